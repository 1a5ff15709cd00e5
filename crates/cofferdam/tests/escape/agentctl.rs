//! agentctl (issue 21): the run's control socket is a way to make the supervisor act, so it
//! is attacked like any boundary. A checkpoint name that is a path (or a shell word, or an
//! id) must not become a file anywhere; a 10 MB note and a flood of notes must not grow the
//! bundle past the protocol's bounds; the lent binary and the socket's directory must not
//! be writable (on the scoped tier `cofferdam` on PATH is a symlink to the host's binary).
//! The supervisor's limits hold on every tier; the lent paths are the sealed and scoped
//! tiers' (the advisory tier restricts no write, so the last attack does not run there: a
//! success would overwrite the binary under test).

use crate::harness::{Attack, BOTH_MUST, Boundary, Ctx, EVERY_TIER_MUST, Outcome, Run, check};
use serde_json::Value;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "rec.ctl-checkpoint-path",
        boundary: Boundary::Records,
        description: "ask the control socket for checkpoints named ../../outside/x, /tmp/x, a/b, .., ckpt-…, $(touch …), 65 letters",
        on: EVERY_TIER_MUST,
        probe: checkpoint_path,
    },
    Attack {
        id: "rec.ctl-huge-note",
        boundary: Boundary::Records,
        description: "send the control socket a 10 MB note, then 200 notes over 7 connections",
        on: EVERY_TIER_MUST,
        probe: huge_note,
    },
    Attack {
        id: "fw.ctl-lent-binary",
        boundary: Boundary::FsWrite,
        description: "overwrite or append to the lent cofferdam binary, write beside the control socket, remove it",
        on: BOTH_MUST,
        probe: lent_binary,
    },
];

