//! Starting the sandbox init with `posix_spawn(3)`, and its lifetime afterwards (wait,
//! kill). The init is normally a fork that never execs (`crate::fork`); this exec is the
//! way when the supervisor has other threads, and `Spawned` is the handle of either.
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
    /// source must not be one of the targets: an earlier `dup2` would have replaced it.
    pub fds: &'a [(RawFd, RawFd)],
    /// Signals whose disposition is reset to the default in the child (an ignored signal
    /// stays ignored across exec otherwise). The child's signal mask is always empty.
    pub default_signals: &'a [libc::c_int],
}

impl SpawnSpec<'_> {
    /// Refuse a table whose `dup2`s would clobber one another: a source that is also a
    /// target.
    pub(crate) fn check_fds(&self) -> io::Result<()> {
        if self
            .fds
            .iter()
            .any(|(source, _)| self.fds.iter().any(|(_, target)| source == target))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a descriptor to hand over is also a target number",
            ));
        }
        Ok(())
    }
}

/// A started child, reaped by [`Spawned::wait`] (dropping it neither kills nor reaps it).
#[derive(Debug)]
pub struct Spawned {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

/// An initialized `posix_spawn_file_actions_t`, destroyed on drop. Boxed: it is never
/// moved after its initialization.
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: a plain C struct that posix_spawn_file_actions_init fills; all zeroes is
        // only a placeholder until then (and is not destroyed if the init fails).
        let mut raw: Box<libc::posix_spawn_file_actions_t> =
            Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable memory of the right type.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *raw) })?;
        Ok(Self(raw))
    }

    fn dup2(&mut self, source: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: initialized in `new`; the descriptors are only numbers here.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *self.0, source, target) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` (a failed init never makes a `FileActions`) and
        // destroyed once, here.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut *self.0) };
    }
}

/// An initialized `posix_spawnattr_t`, destroyed on drop. Boxed like [`FileActions`].
struct SpawnAttr(Box<libc::posix_spawnattr_t>);

impl SpawnAttr {
    /// Attributes that empty the child's signal mask and reset `default_signals` to their
    /// default disposition.
    fn new(default_signals: &[libc::c_int]) -> io::Result<Self> {
        // SAFETY: as for `FileActions::new`, with posix_spawnattr_init.
        let mut raw: Box<libc::posix_spawnattr_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points to writable memory of the right type.
        check(unsafe { libc::posix_spawnattr_init(&mut *raw) })?;
        let mut attr = Self(raw);
        // SAFETY: a sigset_t is a plain bit set that sigemptyset fills.
        let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut defaults: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both point to writable sigset_t values; sigaddset checks the signal number
        // and its error is returned.
        unsafe {
            libc::sigemptyset(&mut empty);
            libc::sigemptyset(&mut defaults);
            for &sig in default_signals {
                if libc::sigaddset(&mut defaults, sig) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        let flags =
            libc::c_short::try_from(libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF)
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `attr.0` is initialized; the sets are valid for the calls, which copy them.
        unsafe {
            check(libc::posix_spawnattr_setsigmask(&mut *attr.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut *attr.0, &defaults))?;
            check(libc::posix_spawnattr_setflags(&mut *attr.0, flags))?;
        }
        Ok(attr)
    }
}

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` and destroyed once, here.
        unsafe { libc::posix_spawnattr_destroy(&mut *self.0) };
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
    spec.check_fds()?;
    let mut actions = FileActions::new()?;
    for &(source, target) in spec.fds {
        actions.dup2(source, target)?;
    }
    let attr = SpawnAttr::new(spec.default_signals)?;
    let mut argv: Vec<*mut libc::c_char> =
        spec.argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    // Empty, but for a debug build's mutant switch, which the init reads (never the
    // command: it gets the plan's environment).
    let mutant = crate::mutant::handed_on();
    let envp: [*mut libc::c_char; 2] = [
        mutant
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.as_ptr().cast_mut()),
        std::ptr::null_mut(),
    ];
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the path and the arguments are
    // NUL-terminated strings that outlive it, both arrays end with a null pointer, and the
    // actions and attributes are initialized (`FileActions`, `SpawnAttr`). posix_spawn
    // keeps none of them.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            spec.exe.as_ptr(),
            &*actions.0,
            &*attr.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    check(rc)?;
    Ok(Spawned { pid, status: None })
}

impl Spawned {
    /// The child `pid` this process started (`crate::fork`).
    pub(crate) fn from_pid(pid: libc::pid_t) -> Self {
        Spawned { pid, status: None }
    }

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
            self.reap(rustix::process::WaitOptions::empty())?;
        }
    }

    /// Its exit status, if it has ended; never blocks.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.reap(rustix::process::WaitOptions::NOHANG)?;
        }
        Ok(self.status)
    }

    /// Kill it with SIGKILL; nothing to do when it was already reaped (its pid may belong
    /// to another process by then).
    pub fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // The pid is our unreaped child, so it cannot have been reused.
        let pid = rustix::process::Pid::from_raw(self.pid)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).map_err(Into::into)
    }

    fn reap(&mut self, flags: rustix::process::WaitOptions) -> io::Result<()> {
        let pid = rustix::process::Pid::from_raw(self.pid)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        match rustix::process::waitpid(Some(pid), flags) {
            Ok(Some((_, st))) => {
                self.status = Some(ExitStatus::from_raw(st.as_raw()));
                Ok(())
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
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
            c("n=$(env | grep -cvE '^(PWD|SHLVL|_)='); printf '%s' \"$n\" >&7"),
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
        // Nothing but what the shell sets itself (`PWD`; bash adds `SHLVL` and `_`).
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
        // SIGUSR2, which no other test here uses: the disposition is process-wide.
        let argv = [c("sh"), c("-c"), c("trap - USR2; kill -USR2 $$; sleep 5")];
        // Ignoring SIGUSR2 in the test process for the spawn only.
        let old = crate::sigaction::ignore(libc::SIGUSR2).unwrap();
        let child = spawn(&SpawnSpec {
            exe: &c("/bin/sh"),
            argv: &argv,
            fds: &[],
            default_signals: &[libc::SIGUSR2],
        });
        old.restore().unwrap();
        let st = child.unwrap().wait().unwrap();
        // An ignored signal cannot be reset by a non-interactive shell: only the spawn did.
        assert_eq!(st.signal(), Some(libc::SIGUSR2), "{st:?}");

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

    #[test]
    fn the_childs_signal_mask_is_empty_and_try_wait_sees_its_end() {
        // SAFETY: sigset_t is a plain bit set; blocking SIGUSR1 in this test thread only.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        }
        let (r, low) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let w = rustix::io::fcntl_dupfd_cloexec(&low, 20).unwrap();
        drop(low);
        // grep itself, not a shell: a shell may clear its mask.
        let argv = [c("grep"), c("^SigBlk"), c("/proc/self/status")];
        let child = spawn(&SpawnSpec {
            exe: &c("/bin/grep"),
            argv: &argv,
            fds: &[(w.as_raw_fd(), 1)],
            default_signals: &[],
        });
        // SAFETY: restoring this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        let mut child = child.unwrap();
        drop(w);
        let out = std::io::read_to_string(std::fs::File::from(r)).unwrap();
        assert_eq!(
            out.split_whitespace().nth(1),
            Some("0000000000000000"),
            "{out:?}"
        );
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        assert!(status.success());
    }

    #[test]
    fn a_source_that_is_also_a_target_is_refused() {
        let err = spawn(&SpawnSpec {
            exe: &c("/bin/true"),
            argv: &[c("true")],
            fds: &[(3, 4), (4, 5)],
            default_signals: &[],
        })
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
