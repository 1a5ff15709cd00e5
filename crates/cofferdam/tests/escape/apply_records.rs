//! Apply and the records (issue 16 §6): what the command stages must reach the host only
//! as the review showed it. A 1 TiB sparse file neither hangs the review nor fills the
//! host's disk when applied; a hard-linked apply carries none of the command's extended
//! attributes (a `user.*` name, a file capability); a staged file's mode (0777, setuid) is
//! in every review before apply; and a stage the command made unreadable (`chmod 0`,
//! nested) still seals, reviews, applies and drops for the job's own user.

use crate::harness::{Attack, BOTH_MUST, Boundary::Records, Ctx, Outcome, Run, both, check};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "rec.apply-sparse-tebibyte",
        boundary: Records,
        description: "stage 1 TiB sparse files (one setuid, so apply copies it): review, diff and apply must not hang or allocate it",
        on: BOTH_MUST,
        probe: sparse_tebibyte,
    },
    Attack {
        id: "rec.apply-xattrs",
        boundary: Records,
        description: "set user.* xattrs and a file capability on staged files apply hard-links (plain, created setuid/setgid)",
        on: BOTH_MUST,
        probe: apply_xattrs,
    },
    Attack {
        id: "rec.review-hidden-modes",
        boundary: Records,
        description: "stage a 0777 file, a 0777 directory, a setuid file and a 0755 one: every review must show them",
        on: BOTH_MUST,
        probe: hidden_modes,
    },
    Attack {
        id: "rec.stage-chmod-0",
        boundary: Records,
        description: "chmod 0 staged directories and files (nested, and a host directory) so the job cannot be sealed, reviewed, applied or dropped",
        on: BOTH_MUST,
        probe: chmod_zero,
    },
];

/// A tebibyte.
const TIB: u64 = 1 << 40;

/// `cofferdam <args>` in the context, killed after `secs`; `None` when it had to be.
fn timed(ctx: &Ctx, args: &[&str], secs: u64) -> Option<Output> {
    let mut child = ctx
        .cmd()
        .args(["--color", "never"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Run `args` with a deadline, asserting success; the text printed.
fn ok(ctx: &Ctx, args: &[&str], secs: u64) -> Result<String, String> {
    match timed(ctx, args, secs) {
        None => Err(format!("`{}` still running after {secs} s", args.join(" "))),
        Some(out) if !out.status.success() => {
            Err(format!("`{}` failed: {}", args.join(" "), both(&out)))
        }
        Some(out) => Ok(both(&out)),
    }
}

/// The run's change of `path`.
fn change<'a>(r: &'a Run, path: &str) -> Option<&'a serde_json::Value> {
    r.bundle["filesystem"]["changes"]
        .as_array()?
        .iter()
        .find(|c| c["path"] == path)
}

fn sparse_tebibyte(ctx: &Ctx) -> Outcome {
    // Staged: a new sparse file (linked when the filesystems allow), a setuid one (copied:
    // its bit is dropped) and a host file grown to 1 TiB (modified: hashed by the seal).
    // A host file that is itself 1 TiB sparse, which the command edits (the scoped tier's
    // copy of the workdir must keep it sparse too).
    ctx.put(&ctx.work().join("grown"), "host\n");
    let host = std::fs::File::create(ctx.work().join("hostsparse")).unwrap();
    host.set_len(TIB).unwrap();
    drop(host);
    let r = ctx.sh(
        "truncate -s 1T big && printf data | dd of=big bs=1 seek=4096 conv=notrunc 2>/dev/null \
         && printf edit | dd of=hostsparse bs=1 seek=8192 conv=notrunc 2>/dev/null \
         && truncate -s 1T suid && truncate -s 1T grown && echo staged=yes; \
         chmod 4755 suid 2>/dev/null; true",
    );
    ctx.assert_boundary(&r);
    if r.value("staged") != Some("yes") {
        return Outcome::Skipped(format!("the command could not make the files: {}", r.err));
    }
    assert_eq!(r.bundle["run"]["state"], "completed", "{}", r.bundle["run"]);
    for p in ["big", "suid", "grown", "hostsparse"] {
        let c = change(&r, p).unwrap_or_else(|| panic!("no change {p}: {:?}", r.changes()));
        assert_eq!(c["size_bytes"], TIB, "{c}");
    }
    for args in [
        &["status", "--review", &r.job][..],
        &["diff", &r.job][..],
        &["diff", &r.job, "--stat"][..],
        &["diff", &r.job, "--json"][..],
    ] {
        if let Err(e) = ok(ctx, args, 60) {
            return Outcome::Escaped(e);
        }
    }
    if let Err(e) = ok(ctx, &["apply", &r.job, "--allow-sensitive"], 120) {
        return Outcome::Escaped(e);
    }
    let mut found = Vec::new();
    let mut fine = true;
    for p in ["big", "suid", "grown", "hostsparse"] {
        let m = std::fs::metadata(ctx.work().join(p)).unwrap();
        let allocated = m.blocks() * 512;
        found.push(format!("{p}: {} bytes, {allocated} allocated", m.len()));
        fine &= m.len() == TIB && allocated < 1 << 20;
    }
    let suid = std::fs::metadata(ctx.work().join("suid")).unwrap();
    fine &= suid.permissions().mode() & 0o6000 == 0;
    let read = |p: &str, at: u64| {
        let mut data = vec![0u8; 4];
        let f = std::fs::File::open(ctx.work().join(p)).unwrap();
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut data, at).unwrap();
        data
    };
    fine &= read("big", 4096) == b"data" && read("hostsparse", 8192) == b"edit";
    check(
        fine,
        format!(
            "review, diff and apply finished at once; applied sparse ({})",
            found.join("; ")
        ),
        format!(
            "apply allocated a sparse file or lost its data: {}",
            found.join("; ")
        ),
    )
}

