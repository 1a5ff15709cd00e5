//! seccomp: the sandbox's syscall filter, built as a pure value ([`build_filter`]) and
//! installed last in the init ([`install`]), reporting one `kernel_surface` observation.
//!
//! Owns the deny list (DESIGN.md §3 step 7), its assembly into one classic-BPF program, and
//! `seccomp(SECCOMP_SET_MODE_FILTER)`. It may not decide whether the sandbox runs without
//! it: a `failed` observation goes back to the caller, which owns that decision.
//!
//! # The filter
//!
//! One program answers every syscall of the native architecture:
//!
//! - **`EPERM`**: the mount family (`mount`, `umount2`, `pivot_root`, `move_mount`,
//!   `open_tree`, `open_tree_attr`, `fsopen`, `fsconfig`, `fsmount`, `fspick`,
//!   `mount_setattr`), namespaces (`unshare`, `setns`, and `clone` when any `CLONE_NEW*` bit
//!   is set in its flags, arg 0), `ptrace`, `process_vm_readv`/`writev`, `bpf`,
//!   `perf_event_open`, `io_uring_setup`/`enter`/`register`, `userfaultfd`, `keyctl`,
//!   `add_key`, `request_key`, `kexec_load`, `kexec_file_load`, module loading
//!   (`init_module`, `finit_module`, `delete_module`), `reboot`, `swapon`, `swapoff`,
//!   `acct`, `quotactl`, `quotactl_fd`, clock setting (`settimeofday`, `clock_settime`,
//!   `clock_adjtime`, `adjtimex`), `open_by_handle_at`, `syslog` (the kernel log: readable by
//!   anyone where `kernel.dmesg_restrict` is 0), `fanotify_init` (filesystem-wide file
//!   activity of other processes; watchers use inotify), and `ioctl` with request `TIOCSTI`
//!   or `TIOCLINUX` (arg 1).
//! - **socket families** (every tier, every network mode): `socket(2)` makes only `AF_UNIX`,
//!   `AF_INET`, `AF_INET6` and `AF_NETLINK` sockets, and of netlink only `NETLINK_ROUTE`
//!   (arg 2); any other family gets `EAFNOSUPPORT` (what a kernel without it answers) and
//!   any other netlink protocol `EPROTONOSUPPORT` (likewise: libaudit and udev take it as
//!   "not built in" and carry on). `socketpair(2)` makes only `AF_UNIX` pairs
//!   (`EAFNOSUPPORT`). See [`SOCKET_FAMILIES`] for why each is there.
//! - **`ENOSYS`**: `clone3`. Its flags live in memory a filter cannot read, so it is
//!   refused as "not implemented" and libc falls back to `clone`, whose flags are checked.
//! - **kill the process**: any other audit architecture (i386 through `int 0x80` on x86_64,
//!   arm32 compat on aarch64), and on x86_64 any x32 number (bit 30 set: `[0x4000_0000,
//!   0x8000_0000)`; x32 shares `AUDIT_ARCH_X86_64`). On a kernel without x32 (as here) those
//!   numbers fail with `ENOSYS` anyway; the guard matters on kernels built with
//!   `CONFIG_X86_X32_ABI`. Negative numbers (`syscall(-1)`) are not x32 and are left to the
//!   kernel.
//! - **allowed**: everything else.
//!
//! No other call makes a socket of a new family: `accept` gives the listener's family,
//! `io_uring` (whose `IORING_OP_SOCKET` would) is refused above, and i386's `socketcall` is a
//! non-native ABI, killed. A descriptor received over a unix socket is whatever its sender
//! made; on the sealed tier nobody outside can send one.
//!
//! `name_to_handle_at` is left allowed: a handle is useless without `open_by_handle_at`
//! (denied, and needing `CAP_DAC_READ_SEARCH` besides), and some tools use it for mount ids.
//!
//! Argument tests read the low 32-bit word of the argument: the kernel reads `clone`'s flags
//! through `lower_32_bits()` and `ioctl`'s request as an `unsigned int`, so a value with junk
//! in the upper half is matched on what the kernel will actually use. `CLONE_NEWTIME` (0x80)
//! is not checked on `clone`: there those bits are the exit signal, and the legacy `clone`
//! cannot create a time namespace (only `clone3` and `unshare` can, both refused).
//!
//! # Why it is assembled here
//!
//! The other filters of this crate (the scoped tier's [`crate::metafilter`] and
//! [`crate::sockfilter`]) are compiled with the `seccompiler` crate. This one is a flat list
//! of syscall numbers with two argument tests, one jump each, and the kernel's cost of
//! loading a filter (conversion to eBPF, then JIT compilation in several passes) grows with
//! its length, on every run: seccompiler's two programs for this list (one match action
//! each, so `clone3` needed a second) came to 278 + 10 instructions and took 0.13-0.21 ms
//! to install here, against 0.06-0.09 ms for this single program of 62 instructions (78
//! since the socket-family tests and `fanotify_init` joined it). The
//! program is checked by a classic-BPF interpreter in the unit tests against
//! [`expected_action`], the rule written as plain Rust, for every syscall number and the
//! argument values that matter; the mechanism tests attempt each escape under the kernel.
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
    BackendError, BpfProgram, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, TargetArch,
    sock_filter,
};
use serde_json::{Value, json};

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The target architecture has no filter definition here.
    #[error("no seccomp filter is defined for the {0} architecture")]
    UnsupportedArch(&'static str),
    /// seccompiler refused a rule or the filter (the scoped tier's filters).
    #[error("compile the seccomp filter: {0}")]
    Compile(#[from] BackendError),
    /// The program is longer than the kernel accepts.
    #[error("the seccomp program has {0} instructions, more than the kernel's 4096")]
    TooLong(usize),
    /// A jump of the program is longer than classic BPF's 255 instructions, or past its end.
    #[error("a jump of the seccomp program spans {0} instructions: past its end or over 255")]
    JumpTooLong(usize),
    /// The program's blocks do not fit together (the reason says how).
    #[error("the seccomp program is malformed: {0}")]
    Layout(&'static str),
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
    ("fanotify_init", libc::SYS_fanotify_init),
];

/// The socket families `socket(2)` may make, on every tier and in every network mode:
///
/// - `AF_UNIX`: local IPC (pathname sockets are Landlock's from ABI 9, abstract ones scoped
///   from ABI 6; the sealed tier has its own network namespace, so its abstract namespace
///   is private).
/// - `AF_INET`, `AF_INET6`: on the sealed tier they reach the run's own network namespace
///   (loopback, and in `allow` mode the supervisor's listeners); on the scoped tier the
///   socket filter ([`crate::sockfilter`]) narrows them further in mode `none`.
/// - `AF_NETLINK` with `NETLINK_ROUTE` only: glibc's `getaddrinfo` (`AI_ADDRCONFIG`),
///   `getifaddrs` and `if_nameindex` ask it for the interfaces, and `ip` lists addresses
///   and routes with it; changing them needs `CAP_NET_ADMIN`, which the command lacks.
///   Other protocols (audit, uevents, sock_diag, xfrm, …) are refused: `ss` falls back to
///   `/proc/net`, libaudit and udev see a kernel without them.
///
/// Everything else — `AF_VSOCK` (the VM's host-guest port space, outside any network
/// namespace), `AF_PACKET`, `AF_BLUETOOTH`, `AF_CAN`, `AF_ALG`, `AF_XDP`, `AF_TIPC`,
/// `AF_RDS`, `AF_KEY`, `AF_SMC`, … — is refused.
pub const SOCKET_FAMILIES: &[(&str, u64)] = &[
    ("AF_UNIX", libc::AF_UNIX as u64),
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
];

/// The netlink protocols `socket(AF_NETLINK, _, protocol)` may name.
pub const NETLINK_PROTOCOLS: &[(&str, u64)] = &[("NETLINK_ROUTE", libc::NETLINK_ROUTE as u64)];

/// The syscall number range the x32 guard kills (x32 numbers carry bit 30).
pub const X32_RANGE: std::ops::Range<u32> = 0x4000_0000..0x8000_0000;

// Classic BPF opcodes (linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
/// The instruction class of jumps (`code & 0x07`).
const BPF_JMP: u16 = 0x05;
/// `offsetof(struct seccomp_data, nr)`.
const DATA_NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const DATA_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args)`: six `u64`s.
const DATA_ARGS: u32 = 16;
/// The kernel's `BPF_MAXINSNS`.
const BPF_MAXINSNS: usize = 4096;

/// `AUDIT_ARCH_X86_64` (linux/audit.h).
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64` (linux/audit.h).
pub const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// What the filter answers a syscall with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run it.
    Allow,
    /// Fail it with this errno.
    Errno(u16),
    /// Kill the whole process (`SECCOMP_RET_KILL_PROCESS`).
    KillProcess,
}

