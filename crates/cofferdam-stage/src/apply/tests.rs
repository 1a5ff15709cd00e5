//! The engine against stages made by a real overlay mount (`unshare -Urm`, `userxattr`:
//! whiteouts as char 0:0, opaque directories as `user.overlay.opaque`) and sealed by the
//! real seal: the lower after apply must equal the merged view, conflicts must refuse, and
//! a crash at every step must leave each path wholly old or wholly new.

use super::*;
use crate::review::join;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::panic::AssertUnwindSafe;
use std::process::Command;
use tempfile::TempDir;

/// One entry of a tree snapshot: type, permission bits (setuid/setgid dropped), content or
/// link target.
type Entry = (char, u32, Vec<u8>);
type Snap = BTreeMap<Vec<u8>, Entry>;

fn snapshot(root: &Path) -> Snap {
    let mut out = Snap::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).follow_links(false) {
        let e = e.unwrap();
        let rel = e
            .path()
            .strip_prefix(root)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec();
        let m = e.path().symlink_metadata().unwrap();
        let ft = m.file_type();
        let mode = m.mode() & 0o1777;
        let v = if ft.is_dir() {
            ('d', mode, Vec::new())
        } else if ft.is_symlink() {
            (
                'l',
                0,
                std::fs::read_link(e.path())
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else if ft.is_fifo() {
            ('p', mode, Vec::new())
        } else {
            ('f', mode, std::fs::read(e.path()).unwrap())
        };
        out.insert(rel, v);
    }
    out
}

struct Fx {
    _tmp: TempDir,
    _other: Option<TempDir>,
    lower: PathBuf,
    upper: PathBuf,
    ledger: PathBuf,
    before: Snap,
    merged: Snap,
    stage: Stage,
}

fn require_userns() -> bool {
    let ok = Command::new("unshare")
        .args(["-Urm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    cofferdam_testkit::require("unprivileged user namespaces (unshare -Urm)", ok)
}

/// Build the lower with `setup`, run `script` in an overlay over it, take the merged view,
/// and seal.
fn overlay(setup: &str, script: &str) -> Option<Fx> {
    overlay_on(None, setup, script)
}

/// How the overlay is mounted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mount {
    /// In a user namespace, `userxattr` (cofferdam's): `user.overlay.opaque`.
    User,
    /// By root in a mount namespace only: `trusted.overlay.opaque`.
    Privileged,
}

/// [`overlay`] with the lower (the workdir) on another filesystem (`/dev/shm`) than the
/// stage: staged files are then copied, not linked.
fn overlay_on(lower_base: Option<&Path>, setup: &str, script: &str) -> Option<Fx> {
    overlay_with(Mount::User, lower_base, setup, script)
}

fn overlay_with(how: Mount, lower_base: Option<&Path>, setup: &str, script: &str) -> Option<Fx> {
    if how == Mount::User && !require_userns() {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let other = lower_base.map(|b| tempfile::tempdir_in(b).unwrap());
    let d = |n: &str| {
        let p = tmp.path().join(n);
        std::fs::create_dir(&p).unwrap();
        p
    };
    let (upper, work, merged, snap) = (d("upper"), d("work"), d("merged"), d("snap"));
    let lower = match &other {
        Some(o) => {
            let p = o.path().join("lower");
            std::fs::create_dir(&p).unwrap();
            p
        }
        None => d("lower"),
    };
    let st = Command::new("sh")
        .arg("-c")
        .arg(setup)
        .current_dir(&lower)
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let start = now_ms();
    let mount = format!(
        "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={}{} {} && cd {} && eval \"$SCRIPT\" && cp -a . {}/",
        lower.display(),
        upper.display(),
        work.display(),
        if how == Mount::User { ",userxattr" } else { "" },
        merged.display(),
        merged.display(),
        snap.display()
    );
    let ns = if how == Mount::User { "-Urm" } else { "-m" };
    let out = Command::new("unshare")
        .args([ns, "sh", "-c", &mount])
        .env("SCRIPT", script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sealed = crate::seal::seal(&upper, &lower).unwrap();
    let mut fps = sealed.fingerprints;
    fps.run_started_at_unix_ms = Some(start);
    let changes = join(&sealed.changes, &fps, Path::new("fingerprints.json")).unwrap();
    let before = snapshot(&lower);
    let merged = snapshot(&snap);
    let ledger = tmp.path().join("apply-ledger.json");
    Some(Fx {
        _tmp: tmp,
        _other: other,
        lower,
        upper,
        ledger,
        before,
        merged,
        stage: Stage {
            changes,
            run_started_at_unix_ms: start,
            ledger: Ledger::default(),
        },
    })
}

impl Fx {
    fn all(&self) -> Vec<usize> {
        (0..self.stage.changes.len())
            .filter(|&i| self.stage.is_remaining(i))
            .collect()
    }

    fn index(&self, path: &[u8]) -> usize {
        self.stage
            .changes
            .iter()
            .position(|c| c.path == path)
            .unwrap_or_else(|| panic!("no change {}", String::from_utf8_lossy(path)))
    }

    fn check(&self, sel: &[usize], opts: &Options) -> Checked {
        check(&self.lower, &self.upper, &self.stage, sel, opts).unwrap()
    }

    fn apply(&mut self, sel: &[usize], opts: &Options) -> Report {
        let c = self.check(sel, opts);
        assert!(
            !c.refused(),
            "conflicts {:?} refusals {:?}",
            c.conflicts,
            c.refusals
        );
        execute(
            &self.lower,
            &self.upper,
            &self.ledger,
            &mut self.stage,
            &c,
            &mut |_| {},
        )
        .unwrap()
    }

    /// The remaining plus pending selection after a recovery, through the real selector.
    fn remaining_selection(&self) -> Vec<usize> {
        let nodes = self.stage.nodes();
        crate::select::select(&nodes, &[], &[], &BTreeSet::new())
            .unwrap()
            .indices
    }
}

const SETUP: &str = r#"
echo keep > keep; echo old > mod; echo del > del
mkdir -p deldir/sub op d2f dmode src; echo a > deldir/a; echo b > deldir/sub/b
echo z > op/z; echo y > op/y; echo f2d > f2d; echo q > d2f/q; echo f2l > f2l
echo m > mode; chmod 644 mode; chmod 755 dmode; echo i > dmode/inner; echo lib > src/lib.rs
"#;

const SCRIPT: &str = r#"
echo new > mod
rm del
rm -rf deldir
rm -rf op && mkdir op && echo n > op/n && echo y2 > op/y
rm f2d && mkdir f2d && echo in > f2d/in
rm -rf d2f && echo file > d2f
rm f2l && ln -s /etc/shadow f2l
chmod 755 mode
chmod 700 dmode && echo x > dmode/new
mkdir -p new/deep/er && echo 1 > new/deep/er/f && echo 2 > new/a.txt && ln -s ../keep new/link
printf nl > "$(printf 'line\nbreak')"
echo dash > ./-rf
printf b > "$(printf 'bad\377')"
echo s > suid && chmod 4755 suid
mkfifo fifo
echo lib2 >> src/lib.rs
"#;

#[test]
fn applying_everything_makes_the_lower_equal_the_merged_view() {
    let Some(mut fx) = overlay(SETUP, SCRIPT) else {
        return;
    };
    let kinds: BTreeMap<String, ChangeKind> = fx
        .stage
        .changes
        .iter()
        .map(|c| (c.display.clone(), c.kind))
        .collect();
    assert_eq!(kinds["op"], ChangeKind::Opaque);
    assert_eq!(kinds["deldir"], ChangeKind::Deleted);
    assert_eq!(kinds["f2d"], ChangeKind::TypeChanged);
    assert_eq!(kinds["dmode"], ChangeKind::Modified);

    // Without --allow-special the fifo is refused, and nothing is written.
    let c = fx.check(&fx.all(), &Options::default());
    assert_eq!(c.refusals.len(), 1);
    assert_eq!(c.refusals[0].what, "fifo");
    assert!(c.conflicts.is_empty(), "{:?}", c.conflicts);
    assert_eq!(c.stripped.len(), 1);
    assert_eq!((c.stripped[0].from, c.stripped[0].to), (0o4755, 0o755));
    assert_eq!(snapshot(&fx.lower), fx.before);

    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    let report = fx.apply(&fx.all(), &opts);
    assert_eq!(report.applied.len(), fx.stage.changes.len());
    assert_eq!(snapshot(&fx.lower), fx.merged);
    assert!(fx.stage.ledger.batch.is_none());
    assert_eq!(fx.stage.remaining().count(), 0);
    assert_eq!(Ledger::load(&fx.ledger).unwrap(), fx.stage.ledger);
    let shadow = std::fs::read_link(fx.lower.join("f2l")).unwrap();
    assert_eq!(shadow, Path::new("/etc/shadow"));
}

#[test]
fn across_filesystems_staged_files_are_copied() {
    if !Path::new("/dev/shm").is_dir() {
        cofferdam_testkit::skip_host("no /dev/shm to put the workdir on another filesystem");
        return;
    }
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    let Some(mut fx) = overlay_on(Some(Path::new("/dev/shm")), SETUP, SCRIPT) else {
        return;
    };
    let staged_mod = std::fs::metadata(fx.upper.join("mod")).unwrap();
    fx.apply(&fx.all(), &opts);
    assert_eq!(snapshot(&fx.lower), fx.merged);
    let applied = std::fs::metadata(fx.lower.join("mod")).unwrap();
    assert_ne!(applied.dev(), staged_mod.dev());
    // And a crash in the middle of a copied batch is finished the same way.
    for at in [Step::Prepared(3), Step::Committed(4)] {
        let Some(mut fx) = overlay_on(Some(Path::new("/dev/shm")), SETUP, SCRIPT) else {
            return;
        };
        crash_at(&mut fx, at, &opts);
        wholly_old_or_new(&fx);
        recover(&fx.lower, &fx.ledger, &mut fx.stage.ledger)
            .unwrap()
            .unwrap();
        wholly_old_or_new(&fx);
        let rest = fx.remaining_selection();
        fx.apply(&rest, &opts);
        assert_eq!(
            snapshot(&fx.lower),
            fx.merged,
            "not finished after a crash at {at:?}"
        );
    }
}

#[test]
fn a_privileged_overlay_with_trusted_xattrs_is_read_the_same() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIP-PRIV a privileged overlay (trusted.overlay.opaque) needs root");
        return;
    }
    let Some(mut fx) = overlay_with(Mount::Privileged, None, SETUP, SCRIPT) else {
        return;
    };
    let mut buf = [0u8; 4];
    let n =
        rustix::fs::getxattr(fx.upper.join("op"), "trusted.overlay.opaque", &mut buf[..]).unwrap();
    assert_eq!(&buf[..n], b"y");
    let op = fx.index(b"op");
    assert_eq!(fx.stage.changes[op].kind, ChangeKind::Opaque);
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    fx.apply(&fx.all(), &opts);
    assert_eq!(snapshot(&fx.lower), fx.merged);
}

#[test]
fn on_one_filesystem_staged_files_are_linked() {
    let Some(mut fx) = overlay(SETUP, SCRIPT) else {
        return;
    };
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    fx.apply(&fx.all(), &opts);
    let staged = std::fs::metadata(fx.upper.join("mod")).unwrap();
    let applied = std::fs::metadata(fx.lower.join("mod")).unwrap();
    assert_eq!((applied.dev(), applied.ino()), (staged.dev(), staged.ino()));
    // The setuid file is copied (its bits are dropped), the stage keeps its own.
    let staged = std::fs::metadata(fx.upper.join("suid")).unwrap();
    let applied = std::fs::metadata(fx.lower.join("suid")).unwrap();
    assert_ne!(applied.ino(), staged.ino());
    assert_eq!(staged.mode() & 0o7777, 0o4755);
    assert_eq!(applied.mode() & 0o7777, 0o755);
}

#[test]
fn a_subset_then_the_rest() {
    let Some(mut fx) = overlay(SETUP, SCRIPT) else {
        return;
    };
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    // dmode/new brings its parent's mode change.
    let sel = vec![fx.index(b"dmode"), fx.index(b"dmode/new")];
    fx.apply(&sel, &opts);
    let now = snapshot(&fx.lower);
    assert_eq!(
        now[&b"dmode/new".to_vec()],
        fx.merged[&b"dmode/new".to_vec()]
    );
    assert_eq!(now[&b"dmode".to_vec()].1, 0o700);
    assert_eq!(now[&b"mod".to_vec()], fx.before[&b"mod".to_vec()]);
    // The rest, checked again after our own writes: no conflict from them.
    let rest = fx.all();
    assert_eq!(rest.len(), fx.stage.changes.len() - 2);
    fx.apply(&rest, &opts);
    assert_eq!(snapshot(&fx.lower), fx.merged);
}

#[test]
fn host_edits_conflict_and_force_overrides() {
    let Some(mut fx) = overlay(SETUP, SCRIPT) else {
        return;
    };
    std::thread::sleep(std::time::Duration::from_millis(30));
    std::fs::write(fx.lower.join("mod"), "mine\n").unwrap();
    std::fs::write(fx.lower.join("deldir/sub/b"), "deep edit\n").unwrap();
    std::fs::write(fx.lower.join("new"), "user made this\n").unwrap();
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    let c = fx.check(&fx.all(), &opts);
    let reasons: BTreeMap<String, &'static str> = c
        .conflicts
        .iter()
        .map(|c| (c.display.clone(), c.reason.code()))
        .collect();
    assert_eq!(reasons.get("mod"), Some(&"content_changed"), "{reasons:?}");
    assert_eq!(
        reasons.get("deldir"),
        Some(&"subtree_changed"),
        "{reasons:?}"
    );
    assert_eq!(reasons.get("new"), Some(&"created"), "{reasons:?}");
    assert!(c.refused());
    // Touched without a content change: still a conflict (ctime after the run's start).
    let before = std::fs::read(fx.lower.join("keep")).unwrap();
    std::fs::write(fx.lower.join("src/lib.rs"), "lib\n").unwrap();
    let c = fx.check(&[fx.index(b"src/lib.rs")], &opts);
    assert_eq!(c.conflicts[0].reason.code(), "changed_after_run_start");
    assert_eq!(std::fs::read(fx.lower.join("keep")).unwrap(), before);

    // --force names paths; only those are overridden.
    let forced = Options {
        allow_special: true,
        force: vec![b"mod".to_vec(), b"deldir".to_vec()],
        ..Options::default()
    };
    let c = fx.check(&fx.all(), &forced);
    assert_eq!(c.forced.len(), 2);
    assert!(
        c.conflicts.iter().all(|c| c.display == "new"
            || c.display.starts_with("new/")
            || c.display == "src/lib.rs"),
        "{:?}",
        c.conflicts
    );
    let sel = vec![fx.index(b"mod"), fx.index(b"deldir")];
    let c = fx.check(&sel, &forced);
    assert!(!c.refused());
    execute(
        &fx.lower,
        &fx.upper,
        &fx.ledger,
        &mut fx.stage,
        &c,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(std::fs::read(fx.lower.join("mod")).unwrap(), b"new\n");
    assert!(!fx.lower.join("deldir").exists());
}

#[test]
fn a_symlinked_directory_is_never_written_through() {
    let Some(fx) = overlay(SETUP, SCRIPT) else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    std::fs::rename(fx.lower.join("src"), outside.path().join("src")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("src"), fx.lower.join("src")).unwrap();
    let force = Options {
        allow_special: true,
        force: vec![Vec::new()],
        ..Options::default()
    };
    let c = fx.check(&[fx.index(b"src/lib.rs")], &force);
    assert_eq!(c.conflicts.len(), 1);
    assert_eq!(c.conflicts[0].reason.code(), "through_symlink");
    assert!(!c.conflicts[0].forceable);
    assert_eq!(
        std::fs::read(outside.path().join("src/lib.rs")).unwrap(),
        b"lib\n"
    );
}

/// Crash (a panic in the hook: nothing is cleaned up, as with SIGKILL) at `at`.
fn crash_at(fx: &mut Fx, at: Step, opts: &Options) {
    let sel = fx.all();
    let c = fx.check(&sel, opts);
    assert!(!c.refused());
    let (lower, upper, ledger) = (fx.lower.clone(), fx.upper.clone(), fx.ledger.clone());
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        execute(&lower, &upper, &ledger, &mut fx.stage, &c, &mut |s| {
            if s == at {
                // A panic without the panic hook: nothing printed, nothing cleaned up.
                std::panic::resume_unwind(Box::new(format!("simulated crash at {s:?}")));
            }
        })
    }));
    assert!(r.is_err(), "no crash at {at:?}");
    // A new process: the ledger as on disk.
    fx.stage.ledger = Ledger::load(&fx.ledger).unwrap();
}

