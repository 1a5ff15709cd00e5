#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Mechanism tests: every control is installed in a forked child (the harness is
//! multi-threaded; restrictions are per process), which then ATTEMPTS THE ESCAPE and reports
//! each outcome over a pipe; the parent asserts the denial and what the observation says.
//! Where an outcome could also come from something else (lack of privilege), a baseline
//! child without the control shows the same attempt giving another result.
//!
//! A test needing a kernel feature first probes it with its own syscall and prints
//! `SKIP-HOST <why>` when it is absent, unless `COFFERDAM_TEST_REQUIRE=sealed`, in which case
//! absence fails the test. Run as root and as an unprivileged user: the expectations that
//! differ (capability bounding set, `RLIMIT_NPROC` for root) are asserted for each.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::RawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cofferdam_policy::plan::{LandlockPlan, RlimitPlan, TcpRules};
use cofferdam_record::bundle::{ControlDimension, ControlObservation, ControlStatus};
use cofferdam_sandbox::{caps, landlock, rlimit, seccomp};

// ---------------------------------------------------------------- harness

use cofferdam_testkit::{require_sealed, skip_host};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The child's side of the report pipe: `key\tvalue` lines, written as they happen so a
/// child killed mid-way still reports what it did before.
struct Report {
    fd: RawFd,
}

impl Report {
    fn put(&self, key: &str, value: &str) {
        let line = format!("{key}\t{}\n", value.replace('\n', " "));
        let mut bytes = line.as_bytes();
        while !bytes.is_empty() {
            // SAFETY: `fd` is the pipe's write end, open for the child's whole life; the
            // buffer is valid for its length.
            let n = unsafe { libc::write(self.fd, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                return;
            }
            bytes = &bytes[n as usize..];
        }
    }

    /// A syscall outcome: `ok` or `err:<errno>`.
    fn sys(&self, key: &str, r: i64) {
        self.put(key, &outcome(r));
    }

    fn obs(&self, o: &ControlObservation) {
        self.put("obs", &serde_json::to_string(o).unwrap());
    }
}

/// `ok` for a non-negative result, `err:<errno>` for -1 (errno read now).
fn outcome(r: i64) -> String {
    if r < 0 {
        format!("err:{}", errno())
    } else {
        "ok".to_owned()
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn err(e: i32) -> String {
    format!("err:{e}")
}

fn io_outcome<T>(r: std::io::Result<T>) -> String {
    match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => err(e.raw_os_error().unwrap_or(-1)),
    }
}

/// What a forked child left behind.
#[derive(Debug)]
struct ChildOut {
    /// Raw wait status.
    status: i32,
    /// Every `key\tvalue` line, in order.
    lines: Vec<(String, String)>,
}

impl ChildOut {
    fn get(&self, key: &str) -> &str {
        self.lines.iter().rev().find(|(k, _)| k == key).map_or_else(
            || panic!("child did not report {key}: {self:#?}"),
            |(_, v)| v,
        )
    }

    fn observations(&self) -> Vec<ControlObservation> {
        self.lines
            .iter()
            .filter(|(k, _)| k == "obs")
            .map(|(_, v)| serde_json::from_str(v).unwrap())
            .collect()
    }

    fn exit_code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }

    fn signal(&self) -> Option<i32> {
        libc::WIFSIGNALED(self.status).then(|| libc::WTERMSIG(self.status))
    }

    fn assert_clean_exit(&self) {
        assert_eq!(self.exit_code(), Some(0), "child did not exit 0: {self:#?}");
    }
}

/// Fork; run `body` in the child (its return value is the exit code; a panic is 101), then
/// `_exit`. The parent collects the report and reaps the child.
fn in_child(body: impl FnOnce(&Report) -> i32) -> ChildOut {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child runs only `body` (which restricts itself and attempts syscalls) and
    // then `_exit`s without returning into the harness; it never touches the harness's
    // locks (no printing) and glibc's malloc is usable after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: the read end belongs to the parent's side; the child closes its copy.
        unsafe { libc::close(rd) };
        let report = Report { fd: wr };
        let code =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&report))).unwrap_or(101);
        // SAFETY: _exit ends the child without running the harness's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: the parent's copy of the write end is ours to close.
    unsafe { libc::close(wr) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a valid buffer of its length from our pipe end.
        let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            out.extend_from_slice(&buf[..n as usize]);
        } else if n == 0 || errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: closing our read end once.
    unsafe { libc::close(rd) };
    let mut status = 0;
    // SAFETY: reaping our own child; `status` is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
    let lines = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    ChildOut { status, lines }
}

fn obs_for(obs: &[ControlObservation], d: ControlDimension) -> &ControlObservation {
    obs.iter()
        .find(|o| o.dimension == d)
        .unwrap_or_else(|| panic!("no {d} observation in {obs:#?}"))
}

