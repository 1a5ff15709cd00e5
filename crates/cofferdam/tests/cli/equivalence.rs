//! Apply equivalence, as properties over random cases: a small random workdir (files with
//! contents and modes, directories, symlinks; names with spaces, unicode and a leading
//! dash) and a random sequence of agent operations (create, write, append, truncate,
//! chmod, rename, delete, mkdir, rmdir, symlink, a directory replaced by a file and back)
//! run as a shell script inside a real sealed `cofferdam run`.
//!
//! What the agent saw at exit is known twice: the script dumps the tree from inside the
//! sandbox as its last step, and the same script runs on a plain copy of the workdir outside
//! any sandbox (the model). The two must agree; then
//! - `apply` (everything) makes the host equal to it: types, contents, modes without
//!   setuid/setgid, symlink targets;
//! - `apply --path P…` (a random subset, named in random forms) makes every path it reports
//!   applied equal to it and leaves every other path as it was, reports only paths the
//!   selection rules allow (at or beneath a `P`, a staged parent of a taken path, or inside
//!   a directory applied whole), and a second `apply` finishes the job to the same end.
//!
//! Cases per property: `PROPTEST_CASES` (default [`DEFAULT_CASES`]). A failure shrinks to
//! a minimal case; fixed failures stay below as regular tests.

use crate::apply::{Tree, sealed_host, shown, tree};
use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command as StdCommand, Output};

/// Cases per property when `PROPTEST_CASES` is unset (each is one run and one or two
/// applies: well under a second).
const DEFAULT_CASES: u32 = 200;

/// Names at the top of the workdir, and below.
const TOP: &[&str] = &["a", "b c", "ünï", "-n"];
const SUB: &[&str] = &["x", "y z", "ß", ".h"];

/// A symlink target that can never resolve: writes through it fail alike in the sandbox
/// and in the model, so the model never writes outside its copy.
const NOWHERE: &str = "/nonexistent-cofferdam-equivalence/t";

/// Modes of initial files and directories, and modes `chmod` sets. Every one keeps the
/// owner's rwx on directories and rw on files: the model runs as the test user, who could
/// otherwise not traverse or read what the sandboxed agent (root in its namespace) can.
const FILE_MODES: &[u32] = &[0o644, 0o600, 0o755, 0o640, 0o664, 0o777, 0o4755, 0o2755];
const DIR_MODES: &[u32] = &[0o755, 0o700, 0o750, 0o775, 0o777, 0o710, 0o1777, 0o2775];
const CHMOD_MODES: &[u32] = &[
    0o700, 0o755, 0o750, 0o775, 0o777, 0o744, 0o4755, 0o6775, 0o1755,
];

/// A path in the workdir, by components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct P(Vec<&'static str>);

impl P {
    fn raw(&self) -> String {
        self.0.join("/")
    }
    fn q(&self) -> Vec<u8> {
        quote(self.raw().as_bytes())
    }
}

/// A symlink target: always relative and downward, or unresolvable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Sibling(&'static str),
    Down(&'static str, &'static str),
    Nowhere,
}

