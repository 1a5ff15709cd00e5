//! Stable exit codes (documented in the README) and the error type that carries one.

use std::fmt;

/// Success.
pub const OK: u8 = 0;
/// A checked thing is invalid (`bundle verify`).
pub const INVALID: u8 = 1;
/// Bad usage: a flag, a manifest or an input file that cannot be used.
pub const USAGE: u8 = 2;
/// cofferdam failed before the command started, including a floor the host cannot meet.
pub const SETUP: u8 = 125;

/// A failure with the exit code it maps to and a message a person can act on.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// The whole message (cause and fix).
    pub message: String,
}

impl Failure {
    /// A usage failure (exit 2).
    pub fn usage(message: impl fmt::Display) -> Self {
        Failure {
            code: USAGE,
            message: message.to_string(),
        }
    }

    /// A setup failure (exit 125).
    pub fn setup(message: impl fmt::Display) -> Self {
        Failure {
            code: SETUP,
            message: message.to_string(),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure {
            code: SETUP,
            message: format!("{e:#}"),
        }
    }
}
