//! Filesystem read, the secret list: every credential on it stays unreadable where home shows
//! inside (lent with `--mount`, or the workdir itself), and the host's SSH host keys (any
//! `ssh_host_*_key`, and a `HostKey` that `sshd_config` names), WireGuard and Let's Encrypt
//! keys stay unreadable to a root run. Canaries only: files in the harness's fake home, and
//! as root files the probe creates under /etc (directories only when absent), all removed
//! afterwards whatever happens.

use crate::harness::{
    Attack, BOTH_MUST, Boundary::FsRead, Ctx, Outcome, SCOPED_READS, SEALED_MUST, Tier,
    Tier::Scoped, Tier::Sealed, Verdict::Documented, Verdict::Must, check,
};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fr.home-credentials-workdir",
        boundary: FsRead,
        description: "with the workdir = home, read ~/.npmrc, ~/.vault-token, ~/.config/git/credentials, ~/.kube/config, ... (one a symlink into the workdir)",
        on: BOTH_MUST,
        probe: home_credentials_workdir,
    },
    Attack {
        id: "fr.home-credentials-lent",
        boundary: FsRead,
        description: "home lent at its own path (--mount ~:~:read): read ~/.npmrc, ~/.pypirc, ~/.docker/config.json, ...",
        on: SEALED_MUST,
        probe: home_credentials_lent,
    },
    Attack {
        id: "fr.host-keys-as-root",
        boundary: FsRead,
        description: "as root: read an extra /etc/ssh/ssh_host_*_key, a HostKey named by sshd_config, /etc/wireguard and /etc/letsencrypt keys",
        on: &[(Sealed, Must), (Scoped, Documented(SCOPED_READS))],
        probe: host_keys_as_root,
    },
];

const MARK: &str = "CANARY-5ec2e7-cofferdam";

/// The credential files of the secret list, relative to home, that the probes plant.
const HOME_FILES: &[&str] = &[
    ".config/git/credentials",
    ".npmrc",
    ".pypirc",
    ".vault-token",
    ".cargo/credentials.toml",
    ".kube/config",
    ".docker/config.json",
    ".git-credentials",
    ".ssh/id_ed25519",
];

fn plant_home(ctx: &Ctx) {
    for f in HOME_FILES {
        ctx.put(&ctx.home().join(f), MARK);
    }
}

fn unread(r: &crate::harness::Run) -> bool {
    !r.out.contains(MARK) && !r.err.contains(MARK)
}

/// Read every planted file by its home path and by its path relative to the start
/// directory (the copy, on the copy tiers), and list what is there.
const READ_ALL: &str = r#"for f in .config/git/credentials .npmrc .pypirc .vault-token .cargo/credentials.toml .kube/config .docker/config.json .git-credentials .ssh/id_ed25519 dotfiles/npmrc-real; do
  cat "$f" "$HOSTHOME/$f" "$HOME/$f" 2>/dev/null
done
grep -r CANARY . "$HOSTHOME" 2>/dev/null
true"#;

fn home_credentials_workdir(ctx: &Ctx) -> Outcome {
    plant_home(ctx);
    // A dotfile manager's link: the content lies elsewhere in the workdir.
    let npmrc = ctx.home().join(".npmrc");
    std::fs::remove_file(&npmrc).unwrap();
    ctx.put(&ctx.home().join("dotfiles/npmrc-real"), MARK);
    std::os::unix::fs::symlink("dotfiles/npmrc-real", &npmrc).unwrap();
    let w = ctx.home().display().to_string();
    let r = ctx.run(&["--workdir", &w], &["sh", "-c", READ_ALL]);
    ctx.assert_boundary(&r);
    let secrets = crate::harness::controls_of(&r.bundle, "secrets_hidden");
    assert_eq!(secrets.len(), 1, "{secrets:?}");
    if ctx.tier() == Tier::Sealed {
        let masked = secrets[0]["details"]["masked"].to_string();
        assert!(masked.contains(".vault-token"), "{masked}");
        assert_eq!(secrets[0]["details"]["read_back"], true);
    } else {
        // Left out of the copy, and their places there checked unopenable.
        let copy = crate::harness::controls_of(&r.bundle, "workdir_copy");
        assert!(
            copy[0]["details"]["secrets_left_out"].as_u64().unwrap_or(0) >= 1,
            "{copy:?}"
        );
        let checked = secrets[0]["details"]["checked"].as_u64().unwrap_or(0);
        let hidden = ctx.scope()["hidden_paths"].as_array().unwrap().len() as u64;
        assert!(
            checked > hidden,
            "the copy's places are checked: {checked} <= {hidden}"
        );
    }
    check(
        unread(&r),
        format!(
            "{} credential files (one a symlink into the workdir) unreadable in the workdir = home",
            HOME_FILES.len() + 1
        ),
        format!("a credential was read: {}", r.out),
    )
}

