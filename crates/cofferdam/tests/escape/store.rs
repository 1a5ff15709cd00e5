//! The job store belongs to its user: a store, `jobs/` directory, job or `--stage`
//! directory another user owns or can write is refused (exit 125, before anything runs), so
//! a second local user cannot plant a job that `status --review last` shows as ours or that
//! `apply` writes into our workdir.
//!
//! The second user is real when the suite runs as root (`cofferdam-other`, through
//! `runuser`, makes the store and runs the planted job itself); as an unprivileged user the
//! foreign-owner attacks are skipped (no second user can be become) and the writable ones
//! use directories the attack makes writable by everyone, which is what lets another user
//! plant.

use crate::harness::{Attack, BOTH_MUST, Boundary::Records, Ctx, Outcome, Tier, both, check};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "rec.store-foreign-owner",
        boundary: Records,
        description: "a second user's store (COFFERDAM_HOME) with a job planted for our workdir: review, apply, run",
        on: BOTH_MUST,
        probe: foreign_store,
    },
    Attack {
        id: "rec.store-writable",
        boundary: Records,
        description: "a store root, then a jobs/ directory, writable by others, with a job in it: review, apply, run",
        on: BOTH_MUST,
        probe: writable_store,
    },
    Attack {
        id: "rec.store-foreign-job",
        boundary: Records,
        description: "a job directory another user owns (or can write) inside our own store: jobs, last, status, apply",
        on: BOTH_MUST,
        probe: foreign_job,
    },
    Attack {
        id: "rec.store-stage-dir",
        boundary: Records,
        description: "`run --stage` into a directory another user owns, or below one anyone can write",
        on: BOTH_MUST,
        probe: stage_dir,
    },
];

/// The attacker's uid, when the suite can act as it (root and the user exists).
fn other_user() -> Option<u32> {
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let out = Command::new("id")
        .args(["-u", "cofferdam-other"])
        .output()
        .ok()?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    (root && out.status.success()).then_some(uid)
}

const NEED_ROOT: &str = "a second user is needed (the suite runs as root to be cofferdam-other)";

