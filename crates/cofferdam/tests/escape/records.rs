//! Records: the command cannot change any job's records or forge what the supervisor
//! records about its own run (the status channel, fd 4, is close-on-exec in pid 1 and
//! pid 1 is not dumpable, so `/proc/1/fd/4` is out of reach).

use crate::harness::{Attack, BOTH_MUST, Boundary::Records, Ctx, Outcome, check};
use std::path::Path;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "rec.earlier-job",
        boundary: Records,
        description: "rewrite an earlier job's run-bundle.json, trace.jsonl and job.json",
        on: BOTH_MUST,
        probe: earlier_job,
    },
    Attack {
        id: "rec.own-job",
        boundary: Records,
        description: "rewrite the running job's own records by its COFFERDAM_RUN_ID",
        on: BOTH_MUST,
        probe: own_job,
    },
    Attack {
        id: "rec.forge-status",
        boundary: Records,
        description: "print status-channel lines (controls, exited) on stdout/stderr, fds 3-9, the supervisor's /proc/$PPID/fd/4",
        on: BOTH_MUST,
        probe: forge_status,
    },
    Attack {
        id: "rec.forge-exit",
        boundary: Records,
        description: "claim a clean exit on every channel, then die by SIGKILL",
        on: BOTH_MUST,
        probe: forge_exit,
    },
    Attack {
        id: "rec.inherited-fds",
        boundary: Records,
        description: "find an inherited descriptor (plan, status, terminal socket, the job)",
        on: BOTH_MUST,
        probe: inherited_fds,
    },
    Attack {
        id: "rec.review-terminal-injection",
        boundary: Records,
        description: "stage names and content with terminal escapes (title, clear, OSC 52) for the review",
        on: BOTH_MUST,
        probe: review_terminal_injection,
    },
];

const FORGED: &str = "FORGED-c0ffee";

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn verify(ctx: &Ctx, bundle: &Path) {
    let out = ctx
        .cmd()
        .args(["bundle", "verify"])
        .arg(bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "bundle verify: {out:?}");
}

/// The marker is assembled at run time: the bundle records the command line itself.
const TAMPER: &str = "M=FORGED; M=$M-c0ffee; for f in run-bundle.json trace.jsonl job.json apply-ledger.json; do echo \"{\\\"$M\\\":1}\" > $JOB/$f; echo $M >> $JOB/$f; done; rm -rf $JOB/upper; true";

fn earlier_job(ctx: &Ctx) -> Outcome {
    let first = ctx.sh("echo one > one");
    let dir = first.bundle_path.parent().unwrap().to_path_buf();
    let before = files(&dir);
    ctx.var("JOB", dir.display().to_string());
    let r = ctx.sh(TAMPER);
    ctx.assert_boundary(&r);
    verify(ctx, &first.bundle_path);
    check(
        files(&dir) == before && dir.join("upper/one").exists(),
        "the earlier job's records and stage are byte-for-byte unchanged; bundle verify passes",
        "an earlier job's records changed",
    )
}

fn own_job(ctx: &Ctx) -> Outcome {
    let r = ctx.sh(&TAMPER.replace("$JOB", "$STORE/jobs/$COFFERDAM_RUN_ID"));
    ctx.assert_boundary(&r);
    verify(ctx, &r.bundle_path);
    let dir = r.bundle_path.parent().unwrap();
    let leaked: Vec<String> = files(dir)
        .into_iter()
        .filter(|(_, b)| String::from_utf8_lossy(b).contains(FORGED))
        .map(|(n, _)| n)
        .collect();
    check(
        leaked.is_empty() && r.bundle["run"]["state"] == "completed",
        "the job's records carry nothing the command wrote; bundle verify passes",
        format!("forged text in {leaked:?}"),
    )
}

/// Status messages as pid 1 sends them (and in the encoding it used before), with the marker
/// in every string: as JSON lines and as `cofferdam_channel` frames (the status channel's
/// framing), written as a `printf` format (each frame's binary header in octal escapes; the
/// JSON holds no `%` or `\\`).
fn forged_lines() -> String {
    let lines = [
        r#"{"type":"control","observation":{"mechanism":"seccomp","dimension":"kernel_surface","status":"failed","reason":"FORGED-c0ffee","details":{}}}"#,
        r#"{"type":"setup_failed","step":"FORGED-c0ffee","error":"FORGED-c0ffee"}"#,
        r#"{"type":"exec_failed","error":"FORGED-c0ffee","code":127}"#,
        r#"{"type":"exited","code":0,"signal":null}"#,
        // The same in the channel's own encoding (externally tagged).
        r#"{"control":{"observation":{"mechanism":"seccomp","dimension":"kernel_surface","status":"failed","reason":"FORGED-c0ffee","details":{}}}}"#,
        r#"{"setup_failed":{"step":"FORGED-c0ffee","error":"FORGED-c0ffee"}}"#,
        r#"{"exec_failed":{"error":"FORGED-c0ffee","code":127}}"#,
        r#"{"exited":{"code":0,"signal":null}}"#,
    ];
    let mut out = lines.join("\\n") + "\\n";
    for l in lines {
        let msg: serde_json::Value = serde_json::from_str(l).unwrap();
        let frame = cofferdam_channel::encode("status", &msg, 0).unwrap();
        let (header, payload) = frame.split_at(cofferdam_channel::HEADER);
        for b in header {
            out.push_str(&format!("\\{b:03o}"));
        }
        out.push_str(std::str::from_utf8(payload).unwrap());
    }
    // Ends a line, so the script's own `key=value` lines after it are read as such.
    out + "\\n"
}

