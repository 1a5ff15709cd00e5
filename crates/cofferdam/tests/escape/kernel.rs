//! Kernel surface: the system calls seccomp refuses, made raw from inside with
//! `/usr/bin/python3` and ctypes (numbers from the `libc` crate, so the table is per
//! architecture); the non-native ABIs are killed.

use crate::harness::{Attack, BOTH_MUST, Boundary::Kernel, Ctx, Outcome, check};

/// Make raw syscall `nr` inside with `args` (a Python expression list: ints, bytes for
/// strings, or calls like `os.open(...)`); denied when it fails with `errno`. A call that
/// would fork continues as a child that exits at once.
pub fn syscall_probe(ctx: &Ctx, nr: libc::c_long, args: &str, errno: i32) -> Outcome {
    let script = format!(
        r#"
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
pid = os.getpid()
args = [ctypes.c_long(a) if isinstance(a, int) else a for a in [{args}]]
r = l.syscall(ctypes.c_long({nr}), *args)
e = ctypes.get_errno()
if os.getpid() != pid:
    os._exit(0)
print("ret=%d" % r)
print("errno=%d" % (e if r < 0 else 0))
"#
    );
    let r = ctx.py(&script);
    ctx.assert_boundary(&r);
    let got = r.value("errno").map(str::to_owned);
    check(
        r.value("ret") == Some("-1") && got.as_deref() == Some(errno.to_string().as_str()),
        format!("syscall {nr} → {}", errno_name(errno)),
        format!(
            "syscall {nr}({args}) returned {:?} errno {:?} (wanted {}); {}",
            r.value("ret"),
            got,
            errno_name(errno),
            r.err.trim()
        ),
    )
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        _ => "errno",
    }
}

macro_rules! denied_syscalls {
    ($( $id:literal, $fn:ident, $nr:expr, $args:literal, $desc:literal; )*) => {
        $( fn $fn(ctx: &Ctx) -> Outcome { syscall_probe(ctx, $nr, $args, libc::EPERM) } )*
        pub const SYSCALL_ATTACKS: &[Attack] = &[ $( Attack {
            id: $id,
            boundary: Kernel,
            description: $desc,
            on: BOTH_MUST,
            probe: $fn,
        }, )* ];
    };
}

// Arguments are chosen so that an unfiltered call would do something observable (succeed,
// or fail with another errno) but nothing harmful, even as root on a tier whose filter is
// gone: an invalid flag, command or magic number the kernel checks right after the
// capability (and before acting), a path that does not exist, a module that is not loaded.
// Never a valid state change of the host (no kexec unload, module removal, C-A-D switch,
// accounting off, host mount).
denied_syscalls! {
    "ks.bpf", bpf, libc::SYS_bpf, "5, 0, 0", "bpf(BPF_PROG_LOAD)";
    "ks.perf-event-open", perf_event_open, libc::SYS_perf_event_open, "0, 0, -1, -1, 0", "perf_event_open";
    "ks.keyctl", keyctl, libc::SYS_keyctl, "0xc0ffee, 0, 0", "keyctl(an unknown operation)";
    "ks.add-key", add_key, libc::SYS_add_key, "b'user', b'cofferdam', b'x', 1, 0", "add_key into keyring 0 (none: ENOKEY when allowed)";
    "ks.request-key", request_key, libc::SYS_request_key, "b'user', b'cofferdam', 0, 0", "request_key";
    "ks.kexec-load", kexec_load, libc::SYS_kexec_load, "0, 0, 0, 0x8000", "kexec_load with an unknown flag (no unload)";
    "ks.kexec-file-load", kexec_file_load, libc::SYS_kexec_file_load, "-1, -1, 0, 0, 0", "kexec_file_load";
    "ks.init-module", init_module, libc::SYS_init_module, "0, 0, b''", "init_module";
    "ks.finit-module", finit_module, libc::SYS_finit_module, "os.open('/dev/null', os.O_RDONLY), b'', 0", "finit_module";
    "ks.delete-module", delete_module, libc::SYS_delete_module, "b'cofferdam_no_such_module', 0x800", "delete_module of a module that is not loaded";
    "ks.userfaultfd", userfaultfd, libc::SYS_userfaultfd, "0", "userfaultfd";
    "ks.io-uring-setup", io_uring_setup, libc::SYS_io_uring_setup, "1, 0", "io_uring_setup";
    "ks.io-uring-register", io_uring_register, libc::SYS_io_uring_register, "-1, 0, 0, 0", "io_uring_register";
    "ks.mount-syscall", mount, libc::SYS_mount, "b'none', b'.', b'tmpfs', 0x80000000, 0", "mount(2) a tmpfs with MS_NOUSER (EINVAL when allowed)";
    "ks.umount2", umount2, libc::SYS_umount2, "b'.', 0x10", "umount2(., an unknown flag)";
    "ks.pivot-root", pivot_root, libc::SYS_pivot_root, "b'/cofferdam-no-such-dir', b'.'", "pivot_root onto a path that does not exist";
    "ks.open-tree", open_tree, libc::SYS_open_tree, "-100, b'/', 1", "open_tree(AT_FDCWD, /, OPEN_TREE_CLONE)";
    "ks.fsopen", fsopen, libc::SYS_fsopen, "b'tmpfs', 0", "fsopen(tmpfs)";
    "ks.move-mount", move_mount, libc::SYS_move_mount, "-100, b'.', -100, b'.', 0x80000000", "move_mount with an unknown flag";
    "ks.open-by-handle-at", open_by_handle_at, libc::SYS_open_by_handle_at, "-100, 0, 0", "open_by_handle_at (the shocker escape)";
    "ks.reboot", reboot, libc::SYS_reboot, "0, 0, 0", "reboot with a wrong magic number (EINVAL when allowed)";
    "ks.swapon", swapon, libc::SYS_swapon, "b'/dev/null', 0", "swapon";
    "ks.acct", acct, libc::SYS_acct, "b'/cofferdam-no-such-dir/acct'", "acct onto a path that does not exist (never acct(NULL), which turns accounting off)";
    "ks.settimeofday", settimeofday, libc::SYS_settimeofday, "0, 0", "settimeofday(NULL, NULL), a no-op when allowed";
    "ks.clock-settime", clock_settime, libc::SYS_clock_settime, "0, 0", "clock_settime(CLOCK_REALTIME)";
    "ks.adjtimex", adjtimex, libc::SYS_adjtimex, "0", "adjtimex";
}

