//! Starting the sandbox init with `posix_spawn(3)`, and its lifetime afterwards (wait,
//! kill).
//!
//! glibc runs a spawned child on a stack of its own in the parent's address space
//! (`CLONE_VM | CLONE_VFORK`) until it execs, and the parent goes on once the exec has
//! succeeded or failed (the error is returned). `std::process::Command` cannot place
//! descriptors at fixed numbers without a `pre_exec` closure, which makes it fork instead:
//! the fork copied the supervisor's page tables and made its next writes fault, about a
//! fifth of a millisecond of every run's start here.
//!
//! Owns the spawn only: which descriptors the init gets and what they carry is
//! `crate::launch`'s business.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// What to start and how.
#[derive(Debug)]
pub struct SpawnSpec<'a> {
    /// The executable (an absolute path: no `PATH` search).
    pub exe: &'a CStr,
    /// Its arguments, `argv[0]` first. The environment is empty.
    pub argv: &'a [CString],
    /// Descriptors to place in the child: `(source, target)`, each `dup2`ed in order. A
    /// source must not be one of the targets (`dup2` onto itself would keep its
    /// close-on-exec flag).
    pub fds: &'a [(RawFd, RawFd)],
    /// Signals whose disposition is reset to the default in the child (an ignored signal
    /// stays ignored across exec otherwise). The child's signal mask is always empty.
    pub default_signals: &'a [libc::c_int],
}

/// A started child, reaped by [`Spawned::wait`] (dropping it neither kills nor reaps it).
#[derive(Debug)]
pub struct Spawned {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

/// Owns a `posix_spawn_file_actions_t` and a `posix_spawnattr_t` for their lifetime.
struct Attrs {
    actions: libc::posix_spawn_file_actions_t,
    attr: libc::posix_spawnattr_t,
}

impl Attrs {
    fn new(spec: &SpawnSpec<'_>) -> io::Result<Box<Self>> {
        // SAFETY: both are plain C structs that their init functions fill; an all-zero value
        // is only a placeholder until then.
        let mut a: Box<Self> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `a.actions` points to writable memory of the right type.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut a.actions) })?;
        // SAFETY: as above, for `a.attr`.
        if let Err(e) = check(unsafe { libc::posix_spawnattr_init(&mut a.attr) }) {
            // SAFETY: `a.actions` was initialized just above and is not used again.
            unsafe { libc::posix_spawn_file_actions_destroy(&mut a.actions) };
            return Err(e);
        }
        for &(source, target) in spec.fds {
            // SAFETY: `a.actions` is initialized; the descriptors are only numbers here.
            check(unsafe {
                libc::posix_spawn_file_actions_adddup2(&mut a.actions, source, target)
            })?;
        }
        // SAFETY: a sigset_t is a plain bit set that sigemptyset fills.
        let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut defaults: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both point to writable sigset_t values; the signal numbers are checked by
        // sigaddset, whose error is returned.
        unsafe {
            libc::sigemptyset(&mut empty);
            libc::sigemptyset(&mut defaults);
            for &sig in spec.default_signals {
                if libc::sigaddset(&mut defaults, sig) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        // SAFETY: `a.attr` is initialized; the sets are valid for the calls.
        unsafe {
            check(libc::posix_spawnattr_setsigmask(&mut a.attr, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut a.attr, &defaults))?;
            check(libc::posix_spawnattr_setflags(
                &mut a.attr,
                libc::c_short::try_from(flags)
                    .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
            ))?;
        }
        Ok(a)
    }
}

impl Drop for Attrs {
    fn drop(&mut self) {
        // SAFETY: both were initialized in `Attrs::new` (a failed init returns before an
        // `Attrs` exists) and are destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// Start `spec`: returns once the child has exec'd, or the reason it could not.
pub fn spawn(spec: &SpawnSpec<'_>) -> io::Result<Spawned> {
    let attrs = Attrs::new(spec)?;
    let mut argv: Vec<*mut libc::c_char> =
        spec.argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the path and the arguments are
    // NUL-terminated strings that outlive it, both arrays end with a null pointer, and the
    // actions and attributes were initialized by `Attrs::new`. posix_spawn does not keep
    // them.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            spec.exe.as_ptr(),
            &attrs.actions,
            &attrs.attr,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    check(rc)?;
    Ok(Spawned { pid, status: None })
}

impl Spawned {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Wait for the child to end (at once when it was already reaped).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(st) = self.status {
                return Ok(st);
            }
            self.reap(0)?;
        }
    }

    /// Its exit status, if it has ended; never blocks.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.reap(libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    /// Kill it with SIGKILL; nothing to do when it was already reaped (its pid may belong
    /// to another process by then).
    pub fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: kill has no memory effects; the pid is our unreaped child, so it cannot
        // have been reused.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn reap(&mut self, flags: libc::c_int) -> io::Result<()> {
        let mut raw: libc::c_int = 0;
        // SAFETY: `raw` is a valid place for the status; the pid is our child.
        let r = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
        if r == self.pid {
            self.status = Some(ExitStatus::from_raw(raw));
            return Ok(());
        }
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(());
        }
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    #[test]
    fn the_child_gets_its_descriptors_at_their_numbers_and_an_empty_environment() {
        let (r, low) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let w = rustix::io::fcntl_dupfd_cloexec(&low, 20).unwrap();
        drop(low);
        let argv = [
            c("sh"),
            c("-c"),
            c("n=$(env | grep -cv '^PWD='); printf '%s' \"$n\" >&7"),
        ];
        let mut child = spawn(&SpawnSpec {
            exe: &c("/bin/sh"),
            argv: &argv,
            fds: &[(w.as_raw_fd(), 7)],
            default_signals: &[libc::SIGPIPE],
        })
        .unwrap();
        drop(w);
        assert!(child.wait().unwrap().success());
        let out = std::io::read_to_string(std::fs::File::from(r)).unwrap();
        // Nothing but the `PWD` the shell sets itself.
        assert_eq!(out, "0");
        // Reaped: waiting again answers at once, killing does nothing.
        assert!(child.wait().unwrap().success());
        child.kill().unwrap();
    }

    #[test]
    fn a_missing_executable_is_an_error_not_a_child() {
        let err = spawn(&SpawnSpec {
            exe: &c("/nonexistent/cofferdam"),
            argv: &[c("x")],
            fds: &[],
            default_signals: &[],
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn an_ignored_signal_is_reset_and_the_child_can_be_killed() {
        let argv = [c("sh"), c("-c"), c("trap - INT; kill -INT $$; sleep 5")];
        // SAFETY: ignoring SIGINT in the test process for the spawn only.
        let old = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        let child = spawn(&SpawnSpec {
            exe: &c("/bin/sh"),
            argv: &argv,
            fds: &[],
            default_signals: &[libc::SIGINT],
        });
        // SAFETY: restoring what was there.
        unsafe { libc::signal(libc::SIGINT, old) };
        let st = child.unwrap().wait().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}");

        let mut sleeper = spawn(&SpawnSpec {
            exe: &c("/bin/sleep"),
            argv: &[c("sleep"), c("30")],
            fds: &[],
            default_signals: &[],
        })
        .unwrap();
        assert_eq!(sleeper.try_wait().unwrap(), None);
        sleeper.kill().unwrap();
        assert_eq!(sleeper.wait().unwrap().signal(), Some(libc::SIGKILL));
    }
}
