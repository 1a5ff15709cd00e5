//! The forked-child probes: everything that would change the prober itself (new
//! namespaces, mounts, a seccomp filter) runs once, in one `fork()`ed child, which reports
//! each step's result over a pipe and exits.
//!
//! Owns the fork, the child's step sequence, the byte protocol on the pipe and its pure
//! decoding into [`ChildReport`] / [`NamespaceFacts`]. It may not touch the host: every
//! mount happens inside the child's own (user-owned, non-propagating) mount namespace on a
//! tmpfs the child mounts itself, so nothing reaches the host's filesystems and nothing
//! needs cleaning up; the child's namespaces die with it.
//!
//! Child steps, in order (a step runs only if the ones it depends on succeeded):
//!
//! 1. `unshare(CLONE_NEWUSER)`;
//! 2. `setgroups` deny, then single-id `uid_map` / `gid_map` for the caller's euid/egid;
//! 3. `unshare(CLONE_NEWNS)` (needs 1–2);
//! 4. a fresh tmpfs (`fsopen`/`fsmount`/`move_mount`) over a scratch directory, with
//!    `l`, `u`, `w`, `m` directories in it (needs 3);
//! 5. overlayfs with the new mount API: `lowerdir+`, `upperdir`, `workdir`, flag
//!    `userxattr`, `fsmount`, `move_mount` onto `m` (needs 4);
//! 6. `unshare(CLONE_NEWNET)` (needs 1–2);
//! 7. `unshare(CLONE_NEWPID)` (needs 1–2);
//! 8. `no_new_privs` + an allow-all seccomp BPF filter (always; last, like the executor).
//!
//! Protocol: before a step the child writes `[step, -1]`, after it `[step, code]` where
//! code is 0 or the errno (one byte of step, four of little-endian `i32`). Every record is
//! far below `PIPE_BUF` and the total far below the pipe's capacity, so writes are atomic
//! and never block. The parent reaps the child first and reads the (non-blocking) pipe
//! afterwards, so a child that dies at any point cannot deadlock it; a step that started
//! but never finished is attributed to the signal that killed the child. When the child
//! cannot be reaped by us (`SIGCHLD` ignored, or another thread reaped it) the parent reads
//! the pipe until EOF instead, bounded by a timeout.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags};
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, WaitOptions};
use rustix::thread::UnshareFlags;

use super::names::{errno_name, signal_name};

/// Why the child could not be run (or reaped) at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChildError {
    /// `pipe2` failed.
    #[error("pipe: {}", errno_name(.0.raw_os_error()))]
    Pipe(Errno),
    /// `fork` failed.
    #[error("fork: {}", errno_name(*.0))]
    Fork(i32),
}

/// The steps of the child, as numbered on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Step {
    /// `unshare(CLONE_NEWUSER)`.
    UserNs = 1,
    /// `setgroups` deny + `uid_map` + `gid_map`.
    IdMap = 2,
    /// `unshare(CLONE_NEWNS)`.
    MountNs = 3,
    /// The scratch tmpfs and its directories.
    Tmpfs = 4,
    /// The overlayfs mount.
    Overlay = 5,
    /// `unshare(CLONE_NEWNET)`.
    NetNs = 6,
    /// `unshare(CLONE_NEWPID)`.
    PidNs = 7,
    /// `no_new_privs` + allow-all seccomp filter.
    Seccomp = 8,
}

impl Step {
    const ALL: [Step; 8] = [
        Step::UserNs,
        Step::IdMap,
        Step::MountNs,
        Step::Tmpfs,
        Step::Overlay,
        Step::NetNs,
        Step::PidNs,
        Step::Seccomp,
    ];

    fn from_wire(b: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|s| *s as u8 == b)
    }

    fn index(self) -> usize {
        usize::from(self as u8 - 1)
    }
}

/// What happened to one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepOutcome {
    /// Never started (a step it depends on failed, or the child never ran).
    #[default]
    NotRun,
    /// Succeeded.
    Ok,
    /// Failed with this errno.
    Failed(i32),
    /// Started but never reported: the child died during it, killed by this signal when
    /// known.
    Died(Option<i32>),
}

impl StepOutcome {
    /// `Some(true)` when it succeeded, `Some(false)` when it was tried and failed (an errno,
    /// or the child was killed by it), `None` when it was not tried.
    pub fn tried(self) -> Option<bool> {
        match self {
            StepOutcome::NotRun => None,
            StepOutcome::Ok => Some(true),
            StepOutcome::Failed(_) | StepOutcome::Died(_) => Some(false),
        }
    }

