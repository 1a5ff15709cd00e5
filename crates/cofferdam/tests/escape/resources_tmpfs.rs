//! Resources through the sealed tier's private tmpfs (HOME, /dev/shm) and the failure kind
//! a run ends with: HOME and /dev/shm stop at their bound (never half the RAM), memory
//! exhausted through tmpfs under `--memory` is `oom` (137), and a workload that kills its
//! init after the command started is not reported as a setup failure.

use crate::harness::{
    Attack, BOTH_MUST, Boundary::Resources, Ctx, Outcome, SEALED_MUST, Tier, Tier::Sealed,
    Verdict::Documented, check,
};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "res.home-tmpfs-bound",
        boundary: Resources,
        description: "fill HOME's and /tmp's tmpfs past --tmp-size 4MiB; without it, /tmp, HOME and /dev/shm are bounded (1 GiB), not half the RAM",
        on: SEALED_MUST,
        probe: home_tmpfs_bound,
    },
    Attack {
        id: "res.shm-private",
        boundary: Resources,
        description: "use /dev/shm (shm_open, Python multiprocessing), read the host's /dev/shm canary, fill it past its bound",
        on: SEALED_MUST,
        probe: shm_private,
    },
    Attack {
        id: "res.memory-tmpfs",
        boundary: Resources,
        description: "exhaust --memory 48MiB through /tmp's tmpfs pages: the run is oom (137), not setup",
        // Without a memory cgroup (an unprivileged user without delegation) --memory is
        // RLIMIT_DATA, which tmpfs pages are not charged to: the scope report says so.
        on: &[(Sealed, Documented(MEMORY_RLIMIT))],
        probe: memory_tmpfs,
    },
    Attack {
        id: "res.kill-init",
        boundary: Resources,
        description: "after the command started, SIGKILL its parent (the sandbox init): the run is not a setup failure",
        on: BOTH_MUST,
        probe: kill_init,
    },
];

const MIB: u64 = 1 << 20;

/// The scope report's memory row without a memory cgroup.
const MEMORY_RLIMIT: &str = "memory: per process and data segment only";

fn home_tmpfs_bound(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--tmp-size", "4MiB"],
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=$HOME/big bs=1M count=8 2>/dev/null; echo size=$(stat -c %s $HOME/big); dd if=/dev/zero of=/tmp/big bs=1M count=8 2>/dev/null; echo tmp=$(stat -c %s /tmp/big)",
        ],
    );
    ctx.assert_boundary(&r);
    let size: u64 = r.value("size").unwrap().parse().unwrap();
    let tmp: u64 = r.value("tmp").unwrap().parse().unwrap();
    let tmpfs = crate::harness::controls_of(&r.bundle, "tmpfs");
    assert_eq!(tmpfs[0]["details"]["home_size_bytes"], 4 * MIB, "{tmpfs:?}");
    let scope = ctx.scope();
    assert_eq!(
        scope["temp_dir"]["home_and_shm_size_limit_bytes"],
        4 * MIB,
        "{}",
        scope["temp_dir"]
    );
    // The default: bounded without --tmp-size (statfs only, nothing written).
    let d = ctx.sh("echo home=$(df -k --output=size $HOME | tail -1); echo shm=$(df -k --output=size /dev/shm | tail -1); echo tmp=$(df -k --output=size /tmp | tail -1)");
    let kib = |k: &str| d.value(k).and_then(|v| v.trim().parse::<u64>().ok());
    let default =
        crate::harness::controls_of(&d.bundle, "tmpfs")[0]["details"]["home_size_bytes"].as_u64();
    assert_eq!(
        default,
        Some(1 << 30),
        "{}",
        d.bundle["executor_observations"]
    );
    let default_tmp =
        crate::harness::controls_of(&d.bundle, "tmpfs")[0]["details"]["tmp_size_read_back"]
            .as_u64();
    assert_eq!(
        default_tmp,
        Some(1 << 30),
        "{}",
        d.bundle["executor_observations"]
    );
    check(
        size <= 4 * MIB
            && tmp <= 4 * MIB
            && kib("home") == Some(1 << 20)
            && kib("shm") == Some(1 << 20)
            && kib("tmp") == Some(1 << 20),
        format!(
            "{size} bytes fit in HOME and {tmp} in /tmp (ENOSPC past 4 MiB); default /tmp, HOME and /dev/shm 1 GiB; bundle and scope show the bound"
        ),
        format!(
            "HOME took {size} bytes, /tmp {tmp}; default HOME {:?} KiB, /dev/shm {:?} KiB, /tmp {:?} KiB \
             (the df run: exit {:?}, stdout {:?}, stderr {:?})",
            kib("home"),
            kib("shm"),
            kib("tmp"),
            d.code,
            d.out,
            d.err
        ),
    )
}

