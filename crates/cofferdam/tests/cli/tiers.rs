//! The tiers below sealed on one machine (issue 7, item 5). A host without user namespaces
//! is simulated by running cofferdam inside a user namespace (`unshare -U -r`) whose
//! `user.max_user_namespaces` is 0, so every nested `unshare(CLONE_NEWUSER)`, the probe's
//! included, fails with ENOSPC: the probe sees no user namespaces and the run takes the
//! scoped tier. The advisory tier is reached with `run --tier advisory`, which only lowers.
//! Each test has its own storage root, so the probe cache (keyed on the sysctls) can never
//! hand a sealed answer to a scoped run.

use crate::common::{Sandbox, json_of, landlock_abi_independently, require};
use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

/// Runs its arguments after making nested user namespaces impossible.
const NO_USERNS: &str = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"";

/// `cofferdam ARGS` on a simulated host without user namespaces.
pub fn no_userns(s: &Sandbox) -> Command {
    let mut c = Command::new("unshare");
    c.env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["-U", "-r", "sh", "-c", NO_USERNS, "sh"])
        .arg(assert_cmd::cargo::cargo_bin("cofferdam"));
    c
}

/// Whether the simulation works here and the host has Landlock (the scoped tier's floor).
pub fn scoped_host() -> bool {
    let sim = std::process::Command::new("unshare")
        .args(["-U", "-r", "sh", "-c", NO_USERNS, "sh", "true"])
        .status()
        .is_ok_and(|st| st.success());
    require("user namespaces to simulate a host without them", sim)
        && require("Landlock", landlock_abi_independently() > 0)
}

fn out_text(o: &std::process::Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Run `c` with `args`, assert exit 0, return its stdout and a description for messages.
fn succeeds(mut c: Command, args: &[&str]) -> (String, String) {
    let out = c.args(args).output().unwrap();
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), text)
}

fn last_bundle(s: &Sandbox) -> Value {
    let jobs = s.store.path().join("jobs");
    let dir = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("run-bundle.json").exists())
        .max()
        .expect("a job with a bundle");
    serde_json::from_str(&std::fs::read_to_string(dir.join("run-bundle.json")).unwrap()).unwrap()
}

