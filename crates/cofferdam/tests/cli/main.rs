//! One integration-test binary driving the real `cofferdam` CLI in temp dirs with a clean
//! environment. Tests that need a kernel feature probe for it independently of cofferdam and
//! print `SKIP-HOST <why>` when it is absent; with `COFFERDAM_TEST_REQUIRE=sealed` such a
//! skip fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apply;
mod bundles;
mod common;
mod equivalence;
mod lifecycle;
mod limits;
mod load;
mod mutants;
mod net;
mod pty;
mod review_output;
mod run;
mod scope;
mod store;
mod tiers;
