//! `cofferdam batch`: many runs from one task file, at most N at once, each a job of its
//! own labelled `batch=<id>` and `batch.task=<n>`. `spec` reads the task file, `schedule`
//! runs the tasks as `cofferdam run` children, `report` tells what they came to, `collect`
//! decides what `cofferdam gc` may remove of a finished batch. May not
//! import `cmd` (its command, `cmd::batch`, is the caller) nor the lifecycle (each task's
//! run is a child process's; `schedule` says why).

pub mod collect;
pub mod report;
pub mod schedule;
pub mod spec;