fn controls(b: &Value) -> Vec<Value> {
    b["executor_observations"]["controls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn jobs_in(store: &Path) -> usize {
    std::fs::read_dir(store.join("jobs")).map_or(0, |d| d.count())
}

#[test]
fn without_user_namespaces_scope_reports_the_scoped_tier() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    let out = no_userns(&s).args(["scope", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", out_text(&out));
    let v = json_of(&out);
    assert_eq!(v["enforcement_tier"], "landlock+seccomp", "{v}");
    assert_eq!(v["achieved_containment"], "scoped");
    assert_eq!(v["host_containment"], "scoped");
    assert_eq!(v["floor_met"], true);
}

#[test]
fn a_scoped_run_stages_by_copy_landlock_denies_outside_writes_and_apply_and_drop_work() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    s.write("a.txt", "old\n");
    std::fs::create_dir(s.work.path().join(".git")).unwrap();
    s.write(".git/HEAD", "ref: refs/heads/main\n");
    let outside = s.home.path().join("outside.txt");
    std::fs::write(&outside, "untouched\n").unwrap();
    let real_a = s.work.path().join("a.txt");
    let script = format!(
        "cat .git/HEAD; echo new > a.txt; echo added > b.txt; \
         (echo evil > '{}') 2>/dev/null && echo ESCAPED-OUTSIDE; \
         (echo evil > '{}') 2>/dev/null && echo ESCAPED-WORKDIR; \
         (cat '{}') 2>/dev/null && echo READ-REAL-HOME; \
         echo done",
        outside.display(),
        real_a.display(),
        outside.display(),
    );
    let (stdout, text) = succeeds(no_userns(&s), &["run", "--", "sh", "-c", &script]);
    assert!(
        stdout.contains("ref: refs/heads/main"),
        ".git is copied: {text}"
    );
    assert!(stdout.contains("done"), "{text}");
    for escape in ["ESCAPED-OUTSIDE", "ESCAPED-WORKDIR", "READ-REAL-HOME"] {
        assert!(!stdout.contains(escape), "{escape}: {text}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched\n");
    assert_eq!(std::fs::read_to_string(&real_a).unwrap(), "old\n");
    assert!(!s.work.path().join("b.txt").exists());

    let b = last_bundle(&s);
    assert_eq!(b["executor_observations"]["tier"], "landlock+seccomp");
    // Landlock has no right for file modes and times: the metadata filter's residual keeps
    // the write claim off (see a_scoped_run_cannot_change_host_metadata_…).
    assert_eq!(
        b["safety"]["filesystem_write_non_bypassable"], false,
        "{}",
        b["safety"]
    );
    assert_eq!(b["safety"]["host_process"], true);
    let cs = controls(&b);
    let has = |m: &str, d: &str, st: &str| {
        cs.iter()
            .any(|c| c["mechanism"] == m && c["dimension"] == d && c["status"] == st)
    };
    assert!(has("workdir_copy", "filesystem_write", "enforced"));
    assert!(has("landlock", "filesystem_write", "enforced"));
    assert!(has("seccomp", "kernel_surface", "enforced"));
    assert!(has("pidns", "process", "unavailable"));
    // The network claim follows what was installed: every network control enforced.
    let net: Vec<&Value> = cs.iter().filter(|c| c["dimension"] == "network").collect();
    assert!(!net.is_empty());
    let all_enforced = net.iter().all(|c| c["status"] == "enforced");
    assert_eq!(
        b["safety"]["network_non_bypassable"], all_enforced,
        "{net:?}"
    );
    assert_eq!(all_enforced, landlock_abi_independently() >= 9, "{net:?}");

    // Review, diff, a partial apply, then drop: unchanged commands on a copy stage.
    let review = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    let review = String::from_utf8_lossy(&review.stdout).into_owned();
    assert!(review.contains("modified     a.txt"), "{review}");
    assert!(review.contains("added        b.txt"), "{review}");
    let diff = s
        .cmd()
        .args(["diff", "last", "--path", "a.txt"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&diff.stdout).contains("+new"));
    let apply = s
        .cmd()
        .args(["apply", "last", "--path", "a.txt"])
        .output()
        .unwrap();
    assert!(apply.status.success(), "{}", out_text(&apply));
    assert_eq!(std::fs::read_to_string(&real_a).unwrap(), "new\n");
    assert!(!s.work.path().join("b.txt").exists());
    let drop = s.cmd().args(["drop", "last"]).output().unwrap();
    assert!(drop.status.success(), "{}", out_text(&drop));
    assert!(!s.work.path().join("b.txt").exists());
    assert_eq!(std::fs::read_to_string(&real_a).unwrap(), "new\n");
}

#[test]
fn a_scoped_run_cannot_reach_the_network_by_tcp_or_udp() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let script = format!(
        "(echo hi > /dev/tcp/127.0.0.1/{}) 2>/dev/null && echo TCP-CONNECTED; \
         (echo hi > /dev/udp/127.0.0.1/{}) 2>/dev/null && echo UDP-SENT; echo done",
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port()
    );
    let out = no_userns(&s)
        .args(["run", "--", "bash", "-c", &script])
        .output()
        .unwrap();
    let text = out_text(&out);
    if out.status.code() == Some(127) {
        require("bash", false);
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("done"), "{text}");
    assert!(!stdout.contains("TCP-CONNECTED"), "{text}");
    assert!(!stdout.contains("UDP-SENT"), "{text}");
    assert!(tcp.accept().is_err(), "a connection arrived");
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "a datagram arrived");
    let cs = controls(&last_bundle(&s));
    assert!(
        cs.iter().any(|c| c["mechanism"] == "landlock"
            && c["dimension"] == "network"
            && c["status"] == "enforced"
            && c["details"]["control"].is_null()),
        "Landlock's TCP rules: {cs:?}"
    );
    assert!(
        cs.iter().any(|c| c["mechanism"] == "seccomp"
            && c["dimension"] == "network"
            && c["status"] == "enforced"),
        "the socket-family filter: {cs:?}"
    );
}

