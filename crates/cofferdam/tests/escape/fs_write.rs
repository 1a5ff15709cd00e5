//! Filesystem write: nothing the command does reaches a host file outside the stage.

use crate::harness::{
    ALL_THREE, Attack, BOTH_MUST, Boundary::FsWrite, Ctx, Outcome, SEALED_MUST, check, exists,
};
use std::os::unix::fs::PermissionsExt;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fw.absolute-outside",
        boundary: FsWrite,
        description: "write a host directory outside the workdir by absolute path",
        on: ALL_THREE,
        probe: absolute_outside,
    },
    Attack {
        id: "fw.usr",
        boundary: FsWrite,
        description: "create, append, rename and delete in a directory under /usr (the harness's canary)",
        on: BOTH_MUST,
        probe: usr,
    },
    Attack {
        id: "fw.etc-passwd",
        boundary: FsWrite,
        description: "append a passwd line to a root-owned file in /etc and delete it (the harness's canary, not /etc/passwd)",
        on: BOTH_MUST,
        probe: etc_passwd,
    },
    Attack {
        id: "fw.symlink-out",
        boundary: FsWrite,
        description: "write through a symlink in the workdir that points outside",
        on: BOTH_MUST,
        probe: symlink_out,
    },
    Attack {
        id: "fw.proc-self-root",
        boundary: FsWrite,
        description: "write outside through /proc/self/root and /proc/1/root",
        on: BOTH_MUST,
        probe: proc_root,
    },
    Attack {
        id: "fw.dotdot",
        boundary: FsWrite,
        description: "write ../ next to the workdir, also via a cwd fd walk",
        on: BOTH_MUST,
        probe: dotdot,
    },
    Attack {
        id: "fw.hardlink-in-workdir",
        boundary: FsWrite,
        description: "write through a hard link in the workdir to a file outside it",
        on: BOTH_MUST,
        probe: hardlink_in_workdir,
    },
    Attack {
        id: "fw.hardlink-system-file",
        boundary: FsWrite,
        description: "hard-link a root-owned file in /etc (the canary, not /etc/hostname) into the workdir and write the link",
        on: BOTH_MUST,
        probe: hardlink_system_file,
    },
    Attack {
        id: "fw.rename-out",
        boundary: FsWrite,
        description: "move a workdir file out to a host directory or to ..",
        on: BOTH_MUST,
        probe: rename_out,
    },
    Attack {
        id: "fw.job-store",
        boundary: FsWrite,
        description: "write into the job store (the jobs directory, an earlier job's stage)",
        on: ALL_THREE,
        probe: job_store,
    },
    Attack {
        id: "fw.mount-over",
        boundary: FsWrite,
        description: "mount a tmpfs or bind over the workdir, remount / read-only, detach / (a private mount namespace)",
        on: BOTH_MUST,
        probe: mount_over,
    },
    Attack {
        id: "fw.setuid-apply",
        boundary: FsWrite,
        description: "stage a setuid/setgid copy of sh and get it applied with those bits",
        on: BOTH_MUST,
        probe: setuid_apply,
    },
    Attack {
        id: "fw.mknod",
        boundary: FsWrite,
        description: "create a block or character device node",
        on: BOTH_MUST,
        probe: mknod,
    },
    Attack {
        id: "fw.read-only-subtree",
        boundary: FsWrite,
        description: "write, chmod, rename, delete, truncate, link out and write inside a --read-only subtree",
        on: SEALED_MUST,
        probe: read_only_subtree,
    },
    Attack {
        id: "fw.host-tmp-and-home",
        boundary: FsWrite,
        description: "write the host's /tmp, /dev/shm and the caller's home",
        on: ALL_THREE,
        probe: host_tmp_and_home,
    },
    Attack {
        id: "fw.inherited-layer",
        boundary: FsWrite,
        description: "as a fork, change the inherited entries in place (append, truncate, chmod, xattr, times, link, rename, remove) and write the overlay's lower layers by the paths mountinfo names",
        on: SEALED_MUST,
        probe: inherited_layer,
    },
    Attack {
        id: "fw.overlay-xattr",
        boundary: FsWrite,
        description: "forge overlayfs xattrs (redirect/opaque/metacopy/whiteout) to steer the scan",
        on: BOTH_MUST,
        probe: overlay_xattr,
    },
    Attack {
        id: "fw.kernel-knobs",
        boundary: FsWrite,
        description: "open host-wide kernel knobs for writing (core_pattern, binfmt_misc, uevent_helper, modprobe), writing nothing",
        on: BOTH_MUST,
        probe: kernel_knobs,
    },
    Attack {
        id: "fw.lent-read-mount",
        boundary: FsWrite,
        description: "write, delete and chmod in a host directory lent with --mount SRC:TGT:read",
        on: SEALED_MUST,
        probe: lent_read_mount,
    },
    Attack {
        id: "fw.lent-target-through-symlink",
        boundary: FsWrite,
        description: "lend a mount at $WD/link/sub/lent with link -> a host directory, to have the mount point made there",
        on: SEALED_MUST,
        probe: lent_target_through_symlink,
    },
];

