//! The fuzz harnesses: one function per target taking the fuzzer's bytes. Each feeds the
//! bytes to the code under test and checks what must hold whatever the input (no panic; a
//! round trip or an invariant where there is one). The cargo-fuzz targets in
//! `fuzz_targets/` call these; on stable, `crates/cofferdam/tests/fuzz_corpus.rs` includes
//! this file and calls them on every committed corpus file, so the corpora are regression
//! tests in CI.
//!
//! Owns nothing of cofferdam; it only calls public functions. The scanner harness writes
//! into a fresh temporary directory and nowhere else.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::ChangeKind;
use cofferdam_stage::select::{self, Glob, Node};

/// Target `manifest`: `cofferdam.toml` text through the parser and, when it parses, the
/// policy resolution. Whether it parsed.
pub fn manifest(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    match cofferdam_policy::parse_manifest("cofferdam.toml", text) {
        Ok(manifest) => {
            let loaded = cofferdam_policy::LoadedManifest {
                path: PathBuf::from("/work/project/cofferdam.toml"),
                manifest,
            };
            let places = cofferdam_policy::Places {
                cwd: PathBuf::from("/work/project"),
                home: PathBuf::from("/home/user"),
            };
            let flags = cofferdam_policy::RunFlags::default();
            if let Err(e) = cofferdam_policy::resolve_policy(Some(&loaded), &flags, &places) {
                assert!(!e.to_string().is_empty(), "an empty policy error");
            }
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an empty manifest error");
            false
        }
    }
}

/// Target `bundle`: bytes through the Run Bundle reader; what it accepts writes back to
/// JSON that it reads again to the same value. Whether it was accepted.
pub fn bundle(data: &[u8]) -> bool {
    match cofferdam_record::read_bundle(data) {
        Ok(b) => {
            let text = cofferdam_record::write_bundle_json(&b).expect("an accepted bundle writes");
            let again = cofferdam_record::read_bundle(text.as_bytes())
                .expect("a written bundle reads back");
            assert_eq!(again, b, "the bundle changed in a write and read");
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an empty bundle error");
            false
        }
    }
}

/// Reads the fuzzer's bytes as small choices.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn pick<'t, T>(&mut self, from: &'t [T]) -> Option<&'t T> {
        let b = self.byte()?;
        from.get(usize::from(b) % from.len())
    }
    /// Up to `max` bytes, as given.
    fn raw(&mut self, max: usize) -> &[u8] {
        let n = usize::from(self.byte().unwrap_or(0)) % (max + 1);
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
}

/// Component names for the selection harness: plain, odd and near-miss prefixes.
const COMPONENTS: &[&[u8]] = &[
    b"a", b"b", b"a.b", b"ab", b"x y", b"\xff", b"-rf", b"\n", b"*", b"[", b"\\",
];

const KINDS: &[ChangeKind] = &[
    ChangeKind::Added,
    ChangeKind::Modified,
    ChangeKind::Deleted,
    ChangeKind::TypeChanged,
    ChangeKind::Opaque,
];

fn component_path(b: &mut Bytes<'_>) -> Option<Vec<u8>> {
    let depth = 1 + b.byte()? % 3;
    let parts: Vec<&[u8]> = (0..depth)
        .map(|_| b.pick(COMPONENTS).copied())
        .collect::<Option<_>>()?;
    Some(parts.join(&b'/'))
}