impl Action {
    /// The filter's return value for this action.
    pub fn ret(self) -> u32 {
        match self {
            Action::Allow => libc::SECCOMP_RET_ALLOW,
            Action::Errno(e) => libc::SECCOMP_RET_ERRNO | u32::from(e),
            Action::KillProcess => libc::SECCOMP_RET_KILL_PROCESS,
        }
    }
}

const EPERM: Action = Action::Errno(libc::EPERM as u16);
const ENOSYS: Action = Action::Errno(libc::ENOSYS as u16);
const EAFNOSUPPORT: Action = Action::Errno(libc::EAFNOSUPPORT as u16);
const EPROTONOSUPPORT: Action = Action::Errno(libc::EPROTONOSUPPORT as u16);

/// The rule the program implements, written as plain Rust: the action for syscall `nr`
/// with arguments `args` made under audit architecture `arch`, on the native architecture
/// `native` (`x86` when it is x86_64, which has the x32 guard). The unit tests hold the
/// program to it.
pub fn expected_action(native: u32, x86: bool, arch: u32, nr: u32, args: [u64; 6]) -> Action {
    if arch != native || (x86 && X32_RANGE.contains(&nr)) {
        return Action::KillProcess;
    }
    let nr = i64::from(nr);
    let low = |a: u64| a & 0xffff_ffff;
    let denied = DENIED.iter().any(|&(_, n)| n == nr);
    let namespace_clone = nr == libc::SYS_clone
        && CLONE_NS_FLAGS
            .iter()
            .any(|&(_, flag)| low(args[0]) & flag != 0);
    let terminal_push = nr == libc::SYS_ioctl && [TIOCSTI, TIOCLINUX].contains(&low(args[1]));
    let listed = |table: &[(&str, u64)], v: u64| table.iter().any(|&(_, f)| f == low(v));
    if nr == libc::SYS_socket {
        return if !listed(SOCKET_FAMILIES, args[0]) {
            EAFNOSUPPORT
        } else if low(args[0]) == libc::AF_NETLINK as u64 && !listed(NETLINK_PROTOCOLS, args[2]) {
            EPROTONOSUPPORT
        } else {
            Action::Allow
        };
    }
    if nr == libc::SYS_socketpair && low(args[0]) != libc::AF_UNIX as u64 {
        return EAFNOSUPPORT;
    }
    if denied || namespace_clone || terminal_push {
        EPERM
    } else if nr == libc::SYS_clone3 {
        ENOSYS
    } else {
        Action::Allow
    }
}