/// The names of every extended attribute of `p` (not following a symlink).
fn xattrs(p: &Path) -> Vec<String> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid C string and a buffer of the length given.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let Ok(n) = usize::try_from(n) else {
        return Vec::new();
    };
    buf[..n]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Sets, on each of `linked` (a plain file: apply links it where it can), `copied` and
/// `sgid` (created setuid, setgid: copied when the bits survive creation), two `user.*` names and a file capability (cap_net_raw,
/// effective; refused without CAP_SETFCAP), printing what it managed.
const SET_XATTRS: &str = r#"
import os, struct
for name, mode in (('linked', 0o644), ('copied', 0o4755), ('sgid', 0o2755)):
    os.umask(0)
    try:
        fd = os.open(name, os.O_CREAT | os.O_WRONLY, mode)
    except OSError as e:
        print('refused=%s:mode:%d' % (name, e.errno))
        fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b'x\n'); os.close(fd)
    for k, v in (('user.cofferdam-evil', b'1'), ('user.mime_type', b'text/x-evil')):
        try:
            os.setxattr(name, k, v); print('set=%s:%s' % (name, k))
        except OSError as e:
            print('refused=%s:%s:%d' % (name, k, e.errno))
    try:
        os.setxattr(name, 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 13, 0, 0, 0))
        print('set=%s:security.capability' % name)
    except OSError as e:
        print('refused=%s:security.capability:%d' % (name, e.errno))
"#;

fn apply_xattrs(ctx: &Ctx) -> Outcome {
    let r = ctx.py(SET_XATTRS);
    ctx.assert_boundary(&r);
    let set: Vec<&str> = r
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("set="))
        .collect();
    // Three files, three names each: every attempt prints a line (the scoped tier's seccomp
    // filter refuses them all, with nothing then to carry; apply is still checked).
    let tries = r
        .lines()
        .iter()
        .filter(|l| (l.starts_with("set=") || l.starts_with("refused=")) && !l.contains(":mode:"))
        .count();
    assert!(r.code == Some(0) && tries == 9, "{:?} {}", r.lines(), r.err);
    if let Err(e) = ok(ctx, &["apply", &r.job, "--allow-sensitive"], 60) {
        return Outcome::Escaped(e);
    }
    let mut carried = Vec::new();
    for p in ["linked", "copied", "sgid"] {
        let path = ctx.work().join(p);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n");
        let m = std::fs::metadata(&path).unwrap();
        if m.permissions().mode() & 0o6000 != 0 {
            carried.push(format!("{p}: mode {:o}", m.permissions().mode()));
        }
        for x in xattrs(&path) {
            carried.push(format!("{p}: {x}"));
        }
    }
    check(
        carried.is_empty(),
        format!(
            "the workdir's files carry no xattr the command set ({} of 9 set in the stage) and no setuid/setgid",
            set.len()
        ),
        format!("apply carried {carried:?}"),
    )
}