/// `/proc/self/status`, read in the calling process.
fn proc_status() -> String {
    std::fs::read_to_string("/proc/self/status").unwrap()
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

// ---------------------------------------------------------------- probes

/// Whether seccomp filters are available: `seccomp(SECCOMP_GET_ACTION_AVAIL)` for
/// `SECCOMP_RET_KILL_PROCESS` (a pure query).
fn seccomp_available() -> bool {
    let action: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    // SAFETY: the kernel reads one u32 from `action`; nothing is installed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    r == 0
}

/// The kernel's Landlock ABI by the raw syscall (0 when absent), independent of the crate.
fn kernel_landlock_abi() -> u32 {
    // SAFETY: NULL attr, size 0 and LANDLOCK_CREATE_RULESET_VERSION: a pure query.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(r).unwrap_or(0)
}

fn landlock_abi_or_skip(min: u32, what: &str) -> Option<u32> {
    let abi = kernel_landlock_abi();
    if abi < min {
        skip_host(&format!(
            "{what} needs Landlock ABI {min}, the kernel has {abi}"
        ));
        return None;
    }
    Some(abi)
}

// ---------------------------------------------------------------- seccomp

/// A raw `clone(flags)` without a new stack (fork-like); the new process `_exit`s at once.
fn raw_clone(flags: u64) -> i64 {
    // SAFETY: without CLONE_VM the child gets a copy of our memory and stack, like fork; it
    // only calls `_exit`. The parent reaps it.
    let r = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if r == 0 {
        // SAFETY: ending the cloned child immediately.
        unsafe { libc::_exit(0) };
    }
    if r > 0 {
        let mut st = 0;
        // SAFETY: reaping the child we just created.
        unsafe { libc::waitpid(r as i32, &mut st, libc::__WALL) };
        return 0;
    }
    r
}

/// Every escape attempt with harmless arguments (they fail or do nothing even unfiltered,
/// as root included), reported as `ok` / `err:N`.
fn attempt_escapes(r: &Report) {
    let nowhere = c"/nonexistent-cofferdam-mechanisms-test";
    // SAFETY (for the block): each call passes valid or NULL pointers that the kernel
    // checks; none of them changes host state: invalid magic/flags, missing paths, or
    // no-op queries, as noted per line.
    unsafe {
        r.sys(
            "mount",
            i64::from(libc::mount(
                c"none".as_ptr(),
                nowhere.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )),
        );
        r.sys("umount2", i64::from(libc::umount2(nowhere.as_ptr(), 0)));
        r.sys(
            "pivot_root",
            libc::syscall(libc::SYS_pivot_root, nowhere.as_ptr(), nowhere.as_ptr()),
        );
        r.sys(
            "open_tree",
            libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, nowhere.as_ptr(), 0),
        );
        // fsopen creates only an unattached context (closed at exit).
        r.sys(
            "fsopen",
            libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), 0),
        );
        r.sys("setns", libc::syscall(libc::SYS_setns, -1, 0));
        r.sys(
            "process_vm_readv",
            libc::syscall(
                libc::SYS_process_vm_readv,
                libc::getpid(),
                std::ptr::null::<libc::iovec>(),
                0,
                std::ptr::null::<libc::iovec>(),
                0,
                0,
            ),
        );
        r.sys(
            "bpf",
            libc::syscall(libc::SYS_bpf, 0xffff, std::ptr::null::<u8>(), 0),
        );
        r.sys(
            "perf_event_open",
            libc::syscall(
                libc::SYS_perf_event_open,
                std::ptr::null::<u8>(),
                0,
                -1,
                -1,
                0,
            ),
        );
        r.sys(
            "io_uring_setup",
            libc::syscall(libc::SYS_io_uring_setup, 0, std::ptr::null::<u8>()),
        );
        // KEYCTL_GET_KEYRING_ID of the user keyring, without creating it.
        r.sys("keyctl", libc::syscall(libc::SYS_keyctl, 0, -4, 0));
        r.sys(
            "add_key",
            libc::syscall(
                libc::SYS_add_key,
                c"user".as_ptr(),
                std::ptr::null::<u8>(),
                std::ptr::null::<u8>(),
                0,
                -4,
            ),
        );
        r.sys(
            "userfaultfd",
            libc::syscall(libc::SYS_userfaultfd, 0xffff_ffffu32),
        );
        // Invalid flags: EINVAL before anything is loaded or unloaded.
        r.sys(
            "kexec_load",
            libc::syscall(
                libc::SYS_kexec_load,
                0,
                1,
                std::ptr::null::<u8>(),
                0xffff_ffffu64,
            ),
        );
        r.sys(
            "init_module",
            libc::syscall(
                libc::SYS_init_module,
                std::ptr::null::<u8>(),
                0,
                c"".as_ptr(),
            ),
        );
        r.sys(
            "delete_module",
            libc::syscall(
                libc::SYS_delete_module,
                c"cofferdam_nonexistent".as_ptr(),
                0,
            ),
        );
        // Wrong magic: EINVAL before any action.
        r.sys("reboot", libc::syscall(libc::SYS_reboot, 0, 0, 0, 0));
        r.sys(
            "swapon",
            libc::syscall(libc::SYS_swapon, nowhere.as_ptr(), 0),
        );
        r.sys("acct", libc::syscall(libc::SYS_acct, nowhere.as_ptr()));
        r.sys(
            "clock_settime",
            libc::syscall(
                libc::SYS_clock_settime,
                libc::CLOCK_REALTIME,
                std::ptr::null::<u8>(),
            ),
        );
        r.sys(
            "adjtimex",
            libc::syscall(libc::SYS_adjtimex, std::ptr::null::<u8>()),
        );
        r.sys(
            "open_by_handle_at",
            libc::syscall(libc::SYS_open_by_handle_at, -1, std::ptr::null::<u8>(), 0),
        );
        // NULL args, size 0: EINVAL unfiltered, never creates a process.
        r.sys(
            "clone3",
            libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize),
        );
    }
    r.sys(
        "clone_newuser",
        raw_clone((libc::CLONE_NEWUSER | libc::SIGCHLD) as u64),
    );
    r.sys(
        "clone_newns",
        raw_clone((libc::CLONE_NEWNS | libc::SIGCHLD) as u64),
    );
    r.sys(
        "clone_newnet_high_bits",
        raw_clone((libc::CLONE_NEWNET | libc::SIGCHLD) as u64 | (1 << 40)),
    );
    attempt_ioctls(r);
    // Late: unfiltered, this child is then in a new user namespace, where the attempts above
    // would give other answers.
    // SAFETY: unshare with a flag only.
    r.sys(
        "unshare_newuser",
        i64::from(unsafe { libc::unshare(libc::CLONE_NEWUSER) }),
    );
    // Last: once traced (unfiltered), any signal or exec would stop this child for a tracer
    // that is not listening. PTRACE_TRACEME only marks this short-lived child traceable.
    // SAFETY: no pointers involved.
    r.sys("ptrace_traceme", unsafe {
        libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0)
    });
}