fn nonce() -> String {
    format!(
        "cofferdam-escape-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn outside_empty(ctx: &Ctx) -> bool {
    std::fs::read_dir(ctx.outside()).unwrap().count() == 0
}

fn absolute_outside(ctx: &Ctx) -> Outcome {
    let r = ctx.sh(
        "echo pwn > $OUTSIDE/a; mkdir $OUTSIDE/d; touch $OUTSIDE/t; ls $OUTSIDE >/dev/null 2>&1 && echo listed=yes",
    );
    ctx.assert_boundary(&r);
    assert!(r.changes().is_empty(), "{:?}", r.changes());
    check(
        outside_empty(ctx),
        "the outside directory is empty on the host",
        format!(
            "wrote {:?}",
            std::fs::read_dir(ctx.outside()).unwrap().count()
        ),
    )
}

fn usr(ctx: &Ctx) -> Outcome {
    let c = ctx.canaries();
    let r = ctx.sh(
        "echo seen=$(head -c 9 $USR_CANARY/file); echo pwn > $USR_CANARY/new; mkdir $USR_CANARY/d; echo pwn >> $USR_CANARY/file; mv $USR_CANARY/file $USR_CANARY/moved; rm -f $USR_CANARY/file; true",
    );
    ctx.assert_boundary(&r);
    c.assert_seen(&r);
    let changed = c.changed();
    check(
        changed.is_empty(),
        format!("nothing created, changed or removed ({})", c.kind()),
        changed,
    )
}

fn etc_passwd(ctx: &Ctx) -> Outcome {
    let c = ctx.canaries();
    let r = ctx.sh("echo seen=$(head -c 9 $ETC_CANARY); echo 'pwn:x:0:0::/:/bin/sh' >> $ETC_CANARY; echo rc=$?; rm -f $ETC_CANARY");
    ctx.assert_boundary(&r);
    c.assert_seen(&r);
    let changed = c.changed();
    check(
        changed.is_empty() && r.value("rc") != Some("0"),
        format!(
            "the canary is unchanged; the append failed inside ({})",
            c.kind()
        ),
        format!("append exit {:?}; {changed}", r.value("rc")),
    )
}

fn symlink_out(ctx: &Ctx) -> Outcome {
    std::os::unix::fs::symlink(ctx.outside(), ctx.work().join("out-link")).unwrap();
    std::os::unix::fs::symlink(ctx.outside().join("f"), ctx.work().join("file-link")).unwrap();
    let r = ctx.sh("echo pwn > out-link/x; echo pwn > file-link; mkdir out-link/d; true");
    ctx.assert_boundary(&r);
    check(
        outside_empty(ctx),
        "the symlinks' targets stay empty",
        "a write through the symlink landed outside",
    )
}

fn proc_root(ctx: &Ctx) -> Outcome {
    let r = ctx.sh(
        "echo pwn > /proc/self/root$OUTSIDE/a; echo pwn > /proc/1/root$OUTSIDE/b; echo pwn > /proc/$$/cwd/../outside/c; true",
    );
    ctx.assert_boundary(&r);
    check(
        outside_empty(ctx),
        "nothing outside through /proc/*/root or cwd",
        "a write through /proc landed outside",
    )
}

fn dotdot(ctx: &Ctx) -> Outcome {
    let r = ctx.py(r#"
import os
for p in ["../dotdot", "../../dotdot2", "../outside/x"]:
    try:
        open(p, "w").write("pwn")
    except OSError:
        pass
try:
    fd = os.open("..", os.O_RDONLY | os.O_DIRECTORY)
    f = os.open("viafd", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
    os.write(f, b"pwn")
except OSError:
    pass
"#);
    ctx.assert_boundary(&r);
    let base = ctx.base();
    let stray: Vec<String> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !["work", "home", "store", "outside"].contains(&n.as_str()))
        .collect();
    let parent_stray = base
        .parent()
        .map(|p| exists(&p.join("dotdot2")))
        .unwrap_or(false);
    check(
        stray.is_empty() && !parent_stray && outside_empty(ctx),
        "nothing next to or above the workdir",
        format!("created {stray:?} (above: {parent_stray})"),
    )
}

fn hardlink_in_workdir(ctx: &Ctx) -> Outcome {
    let target = ctx.outside().join("target");
    std::fs::write(&target, "host original\n").unwrap();
    if std::fs::hard_link(&target, ctx.work().join("hl")).is_err() {
        return Outcome::Skipped("cannot hard-link across these temp dirs".into());
    }
    // (chmod is refused for root on the scoped tier, inside the copy too.)
    let r = ctx.sh("echo pwn > hl; echo more >> hl; chmod 777 hl 2>/dev/null; true");
    ctx.assert_boundary(&r);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(r.changes(), vec![("hl".into(), "modified".into())]);
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    check(
        std::fs::read_to_string(&target).unwrap() == "host original\n" && mode != 0o777,
        "the linked host file is untouched; the write is staged as `hl modified`",
        "the write reached the hard-linked host file",
    )
}

fn hardlink_system_file(ctx: &Ctx) -> Outcome {
    let c = ctx.canaries();
    let r =
        ctx.sh("echo seen=$(head -c 9 $ETC_CANARY); ln $ETC_CANARY h && echo linked=yes; echo pwn >> h; echo pwn >> $ETC_CANARY; true");
    ctx.assert_boundary(&r);
    c.assert_seen(&r);
    let changed = c.changed();
    check(
        changed.is_empty(),
        format!(
            "the canary is unchanged (link inside: {}; {})",
            r.value("linked").unwrap_or("refused"),
            c.kind()
        ),
        changed,
    )
}

fn rename_out(ctx: &Ctx) -> Outcome {
    std::fs::write(ctx.work().join("mine"), "workdir file\n").unwrap();
    std::fs::create_dir(ctx.work().join("dir")).unwrap();
    let r = ctx.sh("mv mine $OUTSIDE/; mv mine ../; mv dir $OUTSIDE/; mv dir ..; true");
    ctx.assert_boundary(&r);
    let host_ok = std::fs::read_to_string(ctx.work().join("mine")).unwrap() == "workdir file\n"
        && ctx.work().join("dir").is_dir()
        && outside_empty(ctx)
        && !exists(&ctx.base().join("mine"))
        && !exists(&ctx.base().join("dir"));
    check(
        host_ok,
        "the files stay in the host workdir; nothing outside",
        "a rename moved a file out of the workdir on the host",
    )
}

fn job_store(ctx: &Ctx) -> Outcome {
    let first = ctx.sh("echo staged > s");
    let job_dir = first.bundle_path.parent().unwrap().to_path_buf();
    let upper_file = job_dir.join("upper/s");
    let staged_before = std::fs::read(&upper_file).ok();
    let listing_before: Vec<_> = std::fs::read_dir(&job_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    ctx.var("JOB", job_dir.display().to_string());
    let r = ctx.sh(
        "echo visible=$(ls -A $STORE 2>/dev/null | wc -l); echo pwn > $STORE/pwn; mkdir -p $STORE/jobs/run-forged; echo pwn > $JOB/upper/s; echo pwn > $JOB/upper/new; echo pwn > $JOB/pwn; true",
    );
    ctx.assert_boundary(&r);
    let listing_after: Vec<_> = std::fs::read_dir(&job_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let jobs: Vec<String> = std::fs::read_dir(ctx.store().join("jobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let host_ok = !exists(&ctx.store().join("pwn"))
        && !jobs.iter().any(|j| j == "run-forged")
        && std::fs::read(&upper_file).ok() == staged_before
        && !exists(&job_dir.join("upper/new"))
        && listing_before == listing_after;
    check(
        host_ok && r.value("visible") == Some("0"),
        "the store is empty inside and unchanged on the host",
        format!(
            "store changed ({host_ok}) or visible ({:?} entries): jobs {jobs:?}",
            r.value("visible")
        ),
    )
}

fn mount_over(ctx: &Ctx) -> Outcome {
    // Every target is per-mount state (no superblock remount, which namespaces share): on
    // the sealed tier the sandbox's own mount namespace, on a tier without one the private
    // namespace the harness wraps the run in as root.
    ctx.private_mounts();
    let r = ctx.sh(
        "mount -t tmpfs none . && echo m1=yes; mount --bind /tmp . && echo m2=yes; mount -o remount,bind,ro / && echo m3=yes; umount -l / && echo m4=yes; true",
    );
    ctx.assert_boundary(&r);
    let got: Vec<&str> = ["m1", "m2", "m3", "m4"]
        .into_iter()
        .filter(|k| r.value(k).is_some())
        .collect();
    check(
        got.is_empty(),
        "every mount, bind, remount and umount refused",
        format!("succeeded: {got:?}"),
    )
}

fn setuid_apply(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("cp /bin/sh ./rootsh && chmod 6755 ./rootsh && stat -c mode=%a ./rootsh");
    ctx.assert_boundary(&r);
    assert_eq!(r.changes(), vec![("rootsh".into(), "added".into())]);
    // (A new executable is held by a bare apply: `sensitive.rs`.)
    let out = ctx
        .cmd()
        .args(["apply", &r.job, "--allow-sensitive"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mode = std::fs::metadata(ctx.work().join("rootsh"))
        .unwrap()
        .permissions()
        .mode();
    check(
        mode & 0o6000 == 0,
        format!(
            "staged with mode {} inside; applied as {:o}",
            r.value("mode").unwrap_or("?"),
            mode & 0o7777
        ),
        format!("applied with setuid/setgid: {:o}", mode & 0o7777),
    )
}

fn mknod(ctx: &Ctx) -> Outcome {
    let r = ctx.sh("mknod ./mem c 1 1 && echo made=c; mknod ./sda b 8 0 && echo made=b; mkfifo ./fifo && echo fifo=yes; true");
    ctx.assert_boundary(&r);
    let devs = ["mem", "sda"]
        .iter()
        .filter(|n| exists(&ctx.work().join(n)))
        .count();
    let staged: Vec<(String, String)> = r
        .changes()
        .into_iter()
        .filter(|(p, _)| p != "fifo")
        .collect();
    check(
        r.value("made").is_none() && devs == 0 && staged.is_empty(),
        "no device node made or staged (a fifo is allowed)",
        format!("device node: {staged:?}"),
    )
}

fn read_only_subtree(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.work().join("locked/file"), "original\n");
    let r = ctx.run(
        &["--read-only", "locked"],
        &[
            "sh",
            "-c",
            "echo pwn > locked/file && echo w=1; chmod 777 locked/file && echo c=1; mv locked/file locked/moved && echo m=1; rm -f locked/file && echo d=1; touch locked/new && echo n=1; truncate -s 0 locked/file && echo t=1; ln -s /etc/passwd locked/sym && echo s=1; mkfifo locked/ff && echo f=1; ln locked/file hl && echo pwn > hl && echo h=1; true",
        ],
    );
    ctx.assert_boundary(&r);
    let through: Vec<&str> = ["w", "c", "m", "d", "n", "t", "s", "f", "h"]
        .into_iter()
        .filter(|k| r.value(k).is_some())
        .collect();
    check(
        through.is_empty() && r.changes().is_empty(),
        "every change inside the read-only subtree refused; nothing staged",
        format!(
            "allowed inside the read-only subtree: {through:?} {:?}",
            r.changes()
        ),
    )
}

fn host_tmp_and_home(ctx: &Ctx) -> Outcome {
    let n = nonce();
    ctx.var("N", &n);
    let r = ctx.sh("echo pwn > /tmp/$N; echo pwn > /dev/shm/$N; echo pwn > $HOSTHOME/$N; echo pwn > ~/$N; true");
    ctx.assert_boundary(&r);
    let hit: Vec<String> = [
        format!("/tmp/{n}"),
        format!("/dev/shm/{n}"),
        ctx.home().join(&n).display().to_string(),
    ]
    .into_iter()
    .filter(|p| exists(std::path::Path::new(p)))
    .collect();
    for p in &hit {
        let _ = std::fs::remove_file(p);
    }
    check(
        hit.is_empty(),
        "the sandbox's /tmp and home are private",
        format!("reached the host: {hit:?}"),
    )
}

/// The extended attribute names of `path` on the host (not following a symlink).
fn xattrs(path: &std::path::Path) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(' '.join(sorted(os.listxattr(sys.argv[1], follow_symlinks=False))))",
        ])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn overlay_xattr(ctx: &Ctx) -> Outcome {
    std::fs::create_dir(ctx.work().join("d")).unwrap();
    std::fs::write(ctx.work().join("d/f"), "x").unwrap();
    std::fs::write(ctx.work().join("g"), "g").unwrap();
    std::fs::write(ctx.work().join("w"), "host content").unwrap();
    let r = ctx.py(r#"
import os
ok = []
open("w", "w").close()
for name, path, value in [("user.overlay.whiteout", "w", b"y"),
                          ("user.overlay.redirect", "g", b"/etc/passwd"),
                          ("user.overlay.opaque", "d", b"y"),
                          ("user.overlay.metacopy", "g", b""),
                          ("trusted.overlay.opaque", "d", b"y"),
                          ("trusted.overlay.redirect", "g", b"/etc/shadow")]:
    try:
        os.setxattr(path, name, value)
        ok.append(name)
    except OSError:
        pass
print("set=" + ",".join(ok))
"#);
    ctx.assert_boundary(&r);
    // The kernel either refuses overlay's private names or stores them escaped
    // (`user.overlay.overlay.*`, Linux 6.7+), which neither overlayfs nor the stage scan
    // interprets. Either way no unescaped forged name may sit in the upper directory, the
    // scan must not see `d` as opaque (d/f deleted), and apply must leave d/f alone.
    let upper = r.bundle_path.parent().unwrap().join("upper");
    let mut forged = Vec::new();
    for n in ["g", "d", "w"] {
        let names = xattrs(&upper.join(n));
        for x in names.split(' ') {
            if ["redirect", "opaque", "metacopy", "whiteout"]
                .iter()
                .any(|k| x == format!("user.overlay.{k}") || x == format!("trusted.overlay.{k}"))
            {
                forged.push(format!("{n}:{x}"));
            }
        }
    }
    let changes = r.changes();
    let out = ctx.cmd().args(["apply", &r.job]).output().unwrap();
    let applied_ok = out.status.success() || out.status.code() == Some(2);
    // The emptied `w` posing as a whiteout is a modification, applied as an empty file.
    let w_ok = changes.contains(&("w".into(), "modified".into()))
        && std::fs::read_to_string(ctx.work().join("w"))
            .ok()
            .as_deref()
            == Some("");
    check(
        forged.is_empty()
            && w_ok
            && !changes.iter().any(|(p, _)| p.starts_with('d'))
            && applied_ok
            && std::fs::read_to_string(ctx.work().join("d/f")).unwrap() == "x"
            && std::fs::read_to_string(ctx.work().join("g")).unwrap() == "g",
        format!(
            "set inside: [{}], stored escaped; the scan and apply ignore them",
            r.value("set").unwrap_or("")
        ),
        format!("forged {forged:?}, changes {changes:?}, apply {out:?}"),
    )
}

fn kernel_knobs(ctx: &Ctx) -> Outcome {
    let knobs = [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",
        "/sys/kernel/uevent_helper",
    ];
    let before: Vec<Option<String>> = knobs
        .iter()
        .map(|k| std::fs::read_to_string(k).ok())
        .collect();
    // Opened for appending and closed with nothing written: the open is what the
    // boundary refuses (read-only mount, Landlock, permissions), and one that gets through
    // changes no knob.
    let r = ctx.sh(
        r#"for k in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /sys/kernel/uevent_helper /proc/sys/fs/binfmt_misc/register; do [ -e $k ] && : >> $k 2>/dev/null && echo "wrote=$k"; done; true"#,
    );
    ctx.assert_boundary(&r);
    let after: Vec<Option<String>> = knobs
        .iter()
        .map(|k| std::fs::read_to_string(k).ok())
        .collect();
    check(
        before == after && r.value("wrote").is_none(),
        "every knob unchanged on the host; opening one for writing failed inside",
        format!("wrote {:?}", r.value("wrote")),
    )
}

fn lent_read_mount(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.outside().join("lent/existing"), "host\n");
    let lend = format!("{}:/lent:read", ctx.outside().join("lent").display());
    let r = ctx.run(
        &["--mount", &lend],
        &[
            "sh",
            "-c",
            "cat /lent/existing && echo read=yes; echo pwn > /lent/existing && echo w=1; echo pwn > /lent/new && echo n=1; rm -f /lent/existing && echo d=1; chmod 777 /lent/existing && echo c=1; true",
        ],
    );
    let through: Vec<&str> = ["w", "n", "d", "c"]
        .into_iter()
        .filter(|k| r.value(k).is_some())
        .collect();
    let host = std::fs::read_to_string(ctx.outside().join("lent/existing")).unwrap();
    let listing = std::fs::read_dir(ctx.outside().join("lent"))
        .unwrap()
        .count();
    assert_eq!(
        r.value("read"),
        Some("yes"),
        "the lent path must be readable"
    );
    assert_eq!(r.control("seccomp"), vec!["enforced"]);
    check(
        through.is_empty() && host == "host\n" && listing == 1,
        "readable, and every write refused; the host directory is unchanged",
        format!("allowed: {through:?}; host now {host:?}, {listing} entries"),
    )
}

fn lent_target_through_symlink(ctx: &Ctx) -> Outcome {
    // The repository plants `link -> <host dir>`; the user lends a path at a target under
    // it. The mount point must never be made (nor the mount placed) on the host through the
    // link: the target resolves as the sandbox sees it, where the link leads nowhere.
    ctx.put(&ctx.outside().join("lent/file"), "lent\n");
    let elsewhere = ctx.outside().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = ctx.work().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let lend = format!(
        "{}:{}:read",
        ctx.outside().join("lent").display(),
        link.join("sub/lent").display()
    );
    let r = ctx.run(
        &["--mount", &lend],
        &["sh", "-c", "echo ran=yes; cat link/sub/lent/file"],
    );
    let made: Vec<String> = walkdir(&elsewhere);
    if !made.is_empty() || r.value("ran").is_some() {
        return Outcome::Escaped(format!(
            "the run went on (exit {:?}) and made {made:?} on the host under the link's target",
            r.code
        ));
    }
    assert_eq!(r.code, Some(125), "{}", r.err);
    let failure = &r.bundle["run"]["failure"];
    assert_eq!(failure["kind"], "setup", "{failure}");
    let cause = format!(
        "`{}` is a symlink to `{}`, which does not exist inside the sandbox",
        link.display(),
        elsewhere.display()
    );
    let step = failure["step"].as_str().unwrap_or("");
    assert!(
        step.contains(&cause) && step.contains("choose a target without symlinks"),
        "the failure names the link and the fix: {failure}"
    );
    assert!(r.err.contains(&cause), "{}", r.err);
    Outcome::Denied(format!(
        "refused (exit 125): {cause}; nothing made under it on the host"
    ))
}

/// Every path under `dir` on the host, relative to it.
fn walkdir(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.symlink_metadata().unwrap().is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

/// The fork's inherited entries are hard links to its checkpoint's, which are hard links to
/// the parent's stage: the attack may change only its own copies (the kernel copies an
/// entry up before a change), never the shared inodes, and the layers' host paths are not
/// reachable inside. Every run is a fork (on the plain sealed row the probe makes the
/// parent itself), and the harness re-reads the checkpoint's digest after it.
fn inherited_layer(ctx: &Ctx) -> Outcome {
    let own_parent = (!ctx.forks()).then(|| ctx.make_fork_parent());
    let extra: Vec<&str> = own_parent
        .as_deref()
        .map(|p| vec!["--on", p])
        .unwrap_or_default();
    let r = ctx.run(&extra, &["/usr/bin/python3", "-c", r#"
import os
done = []
def attempt(name, f):
    try:
        f()
        done.append(name)
    except OSError:
        pass
attempt("append", lambda: open(".fork-parent", "a").write("pwned\n"))
attempt("truncate", lambda: os.truncate(".fork-dir/x", 0))
attempt("chmod", lambda: os.chmod(".fork-parent", 0o777))
attempt("xattr", lambda: os.setxattr(".fork-parent", "user.pwn", b"1"))
attempt("utime", lambda: os.utime(".fork-dir/x", (1, 1)))
attempt("link", lambda: os.link(".fork-parent", ".fork-link"))
def rename_and_back():
    os.rename(".fork-dir/x", ".fork-dir/moved")
    os.rename(".fork-dir/moved", ".fork-dir/x")
attempt("rename", rename_and_back)
# The overlay's layers by their host paths, as mountinfo shows them.
layers = []
for line in open("/proc/self/mountinfo"):
    if " - overlay " in line:
        for opt in line.split(" - overlay ")[1].split()[-1].split(","):
            if opt.startswith(("lowerdir=", "upperdir=", "lowerdir+=")):
                layers += opt.split("=", 1)[1].split(":")
for layer in [l for l in layers if os.path.realpath(l) != os.getcwd()]:
    attempt("layer:" + layer, lambda: open(os.path.join(layer, ".fork-parent"), "a").write("pwned\n"))
    attempt("layer-new:" + layer, lambda: open(os.path.join(layer, "pwn"), "w").write("pwned\n"))
print("done=" + ",".join(done))
print("layers=" + ",".join(layers))
"#]);
    ctx.assert_boundary(&r);
    let Some(parent) = r.bundle["lineage"]["parent_run_id"].as_str() else {
        return Outcome::Escaped(format!("the run was no fork: {}", r.err));
    };
    let ckpt = r.bundle["lineage"]["checkpoint_id"].as_str().unwrap_or("-");
    let parent_dir = ctx.store().join("jobs").join(parent);
    let shared = [
        parent_dir.join("upper"),
        parent_dir.join("checkpoints").join(ckpt).join("upper"),
    ];
    let mut changed = Vec::new();
    for dir in &shared {
        let f = dir.join(".fork-parent");
        let mode = std::fs::symlink_metadata(&f).map(|m| m.permissions().mode() & 0o7777);
        if std::fs::read_to_string(&f).ok().as_deref() != Some("parent\n") {
            changed.push(format!("{} content", f.display()));
        }
        if mode.as_ref().is_ok_and(|m| *m == 0o777) || mode.is_err() {
            changed.push(format!("{} mode {mode:?}", f.display()));
        }
        if xattrs(&f).contains("user.pwn") {
            changed.push(format!("{} xattr", f.display()));
        }
        let x = dir.join(".fork-dir/x");
        let x_ok = std::fs::symlink_metadata(&x).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.len() == 0 && m.mtime() != 1
        });
        if !x_ok {
            changed.push(format!("{} moved or touched", x.display()));
        }
        for stray in ["pwn", ".fork-link", ".fork-dir/moved"] {
            if exists(&dir.join(stray)) {
                changed.push(format!("{} made", dir.join(stray).display()));
            }
        }
    }
    let wrote_layer = r
        .out
        .lines()
        .find_map(|l| l.strip_prefix("done="))
        .unwrap_or_default()
        .split(',')
        .filter(|d| d.starts_with("layer"))
        .map(str::to_owned)
        .collect::<Vec<_>>();
    // What it did, it did to its own copies, in its own stage.
    let own = std::fs::read_to_string(r.bundle_path.with_file_name("upper").join(".fork-parent"))
        .unwrap_or_default();
    check(
        changed.is_empty()
            && wrote_layer.iter().all(|d| !d.contains("/jobs/"))
            && own == "parent\npwned\n",
        format!(
            "the parent's stage and checkpoint unchanged, the fork's own copy {own:?}; {}",
            r.out.trim()
        ),
        format!(
            "shared entries changed: {changed:?}; layer writes {wrote_layer:?}; the fork's copy {own:?}"
        ),
    )
}
