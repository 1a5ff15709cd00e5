//! Signal dispositions: the one place `sigaction(2)` is called, for the init, the reaper and
//! the relay (rustix has no safe `sigaction`; its `runtime` one is for programs without
//! libc). Owns building the `struct sigaction` and keeping the previous one; it may not
//! decide which signals are handled (the callers do) and holds no state of its own, so it
//! is usable between `fork` and `exec` (no allocation, no lock).

use rustix::io::Errno;

/// What the handler's signal mask is while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    /// Only the signal itself is blocked (the kernel's default).
    Empty,
    /// Every signal is blocked: the handler runs to its end uninterrupted.
    Full,
}

/// A signal's disposition before a change, only to be restored.
#[derive(Clone, Copy)]
pub struct Saved {
    sig: libc::c_int,
    old: libc::sigaction,
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Saved").field("sig", &self.sig).finish()
    }
}

impl Saved {
    /// The signal this disposition is for.
    pub fn signal(&self) -> libc::c_int {
        self.sig
    }

    /// Whether the saved disposition was to ignore the signal.
    pub fn was_ignored(&self) -> bool {
        self.old.sa_sigaction == libc::SIG_IGN
    }

    /// Put the saved disposition back.
    pub fn restore(&self) -> Result<(), Errno> {
        // `old` is what sigaction(2) returned for this signal: a disposition that was
        // installed before, its handler (if any) still in this program's code.
        call(self.sig, &self.old).map(drop)
    }
}

/// Install `action` (SIG_DFL, SIG_IGN or a handler address) for `sig`; the previous one.
fn install(
    sig: libc::c_int,
    action: libc::sighandler_t,
    mask: Mask,
    restart: bool,
) -> Result<Saved, Errno> {
    // SAFETY: an all-zero `struct sigaction` is a valid value (no handler, no flags, empty
    // mask); the fields are then set through libc's own functions and constants.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = action;
    sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
    // SAFETY: `sa.sa_mask` is a valid, writable sigset_t.
    unsafe {
        match mask {
            Mask::Empty => libc::sigemptyset(&mut sa.sa_mask),
            Mask::Full => libc::sigfillset(&mut sa.sa_mask),
        };
    }
    call(sig, &sa).map(|old| Saved { sig, old })
}

/// sigaction(2): install `sa` for `sig`, returning the previous disposition.
fn call(sig: libc::c_int, sa: &libc::sigaction) -> Result<libc::sigaction, Errno> {
    // SAFETY: as `install`: an all-zero sigaction is valid, and sigaction(2) overwrites it.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to valid `struct sigaction`s for the duration of the call;
    // `sa` is either built by `install` (SIG_DFL, SIG_IGN, or a handler its caller vouched
    // for) or one sigaction(2) returned before. sigaction(2) is async-signal-safe.
    if unsafe { libc::sigaction(sig, sa, &mut old) } == 0 {
        Ok(old)
    } else {
        Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::INVAL))
    }
}

/// Reset `sig` to its default action (SA_RESTART, empty mask); the previous disposition.
pub fn set_default(sig: libc::c_int) -> Result<Saved, Errno> {
    install(sig, libc::SIG_DFL, Mask::Empty, true)
}

/// Ignore `sig` (SA_RESTART, empty mask); the previous disposition.
pub fn ignore(sig: libc::c_int) -> Result<Saved, Errno> {
    install(sig, libc::SIG_IGN, Mask::Empty, true)
}

/// Run `handler` on `sig`, with `mask` blocked while it runs and, with `restart`,
/// SA_RESTART; the previous disposition.
///
/// # Safety
/// `handler` runs at any instant of any thread of the process: it must make only
/// async-signal-safe calls (no allocation, no lock, nothing that touches state the
/// interrupted code may hold), and preserve `errno` if it can change it.
pub unsafe fn set_handler(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int),
    mask: Mask,
    restart: bool,
) -> Result<Saved, Errno> {
    install(
        sig,
        handler as *const () as libc::sighandler_t,
        mask,
        restart,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignoring_then_restoring_gives_the_old_disposition_back() {
        // SIGURG, which no other test of this crate touches: dispositions are process-wide.
        let saved = ignore(libc::SIGURG).unwrap();
        let now = ignore(libc::SIGURG).unwrap();
        assert_eq!(now.old.sa_sigaction, libc::SIG_IGN);
        saved.restore().unwrap();
        let back = set_default(libc::SIGURG).unwrap();
        assert_eq!(back.old.sa_sigaction, saved.old.sa_sigaction);
        assert_eq!(back.signal(), libc::SIGURG);
        saved.restore().unwrap();
    }

    #[test]
    fn an_invalid_signal_is_an_error() {
        assert_eq!(ignore(libc::SIGKILL).unwrap_err(), Errno::INVAL);
    }
}