/// TIOCSTI / TIOCLINUX on a pty master, and an allowed ioctl.
fn attempt_ioctls(r: &Report) {
    // SAFETY: opening the pty multiplexer; the fd is closed at exit.
    let ptm = unsafe { libc::open(c"/dev/ptmx".as_ptr(), libc::O_RDWR | libc::O_NOCTTY) };
    if ptm < 0 {
        r.put("ptmx", &outcome(-1));
        return;
    }
    let c: u8 = b'x';
    // SAFETY: TIOCSTI reads one byte from `c`; TIOCLINUX reads one byte of subcode.
    unsafe {
        r.sys(
            "tiocsti",
            i64::from(libc::ioctl(ptm, libc::TIOCSTI, &c as *const u8)),
        );
        r.sys(
            "tiocsti_high_bits",
            libc::syscall(
                libc::SYS_ioctl,
                ptm,
                seccomp::TIOCSTI | (1 << 32),
                &c as *const u8,
            ),
        );
        let sub: u8 = 2;
        r.sys(
            "tioclinux",
            i64::from(libc::ioctl(ptm, libc::TIOCLINUX, &sub as *const u8)),
        );
        let mut n: libc::c_int = 0;
        r.sys(
            "ioctl_fionread",
            i64::from(libc::ioctl(ptm, libc::FIONREAD, &mut n as *mut libc::c_int)),
        );
    }
}

/// The ordinary things a workload does, after the filter.
fn attempt_ordinary(r: &Report) {
    // SAFETY: getpid has no arguments.
    r.sys("getpid", i64::from(unsafe { libc::getpid() }));
    let mut tmp = tempfile::tempfile().unwrap();
    r.put("write", &io_outcome(tmp.write_all(b"hello")));
    // fork through glibc (clone without namespace flags).
    // SAFETY: the forked child only `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ending the forked child.
        unsafe { libc::_exit(7) };
    }
    let mut st = 0;
    if pid > 0 {
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
    }
    r.put(
        "fork",
        &if pid > 0 && libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 7 {
            "ok".to_owned()
        } else {
            format!("pid {pid} status {st} errno {}", errno())
        },
    );
    // A thread: glibc tries clone3 first (ENOSYS here) and falls back to clone.
    r.put(
        "thread",
        &io_outcome(std::thread::Builder::new().spawn(|| 42).map(|h| h.join())),
    );
    // posix_spawn + execve.
    r.put(
        "spawn_true",
        &match std::process::Command::new("/bin/true").status() {
            Ok(s) if s.success() => "ok".to_owned(),
            Ok(s) => format!("status {s}"),
            Err(e) => format!("error {e}"),
        },
    );
}

fn install_seccomp(r: &Report) -> i32 {
    let nnp = caps::no_new_privs();
    if nnp.status != ControlStatus::Enforced {
        r.put("error", "no_new_privs");
        return 2;
    }
    let filters = match seccomp::build_filter() {
        Ok(f) => f,
        Err(e) => {
            r.put("error", &e.to_string());
            return 3;
        }
    };
    let o = seccomp::install(&filters);
    r.obs(&o);
    if o.status == ControlStatus::Enforced {
        0
    } else {
        4
    }
}

