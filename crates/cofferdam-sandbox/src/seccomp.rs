//! seccomp: the sandbox's syscall filter, built as a pure value ([`build_filters`]) and
//! installed last in the init ([`install`]), reporting one `kernel_surface` observation.
//!
//! Owns the deny list (DESIGN.md §3 step 7), its compilation to classic BPF with the
//! `seccompiler` crate (rust-vmm), the x32 guard, and `seccomp(SECCOMP_SET_MODE_FILTER)`. It
//! may not decide whether the sandbox runs without it: a `failed` observation goes back to
//! the caller, which owns that decision.
//!
//! # The filters
//!
//! Two filters are stacked, because a seccompiler filter has a single match action:
//!
//! 1. **deny** (`EPERM`): the mount family (`mount`, `umount2`, `pivot_root`, `move_mount`,
//!    `open_tree`, `open_tree_attr`, `fsopen`, `fsconfig`, `fsmount`, `fspick`,
//!    `mount_setattr`), namespaces (`unshare`, `setns`, and `clone` when any `CLONE_NEW*` bit
//!    is set in its flags, arg 0), `ptrace`, `process_vm_readv`/`writev`, `bpf`,
//!    `perf_event_open`, `io_uring_setup`/`enter`/`register`, `userfaultfd`, `keyctl`,
//!    `add_key`, `request_key`, `kexec_load`, `kexec_file_load`, module loading
//!    (`init_module`, `finit_module`, `delete_module`), `reboot`, `swapon`, `swapoff`,
//!    `acct`, `quotactl`, `quotactl_fd`, clock setting (`settimeofday`, `clock_settime`,
//!    `clock_adjtime`, `adjtimex`), `open_by_handle_at`, `syslog` (the kernel log: readable by
//!    anyone where `kernel.dmesg_restrict` is 0), and `ioctl` with request `TIOCSTI`
//!    or `TIOCLINUX` (arg 1). Everything else is allowed.
//! 2. **clone3** (`ENOSYS`): its flags live in memory a filter cannot read, so it is refused
//!    as "not implemented" and libc falls back to `clone`, whose flags filter 1 checks.
//!
//! `name_to_handle_at` is left allowed: a handle is useless without `open_by_handle_at`
//! (denied, and needing `CAP_DAC_READ_SEARCH` besides), and some tools use it for mount ids.
//!
//! Argument conditions compare 32-bit words (`Dword`): the kernel reads `clone`'s flags
//! through `lower_32_bits()` and `ioctl`'s request as an `unsigned int`, so a value with
//! junk in the upper half is matched on what the kernel will actually use. `CLONE_NEWTIME`
//! (0x80) is not checked on `clone`: there those bits are the exit signal, and the legacy
//! `clone` cannot create a time namespace (only `clone3` and `unshare` can, both refused).
//!
//! # Architectures
//!
//! Built for the target's native architecture: x86_64 or aarch64 (seccompiler also knows
//! riscv64, not wired here). Every filter starts with seccompiler's prologue, which loads
//! `seccomp_data.arch` and returns `SECCOMP_RET_KILL_PROCESS` on any other audit arch, so
//! a non-native ABI (i386 through `int 0x80` on x86_64, arm32 compat on aarch64) kills the
//! process. seccompiler has no x32 guard (x32 shares `AUDIT_ARCH_X86_64` and differs only
//! by bit 30 of the syscall number), so on x86_64 the deny filter is prefixed with our own
//! BPF block: arch check, then any number in `[0x4000_0000, 0x8000_0000)` → kill process.
//! On a kernel without x32 (as here) those numbers fail with `ENOSYS` anyway; the guard
//! matters on kernels built with `CONFIG_X86_X32_ABI`. Negative numbers (`syscall(-1)`) are
//! not x32 and are left to the kernel.
//!
//! # Installation
//!
//! `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)` via `seccompiler::apply_filter`, which also
//! sets `no_new_privs` itself (it is required unless the caller has `CAP_SYS_ADMIN`). It
//! filters the calling thread only: call from the single-threaded init, after Landlock.