fn shm_private(ctx: &Ctx) -> Outcome {
    let n = crate::harness::unique();
    let host = std::path::PathBuf::from(format!(
        "/dev/shm/cofferdam-test-{}-{n}",
        std::process::id()
    ));
    if std::fs::write(&host, "HOST-SHM-CANARY").is_err() {
        return Outcome::Skipped("the host has no writable /dev/shm".into());
    }
    struct Rm(std::path::PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(host);
    let r = ctx.run(
        &["--tmp-size", "2MiB"],
        &[
            "sh",
            "-c",
            r#"cat /dev/shm/cofferdam-test-* 2>/dev/null
/usr/bin/python3 -c '
import multiprocessing as m
from concurrent.futures import ProcessPoolExecutor as P
m.Lock()
print("pool=" + str(sum(P(2).map(abs, [-1, -2]))))
'
dd if=/dev/zero of=/dev/shm/fill bs=1M count=8 2>/dev/null; echo fill=$(stat -c %s /dev/shm/fill)
true"#,
        ],
    );
    ctx.assert_boundary(&r);
    let dev = crate::harness::controls_of(&r.bundle, "minimal_dev");
    assert_eq!(dev[0]["details"]["shm_size_bytes"], 2 * MIB, "{dev:?}");
    let fill: u64 = r.value("fill").unwrap_or("0").parse().unwrap_or(u64::MAX);
    let works = r.value("pool") == Some("3");
    check(
        works && fill <= 2 * MIB && !r.out.contains("HOST-SHM-CANARY"),
        format!("multiprocessing works; host /dev/shm unseen; filled to {fill} bytes of 2 MiB"),
        format!(
            "pool {:?}, fill {fill}, host canary seen: {}; {}",
            r.value("pool"),
            r.out.contains("HOST-SHM-CANARY"),
            r.err
        ),
    )
}

fn memory_tmpfs(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &[
            "--memory",
            "48MiB",
            "--tmp-size",
            "512MiB",
            "--timeout",
            "60s",
        ],
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/tmp/fill bs=1M count=256 2>/dev/null; sleep 1; echo survived=yes",
        ],
    );
    ctx.assert_boundary(&r);
    let failure = &r.bundle["run"]["failure"];
    check(
        failure["kind"] == "oom" && r.code == Some(137) && r.value("survived").is_none(),
        "tmpfs pages charged to the memory cgroup: oom, exit 137",
        format!("exit {:?}, failure {failure}", r.code),
    )
}

fn kill_init(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("sleep 0.2; echo started=yes; kill -9 $PPID; sleep 1; echo after=yes");
    ctx.assert_boundary(&r);
    let failure = &r.bundle["run"]["failure"];
    let ok = r.code != Some(125) && failure["kind"] != "setup";
    if ctx.tier() == Tier::Scoped {
        // The init is a process of this user on the copy tiers: it dies, and the run says
        // what killed it.
        assert_eq!(r.value("started"), Some("yes"));
        return check(
            ok && failure["kind"] == "signal" && r.code == Some(137),
            format!("reported as {} (exit {:?})", failure["kind"], r.code),
            format!("exit {:?}, failure {failure}", r.code),
        );
    }
    // Sealed: the parent is the pid namespace's init, which ignores SIGKILL from inside.
    check(
        ok && r.code == Some(0) && r.value("after") == Some("yes"),
        "the pid namespace's init ignores the SIGKILL; the run ends normally",
        format!("exit {:?}, failure {failure}", r.code),
    )
}