fn hidden_modes(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.work().join("host.sh"), "echo\n");
    // Modes given at creation (the scoped tier's seccomp filter refuses chmod), and a chmod
    // of a host file where the tier allows it.
    let r = ctx.py(
        "import os\nos.umask(0)\nfor n, m in (('open', 0o777), ('tool', 0o755), ('su', 0o4755)):\n    \
         fd = os.open(n, os.O_CREAT | os.O_WRONLY, m); os.write(fd, b'x\\n'); os.close(fd)\n\
         os.mkdir('pub', 0o777)\ntry:\n    os.chmod('host.sh', 0o777); print('chmod=yes')\n\
         except OSError:\n    print('chmod=no')\n",
    );
    ctx.assert_boundary(&r);
    // Every human view names each path with its mode on one line; the JSON has it too.
    let mut want: Vec<(&str, &str)> = vec![("open", "0777"), ("tool", "0755"), ("pub", "0777")];
    for (p, m) in [("su", "4755"), ("host.sh", "0777")] {
        let staged = change(&r, p).is_some_and(|c| c["mode"] == u32::from_str_radix(m, 8).unwrap());
        if staged || p == "host.sh" && r.value("chmod") == Some("yes") {
            want.push((p, m));
        }
    }
    let flags_needed = want.iter().any(|(p, _)| *p == "su");
    let mut hidden = Vec::new();
    for args in [
        &["status", "--review", &r.job][..],
        &["diff", &r.job][..],
        &["diff", &r.job, "--stat"][..],
        &["apply", &r.job, "--dry-run", "--allow-sensitive"][..],
    ] {
        let text = match ok(ctx, args, 60) {
            Ok(t) => t,
            Err(e) => return Outcome::Escaped(e),
        };
        for (path, mode) in &want {
            let shown = if args[0] == "diff" && args.len() == 2 {
                // `diff`: the mode is under the path's heading.
                text.split(&format!("diff {path} ("))
                    .nth(1)
                    .and_then(|rest| rest.split("\ndiff ").next())
                    .is_some_and(|block| block.contains(mode))
            } else {
                text.lines()
                    .any(|l| l.split_whitespace().any(|w| w == *path) && l.contains(mode))
            };
            if !shown {
                hidden.push(format!("{}: {path} {mode}", args.join(" ")));
            }
        }
        if !(text.contains("world-writable") && (text.contains("setuid") || !flags_needed)) {
            hidden.push(format!("{}: the flags", args.join(" ")));
        }
    }
    let json = match ok(ctx, &["diff", &r.job, "--json"], 60) {
        Ok(t) => serde_json::from_str::<serde_json::Value>(&t).unwrap(),
        Err(e) => return Outcome::Escaped(e),
    };
    for (path, mode) in &want {
        let c = json["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == *path);
        if c.is_none_or(|c| c["mode"] != *mode) {
            hidden.push(format!("diff --json: {path} {mode}"));
        }
        let b = change(&r, path);
        let m = u32::from_str_radix(mode, 8).unwrap();
        if b.is_none_or(|b| b["mode"] != m) {
            hidden.push(format!("bundle: {path} {mode}"));
        }
    }
    check(
        hidden.is_empty(),
        "status --review, diff, diff --stat, apply --dry-run, diff --json and the bundle show every staged mode, flags named",
        format!("modes not shown: {hidden:?}"),
    )
}

/// Make `p` and everything below it owner-accessible (to read back what apply wrote).
fn open_up(p: &Path) {
    let m = std::fs::symlink_metadata(p).unwrap();
    if m.is_dir() {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).unwrap();
        for e in std::fs::read_dir(p).unwrap() {
            open_up(&e.unwrap().path());
        }
    } else if m.is_file() {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// `rel=mode` (octal) of each of `rels` below `root`.
fn modes(root: &Path, rels: &[&str]) -> Vec<String> {
    rels.iter()
        .map(|r| {
            let m = std::fs::symlink_metadata(root.join(r)).unwrap();
            format!("{r}={:o}", m.permissions().mode() & 0o7777)
        })
        .collect()
}

/// Nested directories the owner cannot list (made 0300 and filled, then chmod 0 where the
/// tier allows: the scoped tier's seccomp filter refuses chmod, not a creation mode), files
/// and an empty directory created with mode 0, a host directory chmod 0'ed where allowed;
/// then every entry's mode as the command sees it (`mode=<path>:<octal>`).
const LOCK: &str = "import os
os.umask(0)
def put(p, text, mode):
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, mode); os.write(fd, text); os.close(fd)
for d in ('a', 'a/b', 'a/b/c'):
    os.mkdir(d, 0o300)
