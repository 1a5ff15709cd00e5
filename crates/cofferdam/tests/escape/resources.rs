//! Resources: rlimits, the cgroup pids limit where one installs, the wall-clock timeout, the
//! stage cap and the private /tmp's size. A fork bomb without `--pids` meets cofferdam's
//! default pids limit; the private tmpfs are bounded by default (resources_tmpfs.rs).

use crate::harness::{
    Attack, BOTH_MUST, Boundary::Resources, Ctx, EVERY_TIER_MUST, Outcome, Run, SEALED_MUST, Tier,
    Tier::Scoped, Tier::Sealed, Verdict::Documented, Verdict::Must, check,
};

/// Attacks that need what is being built; printed under the table, not run.
pub const TO_BE_ADDED: &[(&str, &str)] = &[
    (
        "res.memory",
        "allocate past --memory across processes: needs the memory cgroup (RLIMIT_DATA is per process)",
    ),
    (
        "net.allow-bypass",
        "network allow mode: connect to an allowed name's IP directly, DNS rebinding, non-proxy UDP",
    ),
];

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "res.core-dump",
        boundary: Resources,
        description: "raise RLIMIT_CORE to dump memory to disk",
        on: BOTH_MUST,
        probe: core_dump,
    },
    Attack {
        id: "res.open-files",
        boundary: Resources,
        description: "open more files than --open-files 64; raise the limit",
        on: EVERY_TIER_MUST,
        probe: open_files,
    },
    Attack {
        id: "res.file-size",
        boundary: Resources,
        description: "write a file past --max-file-size 1MiB",
        on: EVERY_TIER_MUST,
        probe: file_size,
    },
    Attack {
        id: "res.fork-bomb-pids",
        boundary: Resources,
        description: "fork past --pids 32 (a cgroup pids limit, else RLIMIT_NPROC)",
        on: BOTH_MUST,
        probe: fork_bomb,
    },
    Attack {
        id: "res.fork-bomb-default",
        boundary: Resources,
        description: "fork without end and without --pids (cofferdam's default pids limit, 4096)",
        on: SEALED_MUST,
        probe: fork_bomb_default,
    },
    Attack {
        id: "res.cpu-time",
        boundary: Resources,
        description: "spin past --cpu-time 1s",
        on: BOTH_MUST,
        probe: cpu_time,
    },
    Attack {
        id: "res.oom-score-adj",
        boundary: Resources,
        description: "lower oom_score_adj so the host's processes are killed first",
        on: BOTH_MUST,
        probe: oom_score_adj,
    },
    Attack {
        id: "res.timeout-outlive",
        boundary: Resources,
        description: "outlive --timeout 1s: ignore SIGTERM, setsid a daemon, background a child",
        on: BOTH_MUST,
        probe: timeout_outlive,
    },
    Attack {
        id: "res.stage-size",
        boundary: Resources,
        description: "write 3 MiB past --stage-size 1MiB and keep running",
        on: &[
            (Sealed, Must),
            (Scoped, Documented("stage_size: not polled on this tier")),
        ],
        probe: stage_size,
    },
    Attack {
        id: "res.tmp-size",
        boundary: Resources,
        description: "write 3 MiB into the temp directory past --tmp-size 1MiB",
        on: &[
            (Sealed, Must),
            (
                Scoped,
                Documented("tmp_size: the temp directory lives in the job directory"),
            ),
        ],
        probe: tmp_size,
    },
];

/// Host processes whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

fn timeout_outlive(ctx: &Ctx) -> Outcome {
    // `sleep <pid>.<n>`, unique to this run of the probe.
    let n = crate::harness::unique();
    let marker = format!("{}.{n}", std::process::id() % 100_000 + 100_000);
    ctx.var("M", &marker);
    let r = ctx.run(
        &["--timeout", "1s"],
        &[
            "sh",
            "-c",
            "trap '' TERM HUP; setsid sh -c \"trap '' TERM HUP; exec sleep $M\" & (trap '' TERM HUP; exec sleep $M) & nohup sleep $M >/dev/null 2>&1 & sleep $M; wait",
        ],
    );
    ctx.assert_boundary(&r);
    assert_eq!(r.code, Some(124), "{}", r.err);
    assert_eq!(r.bundle["run"]["failure"]["kind"], "timeout");
    // The kill is synchronous with the run's end; allow the kernel a moment to reap.
    let mut left = host_processes_with(&marker);
    for _ in 0..20 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = host_processes_with(&marker);
    }
    for p in &left {
        if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill(2) on a pid read from /proc; a stale pid is at worst ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    check(
        left.is_empty(),
        "exit 124, bundle failure timeout; no process of the run (setsid daemon, nohup, TERM-ignoring) survives",
        format!("survived the timeout: {left:?}"),
    )
}