    /// The failure as recorded in `HostFacts`: errno name, or the killing signal's name.
    pub fn error(self) -> Option<String> {
        match self {
            StepOutcome::NotRun | StepOutcome::Ok => None,
            StepOutcome::Failed(e) => Some(errno_name(e)),
            StepOutcome::Died(Some(sig)) => Some(signal_name(sig)),
            StepOutcome::Died(None) => Some("probe child died".to_owned()),
        }
    }
}

/// Everything the child reported, one outcome per step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChildReport {
    outcomes: [StepOutcome; 8],
    /// Set when the child could not be run at all.
    pub error: Option<ChildError>,
}

impl ChildReport {
    /// The outcome of `step`.
    pub fn get(&self, step: Step) -> StepOutcome {
        self.outcomes.get(step.index()).copied().unwrap_or_default()
    }

    /// A report for a child that could not be run.
    pub fn failed(error: ChildError) -> Self {
        ChildReport {
            outcomes: Default::default(),
            error: Some(error),
        }
    }

    /// Decode the bytes the child wrote; `killed_by` is the signal that ended it, if one
    /// did. Unknown or truncated records are ignored (they cannot come from our child).
    pub fn decode(bytes: &[u8], killed_by: Option<i32>) -> Self {
        let mut report = ChildReport::default();
        for rec in bytes.chunks_exact(5) {
            let &[step, a, b, c, d] = rec else {
                continue;
            };
            let Some(step) = Step::from_wire(step) else {
                continue;
            };
            let code = i32::from_le_bytes([a, b, c, d]);
            let outcome = match code {
                -1 => StepOutcome::Died(killed_by),
                0 => StepOutcome::Ok,
                e => StepOutcome::Failed(e),
            };
            if let Some(slot) = report.outcomes.get_mut(step.index()) {
                *slot = outcome;
            }
        }
        report
    }
}

/// The namespace, overlay and seccomp facts, decided from a [`ChildReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NamespaceFacts {
    /// A user namespace was created and its id maps written.
    pub userns_can_create: bool,
    /// Why not, when not.
    pub userns_error: Option<String>,
    /// overlayfs mounted inside it; `None` when not tried.
    pub overlay_in_userns: Option<bool>,
    /// A network namespace was created inside it; `None` when not tried.
    pub netns: Option<bool>,
    /// A pid namespace was created inside it; `None` when not tried.
    pub pidns: Option<bool>,
    /// The allow-all seccomp filter was installed.
    pub seccomp_filter: bool,
}

impl NamespaceFacts {
    /// Decide the facts from the child's report.
    ///
    /// A user namespace counts as created only when the id maps could be written too (with
    /// Ubuntu's AppArmor restriction `unshare` succeeds and the map write fails). The facts
    /// that need it are `None` when it was not created. Overlay is `None` when its scratch
    /// tmpfs could not be prepared (the overlay itself was then not tried) and
    /// `Some(false)` when the mount namespace or the overlay mount failed.
    pub fn from_report(report: &ChildReport) -> Self {
        let userns = report.get(Step::UserNs);
        let id_map = report.get(Step::IdMap);
        let can_create = userns == StepOutcome::Ok && id_map == StepOutcome::Ok;
        let userns_error = if can_create {
            None
        } else {
            userns
                .error()
                .or_else(|| id_map.error())
                .or_else(|| report.error.as_ref().map(ToString::to_string))
                .or_else(|| Some("probe child gave no result".to_owned()))
        };
        let (overlay, netns, pidns) = if can_create {
            let overlay = match report.get(Step::MountNs) {
                StepOutcome::Ok => match report.get(Step::Tmpfs) {
                    StepOutcome::Ok => report.get(Step::Overlay).tried(),
                    _ => None,
                },
                other => other.tried(),
            };
            (
                overlay,
                report.get(Step::NetNs).tried(),
                report.get(Step::PidNs).tried(),
            )
        } else {
            (None, None, None)
        };
        NamespaceFacts {
            userns_can_create: can_create,
            userns_error,
            overlay_in_userns: overlay,
            netns,
            pidns,
            seccomp_filter: report.get(Step::Seccomp) == StepOutcome::Ok,
        }
    }
}

/// The scratch directory the child mounts its tmpfs over, with the overlay's directories
/// inside it. Static C strings, so the child needs no allocation.
#[derive(Debug)]
struct Scratch {
    base: &'static CStr,
    lower: &'static CStr,
    upper: &'static CStr,
    work: &'static CStr,
    merged: &'static CStr,
}