/// Target `select`: a random stage (paths, kinds, applied or not), `--path` arguments in
/// any spelling, `--exclude` patterns, a pending set and sensitive marks through
/// [`select::select_holding`], and
/// the rules of `cofferdam_stage::select` checked on the result. How many were selected.
pub fn selection(data: &[u8]) -> usize {
    let mut b = Bytes(data);
    let mut spec: Vec<(Vec<u8>, ChangeKind, bool, bool)> = Vec::new();
    let n = b.byte().map_or(0, |x| x % 16);
    for _ in 0..n {
        let (Some(p), Some(&k), Some(f)) = (component_path(&mut b), b.pick(KINDS), b.byte()) else {
            break;
        };
        if !spec.iter().any(|s| s.0 == p) {
            spec.push((p, k, f & 1 == 1, f & 2 == 0));
        }
    }
    spec.sort_by(|x, y| x.0.cmp(&y.0));
    let nodes: Vec<Node<'_>> = spec
        .iter()
        .map(|(p, k, d, r)| Node {
            path: p,
            kind: *k,
            new_is_dir: *d,
            remaining: *r,
        })
        .collect();

    // `--path` arguments: node paths respelled, or raw bytes.
    let mut paths: Vec<Vec<u8>> = Vec::new();
    for _ in 0..b.byte().map_or(0, |x| x % 4) {
        let arg: Vec<u8> = match b.byte().map(|x| x % 4) {
            Some(0) => b.raw(24).to_vec(),
            Some(1) => [
                b"/w/".as_slice(),
                &component_path(&mut b).unwrap_or_default(),
            ]
            .concat(),
            Some(2) => [
                b"./".as_slice(),
                &component_path(&mut b).unwrap_or_default(),
                b"/",
            ]
            .concat(),
            _ => component_path(&mut b).unwrap_or_default(),
        };
        let cwd: Option<&[u8]> = match b.byte().map(|x| x % 3) {
            Some(0) => None,
            Some(1) => Some(b"a"),
            _ => Some(b""),
        };
        match select::normalize_arg(&arg, cwd, b"/w") {
            Ok(p) => {
                // The target itself is the empty path; anything else is plain components.
                assert!(
                    p.is_empty()
                        || !p
                            .split(|&c| c == b'/')
                            .any(|c| c.is_empty() || c == b"." || c == b".."),
                    "normalize_arg left an empty, `.` or `..` component: {p:?}"
                );
                paths.push(p);
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    let mut excludes = Vec::new();
    for _ in 0..b.byte().map_or(0, |x| x % 3) {
        match Glob::new(b.raw(12)) {
            Ok(g) => excludes.push(g),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    let pending: BTreeSet<Vec<u8>> = spec
        .iter()
        .filter(|_| b.byte().is_some_and(|x| x % 5 == 0))
        .map(|s| s.0.clone())
        .collect();

    // Sensitive changes (rule 5): random marks, sometimes `--allow-sensitive`.
    let marked: Vec<bool> = nodes
        .iter()
        .map(|_| b.byte().is_some_and(|x| x % 4 == 0))
        .collect();
    let allow_all = b.byte().is_some_and(|x| x % 3 == 0);
    let holding = select::Sensitive {
        marked: &marked,
        allow_all,
    };
    let sel = match select::select_holding(&nodes, &paths, &excludes, &pending, holding) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return 0;
        }
    };
    let chosen: BTreeSet<usize> = sel.indices.iter().copied().collect();
    assert!(
        sel.indices.windows(2).all(|w| w[0] < w[1]),
        "indices not ascending"
    );
    for &i in &sel.indices {
        let n = nodes[i];
        assert!(n.remaining, "an applied change was selected again");
        for (j, m) in nodes.iter().enumerate() {
            if !m.remaining {
                continue;
            }
            // A staged parent comes along.
            if select::ancestors(n.path).any(|a| a == m.path) {
                assert!(
                    chosen.contains(&j),
                    "a staged parent of a taken path left out"
                );
            }
            // So does everything in a directory replaced whole.
            let whole = matches!(n.kind, ChangeKind::Opaque | ChangeKind::Deleted)
                || (n.kind == ChangeKind::TypeChanged && n.new_is_dir);
            if whole && select::is_at_or_beneath(m.path, n.path) {
                assert!(
                    chosen.contains(&j),
                    "an entry of a whole directory left out"
                );
            }
        }
    }
    // What was asked for and not excluded is taken.
    for (j, m) in nodes.iter().enumerate() {
        let asked = paths.is_empty()
            || paths
                .iter()
                .any(|p| select::is_at_or_beneath(m.path, p) || p.is_empty());
        let excluded = excludes.iter().any(|g| g.excludes(m.path));
        let held = sel.held.iter().any(|(h, _)| *h == j);
        if m.remaining && asked && !excluded && !held {
            assert!(chosen.contains(&j), "an asked-for path left out");
        }
    }
    // Nothing held is taken (the closure never reaches a held path), and a path held for
    // itself is marked, not named by a `--path`, and not pending.
    for (h, why) in &sel.held {
        assert!(!chosen.contains(h), "a held path was taken");
        assert!(!allow_all, "a path held despite --allow-sensitive");
        if *why == select::Hold::Sensitive {
            let p = nodes[*h].path;
            assert!(marked[*h], "an unmarked path held for itself");
            assert!(
                !pending.contains(p)
                    && !paths
                        .iter()
                        .any(|q| !q.is_empty() && select::is_at_or_beneath(p, q)),
                "a named or pending path held"
            );
        }
    }
    for (i, _) in &sel.added {
        assert!(chosen.contains(i), "a dependency outside the selection");
    }
    for i in &sel.excluded_but_required {
        assert!(
            sel.added.iter().any(|(a, _)| a == i),
            "an excluded path taken without a reason"
        );
    }
    sel.indices.len()
}

/// Names for the scanner harness: odd bytes, control and bidi characters, a long name.
fn scan_name(b: &mut Bytes<'_>) -> Option<Vec<u8>> {
    const NAMES: &[&[u8]] = &[
        b"a",
        b"b",
        b"f.txt",
        b" lead",
        b"-rf",
        b".hidden",
        b"line\nbreak",
        b"\xff\xfe",
        b"\xe2\x80\xaeevil",
        b"tab\there",
        b"\\",
        b"caf\xc3\xa9",
    ];
    match b.byte()? % 8 {
        0 => Some(vec![b'L'; 255]),
        1 => {
            let raw: Vec<u8> = b
                .raw(8)
                .iter()
                .copied()
                .filter(|&c| c != b'/' && c != 0)
                .collect();
            (!raw.is_empty() && raw != b"." && raw != b"..").then_some(raw)
        }
        _ => b.pick(NAMES).map(|n| n.to_vec()),
    }
}

/// What the scanner harness puts in a tree.
enum Make {
    File,
    Dir,
    Link,
    Fifo,
    /// Char device 0:0, the overlay's whiteout (root only).
    Whiteout,
    /// Another char device (root only).
    Device,
    /// The opaque mark on the directory itself.
    Opaque,
    /// Another extended attribute.
    Xattr,
}

const MAKES: &[Make] = &[
    Make::File,
    Make::File,
    Make::Dir,
    Make::Dir,
    Make::Link,
    Make::Fifo,
    Make::Whiteout,
    Make::Device,
    Make::Opaque,
    Make::Xattr,
];

/// Build one entry; errors (a name taken, no privilege) leave it out.
fn make(dir: &Path, name: &[u8], what: &Make, content: &[u8]) -> Option<PathBuf> {
    use rustix::fs::{FileType, Mode, XattrFlags};
    let p = dir.join(std::ffi::OsStr::from_bytes(name));
    let ok = match what {
        // A new file only: never open a FIFO made earlier under the same name (or a
        // symlink to one), which would block.
        Make::File => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, content))
            .is_ok(),
        Make::Dir => std::fs::create_dir(&p).is_ok(),
        Make::Link => std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(content), &p).is_ok(),
        Make::Fifo => rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .is_ok(),
        Make::Whiteout | Make::Device => {
            let dev = match what {
                Make::Whiteout => rustix::fs::makedev(0, 0),
                _ => rustix::fs::makedev(1, 3),
            };
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &p,
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o600),
                dev,
            )
            .is_ok()
        }
        Make::Opaque | Make::Xattr => {
            let (key, value): (&str, &[u8]) = match what {
                Make::Opaque => ("user.overlay.opaque", b"y"),
                _ => ("user.fuzz", content),
            };
            let _ = rustix::fs::setxattr(dir, key, value, XattrFlags::empty());
            return None;
        }
    };
    ok.then_some(p)
}

