//! Filesystem read: secrets, the job store and host files outside the view stay unreadable.

use crate::harness::{
    ALL_THREE, Attack, BOTH_MUST, Boundary::FsRead, Ctx, Outcome, SCOPED_READS, SEALED_MUST, Tier,
    Tier::Scoped, Tier::Sealed, Verdict::Documented, Verdict::Must, check,
};
use std::path::Path;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fr.ssh-key",
        boundary: FsRead,
        description: "read ~/.ssh/id_ed25519",
        on: ALL_THREE,
        probe: ssh_key,
    },
    Attack {
        id: "fr.aws-credentials",
        boundary: FsRead,
        description: "read ~/.aws/credentials",
        on: BOTH_MUST,
        probe: aws,
    },
    Attack {
        id: "fr.hidden-list",
        boundary: FsRead,
        description: "read every path of the policy's hidden list (from the scope report)",
        on: &[(Sealed, Must), (Scoped, Documented(SCOPED_READS))],
        probe: hidden_list,
    },
    Attack {
        id: "fr.secret-via-symlink",
        boundary: FsRead,
        description: "with the workdir = home, read a secret through the symlink's target",
        on: BOTH_MUST,
        probe: secret_via_symlink,
    },
    Attack {
        id: "fr.job-store",
        boundary: FsRead,
        description: "list the job store and read an earlier job's stage and bundle",
        on: BOTH_MUST,
        probe: job_store,
    },
    Attack {
        id: "fr.symlink-to-store",
        boundary: FsRead,
        description: "read the job store through a workdir symlink pointing into it",
        on: BOTH_MUST,
        probe: symlink_to_store,
    },
    Attack {
        id: "fr.outside-dir",
        boundary: FsRead,
        description: "read a host file outside the workdir and the system view",
        on: ALL_THREE,
        probe: outside_dir,
    },
    Attack {
        id: "fr.environ",
        boundary: FsRead,
        description: "read the host's environment: /proc/1/environ, every /proc/*/environ",
        on: BOTH_MUST,
        probe: environ,
    },
    Attack {
        id: "fr.proc-masked",
        boundary: FsRead,
        description: "read /proc/kcore, keys, kallsyms, timer_list, sched_debug; open sysrq-trigger for writing",
        on: &[(Sealed, Must), (Scoped, Documented(SCOPED_READS))],
        probe: proc_masked,
    },
    Attack {
        id: "fr.root-private-files",
        boundary: FsRead,
        description: "read system-view files that are not world-readable (as root: the sandbox's uid 0 is the host's)",
        on: &[
            (Sealed, Documented("reads: the read-only system view")),
            (Scoped, Documented(SCOPED_READS)),
        ],
        probe: root_private_files,
    },
    Attack {
        id: "fr.secret-lent-through-symlink",
        boundary: FsRead,
        description: "plant cache -> ~/.ssh in the workdir; the user lends ./cache:/cache: the bundle must not claim secrets hidden",
        on: SEALED_MUST,
        probe: secret_lent_through_symlink,
    },
    Attack {
        id: "fr.secret-hard-linked-into-workdir",
        boundary: FsRead,
        description: "read ~/.ssh/id_ed25519 through a hard link the user left in the workdir",
        on: &[
            (Sealed, Documented("reads: the read-only system view")),
            (Scoped, Documented(SCOPED_READS)),
        ],
        probe: secret_hard_linked,
    },
];

const SECRET: &str = "TOPSECRET-d41d8cd9";

/// How many paths the `secrets_hidden` observation covers: masked on the sealed tier
/// (`hidden`), checked for being unreadable after Landlock on the scoped tier (`checked`).
fn hidden_count(r: &crate::harness::Run) -> Option<u64> {
    let o = &crate::harness::controls_of(&r.bundle, "secrets_hidden")[0]["details"];
    o["hidden"].as_u64().or_else(|| o["checked"].as_u64())
}

fn no_secret(r: &crate::harness::Run) -> bool {
    !r.out.contains(SECRET) && !r.err.contains(SECRET)
}

fn ssh_key(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.home().join(".ssh/id_ed25519"), SECRET);
    let r =
        ctx.sh("cat $HOSTHOME/.ssh/id_ed25519; cat ~/.ssh/id_ed25519; ls -a $HOSTHOME/.ssh; true");
    ctx.assert_boundary(&r);
    check(no_secret(&r), "not readable", "the key was read")
}

