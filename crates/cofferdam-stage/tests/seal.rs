#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Seal scan tests: synthetic lower/upper trees built in temp directories (whiteouts are
//! `mknod` char 0:0, which Linux ≥ 5.8 allows without privilege; opaque directories carry
//! `user.overlay.opaque=y`), and one real overlayfs mounted in a forked child's user and
//! mount namespaces, written through, then sealed by the parent.
//!
//! A check needing a kernel feature that is missing prints `SKIP-HOST <why>` and returns —
//! unless `COFFERDAM_TEST_REQUIRE=sealed`, where it fails.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::{ChangeEntry, ChangeEntryType, ChangeKind};
use cofferdam_stage::fingerprint::{
    Ctime, FingerprintError, HostRoot, HostState, fingerprint_of, read_fingerprints,
    write_fingerprints,
};
use cofferdam_stage::{JobStore, seal};
use rustix::fs::{CWD, FileType, Mode};

// ---------------------------------------------------------------- helpers

use cofferdam_testkit::skip_host;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

struct Trees {
    _tmp: tempfile::TempDir,
    lower: PathBuf,
    upper: PathBuf,
}

impl Trees {
    fn new() -> Trees {
        let tmp = tempfile::tempdir().unwrap();
        let lower = tmp.path().join("lower");
        let upper = tmp.path().join("upper");
        fs::create_dir(&lower).unwrap();
        fs::create_dir(&upper).unwrap();
        Trees {
            _tmp: tmp,
            lower,
            upper,
        }
    }
}

fn p(base: &Path, rel: &[u8]) -> PathBuf {
    base.join(OsStr::from_bytes(rel))
}

fn file(base: &Path, rel: &[u8], content: &[u8], mode: u32) {
    let path = p(base, rel);
    fs::write(&path, content).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
}

fn dir(base: &Path, rel: &[u8], mode: u32) {
    let path = p(base, rel);
    fs::create_dir(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
}

fn link(base: &Path, rel: &[u8], target: &[u8]) {
    symlink(OsStr::from_bytes(target), p(base, rel)).unwrap();
}

/// A whiteout (char device 0:0); `false` (after a SKIP-HOST) when this host refuses it.
fn whiteout(base: &Path, rel: &[u8]) -> bool {
    let path = p(base, rel);
    match rustix::fs::mknodat(
        CWD,
        &path,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        rustix::fs::makedev(0, 0),
    ) {
        Ok(()) => true,
        Err(e) => {
            skip_host(&format!(
                "cannot create a whiteout (mknod c 0 0) at {}: {e}",
                path.display()
            ));
            false
        }
    }
}

/// Mark a directory opaque; `false` (after a SKIP-HOST) when the filesystem refuses user
/// xattrs.
fn opaque(base: &Path, rel: &[u8]) -> bool {
    let path = p(base, rel);
    match rustix::fs::lsetxattr(
        &path,
        "user.overlay.opaque",
        b"y",
        rustix::fs::XattrFlags::empty(),
    ) {
        Ok(()) => true,
        Err(e) => {
            skip_host(&format!(
                "cannot set user.overlay.opaque on {}: {e}",
                path.display()
            ));
            false
        }
    }
}

/// Every entry of a tree: relative path bytes → (st_mode, content or link target).
fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(root).follow_links(false) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(root).unwrap();
        let meta = e.metadata().unwrap();
        let data = if meta.file_type().is_symlink() {
            fs::read_link(e.path())
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec()
        } else if meta.is_file() && meta.mode() & 0o444 != 0 {
            fs::read(e.path()).unwrap()
        } else {
            Vec::new()
        };
        out.insert(rel.as_os_str().as_bytes().to_vec(), (meta.mode(), data));
    }
    out
}

fn change(
    path: &[u8],
    kind: ChangeKind,
    old_type: Option<ChangeEntryType>,
    new_type: Option<ChangeEntryType>,
    size: Option<u64>,
    mode: Option<u32>,
) -> ChangeEntry {
    let (shown, lossless) = cofferdam_stage::seal::display_path(path);
    ChangeEntry {
        path: shown,
        path_bytes: (!lossless).then(|| path.to_vec()),
        kind,
        old_type,
        new_type,
        size_bytes: size,
        mode,
    }
}

