//! Review output cannot be steered by the workload: every workload-controlled string a
//! renderer prints (names, argv, link targets, file lines, denied network names) is escaped
//! by one function (`cofferdam_record::shown`), so no control character, C1 control, bidi
//! override or escape sequence reaches the reviewer's terminal raw, also with colour on.

use crate::common::{hostile_text, raw_controls};
use crate::harness::{Attack, BOTH_MUST, Boundary::Records, Ctx, Outcome, Tier, Verdict, check};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "rec.review-every-control",
        boundary: Records,
        description: "argv, file and directory names, link targets and file lines with every C0/C1 control and escape sequences, through every renderer",
        on: BOTH_MUST,
        probe: every_control,
    },
    Attack {
        id: "rec.review-network-names",
        boundary: Records,
        description: "CONNECT targets, absolute URIs, Host names and DNS names with escape sequences, sent to the proxy for the review",
        on: &[(Tier::Sealed, Verdict::Must)],
        probe: network_names,
    },
];

/// Writes names, a link and lines carrying `sys.argv[1]` (the hostile text).
const STAGE_HOSTILE: &str = r#"
import os, sys
h = sys.argv[1]
open("f" + h, "w").write("line " + h + "\nplain\n" + h + "\n")
os.mkdir("d" + h)
os.symlink("t" + h, "l" + h)
open(b"bad\xff\x1b[2J", "wb").write(b"x\n")
open("changed.txt", "w").write(h + "\n")
"#;

/// Every human renderer's output, with colour on (cofferdam's own colours are the only
/// escapes allowed); what leaked, per command.
fn leaks(ctx: &Ctx, commands: &[&[&str]]) -> Vec<String> {
    let mut leaked = Vec::new();
    for args in commands {
        let out = ctx
            .cmd()
            .args(["--color", "always"])
            .args(*args)
            .output()
            .unwrap();
        let raw = raw_controls(&[out.stdout.as_slice(), &out.stderr].concat());
        if !out.status.success() {
            leaked.push(format!("{args:?} failed: {}", crate::harness::both(&out)));
        } else if !raw.is_empty() {
            leaked.push(format!("{args:?}: {} raw, first {}", raw.len(), raw[0]));
        }
    }
    leaked
}

fn every_control(ctx: &Ctx) -> Outcome {
    let h = hostile_text();
    std::fs::write(ctx.work().join("changed.txt"), "before\n").unwrap();
    let r = ctx.run(&[], &["/usr/bin/python3", "-c", STAGE_HOSTILE, &h]);
    ctx.assert_boundary(&r);
    assert_eq!(r.code, Some(0), "{}", r.err);
    // The bundle records the changes under their escaped names, the bytes kept.
    let changes = r.changes();
    let recorded = changes.len() >= 5
        && r.bundle["filesystem"]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["path_bytes"].is_array())
            .count()
            >= 4;
    let second = ctx.run(&[], &["/usr/bin/python3", "-c", STAGE_HOSTILE, &h]);
    let job = r.job.as_str();
    let leaked = leaks(
        ctx,
        &[
            &["status", "--review", job],
            &["status", job],
            &["jobs"],
            &["diff", job],
            &["diff", job, "--stat"],
            &["apply", "--dry-run", job],
            &["apply", job],
            &["drop", &second.job],
        ],
    );
    check(
        recorded,
        "the bundle records every hostile name",
        format!("changes: {changes:?}"),
    )
    .and(check(
        leaked.is_empty(),
        "status, jobs, diff, diff --stat, apply and drop print no raw control",
        leaked.join("; "),
    ))
}

/// Sends each hostile name to the proxy (CONNECT, absolute URI, Host) and the DNS listener.
const SEND_NAMES: &str = r#"
import socket
def http(req):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        s.sendall(req); s.recv(200); s.close()
    except OSError:
        pass
esc = b"\x1b[2J\x1b]0;PWNED\x07\x1b[1A"
http(b"CONNECT connect" + esc + b".test:443 HTTP/1.1\r\nHost: connect.test:443\r\n\r\n")
http(b"GET http://uri" + esc + b".test/ HTTP/1.1\r\nHost: uri.test\r\n\r\n")
http(b"GET / HTTP/1.1\r\nHost: host" + esc + b".test\r\n\r\n")
ns = "127.0.0.1"  # the sandbox's own DNS listener; never a host resolver
label = b"dns" + esc
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + bytes([len(label)]) + label
q += b"\x04test\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
u.sendto(q, (ns, 53))
try:
    u.recv(512)
except OSError:
    pass
"#;

fn network_names(ctx: &Ctx) -> Outcome {
    let r = ctx.run(
        &["--network", "allow", "--allow-net", "allowed.invalid"],
        &["/usr/bin/python3", "-c", SEND_NAMES],
    );
    ctx.assert_boundary(&r);
    let dests = r.bundle["network"]["intercepted"]["destinations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let hostile: Vec<&str> = dests
        .iter()
        .filter(|d| d["denied"].as_u64().unwrap_or(0) > 0)
        .filter_map(|d| d["host"].as_str())
        .filter(|h| h.contains('\x1b'))
        .collect();
    let leaked = leaks(ctx, &[&["status", "--review", &r.job]]);
    check(
        !hostile.is_empty(),
        format!(
            "the bundle records {} denied hostile name(s)",
            hostile.len()
        ),
        format!("no denied hostile name recorded: {dests:?}"),
    )
    .and(check(
        leaked.is_empty(),
        "the review shows them escaped",
        leaked.join("; "),
    ))
}