/// Target `scan`: a synthetic upper directory and host tree with odd names, symlinks,
/// FIFOs, extended attributes (the opaque mark among them) and, for root, whiteouts and
/// a char device, through [`cofferdam_stage::seal::seal`]. The result must be sorted,
/// unique, name only paths present in the upper, and display every path. How many
/// changes it found.
pub fn scan(data: &[u8]) -> usize {
    let Ok(tmp) = tempfile::tempdir() else {
        return 0;
    };
    let upper = tmp.path().join("upper");
    let lower = tmp.path().join("lower");
    if std::fs::create_dir(&upper).is_err() || std::fs::create_dir(&lower).is_err() {
        return 0;
    }
    let mut dirs: [Vec<PathBuf>; 2] = [vec![upper.clone()], vec![lower.clone()]];
    let mut b = Bytes(data);
    for _ in 0..64 {
        let (Some(side), Some(what)) = (b.byte(), b.pick(MAKES)) else {
            break;
        };
        let side = usize::from(side & 1);
        let Some(&parent) = b.pick(&(0..dirs[side].len()).collect::<Vec<_>>()) else {
            break;
        };
        let parent = dirs[side][parent].clone();
        let Some(name) = scan_name(&mut b) else {
            break;
        };
        let content = b.raw(16).to_vec();
        if let Some(p) = make(&parent, &name, what, &content)
            && matches!(what, Make::Dir)
        {
            dirs[side].push(p);
        }
    }
    let result = match cofferdam_stage::seal::seal(&upper, &lower) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return 0;
        }
    };
    let keys: Vec<Vec<u8>> = result
        .changes
        .iter()
        .map(|c| {
            c.path_bytes
                .clone()
                .unwrap_or_else(|| c.path.as_bytes().to_vec())
        })
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "changes not sorted by path bytes, or repeated"
    );
    for (k, c) in keys.iter().zip(&result.changes) {
        let at = upper.join(std::ffi::OsStr::from_bytes(k));
        assert!(
            at.symlink_metadata().is_ok() || c.kind == ChangeKind::Deleted,
            "a change names a path that is not in the upper: {k:?}"
        );
        let (shown, lossless) = cofferdam_stage::seal::display_path(k);
        assert!(!shown.contains('\n'), "a displayed path holds a newline");
        assert_eq!(
            lossless,
            c.path_bytes.is_none(),
            "path_bytes disagrees with display"
        );
    }
    result.changes.len()
}

