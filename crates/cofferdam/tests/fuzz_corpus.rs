//! The fuzz corpora as regression tests on stable: every file under `fuzz/corpus/<target>/`
//! goes through the same harness function the cargo-fuzz target calls (`fuzz/src/lib.rs`,
//! included here), so a committed input that once failed keeps failing the build if the
//! bug comes back. New findings go into the corpus directory of their target.

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("a directory entry").path();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seed in {}", dir.display());
    files
}

/// Every corpus file through `harness`; the results, so a test can check that the seeds
/// reach past the first checks of the code under test.
fn replay<T>(target: &str, harness: fn(&[u8]) -> T) -> Vec<T> {
    corpus(target)
        .into_iter()
        .map(|(path, bytes)| {
            std::panic::catch_unwind(|| harness(&bytes))
                .unwrap_or_else(|_| panic!("{target}: {} fails", path.display()))
        })
        .collect()
}

#[test]
fn manifest_corpus() {
    let parsed = replay("manifest", harness::manifest);
    assert!(
        parsed.iter().any(|&p| p) && parsed.iter().any(|&p| !p),
        "{parsed:?}"
    );
}

#[test]
fn bundle_corpus() {
    let accepted = replay("bundle", harness::bundle);
    assert!(
        accepted.iter().any(|&a| a) && accepted.iter().any(|&a| !a),
        "{accepted:?}"
    );
}

#[test]
fn select_corpus() {
    let selected = replay("select", harness::selection);
    assert!(
        selected.iter().filter(|&&n| n > 1).count() >= 3,
        "{selected:?}"
    );
}

#[test]
fn scan_corpus() {
    let changes = replay("scan", harness::scan);
    assert!(
        changes.iter().filter(|&&n| n > 1).count() >= 3,
        "{changes:?}"
    );
}

#[test]
fn sni_corpus() {
    let named = replay("sni", harness::sni);
    assert!(
        named.iter().any(|&n| n) && named.iter().any(|&n| !n),
        "{named:?}"
    );
}

#[test]
fn http_head_corpus() {
    let accepted = replay("http_head", harness::http_head);
    assert!(
        accepted.iter().filter(|&&a| a).count() >= 5 && accepted.iter().any(|&a| !a),
        "{accepted:?}"
    );
}

#[test]
fn dns_corpus() {
    let queries = replay("dns", harness::dns);
    assert!(
        queries.iter().filter(|&&q| q).count() >= 3 && queries.iter().any(|&q| !q),
        "{queries:?}"
    );
}

#[test]
fn handover_corpus() {
    let accepted = replay("handover", harness::handover);
    assert!(
        accepted.iter().any(|&a| a) && accepted.iter().any(|&a| !a),
        "{accepted:?}"
    );
}

#[test]
fn status_corpus() {
    let read = replay("status", harness::status);
    assert!(read.iter().any(|&n| n >= 5), "{read:?}");
}

#[test]
fn agentctl_corpus() {
    let parsed = replay("agentctl", harness::agentctl);
    assert!(
        parsed.iter().filter(|&&p| p).count() >= 3 && parsed.iter().any(|&p| !p),
        "{parsed:?}"
    );
}

proptest::proptest! {
    /// The control socket's parser over arbitrary bytes, and over request-shaped lines
    /// with arbitrary words in them (cargo-fuzz explores further; this runs on stable).
    #[test]
    fn agentctl_parser_takes_any_bytes(data in proptest::collection::vec(proptest::num::u8::ANY, 0..6000)) {
        harness::agentctl(&data);
    }

    #[test]
    fn agentctl_parser_takes_any_request_shaped_line(
        request in "(note|checkpoint|status|[a-z]{0,8})",
        argument in proptest::option::of(".{0,80}"),
        client in proptest::option::of("\\PC{0,70}"),
    ) {
        let line = serde_json::json!({"request": request, "argument": argument, "client": client});
        harness::agentctl(line.to_string().as_bytes());
    }
}

#[test]
fn import_corpus() {
    // The hostile archives (`cofferdam-stage/tests/hostile_archives.rs` writes them) are
    // refused; the real exports are accepted.
    let accepted = replay("import", harness::import);
    assert!(
        accepted.iter().filter(|&&a| a).count() >= 2
            && accepted.iter().filter(|&&a| !a).count() >= 10,
        "{accepted:?}"
    );
}
