//! One module per subcommand; each parses nothing itself and returns an exit code.

pub mod agents;
pub mod apply;
pub mod apply_hunks;
pub mod bundle;
pub mod checkpoint;
pub mod complete;
pub mod demo;
pub mod diff;
pub mod diff_parent;
pub mod doctor;
pub mod drop;
pub mod export;
pub mod fork;
pub mod gc;
pub mod import;
pub mod jobref;
pub mod jobrules;
pub mod kill;
pub mod logs;
pub mod man;
pub mod preflight;
pub mod recover;
pub mod run;
pub mod scope;
pub mod status;
pub mod trust;
