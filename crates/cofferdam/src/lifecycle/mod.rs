//! The run lifecycle: one run, from a validated request to its sealed records, in the one
//! order of effects. Owns that order and the supervisor's parts of a run (the copy stage of
//! the copy tiers, the limits); may not parse arguments or render results (the commands
//! in `cmd` do), and may not import `cmd`.

pub mod copy;
pub mod limits;