fn aws(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.home().join(".aws/credentials"), SECRET);
    let r = ctx
        .sh("cat $HOSTHOME/.aws/credentials; cat /proc/self/root$HOSTHOME/.aws/credentials; true");
    ctx.assert_boundary(&r);
    check(no_secret(&r), "not readable", "the credentials were read")
}

fn hidden_list(ctx: &Ctx) -> Outcome {
    let scope = ctx.scope();
    let hidden: Vec<String> = scope["hidden_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    assert!(hidden.len() >= 10, "{hidden:?}");
    // Plant a secret at every hidden path under the (fake) home; the system ones are read
    // as they are on this host.
    let home = ctx.home();
    let mut planted = 0;
    for p in &hidden {
        let p = Path::new(p);
        if p.starts_with(&home) {
            let name = p.file_name().unwrap().to_string_lossy();
            if name.contains('.') && name != ".ssh" && name != ".aws" && name.ends_with(".toml")
                || [".netrc", ".git-credentials", ".pypirc"].contains(&name.as_ref())
            {
                ctx.put(p, SECRET);
            } else {
                ctx.put(&p.join("secret"), SECRET);
            }
            planted += 1;
        }
    }
    let list = hidden.join("\n");
    ctx.var("HIDDEN", list);
    let r = ctx.sh(r#"echo "$HIDDEN" | while read -r p; do
  if [ -d "$p" ]; then cat "$p"/* 2>/dev/null; ls -A "$p" 2>/dev/null | sed "s|^|entry:$p/|"; fi
  if [ -f "$p" ] && [ -s "$p" ]; then echo "nonempty:$p"; cat "$p" 2>/dev/null; fi
done"#);
    ctx.assert_boundary(&r);
    let counted = hidden_count(&r);
    if ctx.tier() == Tier::Sealed {
        assert_eq!(
            counted,
            Some(hidden.len() as u64),
            "the bundle counts the hidden list"
        );
    } else {
        // The scoped run checks the plan's whole list, system paths included; the scope
        // report lists only those the tier really hides (not the system files beneath a
        // directory Landlock grants, which file permissions alone protect).
        assert!(
            counted.is_some_and(|c| c >= hidden.len() as u64),
            "the bundle checks at least the scope's hidden list: {counted:?} < {}",
            hidden.len()
        );
    }
    let leaks: Vec<&str> = r
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("nonempty:") || l.starts_with("entry:") || l.contains(SECRET))
        .collect();
    if ctx.tier() != Tier::Sealed {
        // No mount namespace masks the hidden paths: they exist, and `test -s` (a stat,
        // which Landlock does not confine) sees their size. Their contents under home are
        // outside every Landlock grant and must stay unread; system ones the user may read
        // (as root: /etc/shadow) are the scope report's reads line.
        let home = ctx.home().display().to_string();
        let home_leak: Vec<&&str> = leaks
            .iter()
            .filter(|l| l.contains(SECRET) || l.starts_with(&format!("entry:{home}")))
            .collect();
        assert!(home_leak.is_empty(), "home secrets read: {home_leak:?}");
        let read: Vec<&str> = r
            .lines()
            .into_iter()
            .filter(|l| !l.starts_with("nonempty:") && !l.starts_with("entry:"))
            .collect();
        let system: Vec<&&str> = leaks
            .iter()
            .filter(|l| l.starts_with("nonempty:/etc") || l.starts_with("entry:/etc"))
            .collect();
        return check(
            read.is_empty(),
            format!(
                "{planted} home secrets unread (only stat-visible); {} hidden paths' contents unread",
                hidden.len()
            ),
            format!("{} lines read; visible: {system:?}", read.len()),
        );
    }
    check(
        leaks.is_empty(),
        format!(
            "{} hidden paths ({planted} planted under home) all empty or absent",
            hidden.len()
        ),
        format!("visible: {leaks:?}"),
    )
}

fn secret_via_symlink(ctx: &Ctx) -> Outcome {
    let home = ctx.home();
    ctx.put(&home.join("dotfiles/ssh/id_ed25519"), SECRET);
    std::os::unix::fs::symlink("dotfiles/ssh", home.join(".ssh")).unwrap();
    let w = home.display().to_string();
    let r = ctx.run(
        &["--workdir", &w],
        &[
            "sh",
            "-c",
            "cat ~/.ssh/id_ed25519 $HOSTHOME/.ssh/id_ed25519 $HOSTHOME/dotfiles/ssh/id_ed25519; true",
        ],
    );
    ctx.assert_boundary(&r);
    check(
        no_secret(&r),
        "hidden at the link and at its target",
        "the secret was read through the symlink's target",
    )
}

fn job_store(ctx: &Ctx) -> Outcome {
    let first = ctx.sh(&format!("echo {SECRET} > staged"));
    let job_dir = first.bundle_path.parent().unwrap().display().to_string();
    ctx.var("JOB", job_dir);
    let r = ctx.sh("ls -R $STORE; cat $JOB/upper/staged $JOB/run-bundle.json $JOB/job.json; true");
    ctx.assert_boundary(&r);
    let hidden = hidden_count(&r).unwrap();
    assert!(hidden >= 1, "the store is on the hidden list");
    let listed = r.out.contains("run-") || r.out.contains("run_id");
    check(
        no_secret(&r) && !listed,
        "the store is empty inside",
        "the store was listed or read",
    )
}

fn symlink_to_store(ctx: &Ctx) -> Outcome {
    ctx.sh(&format!("echo {SECRET} > staged"));
    std::os::unix::fs::symlink(ctx.store(), ctx.work().join("st")).unwrap();
    let r = ctx.sh("ls -R st/; cat st/jobs/*/upper/staged; true");
    ctx.assert_boundary(&r);
    check(
        no_secret(&r) && !r.out.contains("run-"),
        "nothing through the symlink",
        "the store was read through the symlink",
    )
}

fn outside_dir(ctx: &Ctx) -> Outcome {
    ctx.put(&ctx.outside().join("secret"), SECRET);
    let r = ctx.sh("cat $OUTSIDE/secret; cat ../outside/secret; cat /proc/self/root$OUTSIDE/secret; ls $BASE; true");
    ctx.assert_boundary(&r);
    check(
        no_secret(&r) && !r.out.contains("outside"),
        "the host file is not in the sandbox's view",
        "a host file outside the view was read",
    )
}

fn environ(ctx: &Ctx) -> Outcome {
    let mut c = ctx.cmd();
    c.env("HOST_ONLY_SECRET", SECRET);
    let out = c
        .args([
            "run",
            "--json",
            "--",
            "sh",
            "-c",
            "cat /proc/1/environ; cat /proc/*/environ; tr '\\0' '\\n' < /proc/self/environ; true",
        ])
        .output()
        .unwrap();
    let text = crate::harness::both(&out);
    check(
        !text.contains(SECRET),
        "no process inside carries the host's environment",
        "a host environment value was read",
    )
}

fn proc_masked(ctx: &Ctx) -> Outcome {
    // sysrq-trigger and the sysrq sysctl are opened for appending and closed with nothing
    // written: opening is what must be refused, and one that gets through neither reboots
    // the host nor changes its sysrq mask.
    let r = ctx.sh(
        r#"for f in kcore keys key-users kallsyms timer_list sched_debug; do
  n=$(head -c 4096 /proc/$f 2>/dev/null | wc -c); echo "$f=$n"
done
: >> /proc/sysrq-trigger 2>/dev/null && echo sysrq=written
: >> /proc/sys/kernel/sysrq 2>/dev/null && echo sysctl=written
true"#,
    );
    ctx.assert_boundary(&r);
    if ctx.tier() != Tier::Sealed {
        // The host's /proc, read-only to Landlock: reads are what the user may read anyway
        // (the scope report's reads line); a write must still be refused.
        assert!(
            r.value("sysrq").is_none() && r.value("sysctl").is_none(),
            "a /proc write got through Landlock: {}",
            r.out
        );
    } else {
        let proc_mask = crate::harness::controls_of(&r.bundle, "proc_mask");
        assert_eq!(proc_mask.len(), 1);
        assert_eq!(proc_mask[0]["status"], "enforced");
        assert!(
            proc_mask[0]["details"]["masked"]
                .to_string()
                .contains("/proc/kallsyms")
        );
    }
    let readable: Vec<&str> = [
        "kcore",
        "keys",
        "key-users",
        "kallsyms",
        "timer_list",
        "sched_debug",
    ]
    .into_iter()
    .filter(|f| r.value(f).is_some_and(|n| n != "0"))
    .collect();
    check(
        readable.is_empty() && r.value("sysrq").is_none() && r.value("sysctl").is_none(),
        "masked entries read empty; sysrq and sysctl writes refused",
        format!("readable {readable:?}; {}", r.out),
    )
}

/// Files and directories under `top` that others may not read (mode without o+r).
fn not_world_readable(top: &Path, out: &mut Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(rd) = std::fs::read_dir(top) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(m) = p.symlink_metadata() else {
            continue;
        };
        if m.file_type().is_symlink() {
            continue;
        }
        if m.permissions().mode() & 0o004 == 0 {
            out.push(p.display().to_string());
        }
        if m.is_dir() {
            not_world_readable(&p, out);
        }
    }
}

fn root_private_files(ctx: &Ctx) -> Outcome {
    let hidden: Vec<String> = ctx.scope()["hidden_paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    let mut private = Vec::new();
    for top in ["/etc", "/opt"] {
        not_world_readable(Path::new(top), &mut private);
    }
    private.retain(|p| !hidden.iter().any(|h| Path::new(p).starts_with(h)));
    if private.is_empty() {
        return Outcome::Skipped("no private files in /etc or /opt on this host".into());
    }
    ctx.var("PRIVATE", private.join("\n"));
    let r = ctx.sh(
        r#"echo "$PRIVATE" | while read -r p; do
  if [ -d "$p" ]; then ls "$p" >/dev/null 2>&1 && echo "read=$p"; else head -c1 "$p" >/dev/null 2>&1 && echo "read=$p"; fi
done; true"#,
    );
    ctx.assert_boundary(&r);
    let read: Vec<&str> = r
        .lines()
        .into_iter()
        .filter_map(|l| l.strip_prefix("read="))
        .collect();
    check(
        read.is_empty(),
        format!("none of {} private system files readable", private.len()),
        format!("readable: {read:?}"),
    )
}

fn secret_hard_linked(ctx: &Ctx) -> Outcome {
    let key = ctx.home().join(".ssh/id_ed25519");
    ctx.put(&key, SECRET);
    if std::fs::hard_link(&key, ctx.work().join("key")).is_err() {
        return Outcome::Skipped("cannot hard-link across these temp dirs".into());
    }
    let r = ctx.sh("cat key; true");
    ctx.assert_boundary(&r);
    // Hidden at its path; the workdir's own entries are the workdir's, whatever they link to.
    check(
        no_secret(&r),
        "not readable through the link",
        "the key is readable through the workdir's hard link (a file in the workdir)",
    )
}

fn secret_lent_through_symlink(ctx: &Ctx) -> Outcome {
    // A repository plants `cache -> ~/.ssh`; a user lends what looks like a cache. The bind
    // follows the link (lending is the user's call), so the key is readable inside: what
    // must not happen is a bundle that says the secrets were hidden.
    ctx.put(&ctx.home().join(".ssh/id_ed25519"), SECRET);
    let cache = ctx.work().join("cache");
    std::os::unix::fs::symlink(ctx.home().join(".ssh"), &cache).unwrap();
    let r = ctx.run(
        &["--mount", "./cache:/cache:read"],
        &["sh", "-c", "cat /cache/id_ed25519"],
    );
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(
        r.out.contains(SECRET),
        "the lent link shows the key: {}",
        r.out
    );
    let secrets = crate::harness::controls_of(&r.bundle, "secrets_hidden");
    assert_eq!(secrets.len(), 1, "{secrets:?}");
    let o = &secrets[0];
    let real = std::fs::canonicalize(ctx.home().join(".ssh")).unwrap();
    let named = format!(
        "{} (resolves to {}) -> /cache",
        cache.display(),
        real.display()
    );
    let reason = o["reason"].as_str().unwrap_or("");
    check(
        o["status"] == "partial"
            && reason.contains(&named)
            && r.safety("filesystem_read_non_bypassable") == false,
        format!("read through the lent link, and the bundle says so: {reason}"),
        format!(
            "secrets_hidden is {} ({reason:?}) while ~/.ssh was read through ./cache; read \
             non-bypassable: {}",
            o["status"],
            r.safety("filesystem_read_non_bypassable")
        ),
    )
}