/// The attacks that are not a plain denied syscall.
pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "ks.x32-abi",
        boundary: Kernel,
        description: "an x32 system call number (bit 30): the process is killed",
        on: BOTH_MUST,
        probe: x32,
    },
    Attack {
        id: "ks.i386-int80",
        boundary: Kernel,
        description: "an i386 system call through int 0x80 (another audit arch): killed",
        on: BOTH_MUST,
        probe: i386_int80,
    },
    Attack {
        id: "ks.high-bits-args",
        boundary: Kernel,
        description: "junk in the upper 32 bits of clone flags and ioctl requests to slip past the filter",
        on: BOTH_MUST,
        probe: high_bits,
    },
    Attack {
        id: "ks.syslog",
        boundary: Kernel,
        description: "read the kernel log (syslog(SYSLOG_ACTION_READ_ALL), dmesg)",
        on: BOTH_MUST,
        probe: syslog,
    },
    Attack {
        id: "ks.random-pool",
        boundary: Kernel,
        description: "credit the host's entropy pool through /dev/urandom (RNDADDTOENTCNT)",
        on: BOTH_MUST,
        probe: random_pool,
    },
    Attack {
        id: "ks.device-nodes",
        boundary: Kernel,
        description: "open host devices: /dev/fuse, /dev/kvm, /dev/mem, /dev/kmsg, /dev/sda, /dev/net/tun",
        on: BOTH_MUST,
        probe: device_nodes,
    },
];

fn x32(ctx: &Ctx) -> Outcome {
    if !cfg!(target_arch = "x86_64") {
        return Outcome::Skipped("x32 exists only on x86_64".into());
    }
    // getpid (39) in the x32 numbering.
    let r = ctx.py(
        "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\nprint('ret=%d' % l.syscall(ctypes.c_long(0x40000000 + 39)))",
    );
    ctx.assert_boundary(&r);
    let killed =
        r.code == Some(128 + libc::SIGSYS) && r.bundle["run"]["failure"]["signal"] == libc::SIGSYS;
    check(
        killed && r.value("ret").is_none(),
        "killed by SIGSYS; the bundle records signal 31",
        format!("not killed: exit {:?}, {}", r.code, r.out),
    )
}

fn syslog(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("dmesg >/dev/null 2>&1 && echo dmesg=read; head -c 1 /dev/kmsg >/dev/null 2>&1 && echo kmsg=read; true");
    ctx.assert_boundary(&r);
    if r.value("dmesg").is_some() || r.value("kmsg").is_some() {
        return Outcome::Escaped(format!("the kernel log is readable: {}", r.out));
    }
    // SYSLOG_ACTION_READ_ALL (3) into a real buffer.
    syscall_probe(
        ctx,
        libc::SYS_syslog,
        "3, ctypes.create_string_buffer(4096), 4096",
        libc::EPERM,
    )
}

