//! Hostile and damaged export archives: each is refused with its reason, and a refused
//! import leaves no job behind. `COFFERDAM_BLESS=1` also writes each case into
//! `fuzz/corpus/import/` (the fuzz target's seeds, replayed by `tests/fuzz_corpus.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cofferdam_stage::archive::{ArchiveError, import::import, import::import_tar};
use cofferdam_stage::job::JobStore;
use serde_json::{Value, json};

/// One raw tar entry: name bytes, type, data, link target.
struct Raw {
    name: Vec<u8>,
    kind: tar::EntryType,
    data: Vec<u8>,
    link: Vec<u8>,
    size: Option<u64>,
}

fn raw(name: &str, kind: tar::EntryType, data: &[u8]) -> Raw {
    Raw {
        name: name.as_bytes().to_vec(),
        kind,
        data: data.to_vec(),
        link: Vec::new(),
        size: None,
    }
}

fn hash(b: &[u8]) -> String {
    blake3::hash(b).to_hex().to_string()
}

/// A tar of `entries`, names and links written as given (no checks of the tar crate's).
fn tar_of(entries: &[Raw]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..e.name.len()].copy_from_slice(&e.name);
        gnu.linkname[..e.link.len()].copy_from_slice(&e.link);
        h.set_entry_type(e.kind);
        h.set_mode(0o644);
        h.set_size(e.size.unwrap_or(e.data.len() as u64));
        h.set_cksum();
        b.append(&h, e.data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

const BUNDLE: &[u8] = b"{\"schema_version\": 4}";
const FPS: &[u8] = b"{\"version\": 1, \"entries\": []}";

/// A manifest and entries that agree: a directory, a file in it, a symlink pointing out
/// of everything, a whiteout. Its bundle is not a valid one, so even this is refused, at
/// the very end.
fn base() -> (Value, Vec<Raw>) {
    let m = json!({
        "format": "cofferdam-export", "version": 1,
        "origin": {"version": 1, "id": "run-x", "created_at_unix_ms": 1, "workdir": "/nonexistent",
                   "state": "staged"},
        "records": [
            {"name": "run-bundle.json", "size": BUNDLE.len(), "blake3": hash(BUNDLE)},
            {"name": "fingerprints.json", "size": FPS.len(), "blake3": hash(FPS)}
        ],
        "stage": [
            {"path_bytes": b"d".to_vec(), "type": "dir", "mode": 0o755, "opaque": true},
            {"path_bytes": b"d/f".to_vec(), "type": "file", "mode": 0o644, "size": 8,
             "data": [[0, 2]], "blake3": hash(b"hi")},
            {"path_bytes": b"l".to_vec(), "type": "symlink", "target_bytes": b"/etc".to_vec()},
            {"path_bytes": b"w".to_vec(), "type": "whiteout"}
        ]
    });
    let mut link = raw("stage/l", tar::EntryType::Symlink, b"");
    link.link = b"/etc".to_vec();
    let entries = vec![
        raw("records/run-bundle.json", tar::EntryType::Regular, BUNDLE),
        raw("records/fingerprints.json", tar::EntryType::Regular, FPS),
        raw("stage/d", tar::EntryType::Directory, b""),
        raw("stage/d/f", tar::EntryType::Regular, b"hi"),
        link,
        raw("stage/w", tar::EntryType::Regular, b""),
    ];
    (m, entries)
}

fn archive(m: &Value, entries: Vec<Raw>) -> Vec<u8> {
    let text = serde_json::to_vec(m).unwrap();
    let mut all = vec![raw("cofferdam-export.json", tar::EntryType::Regular, &text)];
    all.extend(entries);
    tar_of(&all)
}

/// Every hostile case: (name, archive bytes, a word the refusal must hold).
fn cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut out = Vec::new();
    let (m, e) = base();
    out.push(("bundle-invalid", archive(&m, e), "not a valid Run Bundle"));

    let (mut m, mut e) = base();
    m["stage"][3]["path_bytes"] = json!(b"../escape".to_vec());
    e[5].name = b"stage/../escape".to_vec();
    out.push(("traversal", archive(&m, e), "plain relative"));

    let (mut m, mut e) = base();
    m["stage"][3]["path_bytes"] = json!(b"/tmp/escape".to_vec());
    e[5].name = b"stage//tmp/escape".to_vec();
    out.push(("absolute", archive(&m, e), "plain relative"));

    let (mut m, mut e) = base();
    m["stage"][3]["path_bytes"] = json!(b"l/passwd".to_vec());
    e[5].name = b"stage/l/passwd".to_vec();
    out.push(("through-symlink", archive(&m, e), "not below a directory"));

    let (m, mut e) = base();
    e[2].kind = tar::EntryType::Symlink;
    e[2].link = b"../../../../tmp".to_vec();
    out.push(("dir-is-a-symlink", archive(&m, e), "is a symlink"));

    let (m, mut e) = base();
    e[3].kind = tar::EntryType::Link;
    e[3].link = b"/etc/passwd".to_vec();
    e[3].data.clear();
    out.push(("hardlink", archive(&m, e), "hard link"));

    let (m, mut e) = base();
    e[5].kind = tar::EntryType::Char;
    out.push(("device", archive(&m, e), "device node"));

    let (m, mut e) = base();
    e[5].kind = tar::EntryType::Fifo;
    out.push(("fifo", archive(&m, e), "fifo"));

    let (mut m, e) = base();
    let dup = m["stage"][0].clone();
    m["stage"].as_array_mut().unwrap().insert(1, dup);
    out.push(("duplicate-in-manifest", archive(&m, e), "listed twice"));

    let (m, mut e) = base();
    let again = raw("stage/d/f", tar::EntryType::Regular, b"hi");
    e.insert(4, again);
    out.push((
        "duplicate-entry",
        archive(&m, e),
        "where the manifest lists",
    ));

    let (m, mut e) = base();
    e[3].data = vec![b'x'; 4096];
    out.push((
        "oversized-entry",
        archive(&m, e),
        "where the manifest gives",
    ));

    let (mut m, e) = base();
    m["records"][0]["size"] = json!(1u64 << 40);
    out.push(("oversized-record", archive(&m, e), "over the limit"));

    let (m, mut e) = base();
    e[3].data = b"hx".to_vec();
    out.push(("tampered-data", archive(&m, e), "digest"));

    let (m, mut e) = base();
    e[0].data = b"{\"schema_version\": 5}".to_vec();
    out.push(("tampered-record", archive(&m, e), "digest"));

    let (m, e) = base();
    let whole = archive(&m, e);
    let cut = whole.len() - 1024 - 700;
    out.push(("truncated", whole[..cut].to_vec(), "truncated"));

    let (mut m, e) = base();
    m["version"] = json!(2);
    out.push(("wrong-version", archive(&m, e), "format version 2"));

    let (m, mut e) = base();
    e.push(raw("stage/extra", tar::EntryType::Regular, b"x"));
    out.push((
        "entry-after-the-end",
        archive(&m, e),
        "after the manifest's last",
    ));

    let (m, e) = base();
    let text = serde_json::to_vec(&m).unwrap();
    let mut all = e;
    all.push(raw("cofferdam-export.json", tar::EntryType::Regular, &text));
    out.push((
        "manifest-not-first",
        tar_of(&all),
        "where the manifest lists",
    ));

    let (mut m, e) = base();
    m["stage"][1]["extra"] = json!(1);
    out.push(("unknown-field", archive(&m, e), "manifest is not valid"));
    out
}