impl Target {
    fn raw(&self) -> String {
        match self {
            Target::Sibling(a) => (*a).to_owned(),
            Target::Down(a, b) => format!("{a}/{b}"),
            Target::Nowhere => NOWHERE.to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Init {
    File(Vec<u8>, u32),
    Dir(u32),
    Link(Target),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Write(P, Vec<u8>),
    Append(P, Vec<u8>),
    Truncate(P, u8),
    Chmod(P, u32),
    Rename(P, P),
    Delete(P),
    Mkdir(P),
    Rmdir(P),
    Symlink(Target, P),
    /// Whatever is at P becomes a file.
    ToFile(P, Vec<u8>),
    /// Whatever is at P becomes a directory with one file in it.
    ToDir(P, Vec<u8>),
    /// A directory at P becomes a file, then an empty directory again.
    DirFileDir(P),
}

/// Single-quote for sh.
fn quote(b: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &c in b {
        if c == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(c);
        }
    }
    out.push(b'\'');
    out
}

/// `printf` writing exactly `content`: bytes other than printable ASCII go as octal escapes
/// in the format, so the script stays UTF-8 (`cofferdam run` takes UTF-8 arguments only).
fn printf_to(content: &[u8], redirect: &str, p: &[u8]) -> Vec<u8> {
    let mut v = b"printf '".to_vec();
    for &c in content {
        match c {
            b' '..=b'~' if !matches!(c, b'\'' | b'%' | b'\\') => v.push(c),
            _ => v.extend_from_slice(format!("\\{c:03o}").as_bytes()),
        }
    }
    v.extend_from_slice(format!("' {redirect} ").as_bytes());
    v.extend_from_slice(p);
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

impl Op {
    fn shell(&self) -> Vec<u8> {
        match self {
            Op::Write(p, c) => printf_to(c, ">", &p.q()),
            Op::Append(p, c) => printf_to(c, ">>", &p.q()),
            Op::Truncate(p, n) => cat(&[format!("truncate -s {n} -- ").as_bytes(), &p.q()]),
            Op::Chmod(p, m) => cat(&[format!("chmod {m:o} -- ").as_bytes(), &p.q()]),
            Op::Rename(a, b) => cat(&[b"mv -T -- ", &a.q(), b" ", &b.q()]),
            Op::Delete(p) => cat(&[b"rm -rf -- ", &p.q()]),
            Op::Mkdir(p) => cat(&[b"mkdir -- ", &p.q()]),
            Op::Rmdir(p) => cat(&[b"rmdir -- ", &p.q()]),
            Op::Symlink(t, p) => cat(&[b"ln -sT -- ", &quote(t.raw().as_bytes()), b" ", &p.q()]),
            Op::ToFile(p, c) => cat(&[b"rm -rf -- ", &p.q(), b" && ", &printf_to(c, ">", &p.q())]),
            Op::ToDir(p, c) => {
                let inner = quote(format!("{}/x", p.raw()).as_bytes());
                cat(&[
                    b"rm -rf -- ",
                    &p.q(),
                    b" && mkdir -- ",
                    &p.q(),
                    b" && ",
                    &printf_to(c, ">", &inner),
                ])
            }
            Op::DirFileDir(p) => cat(&[
                b"[ -d ",
                &p.q(),
                b" ] && [ ! -L ",
                &p.q(),
                b" ] && rm -rf -- ",
                &p.q(),
                b" && echo f > ",
                &p.q(),
                b" && rm -f -- ",
                &p.q(),
                b" && mkdir -- ",
                &p.q(),
            ]),
        }
    }
}

/// Lists the tree under the current directory as `@@ PATH-HEX TYPE MODE DATA-HEX` lines,
/// the same facts as `apply::tree` (modes without setuid/setgid, link targets).
const DUMP: &str = r#"
import os, stat
def walk(d, rel):
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n); r = rel + n; m = os.lstat(p).st_mode
        if stat.S_ISDIR(m): t, x, mode = 'd', b'', m & 0o1777
        elif stat.S_ISLNK(m): t, x, mode = 'l', os.readlink(p), 0
        elif stat.S_ISREG(m): t, x, mode = 'f', open(p, 'rb').read(), m & 0o1777
        else: t, x, mode = 'p', b'', m & 0o1777
        print('@@', r.hex(), t, mode, x.hex() or '-')
        if t == 'd': walk(p, r + b'/')
walk(b'.', b'')
"#;

/// The agent script: the operations, each allowed to fail, then the dump.
fn script(ops: &[Op]) -> Vec<u8> {
    let mut s = b"umask 022\n".to_vec();
    for op in ops {
        s.extend_from_slice(b"{ ");
        s.extend(op.shell());
        s.extend_from_slice(b"; } 2>/dev/null\n");
    }
    s.extend_from_slice(b"python3 -c ");
    s.extend(quote(DUMP.as_bytes()));
    s.push(b'\n');
    s
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn parse_dump(stdout: &[u8]) -> Tree {
    let mut t = Tree::new();
    for line in String::from_utf8_lossy(stdout).lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 5 || f[0] != "@@" {
            continue;
        }
        let kind = f[2].chars().next().unwrap();
        t.insert(unhex(f[1]), (kind, f[3].parse().unwrap(), unhex(f[4])));
    }
    t
}

/// Make the initial tree: entries in order; a missing parent becomes a 0755 directory, an
/// entry whose place is taken (or whose parent is not a directory) is left out.
pub(crate) fn build(root: &Path, init: &[(P, Init)]) {
    for (p, what) in init {
        let path = root.join(p.raw());
        if path.symlink_metadata().is_ok() {
            continue;
        }
        let mut parent_ok = true;
        let mut at = root.to_path_buf();
        for c in &p.0[..p.0.len() - 1] {
            at.push(c);
            match at.symlink_metadata() {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    parent_ok = false;
                    break;
                }
                Err(_) => std::fs::create_dir(&at).unwrap(),
            }
        }
        if !parent_ok {
            continue;
        }
        match what {
            Init::File(c, mode) => {
                std::fs::write(&path, c).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
            Init::Dir(mode) => {
                std::fs::create_dir(&path).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
            }
            Init::Link(t) => std::os::unix::fs::symlink(t.raw(), &path).unwrap(),
        }
    }
}

fn path() -> impl Strategy<Value = P> {
    (
        0..TOP.len(),
        prop::option::weighted(0.6, 0..SUB.len()),
        prop::option::weighted(0.3, 0..SUB.len()),
    )
        .prop_map(|(a, b, c)| {
            let mut v = vec![TOP[a]];
            if let Some(b) = b {
                v.push(SUB[b]);
                if let Some(c) = c {
                    v.push(SUB[c]);
                }
            }
            P(v)
        })
}

fn content() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z \n]{0,24}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..40),
    ]
}