put('a/b/c/f', b'deep\\n', 0); put('a/b/g', b'mid\\n', 0o644); put('old/NAME', b'n\\n', 0o644)
put('secret', b's\\n', 0); os.mkdir('z', 0)
modes = {p: os.lstat(p).st_mode & 0o7777 for p in
         ('a', 'a/b', 'a/b/c', 'a/b/c/f', 'a/b/g', 'old', 'old/NAME', 'secret', 'z')}
for d in ('a/b/c', 'a/b', 'a', 'old'):
    try:
        os.chmod(d, 0); modes[d] = 0
    except OSError:
        pass
for p, m in modes.items():
    print('mode=%s:%o' % (p, m))
";

/// The `mode=` lines of a run: path → mode.
fn printed_modes(r: &Run) -> Vec<(String, u32)> {
    r.lines()
        .iter()
        .filter_map(|l| l.strip_prefix("mode="))
        .filter_map(|l| {
            let (p, m) = l.split_once(':')?;
            Some((p.to_owned(), u32::from_str_radix(m, 8).ok()?))
        })
        .collect()
}

fn chmod_zero(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.work().join("old/o"), "o\n");
    let r = ctx.py(&LOCK.replace("NAME", "n"));
    ctx.assert_boundary(&r);
    let mut failed = Vec::new();
    if r.bundle["run"]["state"] != "completed" || r.code != Some(0) {
        failed.push(format!("run: exit {:?}, {}", r.code, r.bundle["run"]));
    }
    let printed = printed_modes(&r);
    assert_eq!(printed.len(), 9, "{:?} {}", r.lines(), r.err);
    let old_locked = printed.iter().any(|(p, m)| p == "old" && *m == 0);
    // Each staged entry is recorded with the command's mode ("old" only when its mode
    // changed: otherwise it is no change, only its new entry is).
    for (p, m) in &printed {
        if p == "old" && !old_locked {
            continue;
        }
        if change(&r, p).is_none_or(|c| c["mode"] != *m) {
            failed.push(format!("recorded {p} {m:o}: {:?}", change(&r, p)));
        }
    }
    // A second, identical job, dropped unapplied: its stage is removed.
    let second = ctx.py(&LOCK.replace("NAME", "m"));
    if let Err(e) = ok(ctx, &["drop", &second.job], 60) {
        failed.push(e);
    }
    let upper = second.bundle_path.with_file_name("upper");
    if upper.symlink_metadata().is_ok() {
        failed.push(format!("drop left {}", upper.display()));
    }
    match ok(ctx, &["apply", &r.job], 60) {
        Err(e) => failed.push(e),
        Ok(_) => {
            // The staged modes of the top-level entries, read before opening the tree up.
            let outer = modes(&ctx.work(), &["a", "old", "secret", "z"]);
            let want: Vec<String> = ["a", "old", "secret", "z"]
                .iter()
                .map(|p| {
                    let m = printed.iter().find(|(q, _)| q == p).map_or(0, |(_, m)| *m);
                    format!("{p}={m:o}")
                })
                .collect();
            if outer != want {
                failed.push(format!("applied modes {outer:?}, staged {want:?}"));
            }
            open_up(&ctx.work());
            for (p, text) in [
                ("a/b/c/f", "deep\n"),
                ("a/b/g", "mid\n"),
                ("old/n", "n\n"),
                ("old/o", "o\n"),
                ("secret", "s\n"),
            ] {
                if std::fs::read_to_string(ctx.work().join(p)).ok().as_deref() != Some(text) {
                    failed.push(format!("applied {p} wrong"));
                }
            }
        }
    }
    // Whatever is left (a failed apply or drop) must not outlive the test.
    open_up(&ctx.base());
    check(
        failed.is_empty(),
        "the bundle records the 000 modes; review, diff, apply and drop all work; the workdir gets the content, then the staged modes",
        format!("{failed:?}"),
    )
}