#[test]
fn seccomp_denies_every_escape_and_allows_ordinary_work() {
    if !seccomp_available() {
        skip_host("seccomp filters are not available");
        return;
    }
    let baseline = in_child(|r| {
        attempt_escapes(r);
        0
    });
    baseline.assert_clean_exit();
    let filtered = in_child(|r| {
        let code = install_seccomp(r);
        if code != 0 {
            return code;
        }
        attempt_escapes(r);
        attempt_ordinary(r);
        0
    });
    filtered.assert_clean_exit();
    println!("unfiltered: {:?}", baseline.lines);
    println!("filtered: {:?}", filtered.lines);

    let obs = filtered.observations();
    assert_eq!(obs.len(), 1);
    let o = &obs[0];
    assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
    assert_eq!(o.dimension, ControlDimension::KernelSurface);
    assert_eq!(o.details["filters"], 1);
    assert_eq!(o.details["arch"], std::env::consts::ARCH);
    assert_eq!(
        o.details["denied_syscalls"],
        seccomp::build_filter().unwrap().denied_syscalls().len()
    );

    let eperm = err(libc::EPERM);
    for key in [
        "unshare_newuser",
        "mount",
        "umount2",
        "pivot_root",
        "open_tree",
        "fsopen",
        "setns",
        "ptrace_traceme",
        "process_vm_readv",
        "bpf",
        "perf_event_open",
        "io_uring_setup",
        "keyctl",
        "add_key",
        "userfaultfd",
        "kexec_load",
        "init_module",
        "delete_module",
        "reboot",
        "swapon",
        "acct",
        "clock_settime",
        "adjtimex",
        "open_by_handle_at",
        "clone_newuser",
        "clone_newns",
        "clone_newnet_high_bits",
        "tiocsti",
        "tiocsti_high_bits",
        "tioclinux",
    ] {
        assert_eq!(filtered.get(key), eperm, "{key} under the filter");
    }
    assert_eq!(filtered.get("clone3"), err(libc::ENOSYS), "clone3");
    assert_eq!(filtered.get("ioctl_fionread"), "ok");
    for key in ["getpid", "write", "fork", "thread", "spawn_true"] {
        assert_eq!(filtered.get(key), "ok", "{key} must still work");
    }

    // The denials come from the filter: unfiltered, these give another answer on any host
    // (their arguments fail on a path, a descriptor or a pointer before any privilege check).
    for key in [
        "mount",
        "umount2",
        "open_tree",
        "setns",
        "process_vm_readv",
        "perf_event_open",
        "clock_settime",
        "adjtimex",
        "open_by_handle_at",
    ] {
        assert_ne!(baseline.get(key), eperm, "{key} without the filter");
    }
    assert_eq!(
        baseline.get("clone3"),
        err(libc::EINVAL),
        "clone3 without the filter"
    );
    if is_root() {
        for key in [
            "fsopen",
            "clone_newns",
            "reboot",
            "tiocsti",
            "tiocsti_high_bits",
        ] {
            assert_ne!(baseline.get(key), eperm, "{key} as root without the filter");
        }
    }
    // Where user namespaces are allowed (required for the sealed tier), creating one works
    // unfiltered, by unshare and by clone.
    if baseline.get("unshare_newuser") == "ok" || require_sealed() {
        assert_eq!(baseline.get("unshare_newuser"), "ok");
        assert_eq!(baseline.get("clone_newuser"), "ok");
    }
}

#[test]
fn seccomp_kills_x32_and_foreign_arch_syscalls() {
    if !seccomp_available() {
        skip_host("seccomp filters are not available");
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let x32 = in_child(|r| {
            let code = install_seccomp(r);
            if code != 0 {
                return code;
            }
            r.put("installed", "yes");
            // SAFETY: an x32 getpid number; the filter kills before the kernel dispatches.
            let n = unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) };
            r.sys("x32_getpid", n);
            0
        });
        assert_eq!(x32.get("installed"), "yes");
        assert_eq!(x32.signal(), Some(libc::SIGSYS), "x32 syscall: {x32:#?}");

        let baseline = in_child(|r| {
            r.put("int80_getpid", &int80_getpid().to_string());
            0
        });
        if baseline.exit_code() == Some(0) {
            let i386 = in_child(|r| {
                let code = install_seccomp(r);
                if code != 0 {
                    return code;
                }
                r.put("installed", "yes");
                r.put("int80_getpid", &int80_getpid().to_string());
                0
            });
            assert_eq!(i386.get("installed"), "yes");
            assert_eq!(i386.signal(), Some(libc::SIGSYS), "i386 syscall: {i386:#?}");
        } else {
            println!("NOTE no ia32 emulation here (int 0x80 died unfiltered): i386 check not run");
        }
    }
    // Negative numbers are not x32: left to the kernel (ENOSYS), the process lives.
    let neg = in_child(|r| {
        let code = install_seccomp(r);
        if code != 0 {
            return code;
        }
        // SAFETY: syscall -1 does nothing but fail.
        r.sys("minus_one", unsafe { libc::syscall(-1) });
        0
    });
    neg.assert_clean_exit();
    assert_eq!(neg.get("minus_one"), err(libc::ENOSYS));
}

#[cfg(target_arch = "x86_64")]
fn int80_getpid() -> i64 {
    let ret: i64;
    // SAFETY: the i386 getpid (20) through the 32-bit entry takes no arguments and touches
    // no memory; r8–r11 may be clobbered by the compat entry.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("rax") 20i64 => ret,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            options(nostack)
        );
    }
    ret
}

// ---------------------------------------------------------------- landlock

/// The system trees a child needs to keep running and exec `/bin/true`, plus `extra`.
fn system_read_exec(extra: &[&Path]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc"]
        .iter()
        .map(PathBuf::from)
        .chain(extra.iter().map(|p| p.to_path_buf()))
        .collect();
    v.push("/nonexistent-cofferdam-ro".into());
    v
}

/// Copy the program `from` to `to` in another process (`cp`). Written here, its file would
/// be open for writing in this process while other tests fork their children
/// (`in_child`): a child forked in that moment keeps the write descriptor as long as it
/// lives, and executing `to` then fails with ETXTBSY instead of reaching Landlock's check.
/// No process forked from this one ever holds `cp`'s descriptor.
fn copy_executable(from: &str, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success(), "cp {from} {}: {st}", to.display());
}

fn landlock_plan(abi: u32, read_write: Vec<PathBuf>) -> LandlockPlan {
    LandlockPlan {
        abi: abi.min(7),
        read_exec: vec!["/".into(), "/nonexistent-cofferdam-ro".into()],
        read_write,
        exec_in_read_write: false,
        devices: vec!["/dev/null".into()],
        tcp: None,
        scope_signals: true,
        scope_abstract_unix: true,
    }
}