fn target() -> impl Strategy<Value = Target> {
    let all: Vec<&'static str> = TOP.iter().chain(SUB).copied().collect();
    let sib = prop::sample::select(all.clone()).prop_map(Target::Sibling);
    let down = (
        prop::sample::select(all),
        prop::sample::select(SUB.to_vec()),
    )
        .prop_map(|(a, b)| Target::Down(a, b));
    prop_oneof![3 => sib, 2 => down, 1 => Just(Target::Nowhere)]
}

fn init_entry() -> impl Strategy<Value = (P, Init)> {
    let what = prop_oneof![
        4 => (content(), prop::sample::select(FILE_MODES)).prop_map(|(c, m)| Init::File(c, m)),
        2 => prop::sample::select(DIR_MODES).prop_map(Init::Dir),
        1 => target().prop_map(Init::Link),
    ];
    (path(), what)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (path(), content()).prop_map(|(p, c)| Op::Write(p, c)),
        1 => (path(), content()).prop_map(|(p, c)| Op::Append(p, c)),
        1 => (path(), 0u8..16).prop_map(|(p, n)| Op::Truncate(p, n)),
        2 => (path(), prop::sample::select(CHMOD_MODES)).prop_map(|(p, m)| Op::Chmod(p, m)),
        2 => (path(), path()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => path().prop_map(Op::Delete),
        2 => path().prop_map(Op::Mkdir),
        1 => path().prop_map(Op::Rmdir),
        1 => (target(), path()).prop_map(|(t, p)| Op::Symlink(t, p)),
        1 => (path(), content()).prop_map(|(p, c)| Op::ToFile(p, c)),
        1 => (path(), content()).prop_map(|(p, c)| Op::ToDir(p, c)),
        1 => path().prop_map(Op::DirFileDir),
    ]
}

pub(crate) fn case() -> impl Strategy<Value = (Vec<(P, Init)>, Vec<Op>)> {
    (
        prop::collection::vec(init_entry(), 0..10),
        prop::collection::vec(op(), 1..12),
    )
}

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    }
}

/// A command's exit and output, for a failure message.
pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One case made real: the sandbox after its run (the job is `last`), the original tree,
/// and what the agent saw at exit.
pub(crate) struct Ran {
    pub(crate) s: Sandbox,
    original: Tree,
    pub(crate) seen: Tree,
}