/// Candidates for the scratch mount point, first existing real directory wins. Only the
/// child's private mount namespace ever sees the tmpfs over it.
static SCRATCH: [Scratch; 5] = [
    Scratch {
        base: c"/tmp",
        lower: c"/tmp/l",
        upper: c"/tmp/u",
        work: c"/tmp/w",
        merged: c"/tmp/m",
    },
    Scratch {
        base: c"/var/tmp",
        lower: c"/var/tmp/l",
        upper: c"/var/tmp/u",
        work: c"/var/tmp/w",
        merged: c"/var/tmp/m",
    },
    Scratch {
        base: c"/mnt",
        lower: c"/mnt/l",
        upper: c"/mnt/u",
        work: c"/mnt/w",
        merged: c"/mnt/m",
    },
    Scratch {
        base: c"/run",
        lower: c"/run/l",
        upper: c"/run/u",
        work: c"/run/w",
        merged: c"/run/m",
    },
    Scratch {
        base: c"/dev",
        lower: c"/dev/l",
        upper: c"/dev/u",
        work: c"/dev/w",
        merged: c"/dev/m",
    },
];

fn pick_scratch() -> Option<&'static Scratch> {
    SCRATCH.iter().find(|s| {
        s.base
            .to_str()
            .ok()
            .and_then(|p| std::fs::symlink_metadata(p).ok())
            .is_some_and(|m| m.is_dir())
    })
}

/// Everything the child needs, built before the fork.
struct ChildPlan {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    scratch: Option<&'static Scratch>,
}

/// Run the child probes and collect their report.
pub fn run_child_probes() -> ChildReport {
    match RunningChild::spawn() {
        Ok(child) => child.finish(),
        Err(e) => ChildReport::failed(e),
    }
}

/// A forked probe child, running. [`RunningChild::finish`] reaps it and decodes its
/// report; dropping it unfinished still reaps it (no zombie is left behind).
#[derive(Debug)]
pub struct RunningChild {
    pid: Option<Pid>,
    read_end: OwnedFd,
}

impl RunningChild {
    /// Fork the probe child. The caller may do other work before [`RunningChild::finish`]:
    /// the child never waits for the parent.
    pub fn spawn() -> Result<RunningChild, ChildError> {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let plan = ChildPlan {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            scratch: pick_scratch(),
        };
        let (read_end, write_end) =
            rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
                .map_err(ChildError::Pipe)?;

        // SAFETY: `fork` in a possibly multi-threaded process: the child only runs
        // `child_main`, which makes raw syscalls on data prepared above (no allocation, no
        // locks, no unwinding) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            child_main(&plan, write_end.as_fd());
        }
        let fork_errno = std::io::Error::last_os_error().raw_os_error();
        drop(write_end);
        if pid < 0 {
            return Err(ChildError::Fork(fork_errno.unwrap_or(libc::EAGAIN)));
        }
        Ok(RunningChild {
            pid: Pid::from_raw(pid),
            read_end,
        })
    }

    /// Wait for the child to exit, then decode what it wrote.
    pub fn finish(mut self) -> ChildReport {
        match self.pid.take().map(wait_for) {
            Some(Ok(killed_by)) => ChildReport::decode(&read_pipe(&self.read_end, None), killed_by),
            // Not reapable by us (another thread reaped it, or SIGCHLD is ignored): it may
            // still be running, so read until EOF on the pipe instead, bounded.
            Some(Err(_)) | None => ChildReport::decode(
                &read_pipe(&self.read_end, Some(Instant::now() + ORPHAN_EOF_TIMEOUT)),
                None,
            ),
        }
    }
}

impl Drop for RunningChild {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = wait_for(pid);
        }
    }
}

/// How long to wait for the pipe's EOF when the child cannot be reaped by us. The child
/// normally finishes in about a millisecond.
const ORPHAN_EOF_TIMEOUT: Duration = Duration::from_secs(2);

/// Wait for the child to exit; the signal that killed it, if one did. An error when it
/// cannot be waited for (`ECHILD`: reaped elsewhere, or `SIGCHLD` ignored).
fn wait_for(pid: Pid) -> Result<Option<i32>, Errno> {
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(status.terminating_signal()),
            Ok(None) => return Ok(None),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Read what the child wrote, until EOF. The pipe is non-blocking: without a deadline
/// (the child has exited) an empty pipe also ends the read (`EAGAIN`: some other fork in
/// this process still holds a copy of the write end); with one, wait for more data or EOF
/// until the deadline.
fn read_pipe(fd: &OwnedFd, deadline: Option<Instant>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => {
                let Some(deadline) = deadline else { break };
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let ts = Timespec {
                    tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                match rustix::event::poll(&mut fds, Some(&ts)) {
                    Ok(_) | Err(Errno::INTR) => continue,
                    Err(_) => break,
                }
            }
            Err(_) => break,
        }
    }
    out
}

