//! One module per subcommand; each parses nothing itself and returns an exit code.

pub mod bundle;
pub mod demo;
pub mod doctor;
pub mod run;
pub mod scope;
pub mod status;