/// The assembled filter, ready to install. Built once, before any restriction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompFilter {
    program: BpfProgram,
    denied: Vec<&'static str>,
    arch: &'static str,
}

impl SeccompFilter {
    /// The classic-BPF program.
    pub fn program(&self) -> &[sock_filter] {
        &self.program
    }

    /// Names of every syscall the filter answers with `EPERM` (conditionally for `clone`
    /// and `ioctl`).
    pub fn denied_syscalls(&self) -> &[&'static str] {
        &self.denied
    }

    /// The architecture the filter is built for.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The observation's details (also what a successful install reports).
    pub fn details(&self) -> BTreeMap<String, Value> {
        let mut d = BTreeMap::new();
        d.insert("arch".to_owned(), json!(self.arch));
        d.insert("filters".to_owned(), json!(1));
        d.insert("instructions".to_owned(), json!(self.program.len()));
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
        d.insert(
            "socket_families".to_owned(),
            json!({
                "allowed": SOCKET_FAMILIES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                "netlink_protocols": NETLINK_PROTOCOLS.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
                "socketpair": ["AF_UNIX"],
                "errno": "EAFNOSUPPORT",
                "netlink_errno": "EPROTONOSUPPORT",
            }),
        );
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

// Little-endian only: big-endian aarch64 has another audit arch (no __AUDIT_ARCH_LE), and
// neither this program nor seccompiler's knows it.
#[cfg(all(target_arch = "aarch64", target_endian = "little"))]
pub(crate) fn target() -> Result<(TargetArch, &'static str), SeccompError> {
    Ok((TargetArch::aarch64, "aarch64"))
}

#[cfg(not(any(
    target_arch = "x86_64",
    all(target_arch = "aarch64", target_endian = "little")
)))]
pub(crate) fn target() -> Result<(TargetArch, &'static str), SeccompError> {
    Err(SeccompError::UnsupportedArch(std::env::consts::ARCH))
}

/// The audit architecture of the native ABI.
fn native_audit_arch(arch: &str) -> Result<u32, SeccompError> {
    match arch {
        "x86_64" => Ok(AUDIT_ARCH_X86_64),
        "aarch64" => Ok(AUDIT_ARCH_AARCH64),
        _ => Err(SeccompError::UnsupportedArch(std::env::consts::ARCH)),
    }
}

pub(crate) fn dword(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// The offset in `struct seccomp_data` of argument `i`'s low 32-bit word (the targets
/// [`target`] accepts are little-endian).
fn arg_low_word(i: u32) -> u32 {
    DATA_ARGS + 8 * i
}

/// Where a jump of the program goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    /// Over this many instructions (0: the next one).
    Skip(u8),
    /// `clone`'s flag test.
    Clone,
    /// `ioctl`'s request test.
    Ioctl,
    /// `socket`'s family test.
    Socket,
    /// `socket`'s netlink protocol test.
    Netlink,
    /// `socketpair`'s family test.
    Socketpair,
    /// The `ALLOW` return.
    Allow,
    /// The `EAFNOSUPPORT` return.
    Eafnosupport,
    /// The `EPERM` return.
    Eperm,
    /// The `ENOSYS` return.
    Enosys,
}

/// An instruction whose jump targets may still be labels.
struct Ins {
    code: u16,
    k: u32,
    jt: Label,
    jf: Label,
}

fn op(code: u16, k: u32) -> Ins {
    jump(code, k, Label::Skip(0), Label::Skip(0))
}

fn jump(code: u16, k: u32, jt: Label, jf: Label) -> Ins {
    Ins { code, k, jt, jf }
}