fn stage_size(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--stage-size", "1MiB", "--timeout", "20s"],
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=big bs=1M count=3 2>/dev/null; sleep 2; echo survived=yes",
        ],
    );
    ctx.assert_boundary(&r);
    let failure = &r.bundle["run"]["failure"];
    assert_eq!(failure["kind"], "limit", "{}", r.bundle["run"]);
    assert_eq!(failure["limit"], "stage_size_bytes");
    assert_eq!(r.bundle["run"]["state"], "failed");
    let watch = r
        .control_with("wall_clock", "resource", "stage_size")
        .expect("a stage_size watch observation");
    // Partial on both: the poll can overshoot (sealed); there is no poll (copy tiers).
    let reason = watch["reason"].as_str().unwrap_or("");
    if ctx.tier() == Tier::Sealed {
        assert!(reason.contains("poll"), "{watch}");
    } else {
        assert!(reason.contains("once the run has ended"), "{watch}");
    }
    check(
        r.value("survived").is_none(),
        format!(
            "stopped past the cap by the poll (signal {}); bundle: limit stage_size_bytes",
            failure["signal"]
        ),
        "kept running past the cap; the run failed as over it only when it ended",
    )
}

fn tmp_size(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--tmp-size", "1MiB"],
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=$TMPDIR/big bs=1M count=3 2>/dev/null; echo size=$(stat -c %s $TMPDIR/big)",
        ],
    );
    ctx.assert_boundary(&r);
    let size: u64 = r.value("size").unwrap().parse().unwrap();
    if ctx.tier() == Tier::Sealed {
        assert_eq!(
            r.bundle["resources"]["effective"]["tmp_size_bytes"],
            1 << 20,
            "{}",
            r.bundle["resources"]
        );
    }
    check(
        size <= 1 << 20,
        format!("{size} bytes fit (ENOSPC past 1 MiB); bundle: tmp_size enforced"),
        format!("wrote {size} bytes into the temp directory"),
    )
}

/// The rlimit observation for `resource`, asserted present.
fn rlimit(r: &Run, resource: &str) -> serde_json::Value {
    r.control_with("rlimit", "resource", resource)
        .unwrap_or_else(|| panic!("no {resource} observation"))
}

fn core_dump(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("echo soft=$(ulimit -c); ulimit -c unlimited 2>/dev/null && echo raised=yes; ulimit -H -c 1000 2>/dev/null && echo raised=hard; true");
    ctx.assert_boundary(&r);
    let o = rlimit(&r, "RLIMIT_CORE");
    assert_eq!(o["status"], "enforced");
    assert_eq!(o["details"]["hard"], 0);
    check(
        r.value("soft") == Some("0") && r.value("raised").is_none(),
        "RLIMIT_CORE 0/0, cannot be raised; bundle: enforced",
        format!("core limit: {}", r.out),
    )
}

fn open_files(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--open-files", "64"],
        &[
            "/usr/bin/python3",
            "-c",
            "import os, resource\nfds = []\ntry:\n    for i in range(500):\n        fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError:\n    pass\nprint('opened=%d' % len(fds))\ntry:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))\n    print('raised=yes')\nexcept (OSError, ValueError):\n    pass",
        ],
    );
    ctx.assert_boundary(&r);
    let o = rlimit(&r, "RLIMIT_NOFILE");
    assert_eq!(o["status"], "enforced");
    let opened: u32 = r.value("opened").unwrap().parse().unwrap();
    check(
        opened <= 61 && r.value("raised").is_none(),
        format!("{opened} opened (64 with 0-2), no raise; bundle: enforced"),
        format!("opened {opened}, {}", r.out),
    )
}

fn file_size(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--max-file-size", "1MiB"],
        &["sh", "-c", "head -c 3000000 /dev/zero > big; echo rc=$?"],
    );
    ctx.assert_boundary(&r);
    let o = rlimit(&r, "RLIMIT_FSIZE");
    assert_eq!(o["status"], "enforced");
    let job_dir = r.bundle_path.parent().unwrap();
    let staged = std::fs::metadata(job_dir.join("upper/big"))
        .map(|m| m.len())
        .unwrap_or(0);
    check(
        staged <= 1 << 20,
        format!("staged {staged} bytes; bundle: RLIMIT_FSIZE enforced"),
        format!("staged {staged} bytes"),
    )
}