// ---- everything below runs in the forked child only ----

fn child_main(plan: &ChildPlan, out: BorrowedFd<'_>) -> ! {
    let step = |step: Step, f: &dyn Fn() -> Result<(), Errno>| -> bool {
        send(out, step, -1);
        let result = f();
        send(out, step, result.err().map_or(0, |e| e.raw_os_error()));
        result.is_ok()
    };

    if step(Step::UserNs, &|| unshare(UnshareFlags::NEWUSER))
        && step(Step::IdMap, &|| write_id_maps(plan))
    {
        if step(Step::MountNs, &|| unshare(UnshareFlags::NEWNS)) {
            let tmpfs_ok = step(Step::Tmpfs, &|| match plan.scratch {
                Some(s) => mount_scratch(s),
                None => Err(Errno::NOENT),
            });
            if let (true, Some(s)) = (tmpfs_ok, plan.scratch) {
                step(Step::Overlay, &|| mount_overlay(s));
            }
        }
        step(Step::NetNs, &|| unshare(UnshareFlags::NEWNET));
        step(Step::PidNs, &|| unshare(UnshareFlags::NEWPID));
    }
    step(Step::Seccomp, &install_allow_all_filter);

    // SAFETY: `_exit` ends the child without running the parent's atexit handlers or
    // destructors, which must not run twice.
    unsafe { libc::_exit(0) }
}

/// `unshare(flags)` in the forked child.
fn unshare(flags: UnshareFlags) -> Result<(), Errno> {
    // SAFETY: the only hazard of `unshare` is `CLONE_FILES` (fds shared with other
    // threads), which is never passed; the caller is the single-threaded forked child.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

fn send(out: BorrowedFd<'_>, step: Step, code: i32) {
    let c = code.to_le_bytes();
    let rec = [step as u8, c[0], c[1], c[2], c[3]];
    // A failed write leaves the step unreported, which the parent reads as "not run".
    let _ = rustix::io::write(out, &rec);
}

fn write_file(path: &CStr, data: &[u8]) -> Result<(), Errno> {
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    let n = rustix::io::write(&fd, data)?;
    if n == data.len() {
        Ok(())
    } else {
        Err(Errno::IO)
    }
}

fn write_id_maps(plan: &ChildPlan) -> Result<(), Errno> {
    match write_file(c"/proc/self/setgroups", b"deny") {
        // Kernels before 3.19 have no setgroups file; the gid map works without it there.
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e),
    }
    write_file(c"/proc/self/uid_map", &plan.uid_map)?;
    write_file(c"/proc/self/gid_map", &plan.gid_map)
}

