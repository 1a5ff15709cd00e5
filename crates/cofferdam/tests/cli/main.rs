//! One integration-test binary driving the real `cofferdam` CLI in temp dirs with a clean
//! environment. Tests that need a kernel feature probe for it independently of cofferdam and
//! print `SKIP-HOST <why>` when it is absent; with `COFFERDAM_TEST_REQUIRE=sealed` such a
//! skip fails instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agentctl;
mod agents;
mod agents_real;
mod agents_toolchain;
mod apply;
mod batch;
mod bundles;
mod checkpoint;
mod common;
mod docs;
mod drop_paths;
mod equivalence;
mod file_watch;
mod finished;
mod gc;
mod housekeeping;
mod hunks;
mod json_output;
mod k8s;
mod lastref;
mod lifecycle;
mod limits;
mod lineage;
mod load;
mod mounts;
mod mutants;
mod net;
mod orchestration;
mod portable;
mod pty;
mod publish;
mod readme;
mod review_json;
mod review_output;
mod review_scale;
mod rootmode;
mod run;
mod scope;
mod scope_agrees;
mod slow_reader;
mod store;
mod suspend;
mod tiers;
mod trust;
mod usage;
mod web;