#[test]
fn a_sealed_floor_without_user_namespaces_refuses_naming_apparmor_and_creates_nothing() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    s.write("a.txt", "old\n");
    let out = no_userns(&s)
        .args([
            "run",
            "--containment",
            "sealed",
            "--",
            "sh",
            "-c",
            "echo x > a.txt",
        ])
        .output()
        .unwrap();
    let text = out_text(&out);
    assert_eq!(out.status.code(), Some(125), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("user namespaces"), "{text}");
    assert!(
        stderr.contains("AppArmor") && stderr.contains("packaging/apparmor/cofferdam"),
        "{text}"
    );
    assert_eq!(jobs_in(s.store.path()), 0, "a job was created");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a.txt")).unwrap(),
        "old\n"
    );
}

#[test]
fn an_allowlist_without_a_network_namespace_refuses_and_creates_nothing() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    // The allowlist is enforced from the sandbox's own network namespace; the copy tiers
    // have none, and running anyway would leave the network unfiltered.
    for tier in [&["--tier", "scoped"][..], &[][..]] {
        let mut c = if tier.is_empty() {
            no_userns(&s)
        } else {
            s.cmd()
        };
        let out = c
            .arg("run")
            .args(tier)
            .args(["--allow-net", "127.0.0.1:9", "--", "true"])
            .output()
            .unwrap();
        let text = out_text(&out);
        assert_eq!(out.status.code(), Some(125), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("network namespace") && stderr.contains("--network none"),
            "{text}"
        );
        assert_eq!(jobs_in(s.store.path()), 0, "a job was created");
    }
}

#[test]
fn a_tier_override_only_lowers() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    let out = no_userns(&s)
        .args(["run", "--tier", "sealed", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out_text(&out));
    assert_eq!(
        last_bundle(&s)["executor_observations"]["tier"],
        "landlock+seccomp"
    );
    // Below the default floor (scoped) it refuses before creating anything.
    let t = Sandbox::new();
    let out = t
        .cmd()
        .args(["run", "--tier", "advisory", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", out_text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--containment advisory"));
    assert_eq!(jobs_in(t.store.path()), 0);
}

#[test]
fn an_advisory_run_claims_no_boundary_and_the_review_warns_first() {
    let s = Sandbox::new();
    s.write("a.txt", "old\n");
    let out = s
        .cmd()
        .args([
            "run",
            "--containment",
            "advisory",
            "--tier",
            "advisory",
            "--",
            "sh",
            "-c",
            "echo new > a.txt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out_text(&out));
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a.txt")).unwrap(),
        "old\n"
    );
    let b = last_bundle(&s);
    assert_eq!(b["executor_observations"]["tier"], "none");
    let sf = &b["safety"];
    for claim in [
        "filesystem_non_bypassable",
        "filesystem_read_non_bypassable",
        "filesystem_write_non_bypassable",
        "network_non_bypassable",
    ] {
        assert_eq!(sf[claim], false, "{claim}: {sf}");
    }
    assert_eq!(sf["host_process"], true);
    assert_eq!(sf["safe_profile_requested"], false);
    let warned = |list: &Value| {
        list.as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap_or("").starts_with("advisory tier"))
    };
    assert!(
        warned(&b["run"]["warnings"]) && warned(&sf["warnings"]),
        "{b}"
    );
    let review = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    let review = String::from_utf8_lossy(&review.stdout).into_owned();
    assert!(
        review
            .lines()
            .next()
            .unwrap_or("")
            .contains("WARNING: no boundary held"),
        "{review}"
    );
    assert!(review.contains("modified     a.txt"), "{review}");
    let apply = s.cmd().args(["apply", "last"]).output().unwrap();
    assert!(apply.status.success(), "{}", out_text(&apply));
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a.txt")).unwrap(),
        "new\n"
    );
}

