//! Process and signals: host processes are invisible and unreachable; the command cannot
//! leave its namespaces or outlive the run.

use crate::harness::{
    ADVISORY, ALL_THREE, Attack, BOTH_MUST, Boundary::Process, Ctx, NO_PIDNS, Outcome, Tier,
    Verdict, check,
};
use crate::kernel::syscall_probe;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "ps.kill-host-pid",
        boundary: Process,
        description: "signal a host `sleep` by pid (TERM, KILL, STOP)",
        on: ALL_THREE,
        probe: kill_host_pid,
    },
    Attack {
        id: "ps.kill-all",
        boundary: Process,
        description: "SIGKILL a host process group (the harness's sentinel's, standing in for kill(-1))",
        on: BOTH_MUST,
        probe: kill_all,
    },
    Attack {
        id: "ps.see-host-pids",
        boundary: Process,
        description: "find host processes in /proc (by pid and by command line)",
        on: &[
            (Tier::Sealed, Verdict::Must),
            (Tier::Scoped, Verdict::Documented(NO_PIDNS)),
            ADVISORY,
        ],
        probe: see_host_pids,
    },
    Attack {
        id: "ps.pidfd-host",
        boundary: Process,
        description: "pidfd_open a host pid and pidfd_send_signal it",
        on: BOTH_MUST,
        probe: pidfd_host,
    },
    Attack {
        id: "ps.ptrace-attach",
        boundary: Process,
        description: "ptrace(PTRACE_ATTACH) a host process (the harness's sentinel); PTRACE_TRACEME",
        on: BOTH_MUST,
        probe: ptrace_attach,
    },
    Attack {
        id: "ps.process-vm-readv",
        boundary: Process,
        description: "read pid 1's memory with process_vm_readv and /proc/1/mem",
        on: BOTH_MUST,
        probe: process_vm,
    },
    Attack {
        id: "ps.setns",
        boundary: Process,
        description: "setns into a namespace fd (pid 1's are not even openable)",
        on: BOTH_MUST,
        probe: setns,
    },
    Attack {
        id: "ps.unshare-userns",
        boundary: Process,
        description: "unshare a new user namespace (util-linux unshare -U, -m, -n)",
        on: ALL_THREE,
        probe: unshare_userns,
    },
    Attack {
        id: "ps.clone-newuser",
        boundary: Process,
        description: "raw clone(CLONE_NEWUSER|SIGCHLD)",
        on: BOTH_MUST,
        probe: clone_newuser,
    },
    Attack {
        id: "ps.clone3",
        boundary: Process,
        description: "clone3 (its flags are out of seccomp's reach): must be ENOSYS",
        on: BOTH_MUST,
        probe: clone3,
    },
    Attack {
        id: "ps.daemon-outlives",
        boundary: Process,
        description: "setsid + double fork a daemon that outlives the run",
        on: BOTH_MUST,
        probe: daemon_outlives,
    },
    Attack {
        id: "ps.sethostname",
        boundary: Process,
        description: "set the host name and domain name (to the values they have: success is seen, never a change)",
        on: BOTH_MUST,
        probe: sethostname,
    },
    Attack {
        id: "ps.sysv-ipc",
        boundary: Process,
        description: "attach a host SysV shared memory segment by key",
        on: &[
            (Tier::Sealed, Verdict::Must),
            (Tier::Scoped, Verdict::Documented(NO_PIDNS)),
        ],
        probe: sysv_ipc,
    },
    Attack {
        id: "ps.proc-1-exe",
        boundary: Process,
        description: "open pid 1's executable (the host's cofferdam binary) through /proc/1/exe to overwrite it (runc CVE-2019-5736)",
        on: BOTH_MUST,
        probe: proc_1_exe,
    },
];