use std::collections::BTreeMap;

use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch, sock_filter,
};
use serde_json::{Value, json};

/// Why the filters could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The target architecture has no filter definition here.
    #[error("no seccomp filter is defined for the {0} architecture")]
    UnsupportedArch(&'static str),
    /// seccompiler refused a rule or the filter.
    #[error("compile the seccomp filter: {0}")]
    Compile(#[from] BackendError),
    /// The program is longer than the kernel accepts.
    #[error("the seccomp program has {0} instructions, more than the kernel's 4096")]
    TooLong(usize),
}

/// `open_tree_attr` (Linux 6.15), the same number on every architecture; not in `libc` yet.
pub const SYS_OPEN_TREE_ATTR: i64 = 467;

/// `TIOCSTI`: push a byte into a terminal's input queue (asm-generic and x86 value).
pub const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX`: the virtual console's multiplexed ioctl (selection paste, …).
pub const TIOCLINUX: u64 = 0x541C;

/// The `CLONE_NEW*` bits checked on `clone`'s flags (not `CLONE_NEWTIME`: see module docs).
pub const CLONE_NS_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];

/// Syscalls denied with `EPERM` whatever their arguments.
pub const DENIED: &[(&str, i64)] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("open_tree_attr", SYS_OPEN_TREE_ATTR),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("syslog", libc::SYS_syslog),
];

/// The syscall number range the x32 guard kills (x32 numbers carry bit 30).
pub const X32_RANGE: std::ops::Range<u32> = 0x4000_0000..0x8000_0000;

// Classic BPF opcodes (linux/bpf_common.h) for the x32 guard.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// `offsetof(struct seccomp_data, nr)`.
const DATA_NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const DATA_ARCH: u32 = 4;
/// The kernel's `BPF_MAXINSNS`.
const BPF_MAXINSNS: usize = 4096;

/// `AUDIT_ARCH_X86_64` (linux/audit.h).
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64` (linux/audit.h).
pub const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// The compiled filters, ready to install. Built once, before any restriction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompFilters {
    deny: BpfProgram,
    clone3: BpfProgram,
    denied: Vec<&'static str>,
    arch: &'static str,
}

impl SeccompFilters {
    /// The deny (`EPERM`) program, x32 guard included.
    pub fn deny_program(&self) -> &[sock_filter] {
        &self.deny
    }

    /// The `clone3` (`ENOSYS`) program.
    pub fn clone3_program(&self) -> &[sock_filter] {
        &self.clone3
    }

    /// Names of every syscall the deny filter answers with `EPERM` (conditionally for
    /// `clone` and `ioctl`).
    pub fn denied_syscalls(&self) -> &[&'static str] {
        &self.denied
    }