/// Resolve `blocks` (each with the label it starts, if any) into one program: a jump to a
/// label lands on its block's first instruction. Classic BPF jumps only forward, by at most
/// 255 instructions.
fn link(blocks: Vec<(Option<Label>, Vec<Ins>)>) -> Result<BpfProgram, SeccompError> {
    let mut at = BTreeMap::new();
    let mut len = 0usize;
    for (label, body) in &blocks {
        if let Some(l) = label
            && at.insert(*l, len).is_some()
        {
            return Err(SeccompError::Layout("two blocks start with the same label"));
        }
        len += body.len();
    }
    if len > BPF_MAXINSNS {
        return Err(SeccompError::TooLong(len));
    }
    let last_returns = blocks
        .iter()
        .rev()
        .find_map(|(_, body)| body.last())
        .is_some_and(|ins| ins.code == BPF_RET_K);
    if !last_returns {
        return Err(SeccompError::Layout("the last instruction is not a return"));
    }
    let mut program = Vec::with_capacity(len);
    for ins in blocks.into_iter().flat_map(|(_, body)| body) {
        let next = program.len() + 1;
        if ins.code == BPF_JMP {
            // BPF_JA: its offset is `k`, which the labels do not cover.
            return Err(SeccompError::Layout(
                "unconditional jumps are not supported",
            ));
        }
        if ins.code & 0x07 != BPF_JMP {
            // Not a jump: its jt and jf are unused, and must be zero.
            program.push(sock_filter {
                code: ins.code,
                jt: 0,
                jf: 0,
                k: ins.k,
            });
            continue;
        }
        let offset = |to: Label| -> Result<u8, SeccompError> {
            let span = match to {
                Label::Skip(n) => usize::from(n),
                label => at
                    .get(&label)
                    .and_then(|target| target.checked_sub(next))
                    .ok_or(SeccompError::Layout(
                        "a jump goes to a block the program does not have, or backwards",
                    ))?,
            };
            if next + span >= len {
                return Err(SeccompError::JumpTooLong(span));
            }
            u8::try_from(span).map_err(|_| SeccompError::JumpTooLong(span))
        };
        program.push(sock_filter {
            code: ins.code,
            jt: offset(ins.jt)?,
            jf: offset(ins.jf)?,
            k: ins.k,
        });
    }
    Ok(program)
}