fn kill_host_pid(ctx: &Ctx) -> Outcome {
    let mut host = ctx.host_process();
    let r = ctx.sh("kill -TERM $HOSTPID; kill -STOP $HOSTPID; kill -KILL $HOSTPID; kill -0 $HOSTPID && echo reach=yes; true");
    ctx.assert_boundary(&r);
    let state = std::fs::read_to_string(format!("/proc/{}/stat", host.pid())).unwrap_or_default();
    let stopped = state.split_whitespace().nth(2) == Some("T");
    check(
        host.alive() && !stopped && r.value("reach").is_none(),
        "the host sleep is alive and running; kill -0 fails inside",
        "the host process was signalled",
    )
}

/// Never `kill(-1)`: on a tier where it got through it would kill every process of the
/// caller's (as root, the machine's). A group signal takes the same permission checks per
/// process, so the sentinel's own group stands in for "every process it may signal".
fn kill_all(ctx: &Ctx) -> Outcome {
    let mut host = ctx.host_process();
    let r = ctx.py("import os, signal\ntry:\n    os.killpg(int(os.environ['HOSTPGID']), signal.SIGKILL)\n    print('sent=yes')\nexcept OSError as e:\n    print('err=%d' % e.errno)");
    ctx.assert_boundary(&r);
    check(
        host.alive() && r.value("sent").is_none(),
        format!(
            "the sentinel's group lives; killpg failed inside (errno {})",
            r.value("err").unwrap_or("?")
        ),
        "killpg killed the host sentinel's process group",
    )
}