/// The scoped tier lends `/dev/urandom` (git reads it); writing it only mixes bytes in, and
/// crediting entropy needs `CAP_SYS_ADMIN`, which no tier leaves. A credit of 0 bits is
/// asked, so the attack changes nothing on the host even if it got through.
fn random_pool(ctx: &Ctx) -> Outcome {
    let r = ctx.py("import fcntl, os, struct\n\
         fd = -1\n\
         for how, flags in (('rw', os.O_RDWR), ('ro', os.O_RDONLY)):\n    \
         try:\n        fd = os.open('/dev/urandom', flags); print('open=' + how); break\n    \
         except OSError as e:\n        print('open_errno=%d' % e.errno)\n\
         if fd >= 0:\n    \
         try:\n        fcntl.ioctl(fd, 0x40045201, struct.pack('i', 0)); print('credited=1')\n    \
         except OSError as e:\n        print('errno=%d' % e.errno)");
    ctx.assert_boundary(&r);
    if r.value("credited").is_some() {
        return Outcome::Escaped(format!("RNDADDTOENTCNT succeeded: {}", r.out));
    }
    let refused = [libc::EPERM, libc::EACCES].map(|e| e.to_string());
    let errno = r.value("errno").map(str::to_owned);
    check(
        r.code == Some(0) && errno.as_ref().is_some_and(|e| refused.contains(e)),
        format!(
            "/dev/urandom opens ({}); RNDADDTOENTCNT → errno {} (1: no CAP_SYS_ADMIN; 13: \
             Landlock refuses device ioctls)",
            r.value("open").unwrap_or("-"),
            errno.as_deref().unwrap_or("-")
        ),
        format!("unexpected: exit {:?}, {}", r.code, r.out),
    )
}

fn device_nodes(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("for d in /dev/fuse /dev/kvm /dev/mem /dev/kmsg /dev/sda /dev/vda /dev/net/tun /dev/loop-control; do exec 3<>$d 2>/dev/null && echo opened=$d; exec 3<&-; done; true");
    ctx.assert_boundary(&r);
    let evidence = if ctx.tier() == crate::harness::Tier::Sealed {
        let dev = crate::harness::controls_of(&r.bundle, "minimal_dev");
        assert_eq!(dev[0]["status"], "enforced");
        "none exists in the minimal /dev (bundle: minimal_dev enforced)"
    } else {
        "none opens: Landlock grants only /dev/null, zero, full, random, urandom, tty and the \
         run's own pty"
    };
    check(
        r.value("opened").is_none(),
        evidence,
        format!("opened {:?}", r.value("opened")),
    )
}

/// Machine code: `mov eax, 20` (i386 getpid); `int 0x80`; `ret`.
const INT80: &str = r#"
import ctypes, mmap
code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
f = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
print("ret=%d" % f(), flush=True)
"#;

fn i386_int80(ctx: &Ctx) -> Outcome {
    if !cfg!(target_arch = "x86_64") {
        return Outcome::Skipped("int 0x80 is x86 only".into());
    }
    let r = ctx.py(INT80);
    ctx.assert_boundary(&r);
    let sig = r.bundle["run"]["failure"]["signal"].as_i64();
    // SIGSYS: seccomp's audit-arch check; SIGSEGV: a kernel without IA32 emulation, where
    // int 0x80 never reaches a system call. Anything that returns is an escape.
    check(
        r.value("ret").is_none()
            && (sig == Some(i64::from(libc::SIGSYS)) || sig == Some(i64::from(libc::SIGSEGV))),
        format!(
            "killed by signal {sig:?} (31: the audit-arch check; 11: no IA32 emulation), as the bundle records"
        ),
        format!("int 0x80 returned {:?} (signal {sig:?})", r.value("ret")),
    )
}

fn high_bits(ctx: &Ctx) -> Outcome {
    // clone(CLONE_NEWUSER | SIGCHLD) with bit 32 set; ioctl(0, TIOCSTI) with bit 32 set.
    syscall_probe(
        ctx,
        libc::SYS_clone,
        "(1 << 32) | 0x10000000 | 17, 0, 0, 0, 0",
        libc::EPERM,
    )
    .and(syscall_probe(
        ctx,
        libc::SYS_ioctl,
        "0, (1 << 32) | 0x5412, ctypes.c_char_p(b'x')",
        libc::EPERM,
    ))
}