/// Build the filter for the native architecture. Pure: no syscall.
pub fn build_filter() -> Result<SeccompFilter, SeccompError> {
    let (_, arch) = target()?;
    let native = native_audit_arch(arch)?;
    let nr = |v: i64| u32::try_from(v).map_err(|_| SeccompError::UnsupportedArch(arch));
    let word = |v: u64| u32::try_from(v).map_err(|_| SeccompError::UnsupportedArch(arch));
    let ret = |a: Action| op(BPF_RET_K, a.ret());
    let next = Label::Skip(0);

    let mut head = vec![
        op(BPF_LD_W_ABS, DATA_ARCH),
        // Native ? over the kill : the kill.
        jump(BPF_JMP_JEQ_K, native, Label::Skip(1), next),
        ret(Action::KillProcess),
        op(BPF_LD_W_ABS, DATA_NR),
    ];
    if arch == "x86_64" {
        head.extend([
            // nr >= 0x4000_0000 ? the next test : over it and the kill.
            jump(BPF_JMP_JGE_K, X32_RANGE.start, next, Label::Skip(2)),
            // nr >= 0x8000_0000 (negative: not x32) ? over the kill : the kill.
            jump(BPF_JMP_JGE_K, X32_RANGE.end, Label::Skip(1), next),
            ret(Action::KillProcess),
        ]);
    }
    // The argument tests first: `ioctl` and `clone` are common and not answered by the
    // kernel's cache of constant actions, so they are found after one comparison or two.
    let mut dispatch = vec![
        jump(BPF_JMP_JEQ_K, nr(libc::SYS_ioctl)?, Label::Ioctl, next),
        jump(BPF_JMP_JEQ_K, nr(libc::SYS_clone)?, Label::Clone, next),
        jump(BPF_JMP_JEQ_K, nr(libc::SYS_clone3)?, Label::Enosys, next),
        jump(BPF_JMP_JEQ_K, nr(libc::SYS_socket)?, Label::Socket, next),
        jump(
            BPF_JMP_JEQ_K,
            nr(libc::SYS_socketpair)?,
            Label::Socketpair,
            next,
        ),
    ];
    for &(_, n) in DENIED {
        dispatch.push(jump(BPF_JMP_JEQ_K, nr(n)?, Label::Eperm, next));
    }
    dispatch.push(ret(Action::Allow));
    let ns_mask = CLONE_NS_FLAGS.iter().fold(0u64, |m, &(_, f)| m | f);
    let clone = vec![
        op(BPF_LD_W_ABS, arg_low_word(0)),
        jump(BPF_JMP_JSET_K, word(ns_mask)?, Label::Eperm, next),
        ret(Action::Allow),
    ];
    let ioctl = vec![
        op(BPF_LD_W_ABS, arg_low_word(1)),
        jump(BPF_JMP_JEQ_K, word(TIOCSTI)?, Label::Eperm, next),
        jump(BPF_JMP_JEQ_K, word(TIOCLINUX)?, Label::Eperm, next),
        ret(Action::Allow),
    ];
    let mut socket = vec![op(BPF_LD_W_ABS, arg_low_word(0))];
    for &(_, family) in SOCKET_FAMILIES {
        let to = if family == libc::AF_NETLINK as u64 {
            Label::Netlink
        } else {
            Label::Allow
        };
        socket.push(jump(BPF_JMP_JEQ_K, word(family)?, to, next));
    }
    socket.push(ret(EAFNOSUPPORT));
    let mut netlink = vec![op(BPF_LD_W_ABS, arg_low_word(2))];
    for &(_, protocol) in NETLINK_PROTOCOLS {
        netlink.push(jump(BPF_JMP_JEQ_K, word(protocol)?, Label::Allow, next));
    }
    netlink.push(ret(EPROTONOSUPPORT));
    let socketpair = vec![
        op(BPF_LD_W_ABS, arg_low_word(0)),
        jump(
            BPF_JMP_JEQ_K,
            word(libc::AF_UNIX as u64)?,
            Label::Allow,
            Label::Eafnosupport,
        ),
    ];
    let program = link(vec![
        (None, head),
        (None, dispatch),
        (Some(Label::Clone), clone),
        (Some(Label::Ioctl), ioctl),
        (Some(Label::Socket), socket),
        (Some(Label::Netlink), netlink),
        (Some(Label::Socketpair), socketpair),
        (Some(Label::Allow), vec![ret(Action::Allow)]),
        (Some(Label::Eafnosupport), vec![ret(EAFNOSUPPORT)]),
        (Some(Label::Eperm), vec![ret(EPERM)]),
        (Some(Label::Enosys), vec![ret(ENOSYS)]),
    ])?;

    let mut denied: Vec<&'static str> = DENIED.iter().map(|&(name, _)| name).collect();
    denied.push("clone");
    denied.push("ioctl");
    Ok(SeccompFilter {
        program,
        denied,
        arch,
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

/// The number of seccomp filters attached to the calling thread, as `/proc/thread-self/status`
/// shows it (`Seccomp_filters`, Linux 5.9); `None` when it cannot be read.
pub(crate) fn filters_in_force() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    parse_filters(&status)
}

fn parse_filters(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Compare the filter count read after an install with the one before: `Err` with the
/// reason when it did not grow by `added`. An unreadable count (a kernel before 5.9) is
/// `Ok(None)`: the probe call decides alone.
pub(crate) fn check_count(
    before: Option<u64>,
    after: Option<u64>,
    added: u64,
) -> Result<Option<u64>, String> {
    match (before, after) {
        (Some(b), Some(a)) if a == b + added => Ok(Some(a)),
        (Some(b), Some(a)) => Err(format!(
            "Seccomp_filters reads {a} after installing {added} filter(s) on {b}"
        )),
        (None, None) => Ok(None),
        (b, a) => Err(format!(
            "Seccomp_filters was readable only on one side of the install ({b:?}, {a:?})"
        )),
    }
}

/// Read an install of `added` filters back into `o`: the count in `Seccomp_filters` against
/// `before` (`seccomp_filters_read`) and then the probe call `call`, described as `probe`.
/// `Err` with the reason when either says the filters are not in force.
pub(crate) fn read_back_install(
    o: &mut ControlObservation,
    before: Option<u64>,
    added: u64,
    probe: &str,
    call: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let count = check_count(before, filters_in_force(), added);
    o.details.insert(
        "seccomp_filters_read".into(),
        json!(count.as_ref().ok().copied().flatten()),
    );
    o.details.insert("probe".into(), json!(probe));
    count.and_then(|_| call())
}

/// The probe call: `clone3(NULL, 0)`, which the filter answers `ENOSYS` and the kernel,
/// unfiltered, rejects with `EINVAL` (a size below the first version of the arguments)
/// before doing anything.
fn probe_clone3() -> Result<(), String> {
    // SAFETY: with a NULL argument pointer and size 0 the kernel fails the call while
    // checking the size, before reading memory or creating anything; nothing is returned.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    if r == -1 && errno == Some(libc::ENOSYS) {
        Ok(())
    } else {
        Err(format!(
            "the probe clone3(NULL, 0) returned {r} with errno {errno:?}, not the filter's ENOSYS"
        ))
    }
}

/// Install the filter on the calling thread and read it back: the thread's seccomp mode,
/// the `Seccomp_filters` count against the count before plus one, and a probe call the
/// filter must answer.
///
/// `enforced` when all three read back; `failed` when it was refused (nothing is installed)
/// or any reading disagrees.
pub fn install(filter: &SeccompFilter) -> ControlObservation {
    let mut details = filter.details();
    let before = filters_in_force();
    let applied = if crate::mutant::active(crate::mutant::SECCOMP_FILTER) {
        Ok(())
    } else {
        seccompiler::apply_filter(&filter.program)
    };
    if let Err(e) = applied {
        details.insert("filters".to_owned(), json!(0));
        return observation(
            ControlStatus::Failed,
            Some(format!("install the filter: {e}")),
            details,
        );
    }
    let count = check_count(before, filters_in_force(), 1);
    details.insert(
        "seccomp_filters_read".to_owned(),
        json!(count.as_ref().ok().copied().flatten()),
    );
    let mode = match rustix::thread::secure_computing_mode() {
        Ok(rustix::thread::SecureComputingMode::Filter) => Ok(()),
        other => Err(format!(
            "the seccomp mode reads back as {other:?}, not filter"
        )),
    };
    let probe = probe_clone3();
    details.insert("probe".to_owned(), json!("clone3(NULL, 0) = ENOSYS"));
    match mode.and(count.map(|_| ())).and(probe) {
        Ok(()) => observation(ControlStatus::Enforced, None, details),
        Err(why) => observation(ControlStatus::Failed, Some(why), details),
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
    let child = rustix::process::Pid::from_raw(pid).unwrap();
    let (_, status) = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty())
        .unwrap()
        .unwrap();
    status.exit_status().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the instructions the filter uses (and seccompiler's).
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
    const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;

    fn native() -> u32 {
        if cfg!(target_arch = "x86_64") {
            AUDIT_ARCH_X86_64
        } else {
            AUDIT_ARCH_AARCH64
        }
    }

    fn deny(nr: i64, args: [u64; 6]) -> u32 {
        let f = build_filter().unwrap();
        run(f.program(), native(), nr as u32, args)
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
            libc::SYS_name_to_handle_at,
        ] {
            assert_eq!(deny(nr, [0; 6]), ALLOW, "{nr}");
        }
        let f = build_filter().unwrap();
        assert_eq!(f.denied_syscalls().len(), DENIED.len() + 2);
        let mut names = f.denied_syscalls().to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), f.denied_syscalls().len(), "no duplicates");
        let mut nrs: Vec<i64> = DENIED.iter().map(|(_, n)| *n).collect();
        nrs.extend([
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_ioctl,
            libc::SYS_socket,
            libc::SYS_socketpair,
        ]);
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), DENIED.len() + 5, "no two names share a number");
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
        // A namespace bit in the high word only is not one the kernel reads.
        assert_eq!(
            deny(
                libc::SYS_clone,
                [(libc::CLONE_NEWUSER as u64) << 32, 0, 0, 0, 0, 0]
            ),
            ALLOW
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
        // The request is argument 1: TIOCSTI as the descriptor is nothing.
        assert_eq!(deny(libc::SYS_ioctl, [TIOCSTI, 0, 0, 0, 0, 0]), ALLOW);
    }

    #[test]
    fn a_foreign_arch_is_killed() {
        let f = build_filter().unwrap();
        for nr in [0, 20, libc::SYS_mount as u32, libc::SYS_clone3 as u32] {
            assert_eq!(run(f.program(), AUDIT_ARCH_I386, nr, [0; 6]), KILL);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_are_killed_and_negative_ones_left_alone() {
        let p = build_filter().unwrap().program;
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x4000_0000 | 39, [0; 6]), KILL);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x4000_0000, [0; 6]), KILL);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x7fff_ffff, [0; 6]), KILL);
        // x32's own mount number still dies (not EPERM): the guard runs first.
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x4000_0000 | 165, [0; 6]), KILL);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, u32::MAX, [0; 6]), ALLOW);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x8000_0000, [0; 6]), ALLOW);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 0x3fff_ffff, [0; 6]), ALLOW);
    }

    #[test]
    fn clone3_gets_enosys() {
        assert_eq!(deny(libc::SYS_clone3, [0; 6]), ENOSYS);
        let ns = libc::CLONE_NEWUSER as u64;
        assert_eq!(deny(libc::SYS_clone3, [ns, 0, 0, 0, 0, 0]), ENOSYS);
    }

    /// The program against [`expected_action`] for every syscall number below 1024, the
    /// edges of the x32 range, four architectures, and the argument values that matter.
    // libc's ioctl request type is u64 or c_int depending on the target.
    #[allow(clippy::unnecessary_cast)]
    #[test]
    fn the_program_answers_as_the_rule_for_every_syscall() {
        let f = build_filter().unwrap();
        let x86 = cfg!(target_arch = "x86_64");
        let mut values: Vec<u64> = vec![
            0,
            u64::MAX,
            0xffff_ffff_0000_0000,
            libc::SIGCHLD as u64,
            TIOCSTI,
            TIOCLINUX,
            TIOCSTI | (7 << 32),
            TIOCLINUX << 32,
            libc::TCGETS as u64,
            0x80, // CLONE_NEWTIME: the exit-signal bits of clone's flags
            libc::AF_VSOCK as u64,
            libc::AF_PACKET as u64,
            libc::NETLINK_AUDIT as u64,
            libc::NETLINK_KOBJECT_UEVENT as u64,
        ];
        for &(_, f) in SOCKET_FAMILIES.iter().chain(NETLINK_PROTOCOLS) {
            values.extend([f, f | (1 << 32), f << 32, f + 1]);
        }
        for &(_, flag) in CLONE_NS_FLAGS {
            values.extend([flag, flag | (1 << 40), flag << 32, !flag & 0xffff_ffff]);
        }
        let mut numbers: Vec<u32> = (0..1024).collect();
        numbers.extend([
            0x3fff_ffff,
            0x4000_0000,
            0x4000_0000 | libc::SYS_mount as u32,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX,
        ]);
        let mut checked = 0;
        for arch in [
            native(),
            AUDIT_ARCH_I386,
            AUDIT_ARCH_X86_64,
            AUDIT_ARCH_AARCH64,
        ] {
            for &nr in &numbers {
                // Each value as argument 0, 1 and 2; the others get junk.
                for (slot, &v) in values.iter().flat_map(|v| [(0usize, v), (1, v), (2, v)]) {
                    let mut args = [0xdead_beef_u64; 6];
                    args[slot] = v;
                    let want = expected_action(native(), x86, arch, nr, args).ret();
                    let got = run(f.program(), arch, nr, args);
                    assert_eq!(got, want, "arch {arch:#x} nr {nr:#x} args {args:x?}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
        // socket(2): every family below 64 with every netlink protocol below 64 (and both
        // with junk above the low word), as the kernel reads them.
        for nr in [libc::SYS_socket as u32, libc::SYS_socketpair as u32] {
            for family in (0..64u64).flat_map(|f| [f, f | (0xff << 32)]) {
                for protocol in (0..64u64).flat_map(|p| [p, p | (1 << 63)]) {
                    let args = [family, 0xdead_beef, protocol, 0, 0, 0];
                    let want = expected_action(native(), x86, native(), nr, args).ret();
                    assert_eq!(run(f.program(), native(), nr, args), want, "{nr} {args:x?}");
                }
            }
        }
    }

    #[test]
    fn socket_families_follow_the_allowlist() {
        let sock = |family: i32, protocol: i32| {
            deny(
                libc::SYS_socket,
                [
                    family as u64,
                    libc::SOCK_STREAM as u64,
                    protocol as u64,
                    0,
                    0,
                    0,
                ],
            )
        };
        let eafnosupport = libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;
        let eprotonosupport = libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32;
        for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
            assert_eq!(sock(family, 0), ALLOW, "{family}");
        }
        assert_eq!(sock(libc::AF_NETLINK, libc::NETLINK_ROUTE), ALLOW);
        for protocol in [
            libc::NETLINK_AUDIT,
            libc::NETLINK_KOBJECT_UEVENT,
            libc::NETLINK_SOCK_DIAG,
            libc::NETLINK_XFRM,
            libc::NETLINK_NETFILTER,
            libc::NETLINK_GENERIC,
        ] {
            assert_eq!(
                sock(libc::AF_NETLINK, protocol),
                eprotonosupport,
                "{protocol}"
            );
        }
        for family in [
            libc::AF_VSOCK,
            libc::AF_PACKET,
            libc::AF_BLUETOOTH,
            libc::AF_CAN,
            libc::AF_ALG,
            libc::AF_XDP,
            libc::AF_TIPC,
            libc::AF_RDS,
            libc::AF_KEY,
            libc::AF_UNSPEC,
            46, // AF_MAX: one past the last family
        ] {
            assert_eq!(sock(family, 0), eafnosupport, "{family}");
        }
        // A family with junk in the upper half is still the family the kernel uses.
        assert_eq!(
            deny(
                libc::SYS_socket,
                [(1 << 32) | libc::AF_VSOCK as u64, 1, 0, 0, 0, 0]
            ),
            eafnosupport
        );
        let pair = |family: i32| deny(libc::SYS_socketpair, [family as u64, 1, 0, 0, 0, 0]);
        assert_eq!(pair(libc::AF_UNIX), ALLOW);
        for family in [
            libc::AF_TIPC,
            libc::AF_INET,
            libc::AF_VSOCK,
            libc::AF_NETLINK,
        ] {
            assert_eq!(pair(family), eafnosupport, "{family}");
        }
    }

    /// What the kernel checks before it accepts a classic-BPF seccomp program
    /// (`bpf_check_classic`, `seccomp_check_filter`), for the instructions used here: the
    /// interpreter above follows only the paths a test takes.
    #[test]
    fn the_program_passes_the_kernels_structural_checks() {
        let p = build_filter().unwrap().program;
        assert!(!p.is_empty() && p.len() <= BPF_MAXINSNS);
        for (pc, ins) in p.iter().enumerate() {
            match ins.code {
                BPF_LD_W_ABS => {
                    // Aligned and inside `struct seccomp_data` (64 bytes).
                    assert!(ins.k % 4 == 0 && ins.k + 4 <= 64, "load at {pc}: {}", ins.k);
                    assert_eq!((ins.jt, ins.jf), (0, 0), "load at {pc}");
                }
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                    for off in [ins.jt, ins.jf] {
                        assert!(
                            pc + 1 + usize::from(off) < p.len(),
                            "jump at {pc} past the end"
                        );
                    }
                }
                BPF_RET_K => {
                    assert_eq!((ins.jt, ins.jf), (0, 0), "return at {pc}");
                    assert!(
                        [
                            ALLOW,
                            KILL,
                            EPERM,
                            ENOSYS,
                            libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32,
                            libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32,
                        ]
                        .contains(&ins.k),
                        "return at {pc}"
                    );
                }
                c => panic!("instruction {pc}: opcode {c:#x} is not one this filter uses"),
            }
        }
        assert_eq!(
            p.last().map(|i| i.code),
            Some(BPF_RET_K),
            "ends in a return"
        );
    }

    #[test]
    fn the_program_is_one_comparison_per_syscall() {
        let f = build_filter().unwrap();
        let head = if cfg!(target_arch = "x86_64") { 7 } else { 4 };
        // Head, one jump per number (the list, ioctl, clone, clone3, socket, socketpair) and
        // the allow, the argument tests (clone, ioctl, socket, netlink, socketpair), the four
        // shared returns.
        let socket = 2 + SOCKET_FAMILIES.len() + 2 + NETLINK_PROTOCOLS.len() + 2;
        assert_eq!(
            f.program().len(),
            head + DENIED.len() + 5 + 1 + 3 + 4 + socket + 4
        );
    }

    #[test]
    fn the_filter_count_is_read_and_must_grow_by_what_was_installed() {
        let status = "Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\nSpeculation_Store_Bypass:\tx\n";
        assert_eq!(parse_filters(status), Some(3));
        assert_eq!(parse_filters("Seccomp:\t0\n"), None);
        assert_eq!(check_count(Some(3), Some(4), 1), Ok(Some(4)));
        assert_eq!(check_count(None, None, 1), Ok(None));
        assert!(check_count(Some(3), Some(3), 1).is_err());
        assert!(check_count(Some(1), Some(2), 2).is_err());
        assert!(check_count(None, Some(2), 1).is_err());
    }

    #[test]
    fn the_probe_call_tells_the_filter_from_the_kernel() {
        // Unfiltered, clone3(NULL, 0) is the kernel's EINVAL: the probe reports it.
        assert!(probe_clone3().is_err());
        let filter = build_filter().unwrap();
        let code = in_filtered_child(&[&filter.program], || i32::from(probe_clone3().is_ok()));
        assert_eq!(code, 1);
    }

    #[test]
    fn details_name_the_counts() {
        let f = build_filter().unwrap();
        let d = f.details();
        assert_eq!(d["filters"], 1);
        assert_eq!(d["instructions"], f.program().len());
        assert_eq!(d["denied_syscalls"], DENIED.len() + 2);
        assert_eq!(d["arch"], std::env::consts::ARCH);
    }

    #[test]
    fn a_jump_past_the_end_or_too_far_is_refused() {
        let ret = || op(BPF_RET_K, ALLOW);
        let far = link(vec![
            (
                None,
                vec![jump(BPF_JMP_JEQ_K, 1, Label::Eperm, Label::Skip(0))],
            ),
            (None, (0..300).map(|_| ret()).collect()),
            (Some(Label::Eperm), vec![ret()]),
        ]);
        assert!(
            matches!(far, Err(SeccompError::JumpTooLong(300))),
            "{far:?}"
        );
        let past = link(vec![(
            None,
            vec![
                jump(BPF_JMP_JEQ_K, 1, Label::Skip(1), Label::Skip(0)),
                ret(),
            ],
        )]);
        assert!(
            matches!(past, Err(SeccompError::JumpTooLong(1))),
            "{past:?}"
        );
        let missing = link(vec![(
            None,
            vec![jump(BPF_JMP_JEQ_K, 1, Label::Enosys, Label::Skip(0)), ret()],
        )]);
        assert!(
            matches!(missing, Err(SeccompError::Layout(_))),
            "{missing:?}"
        );
        let twice = link(vec![
            (Some(Label::Eperm), vec![ret()]),
            (Some(Label::Eperm), vec![ret()]),
        ]);
        assert!(matches!(twice, Err(SeccompError::Layout(_))), "{twice:?}");
        let open_end = link(vec![(None, vec![ret(), op(BPF_LD_W_ABS, DATA_NR)])]);
        assert!(
            matches!(open_end, Err(SeccompError::Layout(_))),
            "{open_end:?}"
        );
        let ja = link(vec![(None, vec![op(BPF_JMP, 0), ret()])]);
        assert!(matches!(ja, Err(SeccompError::Layout(_))), "{ja:?}");
    }
}