/// The status channel is the supervisor's: the command's parent (pid 1 in the sealed
/// tier's pid namespace, a host pid on the scoped tier). Never `/proc/1/fd/*` on a tier
/// without a pid namespace, which is the host's init: a write that got through there
/// would truncate and write whatever its descriptor is.
fn forge_status(ctx: &Ctx) -> Outcome {
    ctx.var("LINES", forged_lines());
    let r = ctx.sh(
        r#"printf "$LINES"; printf "$LINES" >&2
for fd in 3 4 5 6 7 8 9; do (eval "printf \"\$LINES\" >&$fd") 2>/dev/null && echo "wrote=$fd"; done
for p in /proc/$PPID/fd/4 /proc/$PPID/fd/3 /proc/self/fd/4; do printf "$LINES" > $p 2>/dev/null && echo "wrote=$p"; done
exit 3"#,
    );
    ctx.assert_boundary(&r);
    let raw = r.bundle.to_string();
    // Every seccomp control but the metadata filter (`partial` by design) is enforced.
    let seccomp: Vec<String> = crate::harness::controls_of(&r.bundle, "seccomp")
        .iter()
        .filter(|c| c["details"]["filter"] != "metadata_writes")
        .map(|c| c["status"].as_str().unwrap_or("?").to_owned())
        .collect();
    let ok = r.code == Some(3)
        && r.bundle["run"]["exit_code"] == 3
        && r.bundle["run"]["state"] == "failed"
        && !raw.contains(FORGED)
        && !seccomp.is_empty()
        && seccomp.iter().all(|s| s == "enforced")
        && r.value("wrote").is_none();
    check(
        ok,
        "no channel reaches the supervisor; the bundle records exit 3 and no forged control",
        format!(
            "forged: exit {:?}, wrote {:?}, forged text in bundle: {}",
            r.code,
            r.value("wrote"),
            raw.contains(FORGED)
        ),
    )
}

fn forge_exit(ctx: &Ctx) -> Outcome {
    ctx.var("LINES", forged_lines());
    let r = ctx.sh(
        r#"printf "$LINES"; printf "$LINES" >&2; printf "$LINES" > /proc/$PPID/fd/4 2>/dev/null; kill -9 $$"#,
    );
    ctx.assert_boundary(&r);
    check(
        r.code == Some(137)
            && r.bundle["run"]["failure"]["signal"] == 9
            && r.bundle["run"]["state"] == "failed",
        "exit 137; the bundle records signal 9, state failed",
        format!("the bundle says {}", r.bundle["run"]),
    )
}

fn inherited_fds(ctx: &Ctx) -> Outcome {
    let r = ctx.py(
        "import os\nleak = []\nfor fd in range(3, 1024):\n    try:\n        os.fstat(fd)\n        leak.append('%d->%s' % (fd, os.readlink('/proc/self/fd/%d' % fd)))\n    except OSError:\n        pass\nprint('leak=' + ' '.join(leak))",
    );
    ctx.assert_boundary(&r);
    let close = crate::harness::controls_of(&r.bundle, "close_fds");
    assert_eq!(close[0]["status"], "enforced");
    assert_eq!(close[0]["details"]["verified"], true);
    check(
        r.value("leak") == Some(""),
        "only 0, 1, 2 are open in the command; close_fds enforced and verified",
        format!("inherited: {}", r.value("leak").unwrap_or("?")),
    )
}

fn review_terminal_injection(ctx: &Ctx) -> Outcome {
    let r = ctx.sh(
        r#"n=$(printf 'evil\033]0;PWNED\007\033[2J\033]52;c;cHduZWQ=\007name'); printf 'x' > "$n"
printf 'line\033[31mred\033]0;PWNED\007\r\n' > ansi.txt; mkdir "$(printf 'd\033[1A')"; true"#,
    );
    ctx.assert_boundary(&r);
    let mut leaked = Vec::new();
    for args in [
        &["--color", "never", "status", "--review", &r.job][..],
        &["--color", "never", "diff", &r.job][..],
        &["--color", "never", "diff", &r.job, "--stat"][..],
        &["--color", "never", "jobs"][..],
        &["--color", "never", "apply", &r.job][..],
    ] {
        let out = ctx.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let bytes = [out.stdout, out.stderr].concat();
        if bytes.iter().any(|&b| b == 0x1b || b == 0x07) {
            leaked.push(args[2]);
        }
    }
    check(
        leaked.is_empty(),
        "review, diff, jobs and apply print escapes as text (no ESC or BEL byte)",
        format!("raw terminal escapes printed by {leaked:?}"),
    )
}