fn raw_path(c: &ChangeEntry) -> Vec<u8> {
    c.path_bytes
        .clone()
        .unwrap_or_else(|| c.path.as_bytes().to_vec())
}

use ChangeEntryType::{Directory as D, File as F, Symlink as S};
use ChangeKind::{Added, Deleted, Modified, Opaque, TypeChanged};

// ---------------------------------------------------------------- synthetic trees

#[test]
fn every_kind_of_change() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());

    // Copied up but unchanged: no change (mtime differs, content and mode do not).
    file(lo, b"same.txt", b"same\n", 0o644);
    file(up, b"same.txt", b"same\n", 0o644);
    // Content, same size; content, other size; mode only.
    file(lo, b"content.txt", b"hello\n", 0o644);
    file(up, b"content.txt", b"jello\n", 0o644);
    file(lo, b"grow.txt", b"a", 0o644);
    file(up, b"grow.txt", b"abc", 0o644);
    file(lo, b"mode.sh", b"#!/bin/sh\n", 0o644);
    file(up, b"mode.sh", b"#!/bin/sh\n", 0o755);
    // Deleted file.
    file(lo, b"gone.txt", b"bye", 0o600);
    if !whiteout(up, b"gone.txt") {
        return;
    }
    // A whiteout for something the host no longer has: no change, a warning.
    whiteout(up, b"ghost");
    // Copied-up directory, unchanged, with a new file in it; a directory whose mode changed.
    dir(lo, b"keepdir", 0o755);
    file(lo, b"keepdir/old.txt", b"old", 0o644);
    dir(up, b"keepdir", 0o755);
    file(up, b"keepdir/new.txt", b"new", 0o644);
    dir(lo, b"moddir", 0o755);
    dir(up, b"moddir", 0o700);
    // Opaque directory: the host's x, y, sub/z are hidden; upper has x (rewritten) and n.
    dir(lo, b"opq", 0o755);
    file(lo, b"opq/x", b"host x", 0o644);
    file(lo, b"opq/y", b"host y", 0o644);
    dir(lo, b"opq/sub", 0o755);
    file(lo, b"opq/sub/z", b"z", 0o644);
    dir(up, b"opq", 0o755);
    if !opaque(up, b"opq") {
        return;
    }
    file(up, b"opq/x", b"stage x", 0o644);
    file(up, b"opq/n", b"n", 0o644);
    whiteout(up, b"opq/y"); // meaningless inside an opaque dir: skipped
    // Type changes: file → symlink, dir → file, file → dir (with a child).
    file(lo, b"f2link", b"t", 0o644);
    link(up, b"f2link", b"target");
    dir(lo, b"dir2file", 0o755);
    file(lo, b"dir2file/a", b"a", 0o644);
    file(up, b"dir2file", b"now a file", 0o644);
    file(lo, b"file2dir", b"f", 0o644);
    dir(up, b"file2dir", 0o755);
    file(up, b"file2dir/c", b"c", 0o644);
    // Symlink retargeted; symlink unchanged.
    link(lo, b"link", b"old");
    link(up, b"link", b"new");
    link(lo, b"samelink", b"x");
    link(up, b"samelink", b"x");
    // Added: a file, a setuid file, a nested tree (with a pointless whiteout inside).
    file(up, b"added.txt", b"added", 0o644);
    file(up, b"suid", b"s", 0o4755);
    dir(up, b"newdir", 0o755);
    dir(up, b"newdir/sub", 0o750);
    file(up, b"newdir/sub/deep.txt", b"deep", 0o600);
    file(up, b"newdir/top.txt", b"top", 0o644);
    whiteout(up, b"newdir/wh");
    // Odd names: a newline, invalid UTF-8, a leading dash.
    file(up, b"nl\nname", b"1", 0o644);
    file(up, b"bad\xffname", b"2", 0o644);
    file(up, b"-leading-dash", b"3", 0o644);

    let before = snapshot(lo);
    let r = seal(up, lo).unwrap();
    assert_eq!(snapshot(lo), before, "the lower tree must not change");

    let mut want = vec![
        change(b"-leading-dash", Added, None, Some(F), Some(1), Some(0o644)),
        change(b"added.txt", Added, None, Some(F), Some(5), Some(0o644)),
        change(b"bad\xffname", Added, None, Some(F), Some(1), Some(0o644)),
        change(
            b"content.txt",
            Modified,
            Some(F),
            Some(F),
            Some(6),
            Some(0o644),
        ),
        change(
            b"dir2file",
            TypeChanged,
            Some(D),
            Some(F),
            Some(10),
            Some(0o644),
        ),
        change(b"f2link", TypeChanged, Some(F), Some(S), Some(6), None),
        change(
            b"file2dir",
            TypeChanged,
            Some(F),
            Some(D),
            None,
            Some(0o755),
        ),
        change(b"file2dir/c", Added, None, Some(F), Some(1), Some(0o644)),
        change(b"gone.txt", Deleted, Some(F), None, None, None),
        change(
            b"grow.txt",
            Modified,
            Some(F),
            Some(F),
            Some(3),
            Some(0o644),
        ),
        change(
            b"keepdir/new.txt",
            Added,
            None,
            Some(F),
            Some(3),
            Some(0o644),
        ),
        change(b"link", Modified, Some(S), Some(S), Some(3), None),
        change(
            b"mode.sh",
            Modified,
            Some(F),
            Some(F),
            Some(10),
            Some(0o755),
        ),
        change(b"moddir", Modified, Some(D), Some(D), None, Some(0o700)),
        change(b"newdir", Added, None, Some(D), None, Some(0o755)),
        change(b"newdir/sub", Added, None, Some(D), None, Some(0o750)),
        change(
            b"newdir/sub/deep.txt",
            Added,
            None,
            Some(F),
            Some(4),
            Some(0o600),
        ),
        change(
            b"newdir/top.txt",
            Added,
            None,
            Some(F),
            Some(3),
            Some(0o644),
        ),
        change(b"nl\nname", Added, None, Some(F), Some(1), Some(0o644)),
        change(b"opq", Opaque, Some(D), Some(D), None, Some(0o755)),
        change(b"opq/n", Added, None, Some(F), Some(1), Some(0o644)),
        change(b"opq/x", Added, None, Some(F), Some(7), Some(0o644)),
        change(b"suid", Added, None, Some(F), Some(1), Some(0o4755)),
    ];
    want.sort_by_key(raw_path);
    assert_eq!(r.changes, want);
    assert_eq!(r.whiteouts, 2, "gone.txt and opq");
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].starts_with("ghost:"), "{:?}", r.warnings);

    // Odd names: lossless bytes only where the display cannot carry them.
    let by_raw: BTreeMap<Vec<u8>, &ChangeEntry> =
        r.changes.iter().map(|c| (raw_path(c), c)).collect();
    assert_eq!(by_raw[&b"nl\nname".to_vec()].path, "nl\\nname");
    assert_eq!(
        by_raw[&b"bad\xffname".to_vec()].path_bytes.as_deref(),
        Some(&b"bad\xffname"[..])
    );
    assert_eq!(by_raw[&b"-leading-dash".to_vec()].path_bytes, None);

    // Sorted by path bytes.
    let raws: Vec<Vec<u8>> = r.changes.iter().map(raw_path).collect();
    let mut sorted = raws.clone();
    sorted.sort();
    assert_eq!(raws, sorted);

    // One fingerprint per change, same order, describing the host side.
    let fps = &r.fingerprints;
    let fp_paths: Vec<Vec<u8>> = fps.entries.iter().map(|e| e.path_bytes.clone()).collect();
    assert_eq!(fp_paths, raws);
    let host = |rel: &[u8]| fps.get(rel).unwrap().fingerprint.clone();
    assert_eq!(
        host(b"gone.txt").host,
        HostState::File {
            size: 3,
            mode: 0o600,
            blake3: Some(blake3::hash(b"bye").to_hex().to_string()),
        }
    );
    assert!(host(b"gone.txt").ctime.is_some());
    for absent in [
        &b"added.txt"[..],
        b"newdir",
        b"newdir/sub/deep.txt",
        b"opq/n",
        b"file2dir/c",
        b"nl\nname",
    ] {
        let fp = host(absent);
        assert_eq!(fp.host, HostState::Absent, "{absent:?}");
        assert_eq!(fp.ctime, None);
    }
    assert_eq!(host(b"opq").host, HostState::Dir { mode: 0o755 });
    // Hidden by the opaque dir but still on the host: fingerprinted as it is.
    assert_eq!(
        host(b"opq/x").host,
        HostState::File {
            size: 6,
            mode: 0o644,
            blake3: Some(blake3::hash(b"host x").to_hex().to_string()),
        }
    );
    assert_eq!(
        host(b"link").host,
        HostState::Symlink {
            target_bytes: b"old".to_vec()
        }
    );
    assert_eq!(host(b"dir2file").host, HostState::Dir { mode: 0o755 });
    assert_eq!(host(b"moddir").host, HostState::Dir { mode: 0o755 });

    // The standalone fingerprint agrees with the recorded one.
    assert_eq!(
        fingerprint_of(&lo.join("gone.txt")).unwrap(),
        host(b"gone.txt")
    );
    assert_eq!(fingerprint_of(&lo.join("link")).unwrap(), host(b"link"));
    assert_eq!(
        fingerprint_of(&lo.join("newdir/sub/deep.txt")).unwrap(),
        host(b"newdir/sub/deep.txt")
    );
}