fn fork_bomb(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--pids", "32"],
        &[
            "/usr/bin/python3",
            "-c",
            "import os, time\nn = 0\ntry:\n    for i in range(200):\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint('forked=%d' % n, flush=True)\nos._exit(0)",
        ],
    );
    ctx.assert_boundary(&r);
    let forked: u32 = match r.value("forked") {
        Some(n) => n.parse().unwrap(),
        // Without a user namespace RLIMIT_NPROC counts every task of the user on the host
        // (the scoped tier; the scope report says so): when the user's other tasks (the
        // cases running alongside) already reach the limit, the command itself cannot be
        // started. The limit held before the first fork.
        None => {
            assert!(
                r.err.contains("fork the command failed"),
                "no forked= line and no fork failure: {r:?}"
            );
            0
        }
    };
    // A cgroup's pids.max takes the limit where one can be installed (root here, through
    // cgroup v1); the rlimit is then not set, and the bundle says which held.
    if let Some(cg) = r
        .control_with("cgroup", "dimension", "pids")
        .filter(|c| c["status"] == "enforced")
    {
        return check(
            forked < 32,
            format!(
                "{forked} forks then EAGAIN; bundle: cgroup v{} pids enforced",
                cg["details"]["version"]
            ),
            format!("forked {forked} past --pids 32 with a cgroup pids limit"),
        );
    }
    let o = rlimit(&r, "RLIMIT_NPROC");
    if o["status"] == "partial" {
        // The host's root user: the kernel exempts it; the bundle says so.
        assert!(o["reason"].as_str().unwrap().contains("root"), "{o}");
        return Outcome::Skipped(format!(
            "host root is exempt from RLIMIT_NPROC and no cgroup pids limit could be installed (bundle: partial); forked {forked}"
        ));
    }
    assert_eq!(o["status"], "enforced");
    check(
        forked < 32,
        format!("{forked} forks then EAGAIN; bundle: RLIMIT_NPROC enforced"),
        format!("forked {forked} past --pids 32"),
    )
}

fn fork_bomb_default(ctx: &Ctx) -> Outcome {
    // Each child execs `sleep` at once, so 4096 of them stay small; bounded at 6000 so a
    // host where nothing holds the default is not flooded.
    let r = ctx.run(
        &[],
        &[
            "/usr/bin/python3",
            "-c",
            "import os\nn = 0\ntry:\n    for i in range(6000):\n        if os.fork() == 0:\n            os.execv('/bin/sleep', ['sleep', '5'])\n        n += 1\nexcept OSError:\n    pass\nprint('forked=%d' % n, flush=True)\nos._exit(0)",
        ],
    );
    ctx.assert_boundary(&r);
    let forked: u32 = r.value("forked").unwrap().parse().unwrap();
    let res = &r.bundle["resources"];
    assert_eq!(res["requested"]["pids"], 4096, "{res}");
    if res["effective"]["pids"].is_null() {
        // The host's root without a usable pids cgroup (RLIMIT_NPROC does not bind it).
        let why = res["limitations"].to_string();
        assert!(why.contains("pids 4096"), "{res}");
        return Outcome::Skipped(format!(
            "nothing here enforces the default for this user (bundle: {why}); forked {forked}"
        ));
    }
    assert_eq!(res["effective"]["pids"], 4096, "{res}");
    let how = res["mechanisms"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .find_map(|m| m.as_str().filter(|m| m.starts_with("pids:")))
        })
        .unwrap_or("?")
        .to_owned();
    check(
        forked < 4096,
        format!("{forked} forks then EAGAIN; bundle: {how}"),
        format!("forked {forked} past the default 4096"),
    )
}

fn cpu_time(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--cpu-time", "1s"],
        &["/usr/bin/python3", "-c", "while True:\n    pass"],
    );
    ctx.assert_boundary(&r);
    let o = rlimit(&r, "RLIMIT_CPU");
    assert_eq!(o["status"], "enforced");
    let sig = r.bundle["run"]["failure"]["signal"].as_i64();
    check(
        matches!(sig, Some(9) | Some(24)),
        format!("killed by signal {sig:?} after 1 s of CPU; bundle: RLIMIT_CPU enforced"),
        format!("not stopped: {}", r.bundle["run"]),
    )
}

fn oom_score_adj(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("echo before=$(cat /proc/self/oom_score_adj); echo -1000 > /proc/self/oom_score_adj 2>/dev/null; echo after=$(cat /proc/self/oom_score_adj)");
    ctx.assert_boundary(&r);
    let before: i32 = r.value("before").unwrap().parse().unwrap();
    let after: i32 = r.value("after").unwrap().parse().unwrap();
    check(
        after >= before,
        format!("stays at {after}"),
        format!("lowered from {before} to {after}"),
    )
}
