//! The supervisor ignores the terminal's SIGINT and SIGQUIT while the sandbox runs, as
//! `system(3)` does: the terminal delivers them to the command too (same foreground process
//! group), the command decides, and the supervisor lives to write the records. The init
//! resets both to the default for the sandbox.

/// Ignores SIGINT and SIGQUIT until dropped, then restores the previous dispositions.
pub struct IgnoreTerminalSignals {
    previous: Vec<cofferdam_sandbox::sigaction::Saved>,
}

impl IgnoreTerminalSignals {
    /// Start ignoring.
    pub fn new() -> Self {
        // A signal the kernel refused to change has nothing to restore.
        let previous = [libc::SIGINT, libc::SIGQUIT]
            .into_iter()
            .filter_map(|sig| cofferdam_sandbox::sigaction::ignore(sig).ok())
            .collect();
        IgnoreTerminalSignals { previous }
    }
}

impl Drop for IgnoreTerminalSignals {
    fn drop(&mut self) {
        for old in &self.previous {
            let _ = old.restore();
        }
    }
}
