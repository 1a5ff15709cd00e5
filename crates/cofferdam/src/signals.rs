//! The supervisor ignores the terminal's SIGINT and SIGQUIT while the sandbox runs, as
//! `system(3)` does: the terminal delivers them to the command too (same foreground process
//! group), the command decides, and the supervisor lives to write the records. The init
//! resets both to the default for the sandbox.

/// Ignores SIGINT and SIGQUIT until dropped, then restores the previous dispositions.
pub struct IgnoreTerminalSignals {
    previous: [(libc::c_int, libc::sighandler_t); 2],
}

impl IgnoreTerminalSignals {
    /// Start ignoring.
    pub fn new() -> Self {
        let mut previous = [
            (libc::SIGINT, libc::SIG_DFL),
            (libc::SIGQUIT, libc::SIG_DFL),
        ];
        for (sig, old) in &mut previous {
            // SAFETY: setting SIG_IGN for a standard signal is always valid; the previous
            // disposition returned is restored on drop.
            *old = unsafe { libc::signal(*sig, libc::SIG_IGN) };
        }
        IgnoreTerminalSignals { previous }
    }
}

impl Drop for IgnoreTerminalSignals {
    fn drop(&mut self) {
        for (sig, old) in self.previous {
            if old != libc::SIG_ERR {
                // SAFETY: restores the disposition `signal` returned for this signal.
                unsafe {
                    libc::signal(sig, old);
                }
            }
        }
    }
}