    /// The architecture the filters are built for.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The observation's details (also what a successful install reports).
    pub fn details(&self) -> BTreeMap<String, Value> {
        let mut d = BTreeMap::new();
        d.insert("arch".to_owned(), json!(self.arch));
        d.insert("filters".to_owned(), json!(2));
        d.insert("denied_syscalls".to_owned(), json!(self.denied.len()));
        d.insert("errno".to_owned(), json!("EPERM"));
        d.insert("syscalls".to_owned(), json!(self.denied));
        d.insert(
            "conditional".to_owned(),
            json!({
                "clone": CLONE_NS_FLAGS.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                "ioctl": ["TIOCSTI", "TIOCLINUX"],
            }),
        );
        d.insert("enosys_syscalls".to_owned(), json!(["clone3"]));
        d.insert("non_native_arch".to_owned(), json!("kill_process"));
        d.insert(
            "x32".to_owned(),
            json!(if self.arch == "x86_64" {
                "kill_process"
            } else {
                "not_applicable"
            }),
        );
        d
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn target() -> Result<(TargetArch, &'static str), SeccompError> {
    Ok((TargetArch::x86_64, "x86_64"))
}

#[cfg(target_arch = "aarch64")]
pub(crate) fn target() -> Result<(TargetArch, &'static str), SeccompError> {
    Ok((TargetArch::aarch64, "aarch64"))
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn target() -> Result<(TargetArch, &'static str), SeccompError> {
    Err(SeccompError::UnsupportedArch(std::env::consts::ARCH))
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The x86_64 prefix: kill on a foreign arch, kill on an x32 syscall number, else fall
/// through to the next instruction (the start of seccompiler's program).
pub fn x32_guard() -> Vec<sock_filter> {
    let kill = libc::SECCOMP_RET_KILL_PROCESS;
    vec![
        stmt(BPF_LD_W_ABS, DATA_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, kill),
        stmt(BPF_LD_W_ABS, DATA_NR),
        // nr >= 0x4000_0000 ? next : skip the range test and the kill.
        jump(BPF_JMP_JGE_K, X32_RANGE.start, 0, 2),
        // nr >= 0x8000_0000 (negative) ? leave it to the kernel : kill.
        jump(BPF_JMP_JGE_K, X32_RANGE.end, 1, 0),
        stmt(BPF_RET_K, kill),
    ]
}

pub(crate) fn dword(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// Build both filters for the native architecture. Pure: no syscall.
pub fn build_filters() -> Result<SeccompFilters, SeccompError> {
    let (arch, arch_name) = target()?;
    let errno = |e: i32| SeccompAction::Errno(u32::try_from(e).unwrap_or(1));

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut denied: Vec<&'static str> = Vec::new();
    for &(name, nr) in DENIED {
        rules.insert(nr, Vec::new());
        denied.push(name);
    }
    let clone_rules = CLONE_NS_FLAGS
        .iter()
        .map(|&(_, flag)| SeccompRule::new(vec![dword(0, SeccompCmpOp::MaskedEq(flag), flag)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    denied.push("clone");
    let ioctl_rules = [TIOCSTI, TIOCLINUX]
        .iter()
        .map(|&req| SeccompRule::new(vec![dword(1, SeccompCmpOp::Eq, req)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    denied.push("ioctl");

    let deny_filter = SeccompFilter::new(rules, SeccompAction::Allow, errno(libc::EPERM), arch)?;
    let compiled: BpfProgram = deny_filter.try_into()?;
    let mut deny = if arch_name == "x86_64" {
        x32_guard()
    } else {
        Vec::new()
    };
    deny.extend(compiled);

    let clone3_filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        errno(libc::ENOSYS),
        arch,
    )?;
    let clone3: BpfProgram = clone3_filter.try_into()?;

    for p in [&deny, &clone3] {
        if p.len() > BPF_MAXINSNS {
            return Err(SeccompError::TooLong(p.len()));
        }
    }
    Ok(SeccompFilters {
        deny,
        clone3,
        denied,
        arch: arch_name,
    })
}

fn observation(
    status: ControlStatus,
    reason: Option<String>,
    details: BTreeMap<String, Value>,
) -> ControlObservation {
    ControlObservation {
        mechanism: ControlMechanism::Seccomp,
        dimension: ControlDimension::KernelSurface,
        status,
        reason,
        details,
    }
}

/// Install the deny filter, then the `clone3` filter, on the calling thread, and read back
/// the thread's seccomp mode.
///
/// `enforced` when both were accepted and the mode reads back as "filter"; `partial` when
/// only the deny filter was accepted (then `clone3` can still create namespaces); `failed`
/// when the deny filter was refused (nothing is installed) or the mode does not read back.
pub fn install(filters: &SeccompFilters) -> ControlObservation {
    let mut details = filters.details();
    if let Err(e) = seccompiler::apply_filter(&filters.deny) {
        details.insert("filters".to_owned(), json!(0));
        return observation(
            ControlStatus::Failed,
            Some(format!("install the deny filter: {e}")),
            details,
        );
    }
    let clone3 = seccompiler::apply_filter(&filters.clone3);
    match rustix::thread::secure_computing_mode() {
        Ok(rustix::thread::SecureComputingMode::Filter) => {}
        other => {
            return observation(
                ControlStatus::Failed,
                Some(format!(
                    "the seccomp mode reads back as {other:?}, not filter"
                )),
                details,
            );
        }
    }
    match clone3 {
        Ok(()) => observation(ControlStatus::Enforced, None, details),
        Err(e) => {
            details.insert("filters".to_owned(), json!(1));
            details.insert("enosys_syscalls".to_owned(), json!([]));
            observation(
                ControlStatus::Partial,
                Some(format!(
                    "the clone3 filter was refused ({e}): clone3 can still create namespaces"
                )),
                details,
            )
        }
    }
}

/// Test helper: run `f` in a forked child with `programs` installed in order (the test
/// process stays unfiltered); the child's exit code is returned (100: a filter was refused).
#[cfg(test)]
pub(crate) fn in_filtered_child(programs: &[&BpfProgram], f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes syscalls (the programs are built) and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let _ = rustix::thread::set_no_new_privs(true);
        let code = if programs
            .iter()
            .any(|p| seccompiler::apply_filter(p).is_err())
        {
            100
        } else {
            f()
        };
        // SAFETY: _exit in the forked child.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status));
    libc::WEXITSTATUS(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the instructions seccompiler and the x32 guard emit.
    fn run(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let mut acc: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = &prog[pc];
            pc += 1;
            match ins.code {
                0x20 => {
                    let k = ins.k as usize;
                    acc = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                0x54 => acc &= ins.k,
                0x05 => pc += ins.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match ins.code {
                        0x15 => acc == ins.k,
                        0x25 => acc > ins.k,
                        0x35 => acc >= ins.k,
                        _ => acc & ins.k != 0,
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                0x06 => return ins.k,
                c => panic!("unexpected BPF opcode {c:#x}"),
            }
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    fn native() -> u32 {
        if cfg!(target_arch = "x86_64") {
            AUDIT_ARCH_X86_64
        } else {
            AUDIT_ARCH_AARCH64
        }
    }

    fn deny(nr: i64, args: [u64; 6]) -> u32 {
        let f = build_filters().unwrap();
        run(f.deny_program(), native(), nr as u32, args)
    }

    #[test]
    fn every_listed_syscall_is_denied_and_others_allowed() {
        for &(name, nr) in DENIED {
            assert_eq!(deny(nr, [0; 6]), EPERM, "{name}");
        }
        for nr in [
            libc::SYS_getpid,
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_execve,
            libc::SYS_clone3,
            libc::SYS_name_to_handle_at,
        ] {
            assert_eq!(deny(nr, [0; 6]), ALLOW, "{nr}");
        }
        let f = build_filters().unwrap();
        assert_eq!(f.denied_syscalls().len(), DENIED.len() + 2);
        let mut names = f.denied_syscalls().to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), f.denied_syscalls().len(), "no duplicates");
        let mut nrs: Vec<i64> = DENIED.iter().map(|(_, n)| *n).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), DENIED.len(), "no two names share a number");
    }

    #[test]
    fn clone_is_denied_only_with_namespace_flags() {
        let sigchld = libc::SIGCHLD as u64;
        let fork_flags = libc::CLONE_CHILD_SETTID as u64 | libc::CLONE_CHILD_CLEARTID as u64;
        assert_eq!(
            deny(libc::SYS_clone, [sigchld | fork_flags, 0, 0, 0, 0, 0]),
            ALLOW
        );
        let thread = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        assert_eq!(deny(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), ALLOW);
        for &(name, flag) in CLONE_NS_FLAGS {
            assert_eq!(
                deny(libc::SYS_clone, [flag | sigchld, 0, 0, 0, 0, 0]),
                EPERM,
                "{name}"
            );
            // The kernel uses only the low 32 bits: junk above does not hide the flag.
            assert_eq!(
                deny(libc::SYS_clone, [flag | (0xdead << 32), 0, 0, 0, 0, 0]),
                EPERM,
                "{name} with high bits"
            );
        }
        assert_eq!(
            deny(
                libc::SYS_clone,
                [
                    (libc::CLONE_NEWUSER | libc::CLONE_NEWNS) as u64,
                    0,
                    0,
                    0,
                    0,
                    0
                ]
            ),
            EPERM
        );
    }

    // libc's ioctl request type is u64 or c_int depending on the target.
    #[allow(clippy::unnecessary_cast)]
    #[test]
    fn clone_ns_flags_match_libc() {
        let libc_flags = [
            libc::CLONE_NEWNS,
            libc::CLONE_NEWCGROUP,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
        ];
        for (&(_, ours), theirs) in CLONE_NS_FLAGS.iter().zip(libc_flags) {
            assert_eq!(ours, theirs as u64);
        }
        assert_eq!(TIOCSTI, libc::TIOCSTI as u64);
        assert_eq!(TIOCLINUX, libc::TIOCLINUX as u64);
    }

    #[allow(clippy::unnecessary_cast)]
    #[test]
    fn ioctl_tiocsti_and_tioclinux_are_denied_on_the_low_word() {
        assert_eq!(deny(libc::SYS_ioctl, [0, TIOCSTI, 0, 0, 0, 0]), EPERM);
        assert_eq!(deny(libc::SYS_ioctl, [0, TIOCLINUX, 0, 0, 0, 0]), EPERM);
        assert_eq!(
            deny(libc::SYS_ioctl, [0, TIOCSTI | (1 << 32), 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(
            deny(libc::SYS_ioctl, [0, libc::TCGETS as u64, 0, 0, 0, 0]),
            ALLOW
        );
        assert_eq!(
            deny(libc::SYS_ioctl, [0, libc::FIONREAD as u64, 0, 0, 0, 0]),
            ALLOW
        );
    }

    #[test]
    fn foreign_arch_is_killed_by_both_filters() {
        let f = build_filters().unwrap();
        const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;
        for prog in [f.deny_program(), f.clone3_program()] {
            assert_eq!(run(prog, AUDIT_ARCH_I386, 20, [0; 6]), KILL);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_are_killed_and_negative_ones_left_alone() {
        let f = build_filters().unwrap();
        let p = f.deny_program();
        assert_eq!(p[..7], x32_guard()[..]);
        assert_eq!(run(p, AUDIT_ARCH_X86_64, 0x4000_0000 | 39, [0; 6]), KILL);
        assert_eq!(run(p, AUDIT_ARCH_X86_64, 0x4000_0000, [0; 6]), KILL);
        assert_eq!(run(p, AUDIT_ARCH_X86_64, 0x7fff_ffff, [0; 6]), KILL);
        // x32's own mount number still dies (not EPERM): the guard runs first.
        assert_eq!(run(p, AUDIT_ARCH_X86_64, 0x4000_0000 | 165, [0; 6]), KILL);
        assert_eq!(run(p, AUDIT_ARCH_X86_64, u32::MAX, [0; 6]), ALLOW);
        assert_eq!(run(p, AUDIT_ARCH_X86_64, 0x3fff_ffff, [0; 6]), ALLOW);
    }

    #[test]
    fn clone3_gets_enosys_and_nothing_else() {
        let f = build_filters().unwrap();
        let p = f.clone3_program();
        assert_eq!(run(p, native(), libc::SYS_clone3 as u32, [0; 6]), ENOSYS);
        assert_eq!(run(p, native(), libc::SYS_clone as u32, [0; 6]), ALLOW);
        assert_eq!(run(p, native(), libc::SYS_mount as u32, [0; 6]), ALLOW);
    }

    #[test]
    fn details_name_the_counts() {
        let f = build_filters().unwrap();
        let d = f.details();
        assert_eq!(d["filters"], 2);
        assert_eq!(d["denied_syscalls"], DENIED.len() + 2);
        assert_eq!(d["arch"], std::env::consts::ARCH);
        assert!(f.deny_program().len() < BPF_MAXINSNS);
    }
}