/// Every path is old or new, and the replaced-whole directory is wholly one or the other.
fn wholly_old_or_new(fx: &Fx) {
    let now = snapshot(&fx.lower);
    let keys: BTreeSet<&Vec<u8>> = fx.before.keys().chain(fx.merged.keys()).collect();
    for k in keys {
        let (n, o, m) = (now.get(k), fx.before.get(k), fx.merged.get(k));
        assert!(
            n == o || n == m,
            "{} is torn: {n:?}",
            String::from_utf8_lossy(k)
        );
    }
    for k in now.keys() {
        let hidden =
            k.starts_with(TMP_PREFIX.as_bytes()) || k.windows(12).any(|w| w == b"/.cofferdam-");
        assert!(
            hidden || fx.before.contains_key(k) || fx.merged.contains_key(k),
            "stray {}",
            String::from_utf8_lossy(k)
        );
    }
    let sub = |s: &Snap, d: &[u8]| -> Vec<(Vec<u8>, Entry)> {
        s.iter()
            .filter(|(k, _)| k.starts_with(d) && k.get(d.len()) == Some(&b'/'))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    for d in [&b"op"[..], b"f2d", b"new"] {
        let n = sub(&now, d);
        assert!(
            n == sub(&fx.before, d) || n == sub(&fx.merged, d),
            "{} is mixed",
            String::from_utf8_lossy(d)
        );
    }
}

#[test]
fn a_crash_at_any_step_is_recovered_and_finished() {
    let opts = Options {
        allow_special: true,
        ..Options::default()
    };
    let steps = [
        Step::Prepared(1),
        Step::Prepared(7),
        Step::Committing,
        Step::Committed(1),
        Step::Committed(5),
        Step::Committed(12),
        Step::Synced,
        Step::Cleaned,
    ];
    for at in steps {
        let Some(mut fx) = overlay(SETUP, SCRIPT) else {
            return;
        };
        crash_at(&mut fx, at, &opts);
        wholly_old_or_new(&fx);
        let view = inspect(&fx.lower, &fx.stage.ledger).unwrap().unwrap();
        let r = recover(&fx.lower, &fx.ledger, &mut fx.stage.ledger)
            .unwrap()
            .unwrap();
        assert_eq!(r.batch, view, "inspect and recover disagree at {at:?}");
        wholly_old_or_new(&fx);
        let stray: Vec<_> = snapshot(&fx.lower)
            .into_keys()
            .filter(|k| k.windows(11).any(|w| w == b".cofferdam-"))
            .collect();
        assert!(
            stray.is_empty(),
            "leftovers after recovery at {at:?}: {stray:?}"
        );
        if matches!(at, Step::Prepared(_)) {
            assert!(r.written().is_empty());
            assert_eq!(snapshot(&fx.lower), fx.before);
        }
        if at == Step::Cleaned {
            assert!(r.not_written.is_empty());
        }
        let pending: BTreeSet<Vec<u8>> = fx
            .stage
            .ledger
            .pending
            .iter()
            .map(|p| p.0.clone())
            .collect();
        assert_eq!(pending.len(), r.not_written.len());
        // Finish: the pending paths pass a fresh check (our own ctimes are accepted).
        let rest = fx.remaining_selection();
        if !rest.is_empty() {
            fx.apply(&rest, &opts);
        }
        assert_eq!(
            snapshot(&fx.lower),
            fx.merged,
            "not finished after a crash at {at:?}"
        );
        assert!(fx.stage.ledger.pending.is_empty());
    }
}

#[test]
fn an_exchange_cut_between_its_two_renames_is_put_back() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = tmp.path().join("w");
    std::fs::create_dir_all(lower.join("d")).unwrap();
    std::fs::write(lower.join("d/old"), b"o").unwrap();
    std::fs::create_dir(lower.join(".cofferdam-b-0")).unwrap();
    // The fallback was cut after `d` went to the trash name.
    std::fs::rename(lower.join("d"), lower.join(".cofferdam-b-0-old")).unwrap();
    let new_id = {
        let m = std::fs::metadata(lower.join(".cofferdam-b-0")).unwrap();
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    };
    let mut ledger = Ledger {
        batch: Some(Batch {
            id: "b".into(),
            phase: Phase::Committing,
            started_at_unix_ms: 0,
            ops: vec![LedgerOp {
                path: RelPath(b"d".to_vec()),
                action: Action::Exchange,
                tmp: Some(RelPath(b".cofferdam-b-0".to_vec())),
                trash: Some(RelPath(b".cofferdam-b-0-old".to_vec())),
                new_id: Some(new_id),
                old_id: None,
                mode: None,
                covers: vec![RelPath(b"d".to_vec())],
                partial: None,
            }],
        }),
        ..Ledger::default()
    };
    let lp = tmp.path().join("ledger.json");
    let r = recover(&lower, &lp, &mut ledger).unwrap().unwrap();
    assert_eq!(r.restored, vec![b"d".to_vec()]);
    assert_eq!(std::fs::read(lower.join("d/old")).unwrap(), b"o");
    assert_eq!(std::fs::read_dir(&lower).unwrap().count(), 1);
    assert!(ledger.pending.contains(&RelPath(b"d".to_vec())));
    assert!(ledger.accepted_ctime(b"d").is_some());
}