/// Target `sni`: the first bytes of a transparent connection through the sniffer, as given
/// and wrapped in a TLS handshake record header (so the fuzzer reaches the ClientHello
/// parser at once). A name it reads is lowercase and has no trailing dot, as the allowlist
/// compares it. Whether a TLS server name was read.
pub fn sni(data: &[u8]) -> bool {
    use cofferdam_net::proxy::sniff::{Sniffed, sniff};
    let len = u16::try_from(data.len()).unwrap_or(u16::MAX).to_be_bytes();
    let wrapped = [&[0x16, 3, 1, len[0], len[1]][..], data].concat();
    let mut named = false;
    for bytes in [data, &wrapped[..]] {
        let got = sniff(bytes);
        if let Sniffed::Tls(Some(n)) | Sniffed::Http(Some(n)) = &got {
            assert!(
                !n.bytes().any(|b| b.is_ascii_uppercase()) && !n.ends_with('.'),
                "a claimed name not in the allowlist's form: {n:?}"
            );
        }
        named |= matches!(got, Sniffed::Tls(Some(_)));
    }
    named
}

/// Target `http_head`: bytes through the strict request-head parser; a head it accepts
/// rebuilds (as the proxy sends it upstream) into one that parses to the same request with
/// one `Host` and no hop-by-hop field; a proxy request's authority names its own host and
/// port. Whether a complete head was accepted.
pub fn http_head(data: &[u8]) -> bool {
    use cofferdam_net::proxy::sniff::{self, ProxyRequest};
    let head = match sniff::parse_head(data) {
        Ok(Some(h)) => h,
        Ok(None) => return false,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an empty head error");
            return false;
        }
    };
    assert!(head.len <= data.len(), "the head is longer than the input");
    let host = head.host.clone().unwrap_or_else(|| "h.test".to_owned());
    let rebuilt = head.rebuild(&head.target, &host);
    let again = sniff::parse_head(&rebuilt)
        .expect("a rebuilt head parses")
        .expect("a rebuilt head is complete");
    assert_eq!(
        (&again.method, &again.target, again.minor, again.body),
        (&head.method, &head.target, head.minor, head.body),
        "the rebuilt request differs"
    );
    assert_eq!(again.host.as_deref(), Some(host.trim()), "the rebuilt Host");
    assert_eq!(again.fields, head.fields, "the rebuilt fields");
    assert_eq!(again.len, rebuilt.len(), "bytes after the rebuilt head");
    match sniff::proxy_request(&head) {
        Ok(ProxyRequest::Forward {
            host,
            port,
            path,
            authority,
        }) => {
            assert_eq!(
                sniff::split_authority(&authority, 80),
                Some((host, port)),
                "the forwarded Host is not the target"
            );
            assert!(
                path.starts_with('/'),
                "an origin-form path without /: {path:?}"
            );
        }
        Ok(ProxyRequest::Connect { host, port }) => {
            assert!(port > 0 && !host.is_empty() && !host.contains('@'));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let _ = sniff::request_claim(&head);
    true
}

/// Target `dns`: bytes through the DNS query parser; each answer to a query it accepts
/// keeps the id and one question, is marked a response (so it is never read as a query)
/// and has an answer only for an `A` reply. Whether a query was accepted.
pub fn dns(data: &[u8]) -> bool {
    use cofferdam_net::proxy::dns::{self, Reply};
    let Some(q) = dns::parse_query(data) else {
        return false;
    };
    // Each wire byte is at most one character of the name (a length byte becomes a dot).
    assert!(
        q.name.chars().count() <= 255,
        "a name longer than DNS allows"
    );
    for reply in [
        Reply::A(std::net::Ipv4Addr::new(198, 18, 0, 1)),
        Reply::Empty,
        Reply::Refused,
    ] {
        let r = dns::response(&q, reply);
        assert_eq!(&r[..2], &data[..2], "the id changed");
        assert!(r[2] & 0x80 != 0, "the answer is not marked a response");
        assert_eq!(&r[4..6], &[0, 1], "not one question");
        let answers = u8::from(matches!(reply, Reply::A(_)));
        assert_eq!(&r[6..8], &[0, answers], "the answer count");
        assert!(dns::parse_query(&r).is_none(), "an answer reads as a query");
    }
    true
}

/// Target `handover`: a socket hand-over's payload (the first byte says how many
/// descriptors came with it) through its parser; what it accepts has one description per
/// descriptor and writes back to the same. Whether it was accepted.
pub fn handover(data: &[u8]) -> bool {
    use cofferdam_net::handover::{MAX_SOCKETS, parse_payload};
    let Some((&n, payload)) = data.split_first() else {
        return false;
    };
    let fds = usize::from(n) % (MAX_SOCKETS + 2);
    let Ok(infos) = parse_payload(payload, fds) else {
        return false;
    };
    assert_eq!(infos.len(), fds, "descriptions and descriptors disagree");
    let text = serde_json::to_vec(&infos).expect("descriptions write");
    assert_eq!(
        parse_payload(&text, fds).ok(),
        Some(infos),
        "the descriptions changed in a write and read"
    );
    true
}

/// Equal JSON values, floating-point numbers within their last bits: serde_json's default
/// float reading is not exact to the last bit (its `float_roundtrip` feature is off), so
/// a float in a control's details may move by one unit in a write and read.
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same_json(vx, vy))
        }
        _ => a == b,
    }
}