pub(crate) fn run_case(init: &[(P, Init)], ops: &[Op]) -> Result<Ran, TestCaseError> {
    let s = Sandbox::new();
    build(s.work.path(), init);
    let original = tree(s.work.path());
    let script = script(ops);

    let model_dir = tempfile::tempdir().unwrap();
    let st = StdCommand::new("cp")
        .arg("-a")
        .arg(format!("{}/.", s.work.path().display()))
        .arg(model_dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let model_out = StdCommand::new("sh")
        .arg("-c")
        .arg(OsStr::from_bytes(&script))
        .current_dir(model_dir.path())
        .output()
        .unwrap();
    prop_assert!(model_out.status.success(), "model: {}", text(&model_out));
    let model = tree(model_dir.path());
    prop_assert_eq!(
        shown(&parse_dump(&model_out.stdout)),
        shown(&model),
        "the dump disagrees with the tree walk"
    );

    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c"])
        .arg(OsStr::from_bytes(&script))
        .output()
        .unwrap();
    prop_assert_eq!(out.status.code(), Some(0), "run: {}", text(&out));
    let seen = parse_dump(&out.stdout);
    prop_assert_eq!(
        shown(&seen),
        shown(&model),
        "the agent saw something other than the same commands make on a plain copy"
    );
    prop_assert_eq!(
        shown(&tree(s.work.path())),
        shown(&original),
        "the run wrote to the host"
    );
    Ok(Ran { s, original, seen })
}

/// `apply --json` with `--allow-sensitive`: these properties are about what apply writes;
/// holding back changes that run code is the escape suite's `fw.sensitive-*`.
fn apply_json(s: &Sandbox, extra: &[&OsStr]) -> Result<Value, TestCaseError> {
    let out = s
        .cmd()
        .args(["apply", "last", "--json", "--allow-sensitive"])
        .args(extra)
        .output()
        .unwrap();
    prop_assert_eq!(
        out.status.code(),
        Some(0),
        "apply {:?}: {}",
        extra,
        text(&out)
    );
    Ok(json_of(&out))
}

/// Property 1: apply everything, the host is what the agent saw.
fn apply_all_equals_what_the_agent_saw(
    init: &[(P, Init)],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let r = run_case(init, ops)?;
    apply_json(&r.s, &[])?;
    prop_assert_eq!(shown(&tree(r.s.work.path())), shown(&r.seen));
    Ok(())
}

fn is_at_or_beneath(p: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || p == dir || (p.starts_with(dir) && p.get(dir.len()) == Some(&b'/'))
}

fn ancestors(p: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut end = p.len();
    while let Some(i) = p[..end].iter().rposition(|&b| b == b'/') {
        v.push(p[..i].to_vec());
        end = i;
    }
    v
}

fn paths_of(v: &Value, key: &str) -> Vec<(Vec<u8>, String)> {
    v[key]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().as_bytes().to_vec(),
                c.get("kind")
                    .or_else(|| c.get("because"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// Property 2: `apply --path` a random subset, in random spellings.
fn a_path_subset_applies_exactly_its_part(
    init: &[(P, Init)],
    ops: &[Op],
    picks: &[(usize, u8)],
) -> Result<(), TestCaseError> {
    let r = run_case(init, ops)?;
    let staged = paths_of(
        &apply_json(&r.s, &[OsStr::new("--dry-run")])?,
        "would_apply",
    );
    prop_assert_eq!(
        shown(&tree(r.s.work.path())),
        shown(&r.original),
        "a dry run wrote"
    );
    // Candidates: every staged path and every ancestor of one.
    let mut candidates: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (p, _) in &staged {
        candidates.insert(p.clone());
        candidates.extend(ancestors(p));
    }
    let candidates: Vec<Vec<u8>> = candidates.into_iter().collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let work = r.s.work.path().as_os_str().as_bytes().to_vec();
    let mut chosen: Vec<Vec<u8>> = Vec::new();
    let mut args: Vec<Vec<u8>> = Vec::new();
    for (i, form) in picks {
        let p = candidates[i % candidates.len()].clone();
        let spelled = match form % 4 {
            0 => p.clone(),
            1 => [b"./".as_slice(), &p, b"/"].concat(),
            2 => [work.as_slice(), b"/", &p].concat(),
            _ => [p.as_slice(), b"/."].concat(),
        };
        // `--path=` so a name with a leading dash is not taken for an option.
        args.push([b"--path=".as_slice(), &spelled].concat());
        chosen.push(p);
    }
    let args: Vec<&OsStr> = args.iter().map(|a| OsStr::from_bytes(a)).collect();
    let j = apply_json(&r.s, &args)?;
    let applied: BTreeMap<Vec<u8>, String> = paths_of(&j, "applied").into_iter().collect();
    let deps = paths_of(&j, "dependencies");
    let kinds: BTreeMap<Vec<u8>, String> = staged.iter().cloned().collect();

    // Every staged path at or beneath a chosen path is applied.
    for (p, _) in &staged {
        if chosen.iter().any(|c| is_at_or_beneath(p, c)) {
            prop_assert!(
                applied.contains_key(p),
                "{} is beneath a --path but was not applied",
                String::from_utf8_lossy(p)
            );
        }
    }
    // Every other applied path is a dependency the rules allow.
    let whole = |k: &str| matches!(k, "deleted" | "opaque" | "type_changed");
    for p in applied.keys() {
        if chosen.iter().any(|c| is_at_or_beneath(p, c)) {
            continue;
        }
        let because = deps.iter().find(|(d, _)| d == p).map(|(_, b)| b.as_str());
        let allowed = applied.keys().any(|q| ancestors(q).contains(p))
            || ancestors(p)
                .iter()
                .any(|a| applied.contains_key(a) && whole(&kinds[a]));
        prop_assert!(
            because.is_some() && allowed,
            "{} applied without a reason the rules allow ({:?})",
            String::from_utf8_lossy(p),
            because
        );
    }
    // Applied paths (and what lies in a directory applied whole) are what the agent saw;
    // the rest is the original.
    let host = tree(r.s.work.path());
    let all: BTreeSet<&Vec<u8>> = r.original.keys().chain(r.seen.keys()).collect();
    for x in all {
        let governed = applied.contains_key(x)
            || ancestors(x)
                .iter()
                .any(|a| applied.get(a).is_some_and(|k| whole(k)));
        let want = if governed { &r.seen } else { &r.original };
        prop_assert_eq!(
            host.get(x),
            want.get(x),
            "{} should be {}",
            String::from_utf8_lossy(x),
            if governed {
                "what the agent saw"
            } else {
                "the original"
            }
        );
    }
    // The rest applies on top, to the same end as one apply.
    if j["remaining"].as_array().is_some_and(|r| !r.is_empty()) {
        let rest = apply_json(&r.s, &[])?;
        prop_assert_eq!(&rest["state"], "applied");
    }
    prop_assert_eq!(shown(&tree(r.s.work.path())), shown(&r.seen));
    Ok(())
}

/// The host check, once per test binary (it spawns probes).
pub(crate) fn sealed() -> bool {
    static SEALED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SEALED.get_or_init(sealed_host)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_apply_makes_the_host_what_the_agent_saw((init, ops) in case()) {
        if !sealed() {
            return Ok(());
        }
        apply_all_equals_what_the_agent_saw(&init, &ops)?;
    }

    #[test]
    fn prop_apply_path_subsets_take_their_part_and_leave_the_rest(
        (init, ops) in case(),
        picks in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        if !sealed() {
            return Ok(());
        }
        a_path_subset_applies_exactly_its_part(&init, &ops, &picks)?;
    }
}

/// A property case as a regular test.
fn replay(r: Result<(), TestCaseError>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Found by the subset property: a host symlink that the agent replaced with a directory
/// holding a file was refused as "a symlink on the host now" (the check fingerprinted the
/// new file's path through the host's symlink instead of taking it as absent).
#[test]
fn a_symlink_replaced_by_a_directory_with_a_file_applies() {
    if !sealed() {
        return;
    }
    let init = [(P(vec!["-n"]), Init::Link(Target::Sibling("a")))];
    let ops = [Op::ToDir(P(vec!["-n"]), Vec::new())];
    replay(apply_all_equals_what_the_agent_saw(&init, &ops));
    replay(a_path_subset_applies_exactly_its_part(
        &init,
        &ops,
        &[(0, 0)],
    ));
}