#[test]
fn a_scoped_run_leaves_no_process_behind() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    // No pid namespace here: the init is a subreaper and kills what the command leaves.
    let out = no_userns(&s)
        .args([
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out_text(&out));
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).starts_with("sleep"),
        "the background sleep (pid {pid}) outlived the run"
    );
}

#[test]
fn a_scoped_run_stopped_by_its_timeout_leaves_no_process_behind() {
    let s = Sandbox::new();
    if !scoped_host() {
        return;
    }
    // The kill at the end of the grace period must not kill the init (the subreaper) before
    // the orphans it inherited, or they would go to the host's init and live on.
    let out = no_userns(&s)
        .args([
            "run",
            "-q",
            "--timeout",
            "1s",
            "--",
            "sh",
            "-c",
            "trap '' TERM; setsid sh -c 'trap \"\" TERM; exec sleep 1000' </dev/null >/dev/null 2>&1 & echo $!; sleep 30",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", out_text(&out));
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).starts_with("sleep"),
        "the background sleep (pid {pid}) outlived the timed-out run"
    );
}

#[test]
fn a_tier_cap_runs_scoped_for_the_invoking_user_and_the_read_claim_matches_a_real_read() {
    let s = Sandbox::new();
    if !require("Landlock", landlock_abi_independently() > 0) {
        return;
    }
    s.write("a.txt", "old\n");
    let secret = s.home.path().join(".ssh");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("id_ed25519"), "key\n").unwrap();
    let script = format!(
        "echo new > a.txt; (cat /etc/shadow) >/dev/null 2>&1 && echo READ-SHADOW; \
         (cat '{}') 2>/dev/null && echo READ-KEY; echo done",
        secret.join("id_ed25519").display()
    );
    let (stdout, text) = succeeds(
        s.cmd(),
        &["run", "--tier", "scoped", "--", "sh", "-c", &script],
    );
    assert!(
        stdout.contains("done") && !stdout.contains("READ-KEY"),
        "{text}"
    );
    let b = last_bundle(&s);
    assert_eq!(b["executor_observations"]["tier"], "landlock+seccomp");
    assert_eq!(b["executor_plan"]["floor_met"], true);
    let cs = controls(&b);
    let hidden = cs
        .iter()
        .find(|c| c["mechanism"] == "secrets_hidden")
        .expect("a secrets_hidden observation");
    // The bundle's claim follows what a real read inside could do.
    let shadow_read = stdout.contains("READ-SHADOW");
    assert_eq!(
        hidden["status"] == "partial",
        shadow_read,
        "{hidden} / {text}"
    );
    assert_eq!(
        b["safety"]["filesystem_read_non_bypassable"],
        !shadow_read
            && cs
                .iter()
                .filter(|c| c["dimension"] == "filesystem_read")
                .all(|c| c["status"] == "enforced")
    );
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a.txt")).unwrap(),
        "old\n"
    );
}

/// A file a test creates under /opt (a granted system directory) and removes on drop.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn xattr_of(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(r).ok().map(|len| buf[..len].to_vec())
}

fn mode_and_mtime(path: &Path) -> (u32, std::time::SystemTime) {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(path).unwrap();
    (m.permissions().mode() & 0o7777, m.modified().unwrap())
}

