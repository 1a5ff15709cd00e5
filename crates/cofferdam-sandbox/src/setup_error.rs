//! The one error type of the sandbox setup steps: which step failed and with what errno, so
//! the supervisor can name the failing step (`run.failure.kind = "setup"`, exit 125).

use crate::probe::names::errno_name;
use rustix::io::Errno;
use std::fmt;

/// The init's exit code for a setup failure before the command started.
pub const SETUP_FAILED: i32 = 125;

/// A setup step that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SetupError {
    /// What was being done, e.g. `mount workdir overlay on /home/u/proj`.
    pub step: String,
    /// The kernel's answer.
    pub errno: Errno,
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.step,
            errno_name(self.errno.raw_os_error()),
            std::io::Error::from_raw_os_error(self.errno.raw_os_error())
        )
    }
}

/// Attach a step description to a rustix result.
pub trait StepContext<T> {
    /// Name the step this result belongs to.
    fn step(self, step: impl FnOnce() -> String) -> Result<T, SetupError>;
}

impl<T> StepContext<T> for Result<T, Errno> {
    fn step(self, step: impl FnOnce() -> String) -> Result<T, SetupError> {
        self.map_err(|errno| SetupError {
            step: step(),
            errno,
        })
    }
}