#[test]
fn unchanged_copy_ups_are_no_change() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    dir(lo, b"d", 0o755);
    dir(lo, b"d/e", 0o700);
    file(lo, b"d/e/f", b"content", 0o640);
    link(lo, b"d/l", b"../x");
    dir(up, b"d", 0o755);
    dir(up, b"d/e", 0o700);
    file(up, b"d/e/f", b"content", 0o640);
    link(up, b"d/l", b"../x");
    let r = seal(up, lo).unwrap();
    assert_eq!(r.changes, vec![]);
    assert_eq!(r.whiteouts, 0);
    assert!(r.fingerprints.entries.is_empty());
    assert!(r.warnings.is_empty());
}

#[test]
fn the_roots_mode_is_a_change_of_dot_and_only_its_mode() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    fs::set_permissions(lo, fs::Permissions::from_mode(0o750)).unwrap();
    fs::set_permissions(up, fs::Permissions::from_mode(0o750)).unwrap();
    assert_eq!(
        seal(up, lo).unwrap().changes,
        vec![],
        "same mode: no change"
    );

    // The command left the root without owner read (`chmod 0300 .`): lent, recorded as left.
    fs::set_permissions(up, fs::Permissions::from_mode(0o300)).unwrap();
    file(up, b"new", b"n\n", 0o644);
    let r = seal(up, lo).unwrap();
    assert_eq!(
        r.changes,
        vec![
            change(b".", Modified, Some(D), Some(D), None, Some(0o300)),
            change(b"new", Added, None, Some(F), Some(2), Some(0o644)),
        ]
    );
    assert_eq!(r.fingerprints.entries[0].path, ".");
    let recorded = &r.fingerprints.entries[0].fingerprint.host;
    assert_eq!(
        *recorded,
        cofferdam_stage::fingerprint::HostState::Dir { mode: 0o750 }
    );
}