fn see_host_pids(ctx: &Ctx) -> Outcome {
    let marker = "3.14159265358";
    let mut host = std::process::Command::new("sleep")
        .arg(marker)
        .spawn()
        .unwrap();
    ctx.var("HOSTPID", host.id().to_string());
    ctx.var("MARKER", marker);
    // Python reads the command lines, the marker only in its environment: a `grep MARKER`
    // would find its own command line.
    let r = ctx.py(r#"
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
if os.path.exists("/proc/" + os.environ["HOSTPID"]):
    print("pid=visible")
for p in pids:
    try:
        if os.environ["MARKER"].encode() in open("/proc/%s/cmdline" % p, "rb").read():
            print("cmdline=visible")
    except OSError:
        pass
print("count=%d" % len(pids))
"#);
    let _ = host.kill();
    let _ = host.wait();
    ctx.assert_boundary(&r);
    let count: u32 = r.value("count").unwrap().parse().unwrap();
    check(
        r.value("pid").is_none() && r.value("cmdline").is_none() && count <= 6,
        format!("{count} processes visible, none of the host's"),
        format!("host processes visible: {}", r.out),
    )
}

fn pidfd_host(ctx: &Ctx) -> Outcome {
    let mut host = ctx.host_process();
    let r = ctx.py(&format!(
        r#"
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
fd = l.syscall(ctypes.c_long({open}), ctypes.c_long(int(os.environ["HOSTPID"])), ctypes.c_long(0))
print("open=%d errno=%d" % (fd, ctypes.get_errno()))
if fd >= 0:
    print("send=%d" % l.syscall(ctypes.c_long({send}), ctypes.c_long(fd), ctypes.c_long(9), None, ctypes.c_long(0)))
"#,
        open = libc::SYS_pidfd_open,
        send = libc::SYS_pidfd_send_signal,
    ));
    ctx.assert_boundary(&r);
    if ctx.tier() != Tier::Sealed {
        // No pid namespace: the pid names a visible host process, so the pidfd opens (the
        // scope report's "no pid, ipc or uts namespace"); Landlock's signal scope (ABI 6+)
        // must still refuse the signal.
        return check(
            host.alive() && r.value("send").is_some_and(|v| v != "0"),
            format!(
                "the host process lives; {}",
                r.out.trim().replace('\n', " ")
            ),
            format!("signalled a host process through a pidfd: {}", r.out),
        );
    }
    check(
        host.alive() && r.out.contains("open=-1") && r.value("send").is_none(),
        r.out.trim().to_owned(),
        format!("got a pidfd for a host process: {}", r.out),
    )
}

fn ptrace_attach(ctx: &Ctx) -> Outcome {
    // PTRACE_ATTACH (16) on the sentinel, not pid 1 (the host's init on a tier without a
    // pid namespace), then PTRACE_TRACEME (0), which succeeds when allowed.
    let mut host = ctx.host_process();
    let attach = syscall_probe(
        ctx,
        libc::SYS_ptrace,
        "16, int(os.environ['HOSTPID']), 0, 0",
        libc::EPERM,
    );
    let alive = host.alive();
    attach
        .and(check(alive, "the sentinel lives", "the sentinel died"))
        .and(syscall_probe(
            ctx,
            libc::SYS_ptrace,
            "0, 0, 0, 0",
            libc::EPERM,
        ))
}

fn process_vm(ctx: &Ctx) -> Outcome {
    // Listing /proc/1/fd shows numbers only (the directory belongs to the same uid); what
    // must be refused is following a descriptor, reading memory or the environment.
    let r = ctx.sh("head -c 16 /proc/1/mem >/dev/null 2>&1 && echo mem=read; readlink /proc/1/fd/4 && echo fd=followed; cat /proc/1/environ >/dev/null 2>&1 && echo environ=read; true");
    ctx.assert_boundary(&r);
    if ["mem", "fd", "environ"]
        .iter()
        .any(|k| r.value(k).is_some())
    {
        return Outcome::Escaped(format!("pid 1 is readable: {}", r.out));
    }
    syscall_probe(
        ctx,
        libc::SYS_process_vm_readv,
        "1, 0, 0, 0, 0, 0",
        libc::EPERM,
    )
}

fn setns(ctx: &Ctx) -> Outcome {
    syscall_probe(
        ctx,
        libc::SYS_setns,
        "os.open('/proc/self/ns/mnt', os.O_RDONLY), 0",
        libc::EPERM,
    )
}

fn unshare_userns(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("unshare -U true && echo u=yes; unshare -r true && echo r=yes; unshare -m true && echo m=yes; unshare -n true && echo n=yes; true");
    ctx.assert_boundary(&r);
    if ["u", "r", "m", "n"].iter().any(|k| r.value(k).is_some()) {
        return Outcome::Escaped(r.out);
    }
    syscall_probe(ctx, libc::SYS_unshare, "0x10000000", libc::EPERM)
}

fn clone_newuser(ctx: &Ctx) -> Outcome {
    // CLONE_NEWUSER | SIGCHLD, no stack: a fork into a new user namespace when allowed.
    syscall_probe(
        ctx,
        libc::SYS_clone,
        "0x10000000 | 17, 0, 0, 0, 0",
        libc::EPERM,
    )
    .and(syscall_probe(
        ctx,
        libc::SYS_clone,
        "0x40000000 | 17, 0, 0, 0, 0",
        libc::EPERM,
    ))
}

fn clone3(ctx: &Ctx) -> Outcome {
    syscall_probe(ctx, libc::SYS_clone3, "0, 0", libc::ENOSYS)
}

fn daemon_outlives(ctx: &Ctx) -> Outcome {
    let marker = "27.1828182845";
    ctx.var("MARKER", marker);
    let r = ctx.sh("(setsid sh -c 'sleep $MARKER' </dev/null >/dev/null 2>&1 &) ; nohup sleep $MARKER >/dev/null 2>&1 & sleep 0.2");
    ctx.assert_boundary(&r);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    check(
        survivors.is_empty(),
        "nothing of the run is left on the host",
        format!("survivors: {survivors:?}"),
    )
}

/// The names are set to the host's own values, so one that gets through changes nothing;
/// what is seen is the call's success in the host's UTS namespace (in a namespace of the
/// sandbox's own, the names are the sandbox's to set).
fn sethostname(ctx: &Ctx) -> Outcome {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).unwrap();
    let (host, domain) = (read("hostname"), read("domainname"));
    let uts = std::fs::read_link("/proc/self/ns/uts").unwrap();
    ctx.var("HOST_NAME", host.trim_end());
    ctx.var("HOST_DOMAIN", domain.trim_end());
    let r = ctx.py(
        r#"
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
for name, var, call in [("host", "HOST_NAME", l.sethostname), ("domain", "HOST_DOMAIN", l.setdomainname)]:
    v = os.environ[var].encode()
    if call(v, len(v)) == 0:
        print(name + "=set")
for f in ["hostname", "domainname"]:
    try:
        os.close(os.open("/proc/sys/kernel/" + f, os.O_WRONLY | os.O_APPEND))
        print(f + "=opened")
    except OSError:
        pass
print("uts=" + os.readlink("/proc/self/ns/uts"))
"#,
    );
    ctx.assert_boundary(&r);
    assert!(r.value("uts").is_some(), "the probe did not run: {}", r.err);
    let shared = r.value("uts") == Some(&*uts.to_string_lossy());
    let set: Vec<&str> = ["host", "domain", "hostname", "domainname"]
        .into_iter()
        .filter(|k| r.value(k).is_some())
        .collect();
    check(
        read("hostname") == host && read("domainname") == domain && (!shared || set.is_empty()),
        if shared {
            "refused in the host's UTS namespace; the names are unchanged".to_owned()
        } else {
            format!("own UTS namespace (set there: {set:?}); the host's names are unchanged")
        },
        format!("set {set:?} in the host's UTS namespace"),
    )
}