fn store() -> (tempfile::TempDir, JobStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = JobStore::open(&tmp.path().join("store")).unwrap();
    (tmp, store)
}

fn refusal(r: Result<cofferdam_stage::archive::import::Imported, ArchiveError>) -> String {
    match r {
        Err(ArchiveError::Refused { reason }) => reason,
        Err(other) => panic!("not a refusal: {other}"),
        Ok(done) => panic!("accepted: {}", done.job.id()),
    }
}

#[test]
fn hostile_archives_are_refused_with_their_reason_and_leave_no_job() {
    let bless = std::env::var_os("COFFERDAM_BLESS").is_some();
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/import");
    for (name, bytes, word) in cases() {
        let (tmp, store) = store();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let reason = refusal(import_tar(&store, bytes.as_slice(), Some(&work), 1));
        assert!(reason.contains(word), "{name}: {reason}");
        let left: Vec<_> = std::fs::read_dir(store.jobs_dir()).unwrap().collect();
        assert!(left.is_empty(), "{name}: left {left:?}");
        assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0, "{name}");
        if bless {
            std::fs::write(corpus.join(format!("hostile-{name}.tar")), &bytes).unwrap();
        }
    }
}

#[test]
fn damaged_compression_is_refused() {
    let (m, e) = base();
    let compressed = zstd::stream::encode_all(archive(&m, e).as_slice(), 3).unwrap();
    for (name, bytes) in [
        ("cut", compressed[..compressed.len() / 2].to_vec()),
        ("not-zstd", b"PK\x03\x04 a zip".to_vec()),
    ] {
        let (tmp, store) = store();
        let reason = refusal(import(&store, bytes.as_slice(), Some(tmp.path()), 1));
        assert!(
            reason.contains("truncated") || reason.contains("decompressed"),
            "{name}: {reason}"
        );
        assert_eq!(std::fs::read_dir(store.jobs_dir()).unwrap().count(), 0);
    }
}