#[test]
fn deleted_directory_and_symlink() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    dir(lo, b"tree", 0o755);
    file(lo, b"tree/a", b"a", 0o644);
    link(lo, b"sl", b"/etc/passwd");
    if !(whiteout(up, b"tree") && whiteout(up, b"sl")) {
        return;
    }
    let r = seal(up, lo).unwrap();
    assert_eq!(
        r.changes,
        vec![
            change(b"sl", Deleted, Some(S), None, None, None),
            change(b"tree", Deleted, Some(D), None, None, None),
        ]
    );
    assert_eq!(r.whiteouts, 2);
    assert_eq!(
        r.fingerprints.get(b"sl").unwrap().fingerprint.host,
        HostState::Symlink {
            target_bytes: b"/etc/passwd".to_vec()
        }
    );
}

/// Nothing is followed through a host symlink: a directory in the upper whose host
/// counterpart is a symlink to elsewhere is a type change, and its entries are new.
#[test]
fn host_symlinks_are_never_followed() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    let outside = t.lower.parent().unwrap().join("outside");
    fs::create_dir(&outside).unwrap();
    file(&outside, b"secret", b"outside", 0o644);
    symlink(&outside, lo.join("esc")).unwrap();
    dir(up, b"esc", 0o755);
    file(up, b"esc/secret", b"outside", 0o644);
    let r = seal(up, lo).unwrap();
    assert_eq!(
        r.changes,
        vec![
            change(b"esc", TypeChanged, Some(S), Some(D), None, Some(0o755)),
            change(b"esc/secret", Added, None, Some(F), Some(7), Some(0o644)),
        ]
    );
    assert_eq!(
        r.fingerprints.get(b"esc/secret").unwrap().fingerprint.host,
        HostState::Absent
    );
    // Asked directly, a path through the symlink is refused rather than followed.
    let root = HostRoot::open(lo).unwrap();
    assert!(matches!(
        root.fingerprint(Path::new("esc/secret")),
        Err(FingerprintError::Unstable { .. })
    ));
    assert!(matches!(
        root.fingerprint(Path::new("../outside/secret")),
        Err(FingerprintError::NotRelative { .. })
    ));
}