fn home_credentials_lent(ctx: &Ctx) -> Outcome {
    plant_home(ctx);
    let h = ctx.home().display().to_string();
    let lend = format!("{h}:{h}:read");
    let r = ctx.run(&["--mount", &lend], &["sh", "-c", READ_ALL]);
    ctx.assert_boundary(&r);
    let secrets = crate::harness::controls_of(&r.bundle, "secrets_hidden");
    assert_eq!(secrets[0]["status"], "enforced", "{secrets:?}");
    assert_eq!(secrets[0]["details"]["read_back"], true);
    check(
        unread(&r),
        format!(
            "{} credential files masked in the lent home",
            HOME_FILES.len()
        ),
        format!("a credential was read through the lent home: {}", r.out),
    )
}

/// One probe at a time creates canaries under /etc (the tiers run in parallel): a directory
/// one of them created is removed by it, never while another's file is inside.
static ETC: Mutex<()> = Mutex::new(());

/// Canaries under /etc, removed (and the directories created for them) when dropped.
#[derive(Default)]
struct EtcCanaries {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl EtcCanaries {
    fn dir(&mut self, d: &Path) {
        if let Some(parent) = d.parent()
            && !parent.exists()
        {
            self.dir(parent);
        }
        if !d.exists() {
            std::fs::create_dir(d).unwrap();
            self.dirs.push(d.to_path_buf());
        }
    }

    fn file(&mut self, p: &Path, text: &str, mode: u32) {
        self.dir(p.parent().unwrap());
        assert!(!p.exists(), "{} exists already", p.display());
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .unwrap();
        self.files.push(p.to_path_buf());
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    }
}

impl Drop for EtcCanaries {
    fn drop(&mut self) {
        for f in self.files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn host_keys_as_root(ctx: &Ctx) -> Outcome {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Outcome::Skipped(
            "root only: the host's keys are root's 0600 files, unreadable to this user".into(),
        );
    }
    let _one = ETC.lock().unwrap_or_else(|e| e.into_inner());
    let n = format!("{}x{}", std::process::id(), crate::harness::unique());
    let host_key = PathBuf::from(format!("/etc/ssh/ssh_host_cofferdamtest{n}_key"));
    let named = PathBuf::from(format!("/etc/ssh/cofferdam-test-{n}.hostkey"));
    let wg = PathBuf::from(format!("/etc/wireguard/cofferdam-test-{n}.conf"));
    let le_live = PathBuf::from(format!(
        "/etc/letsencrypt/live/cofferdam-test-{n}/privkey.pem"
    ));
    let le_archive = PathBuf::from(format!(
        "/etc/letsencrypt/archive/cofferdam-test-{n}/privkey1.pem"
    ));
    let config = Path::new("/etc/ssh/sshd_config");
    let mut c = EtcCanaries::default();
    for p in [&host_key, &named, &wg, &le_live, &le_archive] {
        c.file(p, MARK, 0o600);
    }
    // sshd_config only when the host has none (this one: none), removed afterwards.
    let with_config = !config.exists();
    if with_config {
        c.file(
            config,
            &format!(
                "# cofferdam escape-suite canary\nHostKey {}\n",
                named.display()
            ),
            0o644,
        );
    }
    let paths = [&host_key, &named, &wg, &le_live, &le_archive]
        .map(|p| p.display().to_string())
        .join("\n");
    ctx.var("CANARIES", paths);
    let r = ctx.sh(
        r#"echo "$CANARIES" | while read -r p; do cat "$p" 2>/dev/null; done
ls -R /etc/wireguard /etc/letsencrypt 2>/dev/null | grep cofferdam-test | sed 's/^/listed:/'
true"#,
    );
    ctx.assert_boundary(&r);
    let hidden = ctx.scope()["hidden_paths"].to_string();
    // The sealed tier masks them, so its scope report lists them; the scoped tier cannot
    // (Landlock grants /etc whole), so its report must not promise them.
    assert_eq!(
        hidden.contains(&host_key.display().to_string()),
        ctx.tier() == Tier::Sealed,
        "the scope report lists the extra host key exactly when the tier hides it: {hidden}"
    );
    if with_config && ctx.tier() == Tier::Sealed {
        assert!(
            hidden.contains(&named.display().to_string()),
            "the scope report lists sshd_config's HostKey: {hidden}"
        );
    }
    let secrets = crate::harness::controls_of(&r.bundle, "secrets_hidden");
    if ctx.tier() == Tier::Scoped {
        // Landlock grants /etc whole; a root run reads what root may: the bundle must say
        // which secrets were readable.
        let exposed = secrets[0]["details"]["exposed"].to_string();
        assert_eq!(secrets[0]["status"], "partial", "{secrets:?}");
        assert!(
            exposed.contains(&host_key.display().to_string()),
            "the bundle names the readable host key: {exposed}"
        );
    }
    let listed = r.out.contains("listed:");
    check(
        unread(&r) && !listed,
        format!(
            "host keys (glob{}), WireGuard and Let's Encrypt canaries masked",
            if with_config {
                " and sshd_config's HostKey"
            } else {
                ""
            }
        ),
        format!("read as root: {}", r.out),
    )
}