fn tier_args(ctx: &Ctx) -> &'static [&'static str] {
    match ctx.tier() {
        Tier::Sealed => &["--containment", "sealed"],
        Tier::Scoped => &["--tier", "scoped"],
        Tier::Advisory => &["--tier", "advisory", "--containment", "advisory"],
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory of the attacker's, as they would make it (we are root here).
fn their_dir(p: &Path, mode: u32) {
    let uid = other_user().unwrap();
    std::fs::create_dir(p).unwrap();
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    chmod(p, mode);
}

/// `cofferdam` as the attacker (`user` = `Some`) or as us, with `store` as COFFERDAM_HOME.
fn cofferdam(ctx: &Ctx, user: Option<&str>, store: &Path, home: &Path, cwd: &Path) -> Command {
    let bin = assert_cmd::cargo::cargo_bin("cofferdam");
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--"]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    c.env_clear()
        .env("HOME", home)
        .env("COFFERDAM_HOME", store)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(cwd)
        .stdin(Stdio::null())
        .args(["--color", "never"]);
    let _ = ctx;
    c
}

/// A real run that stages `evil.txt`, by `user` (or us) in `store`; its job id. Then the
/// job is made to name `victim_work` as its workdir, and everything in the store is made
/// readable and writable by everyone (so nothing but ownership and modes stands in the
/// victim's way).
fn plant(ctx: &Ctx, user: Option<&str>, store: &Path, victim_work: &Path) -> String {
    let base = ctx
        .base()
        .join(format!("attacker-{}", crate::harness::unique()));
    let (home, work) = (base.join("home"), base.join("work"));
    for d in [&base, &home, &work] {
        std::fs::create_dir_all(d).unwrap();
        chmod(d, 0o777);
    }
    let out = cofferdam(ctx, user, store, &home, &work)
        .args(["run", "--json"])
        .args(tier_args(ctx))
        .args(["--", "sh", "-c", "echo planted > evil.txt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "the attacker's run: {}", both(&out));
    let job = crate::harness::job_of(&out);
    // Rewrite job.json's workdir as the attacker (their file), and open everything up.
    let script = format!(
        "set -e; f=\"$1/jobs/{job}/job.json\"; sed \"s|\\\"workdir\\\": \\\"[^\\\"]*\\\"|\\\"workdir\\\": \\\"$2\\\"|\" \"$f\" > \"$f.new\"; mv \"$f.new\" \"$f\"; chmod -R a+rwX \"$1\""
    );
    let mut c = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", "sh", "-c", &script, "sh"]);
            c
        }
        None => {
            let mut c = Command::new("sh");
            c.args(["-c", &script, "sh"]);
            c
        }
    };
    let st = c.arg(store).arg(victim_work).status().unwrap();
    assert!(st.success(), "planting {job}");
    job
}

/// Run each victim command in `store`; `Denied` when each exits 125 with a refusal and
/// the planted file never reached the workdir.
fn victim_refused(ctx: &Ctx, store: &Path, job: &str, cmds: &[&[&str]]) -> Outcome {
    let mut outcome = Outcome::Denied("refused".into());
    for args in cmds {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "JOB" { job } else { a })
            .collect();
        let out = cofferdam(ctx, None, store, &ctx.home(), &ctx.work())
            .args(&args)
            .output()
            .unwrap();
        let text = both(&out);
        outcome = outcome.and(check(
            out.status.code() == Some(125) && text.contains("refusing"),
            format!("{args:?}: 125, refused"),
            format!(
                "{args:?} exited {:?} without refusing the store: {text}",
                out.status.code()
            ),
        ));
    }
    let planted = ctx.work().join("evil.txt");
    outcome.and(check(
        !planted.exists(),
        "the planted file is not in the workdir",
        "apply wrote the other user's file into our workdir",
    ))
}

const ALL_CMDS: &[&[&str]] = &[
    &["status", "--review", "last"],
    &["status", "JOB"],
    &["diff", "JOB"],
    &["jobs"],
    &["apply", "last"],
    &["apply", "JOB"],
    &["drop", "JOB"],
    &["kill", "JOB"],
    &["run", "--", "sh", "-c", "echo ran > ran.txt"],
];

fn not_run(ctx: &Ctx) -> Outcome {
    check(
        !ctx.work().join("ran.txt").exists(),
        "run refused before the command ran",
        "run ran its command in a foreign store",
    )
}

fn foreign_store(ctx: &Ctx) -> Outcome {
    if other_user().is_none() {
        return Outcome::Skipped(NEED_ROOT.into());
    }
    chmod(&ctx.base(), 0o755);
    // The attacker makes a shared store (as in /tmp) and plants a job for our workdir.
    let store = ctx.base().join("shared-store");
    their_dir(&store, 0o755);
    let job = plant(ctx, Some("cofferdam-other"), &store, &ctx.work());
    victim_refused(ctx, &store, &job, ALL_CMDS).and(not_run(ctx))
}

fn writable_store(ctx: &Ctx) -> Outcome {
    let store = ctx.base().join("open-store");
    std::fs::create_dir(&store).unwrap();
    let job = plant(ctx, None, &store, &ctx.work());
    // The root writable by others (the rest as `plant` left it: open too).
    chmod(&store, 0o777);
    let a = victim_refused(ctx, &store, &job, ALL_CMDS);
    // Only jobs/ writable by others.
    chmod(&store, 0o700);
    chmod(&store.join("jobs"), 0o1777);
    a.and(victim_refused(ctx, &store, &job, ALL_CMDS))
        .and(not_run(ctx))
}

fn foreign_job(ctx: &Ctx) -> Outcome {
    let other = other_user();
    let store = ctx.store();
    // Our own store, made by a run of ours.
    let out = cofferdam(ctx, None, &store, &ctx.home(), &ctx.work())
        .args(["run", "--json"])
        .args(tier_args(ctx))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let own = crate::harness::job_of(&out);
    let job = match other {
        Some(_) => {
            chmod(&ctx.base(), 0o755);
            let theirs = ctx.base().join("their-store");
            their_dir(&theirs, 0o700);
            let job = plant(ctx, Some("cofferdam-other"), &theirs, &ctx.work());
            // How it got into our jobs/ (a store that was open once, root's hand) does not
            // matter: it is there, theirs.
            std::fs::rename(
                theirs.join("jobs").join(&job),
                store.join("jobs").join(&job),
            )
            .unwrap();
            job
        }
        None => {
            // A job directory writable by others is one they could have filled.
            let scratch = ctx.base().join("scratch-store");
            std::fs::create_dir(&scratch).unwrap();
            let job = plant(ctx, None, &scratch, &ctx.work());
            std::fs::rename(
                scratch.join("jobs").join(&job),
                store.join("jobs").join(&job),
            )
            .unwrap();
            job
        }
    };
    let mut outcome = victim_refused(
        ctx,
        &store,
        &job,
        &[
            &["status", "JOB"],
            &["diff", "JOB"],
            &["apply", "JOB"],
            &["drop", "JOB"],
        ],
    );
    // `last` is our own job, never theirs (theirs is newer and names our workdir).
    let out = cofferdam(ctx, None, &store, &ctx.home(), &ctx.work())
        .args(["status", "--json", "last"])
        .output()
        .unwrap();
    let picked = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["run"]["run_id"].as_str().map(str::to_owned));
    outcome = outcome.and(check(
        picked.as_deref() == Some(own.as_str()),
        "`last` is our own job",
        format!(
            "`status last` picked {picked:?}, not our {own}: {}",
            both(&out)
        ),
    ));
    let out = cofferdam(ctx, None, &store, &ctx.home(), &ctx.work())
        .args(["apply", "last"])
        .output()
        .unwrap();
    outcome = outcome.and(check(
        out.status.success() && !ctx.work().join("evil.txt").exists(),
        "`apply last` applies our own job, not theirs",
        format!("`apply last`: {}", both(&out)),
    ));
    let out = cofferdam(ctx, None, &store, &ctx.home(), &ctx.work())
        .arg("jobs")
        .output()
        .unwrap();
    let text = both(&out);
    outcome.and(check(
        out.status.success()
            && text
                .lines()
                .any(|l| l.starts_with(job.as_str()) && l.contains("refusing")),
        "`jobs` lists it as refused",
        format!("`jobs` does not show {job} refused: {text}"),
    ))
}

fn stage_dir(ctx: &Ctx) -> Outcome {
    let mut outcome = Outcome::Denied("refused".into());
    let run_into = |stage: &Path| {
        cofferdam(ctx, None, &ctx.store(), &ctx.home(), &ctx.work())
            .args(["run"])
            .args(tier_args(ctx))
            .arg("--stage")
            .arg(stage)
            .args(["--", "sh", "-c", "echo ran > ran.txt"])
            .output()
            .unwrap()
    };
    // Below a directory anyone can write (no sticky bit): it could be swapped.
    let open = ctx.base().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let mut stages = vec![open.join("stage")];
    if other_user().is_some() {
        chmod(&ctx.base(), 0o755);
        let theirs = ctx.base().join("their-stage");
        their_dir(&theirs, 0o777);
        stages.push(theirs);
    }
    for stage in stages {
        let out = run_into(&stage);
        outcome = outcome.and(check(
            out.status.code() == Some(125) && both(&out).contains("refusing"),
            format!("--stage {}: 125", stage.display()),
            format!("--stage {}: {}", stage.display(), both(&out)),
        ));
    }
    outcome.and(not_run(ctx))
}