/// Target `status`: bytes as the sandbox's status channel (frames of `cofferdam_channel`)
/// through its parser: one result per whole frame, in order, and one last error when the
/// stream ends inside a frame or past the bounds; each message it reads encodes to a frame
/// that reads back to the same message. How many messages were read.
pub fn status(data: &[u8]) -> usize {
    use cofferdam_sandbox::status;
    let parsed = status::parse(data);
    let (mut frames, mut rest) = (0, data);
    while let Some(n) = cofferdam_channel::frame_len(rest).filter(|n| *n <= rest.len()) {
        frames += 1;
        rest = &rest[n..];
    }
    let torn = usize::from(!rest.is_empty());
    assert_eq!(parsed.len(), frames + torn, "a frame was dropped or split");
    if torn == 1 {
        assert!(
            parsed.last().is_some_and(Result::is_err),
            "a torn frame read"
        );
    }
    let mut read = 0;
    for m in parsed.iter().flatten() {
        let frame = cofferdam_channel::encode(status::CHANNEL, m, 0).expect("a message encodes");
        let again = status::parse(&frame);
        let [Ok(back)] = &again[..] else {
            panic!("a written message does not read back: {again:?}");
        };
        assert!(
            same_json(
                &serde_json::to_value(back).expect("a message is JSON"),
                &serde_json::to_value(m).expect("a message is JSON")
            ),
            "the message changed in a write and read: {m:?} became {back:?}"
        );
        read += 1;
    }
    for e in parsed.iter().filter_map(|r| r.as_ref().err()) {
        assert!(!e.is_empty(), "an empty status error");
    }
    read
}