/// Mode 000 files: root can read them and compares content; anyone else cannot, and the
/// copy-up is listed as modified with a warning rather than guessed unchanged.
#[test]
fn unreadable_files() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    file(lo, b"locked", b"s", 0o000);
    file(up, b"locked", b"s", 0o000);
    file(lo, b"gone", b"g", 0o000);
    if !whiteout(up, b"gone") {
        return;
    }
    let r = seal(up, lo).unwrap();
    let gone = &r.fingerprints.get(b"gone").unwrap().fingerprint.host;
    if is_root() {
        assert_eq!(
            r.changes,
            vec![change(b"gone", Deleted, Some(F), None, None, None)]
        );
        assert!(matches!(
            gone,
            HostState::File {
                blake3: Some(_),
                ..
            }
        ));
        assert!(r.warnings.is_empty());
    } else {
        assert_eq!(
            r.changes,
            vec![
                change(b"gone", Deleted, Some(F), None, None, None),
                change(b"locked", Modified, Some(F), Some(F), Some(1), Some(0)),
            ]
        );
        assert_eq!(
            *gone,
            HostState::File {
                size: 1,
                mode: 0,
                blake3: None
            }
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    }
}

fn fifo(base: &Path, rel: &[u8], mode: u32) {
    rustix::fs::mknodat(
        CWD,
        p(base, rel),
        FileType::Fifo,
        Mode::from_raw_mode(mode),
        0,
    )
    .unwrap();
    fs::set_permissions(p(base, rel), fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn fifo_is_other() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    fifo(lo, b"pipe", 0o644);
    fifo(up, b"pipe", 0o600);
    fifo(up, b"newpipe", 0o600);
    file(lo, b"wasfile", b"x", 0o644);
    fifo(up, b"wasfile", 0o644);
    let r = seal(up, lo).unwrap();
    let o = Some(ChangeEntryType::Other);
    assert_eq!(
        r.changes,
        vec![
            change(b"newpipe", Added, None, o, None, Some(0o600)),
            change(b"pipe", Modified, o, o, None, Some(0o600)),
            change(b"wasfile", TypeChanged, Some(F), o, None, Some(0o644)),
        ]
    );
}

#[test]
fn fingerprints_file_round_trips() {
    let t = Trees::new();
    let (lo, up) = (t.lower.as_path(), t.upper.as_path());
    file(lo, b"gone", b"bye", 0o644);
    file(up, b"new\xff", b"n", 0o644);
    if !whiteout(up, b"gone") {
        return;
    }
    let mut r = seal(up, lo).unwrap();
    r.fingerprints.run_started_at_unix_ms = Some(1_764_477_000_000);
    let path = t.upper.parent().unwrap().join("fingerprints.json");
    write_fingerprints(&path, &r.fingerprints).unwrap();
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(read_fingerprints(&path).unwrap(), r.fingerprints);

    // A ctime taken now is after a run start in the past.
    let ctime: Ctime = r
        .fingerprints
        .get(b"gone")
        .unwrap()
        .fingerprint
        .ctime
        .unwrap();
    assert!(ctime.is_after_unix_ms(1_000));

    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    v["version"] = serde_json::json!(2);
    fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(matches!(
        read_fingerprints(&path),
        Err(FingerprintError::Version { found: 2, .. })
    ));
}

#[test]
fn fingerprint_of_odd_paths() {
    let t = Trees::new();
    let lo = t.lower.as_path();
    assert_eq!(
        fingerprint_of(&lo.join("missing/deeper")).unwrap().host,
        HostState::Absent
    );
    file(lo, b"f", b"x", 0o644);
    // Below a file: absent (ENOTDIR), not an error.
    assert_eq!(
        fingerprint_of(&lo.join("f/below")).unwrap().host,
        HostState::Absent
    );
    assert!(matches!(
        fingerprint_of(Path::new("/")).unwrap().host,
        HostState::Dir { .. }
    ));
}

// ---------------------------------------------------------------- a real overlay

/// One operation the forked child performs through the mounted overlay.
enum Op {
    /// Create or truncate, write, mode 0644.
    Write(CString, &'static [u8]),
    /// Open an existing file for writing and close it (a copy-up that changes nothing).
    OpenForWrite(CString),
    Unlink(CString),
    Mkdir(CString),
    Rmdir(CString),
    Chmod(CString, u32),
}

/// Everything the forked child needs, prepared before the fork (the child allocates
/// nothing).
struct OverlayPlan {
    lower: CString,
    upper: CString,
    work: CString,
    merged: CString,
    ops: Vec<Op>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Failure codes the child exits with: which step failed (an op: its index plus
/// `STEP_OPS`).
const STEP_USERNS: i32 = 10;
const STEP_IDMAP: i32 = 11;
const STEP_PRIVATE: i32 = 12;
const STEP_MOUNT: i32 = 13;
const STEP_OPS: i32 = 20;

/// A lower tree, a job for it, and the merged mount point.
struct RealOverlay {
    _tmp: tempfile::TempDir,
    lower: PathBuf,
    merged: PathBuf,
    job: cofferdam_stage::Job,
}

impl RealOverlay {
    fn new(build_lower: impl FnOnce(&Path)) -> RealOverlay {
        let tmp = tempfile::tempdir().unwrap();
        let lower = tmp.path().join("lower");
        let merged = tmp.path().join("merged");
        fs::create_dir(&lower).unwrap();
        fs::create_dir(&merged).unwrap();
        build_lower(&lower);
        let store = JobStore::open(&tmp.path().join("store")).unwrap();
        let job = store.create(&lower, None).unwrap();
        // As the sandbox does before its mount: the overlay's root shows the upper's mode.
        let mode = fs::metadata(&lower).unwrap().permissions();
        fs::set_permissions(job.upper(), mode).unwrap();
        RealOverlay {
            _tmp: tmp,
            lower,
            merged,
            job,
        }
    }

    fn at(&self, rel: &str) -> CString {
        cstr(&self.merged.join(rel))
    }

    /// Mount the overlay in a forked child and run `ops` through it. `false` (after a
    /// SKIP-HOST) when this host cannot.
    fn run(&self, ops: Vec<Op>) -> bool {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let plan = OverlayPlan {
            lower: cstr(&self.lower),
            upper: cstr(&self.job.upper()),
            work: cstr(&self.job.overlay_work()),
            merged: cstr(&self.merged),
            ops,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        };
        // SAFETY: the test harness is multi-threaded; the child only runs
        // `overlay_child`, which makes raw syscalls on data prepared above (no allocation,
        // no locks, no unwinding) and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            overlay_child(&plan);
        }
        let mut status = 0;
        // SAFETY: waiting for our own child; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        match libc::WEXITSTATUS(status) {
            0 => true,
            STEP_USERNS | STEP_IDMAP => {
                skip_host("cannot create a user namespace with an id map");
                false
            }
            STEP_PRIVATE | STEP_MOUNT => {
                skip_host("cannot mount overlayfs (userxattr) in a user namespace");
                false
            }
            code => panic!("the overlay child failed at op {}", code - STEP_OPS),
        }
    }
}

/// The brief's scenario: `echo x > a; rm b; mkdir d; echo y > d/f`, plus two copy-ups that
/// change nothing (c opened for writing, keep chmod'ed to its own mode).
#[test]
fn real_overlay_seal() {
    let o = RealOverlay::new(|lower| {
        file(lower, b"b", b"to be removed\n", 0o644);
        file(lower, b"c", b"copied up, never changed\n", 0o644);
        dir(lower, b"keep", 0o755);
        file(lower, b"keep/k", b"k\n", 0o644);
    });
    let before = snapshot(&o.lower);
    let ops = vec![
        Op::Write(o.at("a"), b"x\n"),
        Op::Unlink(o.at("b")),
        Op::Mkdir(o.at("d")),
        Op::Write(o.at("d/f"), b"y\n"),
        Op::OpenForWrite(o.at("c")),
        Op::Chmod(o.at("keep"), 0o755),
    ];
    if !o.run(ops) {
        return;
    }

    // The child's mount namespace is gone; the upper holds what it wrote.
    let upper = o.job.upper();
    assert!(
        upper.join("c").is_file(),
        "opening c for writing copied it up"
    );
    assert!(upper.join("keep").is_dir(), "chmod on keep copied it up");
    let r = seal(&upper, &o.lower).unwrap();
    assert_eq!(
        r.changes,
        vec![
            change(b"a", Added, None, Some(F), Some(2), Some(0o644)),
            change(b"b", Deleted, Some(F), None, None, None),
            change(b"d", Added, None, Some(D), None, Some(0o755)),
            change(b"d/f", Added, None, Some(F), Some(2), Some(0o644)),
        ],
        "warnings: {:?}",
        r.warnings
    );
    assert_eq!(r.whiteouts, 1);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(
        snapshot(&o.lower),
        before,
        "the lower tree must be unchanged"
    );
    assert_eq!(
        r.fingerprints.get(b"b").unwrap().fingerprint.host,
        HostState::File {
            size: 14,
            mode: 0o644,
            blake3: Some(blake3::hash(b"to be removed\n").to_hex().to_string()),
        }
    );

    // The kernel left work/work mode 000; the job can still remove its overlay workdir.
    let work_work = o.job.overlay_work().join("work");
    assert_eq!(
        fs::symlink_metadata(&work_work).unwrap().mode() & 0o777,
        0,
        "work/work as the kernel made it"
    );
    o.job.remove_overlay_work().unwrap();
    assert!(!o.job.overlay_work().exists());
}

/// What the kernel itself writes for a replaced directory (opaque) and a file replaced by
/// a directory.
#[test]
fn real_overlay_opaque_and_type_change() {
    let o = RealOverlay::new(|lower| {
        dir(lower, b"od", 0o755);
        file(lower, b"od/z", b"z\n", 0o644);
        file(lower, b"od/keep", b"old\n", 0o644);
        file(lower, b"f", b"file\n", 0o644);
    });
    let before = snapshot(&o.lower);
    let ops = vec![
        Op::Unlink(o.at("od/z")),
        Op::Unlink(o.at("od/keep")),
        Op::Rmdir(o.at("od")),
        Op::Mkdir(o.at("od")),
        Op::Write(o.at("od/keep"), b"new\n"),
        Op::Unlink(o.at("f")),
        Op::Mkdir(o.at("f")),
    ];
    if !o.run(ops) {
        return;
    }
    let r = seal(&o.job.upper(), &o.lower).unwrap();
    assert_eq!(
        r.changes,
        vec![
            change(b"f", TypeChanged, Some(F), Some(D), None, Some(0o755)),
            change(b"od", Opaque, Some(D), Some(D), None, Some(0o755)),
            change(b"od/keep", Added, None, Some(F), Some(4), Some(0o644)),
        ],
        "warnings: {:?}",
        r.warnings
    );
    assert_eq!(r.whiteouts, 1);
    assert_eq!(snapshot(&o.lower), before);
    // The hidden host file is fingerprinted as it is on the host.
    assert!(matches!(
        r.fingerprints.get(b"od/keep").unwrap().fingerprint.host,
        HostState::File { size: 4, .. }
    ));
    o.job.remove_overlay_work().unwrap();
}

// ---- runs in the forked child only ----

fn overlay_child(plan: &OverlayPlan) -> ! {
    let code = match overlay_child_steps(plan) {
        Ok(()) => 0,
        Err(step) => step,
    };
    // SAFETY: `_exit` ends the child without running the parent's atexit handlers or
    // destructors, which must not run twice.
    unsafe { libc::_exit(code) }
}

fn overlay_child_steps(plan: &OverlayPlan) -> Result<(), i32> {
    use rustix::fs::OFlags;
    use rustix::mount::{
        FsMountFlags, FsOpenFlags, MountAttrFlags, MountPropagationFlags, MoveMountFlags,
    };
    use rustix::thread::UnshareFlags;

    // SAFETY: `CLONE_FILES` is not passed; this is the single-threaded forked child.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS) }
        .map_err(|_| STEP_USERNS)?;
    let write = |path: &std::ffi::CStr, data: &[u8]| -> Result<(), rustix::io::Errno> {
        let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
        match rustix::io::write(&fd, data)? {
            n if n == data.len() => Ok(()),
            _ => Err(rustix::io::Errno::IO),
        }
    };
    write(c"/proc/self/setgroups", b"deny").map_err(|_| STEP_IDMAP)?;
    write(c"/proc/self/uid_map", &plan.uid_map).map_err(|_| STEP_IDMAP)?;
    write(c"/proc/self/gid_map", &plan.gid_map).map_err(|_| STEP_IDMAP)?;
    rustix::mount::mount_change(
        c"/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|_| STEP_PRIVATE)?;

    let mount = || -> Result<(), rustix::io::Errno> {
        let fs = rustix::mount::fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC)?;
        rustix::mount::fsconfig_set_string(&fs, c"lowerdir+", plan.lower.as_c_str())?;
        rustix::mount::fsconfig_set_string(&fs, c"upperdir", plan.upper.as_c_str())?;
        rustix::mount::fsconfig_set_string(&fs, c"workdir", plan.work.as_c_str())?;
        rustix::mount::fsconfig_set_flag(&fs, c"userxattr")?;
        rustix::mount::fsconfig_create(&fs)?;
        let mnt =
            rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())?;
        rustix::mount::move_mount(
            &mnt,
            c"",
            CWD,
            plan.merged.as_c_str(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    mount().map_err(|_| STEP_MOUNT)?;

    for (i, op) in plan.ops.iter().enumerate() {
        run_op(op).map_err(|_| STEP_OPS + i32::try_from(i).unwrap_or(99))?;
    }
    Ok(())
}

fn run_op(op: &Op) -> Result<(), rustix::io::Errno> {
    use rustix::fs::OFlags;
    let mode = |m: u32| Mode::from_raw_mode(m);
    match op {
        Op::Write(path, data) => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
            let fd = rustix::fs::open(path.as_c_str(), flags, mode(0o644))?;
            rustix::fs::fchmod(&fd, mode(0o644))?;
            match rustix::io::write(&fd, data)? {
                n if n == data.len() => Ok(()),
                _ => Err(rustix::io::Errno::IO),
            }
        }
        Op::OpenForWrite(path) => rustix::fs::open(
            path.as_c_str(),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(drop),
        Op::Unlink(path) => rustix::fs::unlink(path.as_c_str()),
        Op::Mkdir(path) => {
            rustix::fs::mkdir(path.as_c_str(), mode(0o755))?;
            rustix::fs::chmod(path.as_c_str(), mode(0o755))
        }
        Op::Rmdir(path) => rustix::fs::rmdir(path.as_c_str()),
        Op::Chmod(path, m) => rustix::fs::chmod(path.as_c_str(), mode(*m)),
    }
}