const SHM: &str = r#"
import ctypes, os, sys
l = ctypes.CDLL(None, use_errno=True)
key = int(os.environ["SHMKEY"])
if sys.argv[1] == "create":
    id = l.shmget(key, 4096, 0o1666)
    print(id)
elif sys.argv[1] == "remove":
    l.shmctl(int(sys.argv[2]), 0, None)
else:
    id = l.shmget(key, 0, 0o666)
    print("shmget=%d errno=%d" % (id, ctypes.get_errno()))
"#;

fn sysv_ipc(ctx: &Ctx) -> Outcome {
    let n = crate::harness::unique();
    let key = (std::process::id() % 100_000 * 10 + n % 10 + 7_000_000).to_string();
    let host = |args: &[&str]| {
        let out = std::process::Command::new("python3")
            .args(["-c", SHM])
            .args(args)
            .env("SHMKEY", &key)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let id = host(&["create"]);
    if id.starts_with('-') || id.is_empty() {
        return Outcome::Skipped("cannot create a SysV segment on the host".into());
    }
    ctx.var("SHMKEY", &key);
    let r = ctx.run(&[], &["/usr/bin/python3", "-c", SHM, "attach"]);
    host(&["remove", &id]);
    ctx.assert_boundary(&r);
    if ctx.tier() == Tier::Sealed {
        assert_eq!(r.control("ipcns"), vec!["enforced"]);
    }
    check(
        r.out.contains("shmget=-1"),
        format!(
            "{} (own IPC namespace; bundle: ipcns enforced)",
            r.out.trim()
        ),
        format!("attached the host segment: {}", r.out.trim()),
    )
}

fn proc_1_exe(ctx: &Ctx) -> Outcome {
    let exe = assert_cmd::cargo::cargo_bin("cofferdam");
    let before = std::fs::read(&exe).unwrap();
    let r = ctx.py(r#"
import os
got = []
for path in ["/proc/1/exe", "/proc/1/cwd", "/proc/1/root", "/proc/1/fd/0"]:
    for name, flags in [("path", os.O_PATH), ("read", os.O_RDONLY), ("write", os.O_WRONLY)]:
        try:
            fd = os.open(path, flags)
            got.append("%s:%s" % (path, name))
            if flags == os.O_PATH:
                try:
                    os.close(os.open("/proc/self/fd/%d" % fd, os.O_WRONLY))
                    got.append(path + ":reopened-for-write")
                except OSError:
                    pass
        except OSError:
            pass
print("got=" + " ".join(got))
"#);
    ctx.assert_boundary(&r);
    let unchanged = std::fs::read(&exe).unwrap() == before;
    check(
        r.value("got") == Some("") && unchanged,
        "pid 1 is not dumpable: none of its /proc links opens; the host binary is unchanged",
        format!("opened {:?}; binary unchanged: {unchanged}", r.value("got")),
    )
}