fn mount_scratch(s: &Scratch) -> Result<(), Errno> {
    let fs = rustix::mount::fsopen(c"tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_create(&fs)?;
    let mnt = rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())?;
    rustix::mount::move_mount(
        &mnt,
        c"",
        CWD,
        s.base,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    for dir in [s.lower, s.upper, s.work, s.merged] {
        rustix::fs::mkdir(dir, Mode::RWXU)?;
    }
    Ok(())
}

fn mount_overlay(s: &Scratch) -> Result<(), Errno> {
    let fs = rustix::mount::fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(&fs, c"lowerdir+", s.lower)?;
    rustix::mount::fsconfig_set_string(&fs, c"upperdir", s.upper)?;
    rustix::mount::fsconfig_set_string(&fs, c"workdir", s.work)?;
    rustix::mount::fsconfig_set_flag(&fs, c"userxattr")?;
    rustix::mount::fsconfig_create(&fs)?;
    let mnt = rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())?;
    rustix::mount::move_mount(
        &mnt,
        c"",
        CWD,
        s.merged,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
}

fn install_allow_all_filter() -> Result<(), Errno> {
    rustix::thread::set_no_new_privs(true)?;
    let mut filter = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: `prog` points at a valid one-instruction program that outlives the call; the
    // kernel copies it. `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)` only affects this
    // (forked, single-threaded) child.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &prog as *const libc::sock_fprog,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: Step, code: i32) -> Vec<u8> {
        let mut v = vec![step as u8];
        v.extend_from_slice(&code.to_le_bytes());
        v
    }

    fn ok(step: Step) -> Vec<u8> {
        [rec(step, -1), rec(step, 0)].concat()
    }

    #[test]
    fn decodes_full_success() {
        let bytes: Vec<u8> = Step::ALL.into_iter().flat_map(ok).collect();
        let r = ChildReport::decode(&bytes, None);
        for s in Step::ALL {
            assert_eq!(r.get(s), StepOutcome::Ok, "{s:?}");
        }
        let f = NamespaceFacts::from_report(&r);
        assert!(f.userns_can_create);
        assert_eq!(f.userns_error, None);
        assert_eq!(f.overlay_in_userns, Some(true));
        assert_eq!(f.netns, Some(true));
        assert_eq!(f.pidns, Some(true));
        assert!(f.seccomp_filter);
    }

    #[test]
    fn userns_enospc_leaves_dependents_unknown() {
        let bytes = [
            rec(Step::UserNs, -1),
            rec(Step::UserNs, libc::ENOSPC),
            ok(Step::Seccomp),
        ]
        .concat();
        let f = NamespaceFacts::from_report(&ChildReport::decode(&bytes, None));
        assert!(!f.userns_can_create);
        assert_eq!(f.userns_error.as_deref(), Some("ENOSPC"));
        assert_eq!((f.overlay_in_userns, f.netns, f.pidns), (None, None, None));
        assert!(f.seccomp_filter);
    }

    #[test]
    fn map_failure_means_no_userns() {
        // Ubuntu's restriction: unshare works, the map write is refused.
        let bytes = [
            ok(Step::UserNs),
            rec(Step::IdMap, -1),
            rec(Step::IdMap, libc::EPERM),
            ok(Step::Seccomp),
        ]
        .concat();
        let f = NamespaceFacts::from_report(&ChildReport::decode(&bytes, None));
        assert!(!f.userns_can_create);
        assert_eq!(f.userns_error.as_deref(), Some("EPERM"));
        assert_eq!(f.overlay_in_userns, None);
    }

    #[test]
    fn overlay_failure_and_unprepared_scratch() {
        let base = [ok(Step::UserNs), ok(Step::IdMap), ok(Step::MountNs)].concat();
        let failed = [
            base.clone(),
            ok(Step::Tmpfs),
            rec(Step::Overlay, -1),
            rec(Step::Overlay, libc::EINVAL),
            ok(Step::NetNs),
            rec(Step::PidNs, -1),
            rec(Step::PidNs, libc::EPERM),
        ]
        .concat();
        let f = NamespaceFacts::from_report(&ChildReport::decode(&failed, None));
        assert_eq!(f.overlay_in_userns, Some(false));
        assert_eq!(f.netns, Some(true));
        assert_eq!(f.pidns, Some(false));
        assert!(!f.seccomp_filter);

        let no_scratch = [base, rec(Step::Tmpfs, -1), rec(Step::Tmpfs, libc::ENOENT)].concat();
        let f = NamespaceFacts::from_report(&ChildReport::decode(&no_scratch, None));
        assert_eq!(f.overlay_in_userns, None);

        let no_mountns = [
            ok(Step::UserNs),
            ok(Step::IdMap),
            rec(Step::MountNs, -1),
            rec(Step::MountNs, libc::EPERM),
        ]
        .concat();
        let f = NamespaceFacts::from_report(&ChildReport::decode(&no_mountns, None));
        assert_eq!(f.overlay_in_userns, Some(false));
    }

    #[test]
    fn child_killed_mid_step() {
        let bytes = [ok(Step::UserNs), ok(Step::IdMap), rec(Step::MountNs, -1)].concat();
        let r = ChildReport::decode(&bytes, Some(libc::SIGSYS));
        assert_eq!(r.get(Step::MountNs), StepOutcome::Died(Some(libc::SIGSYS)));
        let f = NamespaceFacts::from_report(&r);
        assert!(f.userns_can_create);
        assert_eq!(f.overlay_in_userns, Some(false));
        assert_eq!((f.netns, f.pidns), (None, None));
        assert!(!f.seccomp_filter);

        let killed_at_start = ChildReport::decode(&rec(Step::UserNs, -1), Some(libc::SIGSYS));
        let f = NamespaceFacts::from_report(&killed_at_start);
        assert!(!f.userns_can_create);
        assert_eq!(f.userns_error.as_deref(), Some("SIGSYS"));
    }

    #[test]
    fn no_child_at_all() {
        let f = NamespaceFacts::from_report(&ChildReport::failed(ChildError::Fork(libc::EAGAIN)));
        assert!(!f.userns_can_create);
        assert_eq!(f.userns_error.as_deref(), Some("fork: EAGAIN"));
        assert!(!f.seccomp_filter);
        assert_eq!(f.overlay_in_userns, None);

        let garbage = ChildReport::decode(&[0xff, 1, 2], None);
        assert_eq!(garbage, ChildReport::default());
    }
}