/// A client that sends each line of `$LINES`-like requests given in the script's body.
const CLIENT: &str = r#"
import json, os, socket
PATH = os.environ["COFFERDAM_CTL"]
def ask(data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(PATH)
    try:
        s.sendall(data)
    except OSError:
        pass
    s.settimeout(20)
    try:
        r = s.makefile("rb").readline()
    except OSError:
        r = b""
    s.close()
    try:
        return json.loads(r)
    except ValueError:
        return {"ok": None, "raw": repr(r)}
"#;

fn agentctl(r: &Run) -> &Value {
    &r.bundle["agentctl"]
}

fn counter(r: &Run, k: &str) -> u64 {
    agentctl(r)["counters"][k].as_u64().unwrap_or(0)
}

fn checkpoint_path(ctx: &Ctx) -> Outcome {
    let names = [
        "../../outside/x",
        "/tmp/x",
        "a/b",
        "..",
        ".hidden",
        "ckpt-00000000-forged",
        "$(touch $OUTSIDE/pwned)",
        &"x".repeat(65),
    ];
    let list = serde_json::to_string(&names).unwrap();
    let script = format!(
        "{CLIENT}\nfor n in {list}:\n    r = ask((json.dumps({{'request': 'checkpoint', 'argument': n}}) + '\\n').encode())\n    print('refused=%s' % (r.get('ok') is False))\n"
    );
    let r = ctx.py(&script);
    ctx.assert_boundary(&r);
    let refused = r.lines().iter().filter(|l| **l == "refused=True").count();
    let a = agentctl(&r);
    let outside_empty = std::fs::read_dir(ctx.outside()).unwrap().next().is_none();
    let job_dir = r.bundle_path.parent().unwrap();
    let checkpoints = std::fs::read_dir(job_dir.join("checkpoints"))
        .map(|d| d.count())
        .unwrap_or(0);
    let held = refused == names.len()
        && a["requests"].as_array().is_none_or(Vec::is_empty)
        && a["directives"].as_array().is_some_and(Vec::is_empty)
        && counter(&r, "requests_refused") == names.len() as u64
        && checkpoints == 0
        && outside_empty
        && r.code == Some(0);
    check(
        held,
        format!(
            "{refused} names refused by the socket; the bundle lists no request or directive and \
             counts {} refusals; no checkpoint, nothing outside",
            counter(&r, "requests_refused")
        ),
        format!(
            "refused {refused}/{}, agentctl {a}, checkpoints {checkpoints}, outside empty \
             {outside_empty}, exit {:?}\n{}",
            names.len(),
            r.code,
            r.err
        ),
    )
}

fn huge_note(ctx: &Ctx) -> Outcome {
    let script = format!(
        "{CLIENT}
r = ask(b'{{\"request\":\"note\",\"argument\":\"' + b'A' * (10 * 1024 * 1024) + b'\"}}\\n')
print('huge-refused=%s' % (r.get('ok') is False))
accepted = 0
for c in range(7):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(PATH)
    f = s.makefile('rwb')
    for i in range(32):
        f.write(b'{{\"request\":\"note\",\"argument\":\"flood %d\"}}\\n' % (c * 32 + i))
        f.flush()
        line = f.readline()
        if b'\"ok\":true' in line:
            accepted += 1
    s.close()
print('accepted=%d' % accepted)
"
    );
    let r = ctx.py(&script);
    ctx.assert_boundary(&r);
    let size = std::fs::metadata(&r.bundle_path).map_or(u64::MAX, |m| m.len());
    let a = agentctl(&r);
    let listed = a["requests"].as_array().map_or(0, Vec::len);
    let longest = a["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| q["argument"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0);
    let held = r.value("huge-refused") == Some("True")
        && r.value("accepted") == Some("128")
        && listed == 128
        && longest < 4096
        && counter(&r, "requests_refused") == 1 + (7 * 32 - 128)
        && size < 1 << 20
        && r.code == Some(0);
    check(
        held,
        format!(
            "the 10 MB note refused, 128 of 224 notes taken, the rest refused and counted; the \
             bundle is {size} bytes"
        ),
        format!(
            "huge refused {:?}, accepted {:?}, listed {listed}, longest {longest}, refused {}, \
             bundle {size} bytes, exit {:?}",
            r.value("huge-refused"),
            r.value("accepted"),
            counter(&r, "requests_refused"),
            r.code
        ),
    )
}

fn lent_binary(ctx: &Ctx) -> Outcome {
    let exe = assert_cmd::cargo::cargo_bin("cofferdam");
    let stamp = |p: &std::path::Path| {
        std::fs::metadata(p).map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.len(), m.mtime(), m.mtime_nsec(), m.ino())
        })
    };
    let before = stamp(&exe).unwrap();
    let r = ctx.sh(
        r#"d=$(dirname "$COFFERDAM_CTL"); b=$(command -v cofferdam)
echo "bin=$b"
(echo x > "$d/evil") 2>/dev/null && echo wrote-dir=yes || echo wrote-dir=no
(cp /bin/true "$b") 2>/dev/null && echo replaced=yes || echo replaced=no
(echo x >> "$b") 2>/dev/null && echo appended=yes || echo appended=no
(rm -f "$COFFERDAM_CTL") 2>/dev/null; [ -S "$COFFERDAM_CTL" ] && echo socket=kept || echo socket=gone
cofferdam ctl note still-here >/dev/null && echo note=ok || echo note=failed"#,
    );
    ctx.assert_boundary(&r);
    let after = stamp(&exe).unwrap();
    let noted = agentctl(&r)["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|q| q["argument"] == "still-here");
    let held = [
        "wrote-dir=no",
        "replaced=no",
        "appended=no",
        "socket=kept",
        "note=ok",
    ]
    .iter()
    .all(|l| r.lines().contains(l))
        && after == before
        && noted;
    check(
        held,
        format!(
            "{}: not writable, not replaced, the socket kept and still answering; the host's \
             binary unchanged",
            r.value("bin").unwrap_or("?")
        ),
        format!("{}\n{}; binary {before:?} -> {after:?}", r.out, r.err),
    )
}