/// Target `agentctl`: bytes as one request line on a run's control socket (what any
/// process of the run may send) to `cofferdam_policy::agentctl::parse_request`. Whether it
/// parsed. Checks: no panic; only a line shorter than the limit parses; a note's text is
/// never blank, a `status` has no argument; an accepted request writes to one line that
/// reads back equal; a refusal's reply is one line.
pub fn agentctl(data: &[u8]) -> bool {
    use cofferdam_policy::agentctl::{MESSAGE_MAX, Reply, RequestKind, parse_request};
    match parse_request(data) {
        Ok(r) => {
            assert!(data.len() < MESSAGE_MAX, "an over-long line parsed");
            match r.request {
                RequestKind::Note => assert!(
                    r.argument.as_ref().is_some_and(|t| !t.trim().is_empty()),
                    "a note without text"
                ),
                RequestKind::Status => assert!(r.argument.is_none(), "a status with an argument"),
                RequestKind::Checkpoint => {}
            }
            let line = serde_json::to_vec(&r).expect("a request writes");
            assert!(!line.contains(&b'\n'), "a written request spans lines");
            if line.len() < MESSAGE_MAX {
                let back = parse_request(&line).expect("a written request reads back");
                assert_eq!(back, r, "the request changed in a write and read");
            }
            true
        }
        Err(e) => {
            let reply = Reply::refused(e.to_string()).line();
            assert_eq!(
                reply.iter().filter(|&&b| b == b'\n').count(),
                1,
                "a refusal spans lines"
            );
            false
        }
    }
}

/// Target `import`: bytes as an export archive (zstd-compressed when they start with the
/// zstd magic number, else the tar stream itself) to `cofferdam_stage::archive::import`,
/// into a fresh store, applying onto a fresh workdir beside a canary directory. Whether it
/// was accepted. Checks: no panic; a refusal leaves no job (nor a hidden half-made one) in
/// the store; accepted or not, the workdir and the canary stay empty and nothing appears
/// beside the store; an accepted job is `staged` and its bundle reads.
pub fn import(data: &[u8]) -> bool {
    use cofferdam_stage::archive::import as imp;
    let Ok(tmp) = tempfile::tempdir() else {
        return false;
    };
    let (root, work, canary) = (
        tmp.path().join("store"),
        tmp.path().join("work"),
        tmp.path().join("canary"),
    );
    for d in [&root, &work, &canary] {
        if std::fs::create_dir(d).is_err() {
            return false;
        }
    }
    let Ok(store) = cofferdam_stage::job::JobStore::open(&root) else {
        return false;
    };
    let result = if data.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        imp::import(&store, data, Some(&work), 1)
    } else {
        imp::import_tar(&store, data, Some(&work), 1)
    };
    let names = |p: &Path| -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> = std::fs::read_dir(p)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    assert!(names(&work).is_empty() && names(&canary).is_empty());
    assert_eq!(names(tmp.path()), ["canary", "store", "work"]);
    let jobs = names(store.jobs_dir());
    match result {
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!(jobs.is_empty(), "a refused import left {jobs:?}");
            false
        }
        Ok(done) => {
            assert_eq!(jobs.len(), 1);
            let state = done.job.state().map(|s| s.state);
            assert!(matches!(
                state,
                Ok(cofferdam_stage::job::StageState::Staged)
            ));
            let bundle = std::fs::read(done.job.bundle_path()).unwrap_or_default();
            assert!(cofferdam_record::read_bundle(&bundle).is_ok());
            true
        }
    }
}