#[test]
fn landlock_confines_writes_exec_signals_and_abstract_sockets() {
    let Some(abi) = landlock_abi_or_skip(1, "Landlock") else {
        return;
    };
    // Scopes (signals, abstract unix sockets) exist from ABI 6.
    let scoped = abi >= 6;
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    std::fs::write(b.path().join("existing"), b"host data").unwrap();
    let tool = a.path().join("true");
    copy_executable("/bin/true", &tool);
    let name = format!("cofferdam-mech-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let mut plan = landlock_plan(abi, vec![a.path().to_owned()]);
    // Not "/": a grant on "/" would give execute beneath A too (see the next test).
    plan.read_exec = system_read_exec(&[b.path()]);

    let out = in_child(|r| {
        // Reachable before the ruleset: the later denial is Landlock's.
        r.put(
            "abstract_before",
            &io_outcome(std::os::unix::net::UnixStream::connect_addr(&addr)),
        );
        let nnp = caps::no_new_privs();
        r.obs(&nnp);
        for o in landlock::install(&plan) {
            r.obs(&o);
        }
        let bp = b.path();
        r.put(
            "b_create",
            &io_outcome(std::fs::write(bp.join("new"), b"x")),
        );
        r.put(
            "b_write_existing",
            &io_outcome(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(bp.join("existing")),
            ),
        );
        r.put(
            "b_unlink",
            &io_outcome(std::fs::remove_file(bp.join("existing"))),
        );
        r.put("b_mkdir", &io_outcome(std::fs::create_dir(bp.join("d"))));
        r.put(
            "b_read",
            &io_outcome(std::fs::read(bp.join("existing")).map(|v| assert_eq!(v, b"host data"))),
        );
        r.put(
            "a_create",
            &io_outcome(std::fs::write(a.path().join("new"), b"x")),
        );
        r.put(
            "a_rename_into_b",
            &io_outcome(std::fs::rename(a.path().join("new"), bp.join("moved"))),
        );
        r.put(
            "a_mkdir",
            &io_outcome(std::fs::create_dir(a.path().join("d"))),
        );
        r.put(
            "a_exec",
            &io_outcome(std::process::Command::new(&tool).status()),
        );
        r.put(
            "system_exec",
            &io_outcome(std::process::Command::new("/bin/true").status()),
        );
        // `> /dev/null` in a shell: O_WRONLY|O_CREAT|O_TRUNC on the device.
        r.put(
            "dev_null_trunc",
            &io_outcome(std::fs::File::create("/dev/null")),
        );
        // SAFETY: signal 0 only checks permission.
        r.sys(
            "kill_parent",
            i64::from(unsafe { libc::kill(libc::getppid(), 0) }),
        );
        // SAFETY: as above, on ourselves.
        r.sys(
            "kill_self",
            i64::from(unsafe { libc::kill(libc::getpid(), 0) }),
        );
        r.put(
            "abstract_after",
            &io_outcome(std::os::unix::net::UnixStream::connect_addr(&addr)),
        );
        0
    });
    drop(listener);
    out.assert_clean_exit();

    let eacces = err(libc::EACCES);
    for key in [
        "b_create",
        "b_write_existing",
        "b_unlink",
        "b_mkdir",
        "a_rename_into_b",
        "a_exec",
    ] {
        assert_eq!(out.get(key), eacces, "{key}");
    }
    for key in [
        "b_read",
        "a_create",
        "a_mkdir",
        "system_exec",
        "dev_null_trunc",
        "kill_self",
        "abstract_before",
    ] {
        assert_eq!(out.get(key), "ok", "{key}");
    }
    if scoped {
        assert_eq!(out.get("kill_parent"), err(libc::EPERM));
        assert_eq!(out.get("abstract_after"), err(libc::EPERM));
    } else {
        skip_host(&format!(
            "Landlock ABI {abi} has no scopes: signal and abstract-socket denials not checked"
        ));
    }

    let obs = out.observations();
    let ll: Vec<_> = obs
        .iter()
        .filter(|o| o.mechanism == cofferdam_record::bundle::ControlMechanism::Landlock)
        .cloned()
        .collect();
    let dims: Vec<_> = ll.iter().map(|o| o.dimension).collect();
    assert_eq!(
        dims,
        [
            ControlDimension::FilesystemRead,
            ControlDimension::FilesystemWrite,
            ControlDimension::Process
        ]
    );
    let expected_abi = abi.min(7);
    for o in &ll {
        if o.dimension == ControlDimension::Process && !scoped {
            assert_eq!(o.status, ControlStatus::Unavailable, "{o:#?}");
            continue;
        }
        assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
        assert_eq!(o.details["abi"], expected_abi);
        assert_eq!(o.details["restriction"], "fully_enforced");
        assert_eq!(o.details["no_new_privs"], true);
    }
    if abi >= 7 {
        assert_eq!(ll[0].details["abi"], 7, "this host runs Landlock ABI 7");
    }
    let missing = &obs_for(&ll, ControlDimension::FilesystemRead).details["missing_paths"];
    assert_eq!(missing, &serde_json::json!(["/nonexistent-cofferdam-ro"]));
}

#[test]
fn landlock_flags_execute_granted_from_above_a_read_write_tree() {
    let Some(abi) = landlock_abi_or_skip(1, "Landlock") else {
        return;
    };
    let a = tempfile::tempdir().unwrap();
    let tool = a.path().join("true");
    copy_executable("/bin/true", &tool);
    let plan = landlock_plan(abi, vec![a.path().to_owned()]);
    let out = in_child(|r| {
        caps::no_new_privs();
        for o in landlock::install(&plan) {
            r.obs(&o);
        }
        r.put(
            "a_exec",
            &io_outcome(std::process::Command::new(&tool).status()),
        );
        0
    });
    out.assert_clean_exit();
    // Landlock cannot withhold what "/" grants: the observation says so.
    assert_eq!(out.get("a_exec"), "ok");
    let obs = out.observations();
    let read = obs_for(&obs, ControlDimension::FilesystemRead);
    assert_eq!(
        read.details["execute_reaches_read_write"],
        serde_json::json!([a.path().to_string_lossy()])
    );
}

#[test]
fn landlock_tcp_rules_allow_only_listed_ports() {
    let Some(abi) = landlock_abi_or_skip(4, "TCP port rules") else {
        return;
    };
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let pa = allowed.local_addr().unwrap();
    let pd = denied.local_addr().unwrap();
    let mut plan = landlock_plan(abi, vec![]);
    plan.tcp = Some(TcpRules {
        connect: vec![pa.port()],
        bind: vec![],
    });
    let out = in_child(|r| {
        r.put(
            "denied_before",
            &io_outcome(std::net::TcpStream::connect(pd)),
        );
        caps::no_new_privs();
        for o in landlock::install(&plan) {
            r.obs(&o);
        }
        r.put("allowed", &io_outcome(std::net::TcpStream::connect(pa)));
        r.put("denied", &io_outcome(std::net::TcpStream::connect(pd)));
        r.put(
            "bind",
            &io_outcome(std::net::TcpListener::bind("127.0.0.1:0")),
        );
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("denied_before"), "ok");
    assert_eq!(out.get("allowed"), "ok");
    assert_eq!(out.get("denied"), err(libc::EACCES));
    assert_eq!(out.get("bind"), err(libc::EACCES));
    let obs = out.observations();
    let net = obs_for(&obs, ControlDimension::Network);
    assert_eq!(net.status, ControlStatus::Enforced, "{net:#?}");
    assert_eq!(net.details["connect_ports"], serde_json::json!([pa.port()]));
    assert_eq!(
        net.details["handled"],
        serde_json::json!(["bind_tcp", "connect_tcp"])
    );
}

#[test]
fn landlock_at_abi_zero_reports_unavailable() {
    let mut plan = landlock_plan(0, vec![]);
    plan.abi = 0;
    let obs = landlock::install(&plan);
    assert!(obs.iter().all(|o| o.status == ControlStatus::Unavailable));
}

// ---------------------------------------------------------------- capabilities

fn report_caps(r: &Report, prefix: &str) {
    let status = proc_status();
    let caps = caps::parse_status_caps(&status).unwrap();
    for (k, v) in caps.details() {
        r.put(&format!("{prefix}{k}"), v.as_str().unwrap());
    }
}

#[test]
fn drop_all_leaves_no_capability() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before");
    let after = dir.path().join("after");
    std::fs::write(&before, b"").unwrap();
    std::fs::write(&after, b"").unwrap();
    let out = in_child(|r| {
        // SAFETY: chown with a valid NUL-terminated path.
        r.sys(
            "chown_before",
            i64::from(unsafe { libc::chown(cstr(&before).as_ptr(), 4242, 4242) }),
        );
        let o = caps::drop_all();
        r.obs(&o);
        report_caps(r, "");
        // SAFETY: as above.
        r.sys(
            "chown_after",
            i64::from(unsafe { libc::chown(cstr(&after).as_ptr(), 4242, 4242) }),
        );
        // SAFETY: setuid with a plain uid.
        r.sys("setuid_after", i64::from(unsafe { libc::setuid(4242) }));
        0
    });
    out.assert_clean_exit();
    let o = &out.observations()[0];
    assert_eq!(o.dimension, ControlDimension::KernelSurface);
    for k in ["cap_eff", "cap_prm", "cap_inh", "cap_amb"] {
        assert_eq!(out.get(k), "0000000000000000", "{k}");
        assert_eq!(o.details[k], "0000000000000000", "{k}");
    }
    assert_eq!(out.get("chown_after"), err(libc::EPERM));
    assert_eq!(out.get("setuid_after"), err(libc::EPERM));
    if is_root() {
        assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
        assert_eq!(out.get("cap_bnd"), "0000000000000000");
        assert_eq!(
            out.get("chown_before"),
            "ok",
            "root could chown before the drop"
        );
    } else {
        // Without CAP_SETPCAP the bounding set stays: honestly partial.
        assert_eq!(o.status, ControlStatus::Partial, "{o:#?}");
        assert_ne!(out.get("cap_bnd"), "0000000000000000");
        assert!(o.reason.as_deref().unwrap().contains("bounding set"));
    }
}

#[test]
fn drop_all_in_a_user_namespace_is_enforced_for_anyone() {
    let out = in_child(|r| {
        // SAFETY: unshare of a new user namespace for this child only.
        let u = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
        r.sys("unshare", i64::from(u));
        if u != 0 {
            return 0;
        }
        report_caps(r, "before_");
        r.obs(&caps::drop_all());
        report_caps(r, "");
        0
    });
    out.assert_clean_exit();
    if out.get("unshare") != "ok" {
        skip_host(&format!(
            "cannot create a user namespace ({})",
            out.get("unshare")
        ));
        return;
    }
    assert_ne!(out.get("before_cap_eff"), "0000000000000000");
    let o = &out.observations()[0];
    assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
    for k in ["cap_eff", "cap_prm", "cap_inh", "cap_amb", "cap_bnd"] {
        assert_eq!(out.get(k), "0000000000000000", "{k}");
    }
}

#[test]
fn no_new_privs_is_set_and_read_back() {
    let out = in_child(|r| {
        r.obs(&caps::no_new_privs());
        let nnp = caps::parse_status_no_new_privs(&proc_status()).unwrap();
        r.put("status_nnp", if nnp { "1" } else { "0" });
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("status_nnp"), "1");
    let o = &out.observations()[0];
    assert_eq!(o.status, ControlStatus::Enforced);
    assert_eq!(o.dimension, ControlDimension::Process);
    assert_eq!(o.details["no_new_privs"], 1);
}

#[test]
fn close_fds_closes_everything_not_kept() {
    let out = in_child(|r| {
        let open = || {
            // SAFETY: opening /dev/null; the raw fd is owned by nobody but this child.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) }
        };
        let (keep, gone1, gone2) = (open(), open(), open());
        // SAFETY: dup2 onto a high number owned by nobody.
        let high = unsafe { libc::dup2(gone1, 900) };
        // The standard descriptors as the launcher leaves them: pipes, whatever cargo's own
        // stdout is (a file or a terminal would fail the sweep, as it must).
        let mut p = [0; 2];
        // SAFETY: pipe fills the array; dup2 onto 0-2 of this child only.
        unsafe {
            libc::pipe(p.as_mut_ptr());
            libc::dup2(p[0], 0);
            libc::dup2(p[1], 1);
            libc::dup2(p[1], 2);
            libc::close(p[0]);
            libc::close(p[1]);
        }
        let o = caps::close_fds(&[r.fd, keep]);
        r.obs(&o);
        for (k, fd) in [
            ("keep", keep),
            ("gone1", gone1),
            ("gone2", gone2),
            ("high", high),
        ] {
            // SAFETY: F_GETFD only reads descriptor flags.
            r.sys(k, i64::from(unsafe { libc::fcntl(fd, libc::F_GETFD) }));
        }
        for fd in 0..3 {
            // SAFETY: as above.
            r.sys(
                &format!("std{fd}"),
                i64::from(unsafe { libc::fcntl(fd, libc::F_GETFD) }),
            );
        }
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("keep"), "ok");
    for k in ["gone1", "gone2", "high"] {
        assert_eq!(out.get(k), err(libc::EBADF), "{k}");
    }
    let o = &out.observations()[0];
    assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
    assert_eq!(o.details["verified"], true);
    for fd in 0..3 {
        assert_ne!(out.get(&format!("std{fd}")), err(libc::EBADF));
    }
}

// ---------------------------------------------------------------- rlimits

fn only(plan: RlimitPlan) -> RlimitPlan {
    RlimitPlan {
        core_zero: false,
        priority_zero: false,
        ..plan
    }
}

#[test]
fn rlimit_fsize_stops_writing_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big");
    let out = in_child(|r| {
        // SAFETY: ignoring SIGXFSZ so the write fails with EFBIG instead of killing us.
        unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
        for o in rlimit::apply(&only(RlimitPlan {
            fsize: Some(4096),
            ..RlimitPlan::default()
        })) {
            r.obs(&o);
        }
        let mut f = std::fs::File::create(&file).unwrap();
        r.put("first_4k", &io_outcome(f.write_all(&[0u8; 4096])));
        r.put("past_limit", &io_outcome(f.write_all(&[0u8; 1])));
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("first_4k"), "ok");
    assert_eq!(out.get("past_limit"), err(libc::EFBIG));
    let o = &out.observations()[0];
    assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
    assert_eq!(o.details["resource"], "RLIMIT_FSIZE");
    assert_eq!(o.details["soft"], 4096);
    assert_eq!(o.details["hard"], 4096);
}

#[test]
fn rlimit_nofile_stops_opening_past_the_limit() {
    let out = in_child(|r| {
        for o in rlimit::apply(&only(RlimitPlan {
            nofile: Some(16),
            ..RlimitPlan::default()
        })) {
            r.obs(&o);
        }
        let mut last = String::new();
        let mut opened = 0;
        for _ in 0..64 {
            // SAFETY: opening /dev/null; leaked on purpose until exit.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
            if fd < 0 {
                last = err(errno());
                break;
            }
            opened += 1;
        }
        r.put("stopped_with", &last);
        r.put("opened", &opened.to_string());
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("stopped_with"), err(libc::EMFILE));
    assert!(out.get("opened").parse::<u32>().unwrap() < 16);
    assert_eq!(out.observations()[0].status, ControlStatus::Enforced);
}

#[test]
fn rlimit_never_raises_the_hard_limit() {
    let out = in_child(|r| {
        let cap = rustix::process::Rlimit {
            current: Some(200),
            maximum: Some(200),
        };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, cap).unwrap();
        for o in rlimit::apply(&only(RlimitPlan {
            nofile: Some(10_000),
            ..RlimitPlan::default()
        })) {
            r.obs(&o);
        }
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        r.put("hard", &format!("{:?}", now.maximum));
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("hard"), "Some(200)");
    let o = &out.observations()[0];
    assert_eq!(o.status, ControlStatus::Partial);
    assert!(o.reason.as_deref().unwrap().contains("hard limit"));
    assert_eq!(o.details["requested"], 10_000);
    assert_eq!(o.details["soft"], 200);
}

#[test]
fn rlimit_rtprio_and_nice_zero_refuse_real_time_scheduling_and_raised_priority() {
    let out = in_child(|r| {
        for o in rlimit::apply(&RlimitPlan {
            priority_zero: true,
            ..RlimitPlan::default()
        }) {
            r.obs(&o);
        }
        // Without CAP_SYS_NICE in the initial namespace (dropped, as in the sandbox), the
        // kernel falls back to the two rlimits.
        let _ = caps::drop_all();
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sched_setscheduler on ourselves with a valid parameter block.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        r.put("fifo", &if rc == 0 { "ok".into() } else { err(errno()) });
        // The inherited nice value (tests may run under `nice`); -20 is always a raise
        // unless already there, one step down (a higher value) always a lowering.
        let now = rustix::process::getpriority_process(None).unwrap();
        // SAFETY: setpriority on ourselves.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) };
        r.put("raise", &if rc == 0 { "ok".into() } else { err(errno()) });
        // SAFETY: as above.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, (now + 1).min(19)) };
        r.put("lower", &if rc == 0 { "ok".into() } else { err(errno()) });
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("fifo"), err(libc::EPERM));
    assert_eq!(out.get("raise"), err(libc::EACCES));
    assert_eq!(out.get("lower"), "ok");
    let obs = out.observations();
    let names: Vec<_> = obs.iter().map(|o| o.details["resource"].clone()).collect();
    assert_eq!(names, ["RLIMIT_RTPRIO", "RLIMIT_NICE"]);
    for o in obs {
        assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
        assert_eq!(o.details["hard"], 0);
    }
}

#[test]
fn rlimit_data_stops_large_mappings_and_core_is_zero() {
    let out = in_child(|r| {
        let vm_data_kib: u64 = proc_status()
            .lines()
            .find_map(|l| l.strip_prefix("VmData:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        let limit = vm_data_kib * 1024 + (32 << 20);
        for o in rlimit::apply(&RlimitPlan {
            data: Some(limit),
            core_zero: true,
            ..RlimitPlan::default()
        }) {
            r.obs(&o);
        }
        let map = |len: usize| {
            // SAFETY: an anonymous private mapping; unmapped right away when it succeeds.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    err(errno())
                } else {
                    libc::munmap(p, len);
                    "ok".to_owned()
                }
            }
        };
        r.put("map_1m", &map(1 << 20));
        r.put("map_256m", &map(256 << 20));
        let core = rustix::process::getrlimit(rustix::process::Resource::Core);
        r.put("core", &format!("{:?}/{:?}", core.current, core.maximum));
        0
    });
    out.assert_clean_exit();
    assert_eq!(out.get("map_1m"), "ok");
    assert_eq!(out.get("map_256m"), err(libc::ENOMEM));
    assert_eq!(out.get("core"), "Some(0)/Some(0)");
    let obs = out.observations();
    assert_eq!(obs.len(), 2);
    assert_eq!(obs[0].details["resource"], "RLIMIT_DATA");
    assert_eq!(obs[1].details["resource"], "RLIMIT_CORE");
    assert!(obs.iter().all(|o| o.status == ControlStatus::Enforced));
}

#[test]
fn rlimit_cpu_sends_sigxcpu_then_kills_a_spinning_process() {
    // SIGXCPU at the soft limit; a process that ignores it is killed at the hard limit,
    // one second later.
    for ignore in [false, true] {
        let out = in_child(|r| {
            for o in rlimit::apply(&only(RlimitPlan {
                cpu_seconds: Some(1),
                ..RlimitPlan::default()
            })) {
                r.obs(&o);
            }
            if ignore {
                // SAFETY: ignoring a signal in this single-threaded test child.
                unsafe {
                    libc::signal(libc::SIGXCPU, libc::SIG_IGN);
                }
            }
            r.put("spinning", "yes");
            let start = std::time::Instant::now();
            let mut x: u64 = 0;
            while start.elapsed() < std::time::Duration::from_secs(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            3
        });
        assert_eq!(out.get("spinning"), "yes");
        let want = if ignore { libc::SIGKILL } else { libc::SIGXCPU };
        assert_eq!(out.signal(), Some(want), "{out:#?}");
        let obs = &out.observations()[0];
        assert_eq!(obs.status, ControlStatus::Enforced);
        assert_eq!(
            (obs.details["soft"].clone(), obs.details["hard"].clone()),
            (1.into(), 2.into())
        );
    }
}

#[test]
fn rlimit_nproc_stops_forking_except_for_host_root() {
    let out = in_child(|r| {
        r.obs(&caps::drop_all());
        for o in rlimit::apply(&only(RlimitPlan {
            nproc: Some(1),
            ..RlimitPlan::default()
        })) {
            r.obs(&o);
        }
        // SAFETY: the forked child only `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ending the forked child.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            let mut st = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
        }
        r.sys("fork", i64::from(pid));
        0
    });
    out.assert_clean_exit();
    let obs = out.observations();
    let o = &obs[1];
    assert_eq!(o.details["resource"], "RLIMIT_NPROC");
    let host_root = rustix::process::getuid().is_root();
    if host_root {
        // The kernel exempts the host's root user: the observation must not claim more.
        assert_eq!(o.status, ControlStatus::Partial, "{o:#?}");
        assert_eq!(out.get("fork"), "ok");
    } else {
        assert_eq!(o.status, ControlStatus::Enforced, "{o:#?}");
        assert_eq!(out.get("fork"), err(libc::EAGAIN));
    }
}

#[test]
fn rlimit_empty_plan_sets_nothing() {
    assert!(rlimit::apply(&RlimitPlan::default()).is_empty());
}

#[test]
fn observations_serialize_with_wire_names() {
    let o = ControlObservation::new(
        cofferdam_record::bundle::ControlMechanism::Landlock,
        ControlDimension::FilesystemWrite,
        ControlStatus::Partial,
    );
    let v: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
    assert_eq!(v["mechanism"], "landlock");
    assert_eq!(v["dimension"], "filesystem_write");
    assert_eq!(v["status"], "partial");
}