/// Review finding 0: Landlock has no right for chmod, utimes or xattrs, so a scoped run
/// could change the metadata of every host file its uid owns (as root: every system file).
/// The metadata filter refuses all of it for root (a root-owned file outside the copy, and
/// one under /opt reached through a read-only descriptor, stay as they were) and the
/// path-based xattr writes for any user; what stays open for a non-root user (modes and
/// times of its own files) is what the bundle and the scope report admit.
#[test]
fn a_scoped_run_cannot_change_host_metadata_beyond_what_the_bundle_admits() {
    let s = Sandbox::new();
    if !require("Landlock", landlock_abi_independently() > 0)
        || !require("/usr/bin/python3", Path::new("/usr/bin/python3").exists())
    {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let victim = s.home.path().join("victim");
    std::fs::write(&victim, "v\n").unwrap();
    let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_modified(then)
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    // As root, a root-owned file beneath a granted system directory: it can be opened
    // read-only, so the descriptor calls (fchmod, fsetxattr, futimens with times) are tried.
    let scratch = root.then(|| {
        let p =
            std::path::PathBuf::from(format!("/opt/cofferdam-test-meta-{}", std::process::id()));
        std::fs::write(&p, "s\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        Scratch(p)
    });
    let scratch_path = scratch
        .as_ref()
        .map_or_else(|| "/nonexistent".to_owned(), |s| s.0.display().to_string());
    let before = mode_and_mtime(&victim);
    let scratch_before = scratch.as_ref().map(|s| mode_and_mtime(&s.0));
    let py_fd = "import os,sys\n\
                 fd=os.open(sys.argv[1],os.O_RDONLY)\n\
                 for what,f in (('FCHMOD',lambda:os.fchmod(fd,0o666)),\
                 ('FSETXATTR',lambda:os.setxattr(fd,'user.cofferdam',b'1')),\
                 ('FUTIMES',lambda:os.utime(fd,(1,1)))):\n\
                 \x20   try:\n\
                 \x20       f(); print(what+'-OK')\n\
                 \x20   except OSError as e: print(what, e.errno)\n";
    let script = format!(
        "V='{v}'; chmod 0644 \"$V\" && echo CHMOD-OK; \
         touch -m -d 2001-01-01 \"$V\" && echo TOUCH-OK; \
         /usr/bin/python3 -c 'import os,sys; os.setxattr(sys.argv[1],\"user.cofferdam\",b\"1\")' \"$V\" \
           && echo XATTR-OK; \
         [ -e '{sc}' ] && /usr/bin/python3 fd.py '{sc}'; \
         touch new.sh && echo TOUCH-NEW-OK; chmod +x new.sh && echo COPY-CHMOD-OK; echo done",
        v = victim.display(),
        sc = scratch_path,
    );
    s.write("fd.py", py_fd);
    let (stdout, text) = succeeds(
        s.cmd(),
        &["run", "--tier", "scoped", "--", "sh", "-c", &script],
    );
    assert!(stdout.contains("done"), "{text}");
    // Every uid: the path-based xattr write is refused, the host file carries no xattr.
    assert!(!stdout.contains("XATTR-OK"), "{text}");
    assert_eq!(xattr_of(&victim, "user.cofferdam"), None);
    assert!(
        stdout.contains("TOUCH-NEW-OK"),
        "touch in the copy works: {text}"
    );
    let after = mode_and_mtime(&victim);
    if root {
        for escape in [
            "CHMOD-OK",
            "TOUCH-OK",
            "FCHMOD-OK",
            "FSETXATTR-OK",
            "FUTIMES-OK",
        ] {
            assert!(!stdout.contains(escape), "{escape}: {text}");
        }
        assert!(
            stdout.contains("FCHMOD 1"),
            "the descriptor was opened: {text}"
        );
        assert_eq!(after, before, "the root-owned file outside is unchanged");
        let sc = scratch.as_ref().unwrap();
        assert_eq!(
            Some(mode_and_mtime(&sc.0)),
            scratch_before,
            "/opt scratch unchanged"
        );
        assert_eq!(xattr_of(&sc.0, "user.cofferdam"), None);
        assert!(
            !stdout.contains("COPY-CHMOD-OK"),
            "documented cost for root: {text}"
        );
    } else {
        // The documented residual: a user's own file's mode and times; and chmod +x works.
        assert_eq!(stdout.contains("CHMOD-OK"), after.0 == 0o644, "{text}");
        assert!(stdout.contains("COPY-CHMOD-OK"), "{text}");
    }
    let b = last_bundle(&s);
    let cs = controls(&b);
    let meta = cs
        .iter()
        .find(|c| c["mechanism"] == "seccomp" && c["details"]["filter"] == "metadata_writes")
        .unwrap_or_else(|| panic!("a metadata filter observation: {cs:?}"));
    assert_eq!(meta["dimension"], "filesystem_write");
    assert_eq!(meta["status"], "partial", "{meta}");
    assert_eq!(meta["details"]["root"], root, "{meta}");
    let reason = meta["reason"].as_str().unwrap_or_default();
    if root {
        assert!(reason.contains("touch"), "{reason}");
    } else {
        assert!(reason.starts_with("file modes, timestamps"), "{reason}");
    }
    assert_eq!(b["safety"]["filesystem_write_non_bypassable"], false);
    assert!(
        b["safety"]["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap_or_default()
            .contains("file modes")
            || w.as_str().unwrap_or_default().contains("touch")),
        "{}",
        b["safety"]
    );
    let scope = json_of(
        &s.cmd()
            .args(["scope", "--tier", "scoped", "--json"])
            .output()
            .unwrap(),
    );
    let np = scope["filesystem_boundary"]["not_protected"].to_string();
    assert!(np.contains("metadata: file modes, timestamps"), "{np}");
}

/// Review findings 1, 3 and 10: with `--network none` on the scoped tier no TCP socket can
/// be made (so TCP Fast Open, which skips Landlock's connect hook, and a listen() that binds
/// by itself cannot happen), while a unix socket still binds and listens.
#[test]
fn a_scoped_run_cannot_fast_open_or_listen_on_tcp_but_unix_listen_works() {
    let s = Sandbox::new();
    if !require("Landlock", landlock_abi_independently() >= 4)
        || !require("/usr/bin/python3", Path::new("/usr/bin/python3").exists())
    {
        return;
    }
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    upstream.set_nonblocking(true).unwrap();
    let port = upstream.local_addr().unwrap().port();
    let py = "import socket,sys\n\
              port=int(sys.argv[1])\n\
              for fam,addr in ((socket.AF_INET,('127.0.0.1',port)),(socket.AF_INET6,('::1',port))):\n\
              \x20   try:\n\
              \x20       t=socket.socket(fam); t.sendto(b'TFO-ESCAPE',socket.MSG_FASTOPEN,addr); print('TFO-SENT')\n\
              \x20   except OSError as e: print('tfo', e.errno)\n\
              \x20   try:\n\
              \x20       l=socket.socket(fam); l.listen(1); print('LISTEN-OK', l.getsockname())\n\
              \x20   except OSError as e: print('listen', e.errno)\n\
              u=socket.socket(socket.AF_UNIX); u.bind('s.sock'); u.listen(1); print('UNIX-LISTEN-OK')\n\
              print('done')\n";
    let (stdout, text) = succeeds(
        s.cmd(),
        &[
            "run",
            "--tier",
            "scoped",
            "--",
            "/usr/bin/python3",
            "-c",
            py,
            &port.to_string(),
        ],
    );
    assert!(stdout.contains("done"), "{text}");
    assert!(!stdout.contains("TFO-SENT"), "{text}");
    assert!(!stdout.contains("LISTEN-OK ("), "{text}");
    assert!(stdout.contains("UNIX-LISTEN-OK"), "{text}");
    let eafnosupport = format!("tfo {}", libc::EAFNOSUPPORT);
    assert!(stdout.contains(&eafnosupport), "{text}");
    assert!(
        upstream.accept().is_err(),
        "a connection reached the host listener"
    );
    let cs = controls(&last_bundle(&s));
    let filter = cs
        .iter()
        .find(|c| c["mechanism"] == "seccomp" && c["dimension"] == "network")
        .unwrap_or_else(|| panic!("the socket filter: {cs:?}"));
    assert_eq!(filter["status"], "enforced");
    assert_eq!(
        filter["details"]["allowed"],
        serde_json::json!(["AF_UNIX", "AF_NETLINK"])
    );
    assert!(
        filter["details"]["refused"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("MSG_FASTOPEN")),
        "{filter}"
    );
}
