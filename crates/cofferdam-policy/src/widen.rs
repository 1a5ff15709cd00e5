//! Which keys of a workdir's `cofferdam.toml` grant more than the user allowed (issue 19).
//!
//! Owns one decision: given the user's baseline (flags and user config, without the
//! manifest) and the effective policy (the same with the manifest), list every manifest key
//! whose contribution widens the baseline, with why. A manifest may narrow freely; one that
//! widens runs only when the user trusted that exact file (`crate::trust`). Pure: it reads
//! nothing and does not decide what happens to the run.

use crate::allow::HostPattern;
use crate::allow::{AllowEntry, NetworkMode};
use crate::manifest::{Manifest, MountMode};
use crate::policy::{Mount, Policy, USER_CONFIG_ORIGIN};

/// One widening key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    /// The manifest's TOML key path, e.g. `network.mode` or `filesystem.mounts[0]`.
    pub key: String,
    /// What it grants beyond the baseline.
    pub why: String,
}

/// How far a network mode opens (none < allow < host).
pub(crate) fn net_rank(mode: NetworkMode) -> u8 {
    match mode {
        NetworkMode::None => 0,
        NetworkMode::Allow => 1,
        NetworkMode::Host => 2,
    }
}

/// How much a mount mode lends (hide < read < stage < write).
pub(crate) fn mode_rank(mode: MountMode) -> u8 {
    match mode {
        MountMode::Hide => 0,
        MountMode::Read => 1,
        MountMode::Stage => 2,
        MountMode::Write => 3,
    }
}

/// Whether `outer` lets through everything `inner` names.
pub(crate) fn entry_covers(outer: &AllowEntry, inner: &AllowEntry) -> bool {
    let host = match (&outer.host, &inner.host) {
        (a, b) if a == b => true,
        (HostPattern::Below(d), HostPattern::Name(n) | HostPattern::Below(n)) => {
            n.ends_with(&format!(".{d}"))
        }
        _ => false,
    };
    host && inner.ports.iter().all(|p| outer.ports.contains(p))
}

/// Whether a baseline mount already lends what `m` asks for.
pub(crate) fn mount_covered(m: &Mount, baseline: &[Mount]) -> bool {
    baseline.iter().any(|b| {
        b.source == m.source && b.target == m.target && mode_rank(b.mode) >= mode_rank(m.mode)
    })
}

/// Every key of `manifest` that makes `effective` wider than `baseline`, in manifest order.
pub fn widening(manifest: &Manifest, baseline: &Policy, effective: &Policy) -> Vec<Widening> {
    let mut out: Vec<Widening> = Vec::new();
    let mut push = |key: &str, why: String| match out.iter_mut().find(|w| w.key == key) {
        Some(w) => {
            w.why.push_str("; ");
            w.why.push_str(&why);
        }
        None => out.push(Widening {
            key: key.to_owned(),
            why,
        }),
    };
    if effective.floor < baseline.floor {
        push(
            "containment",
            format!(
                "`{}` is weaker than the `{}` your flags and config require",
                effective.floor.wire_name(),
                baseline.floor.wire_name()
            ),
        );
    }
    if !effective.workdir.starts_with(&baseline.workdir) {
        push(
            "filesystem.workdir",
            format!(
                "moves the workdir to {}, outside {}",
                effective.workdir.display(),
                baseline.workdir.display()
            ),
        );
    }
    if effective.workdir_exec && !baseline.workdir_exec {
        push(
            "filesystem.workdir_exec",
            "lets workdir files be executed, which your config forbids".to_owned(),
        );
    }
    for m in &effective.mounts {
        let from_manifest = m.origin.starts_with("filesystem.mounts[");
        if !from_manifest || m.mode == MountMode::Hide || mount_covered(m, &baseline.mounts) {
            continue;
        }
        let why = match m.mode {
            MountMode::Write => format!(
                "lends {} writable directly on the host (mode `write`)",
                m.source.display()
            ),
            MountMode::Stage => format!("lends {} writable (mode `stage`)", m.source.display()),
            _ if !m.source.starts_with(&baseline.workdir) => {
                format!("lends {}, outside the workdir", m.source.display())
            }
            _ => continue,
        };
        push(&m.origin, why);
    }
    if net_rank(effective.network.mode) > net_rank(baseline.network.mode) {
        let key = if manifest.network.mode.is_some() {
            "network.mode"
        } else {
            "network.allow"
        };
        push(
            key,
            format!(
                "opens the network to `{}` where your flags and config give `{}`",
                effective.network.mode.wire_name(),
                baseline.network.mode.wire_name()
            ),
        );
    }
    if effective.network.mode == NetworkMode::Allow && baseline.network.mode != NetworkMode::Host {
        let extra: Vec<String> = effective
            .network
            .allow
            .iter()
            .filter(|e| !baseline.network.allow.iter().any(|b| entry_covers(b, e)))
            .map(ToString::to_string)
            .collect();
        if !extra.is_empty() {
            push(
                "network.allow",
                format!("adds destinations {}", extra.join(", ")),
            );
        }
    }
    let extra = |eff: &[String], base: &[String]| -> Vec<String> {
        eff.iter().filter(|n| !base.contains(n)).cloned().collect()
    };
    let env = extra(&effective.env_allow, &baseline.env_allow);
    if !env.is_empty() {
        push(
            "env.allow",
            format!("passes host variables {}", env.join(", ")),
        );
    }
    let exec = extra(&effective.exec_allow, &baseline.exec_allow);
    if !exec.is_empty() {
        push(
            "exec.allow",
            format!("declares programs {}", exec.join(", ")),
        );
    }
    for (name, removed) in resource_widening(&baseline.resources, &effective.resources) {
        let why = if removed {
            "removes the limit your flags, config or cofferdam's default set"
        } else {
            "raises the limit your flags, config or cofferdam's default set"
        };
        push(&format!("resources.{name}"), why.to_owned());
    }
    out
}

/// The resource dimensions (their manifest names) whose limit `e` removes (`true`) or
/// raises (`false`) over `b`; shared with `crate::inherit`.
pub(crate) fn resource_widening(
    b: &crate::policy::ResourceRequest,
    e: &crate::policy::ResourceRequest,
) -> Vec<(&'static str, bool)> {
    let mut out = Vec::new();
    // One row per dimension, both limits as numbers of the dimension's unit.
    macro_rules! dim {
        ($name:ident, $num:expr) => {
            (stringify!($name), b.$name.map($num), e.$name.map($num))
        };
    }
    let bytes = |v: crate::units::ByteSize| v.0 as f64;
    let secs = |v: crate::units::Span| v.0.as_secs_f64();
    let count = |v: u64| v as f64;
    let dims = [
        dim!(memory, bytes),
        dim!(pids, count),
        dim!(cpus, |v: f64| v),
        dim!(timeout, secs),
        dim!(cpu_time, secs),
        dim!(max_file_size, bytes),
        dim!(open_files, count),
        dim!(io_bps, bytes),
        dim!(tmp_size, bytes),
        dim!(stage_size, bytes),
    ];
    for (name, base, eff) in dims {
        match (base, eff) {
            (Some(_), None) => out.push((name, true)),
            (Some(bv), Some(ev)) if ev > bv => out.push((name, false)),
            _ => {}
        }
    }
    out
}

/// Whether a mount origin is the user config's.
pub fn is_user_config_origin(origin: &str) -> bool {
    origin.starts_with(USER_CONFIG_ORIGIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse_manifest;
    use crate::policy::{LoadedManifest, Places, RunFlags, resolve_layered};

    fn places() -> Places {
        Places {
            cwd: "/w/proj".into(),
            home: "/home/u".into(),
        }
    }

    fn loaded(path: &str, text: &str) -> LoadedManifest {
        LoadedManifest {
            path: path.into(),
            manifest: parse_manifest(path, text).unwrap(),
        }
    }

    /// The widening keys of manifest `m` over user config `user` and `flags`.
    fn keys_with(user: &str, m: &str, flags: &RunFlags) -> Vec<String> {
        let u = loaded("/home/u/.config/cofferdam/config.toml", user);
        let l = loaded("/w/proj/cofferdam.toml", m);
        let base = resolve_layered(Some(&u), None, flags, &places()).unwrap();
        let eff = resolve_layered(Some(&u), Some(&l), flags, &places()).unwrap();
        widening(&l.manifest, &base, &eff)
            .into_iter()
            .map(|w| w.key)
            .collect()
    }

    fn keys(user: &str, m: &str) -> Vec<String> {
        keys_with(user, m, &RunFlags::default())
    }

    #[test]
    fn narrowing_manifests_widen_nothing() {
        for m in [
            "",
            "containment = \"sealed\"",
            "containment = \"scoped\"",
            "[filesystem]\nread_only = [\".git\"]\nworkdir_exec = false",
            "[filesystem]\nworkdir = \"src\"",
            "[filesystem]\nworkdir = \".\"",
            "[filesystem]\nworkdir = \"src\"\n[[filesystem.mounts]]\nsource = \"vendor\"\nmode = \"read\"",
            "[[filesystem.mounts]]\nsource = \"vendor\"\nmode = \"read\"",
            "[[filesystem.mounts]]\nsource = \"/opt\"\nmode = \"hide\"",
            "[network]\nmode = \"none\"",
            "[resources]\nmemory = \"1GiB\"\npids = 64\ncpus = 1\ntimeout = \"1m\"",
            "[resources]\ncpu_time = \"1m\"\nmax_file_size = \"1MiB\"\nopen_files = 64",
            "[resources]\nio_bps = \"1MiB\"\ntmp_size = \"1MiB\"\nstage_size = \"1GiB\"",
        ] {
            assert_eq!(keys("", m), Vec::<String>::new(), "{m}");
        }
    }

    #[test]
    fn every_widening_dimension_is_named_by_its_key() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("", "containment = \"advisory\"", &["containment"]),
            (
                "containment = \"sealed\"",
                "containment = \"scoped\"",
                &["containment"],
            ),
            (
                "",
                "[filesystem]\nworkdir = \"..\"",
                &["filesystem.workdir"],
            ),
            ("", "[filesystem]\nworkdir = \"/\"", &["filesystem.workdir"]),
            (
                "[filesystem]\nworkdir_exec = false",
                "[filesystem]\nworkdir_exec = true",
                &["filesystem.workdir_exec"],
            ),
            (
                "",
                "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"read\"",
                &["filesystem.mounts[0]"],
            ),
            (
                "",
                "[[filesystem.mounts]]\nsource = \"~/.local/share\"\nmode = \"read\"",
                &["filesystem.mounts[0]"],
            ),
            (
                "",
                "[[filesystem.mounts]]\nsource = \"cache\"\nmode = \"write\"",
                &["filesystem.mounts[0]"],
            ),
            (
                "",
                "[[filesystem.mounts]]\nsource = \"x\"\nmode = \"hide\"\n\
                 [[filesystem.mounts]]\nsource = \"/srv\"\nmode = \"stage\"",
                &["filesystem.mounts[1]"],
            ),
            ("", "[network]\nmode = \"host\"", &["network.mode"]),
            (
                "",
                "[network]\nmode = \"allow\"\nallow = [\"x.org\"]",
                &["network.mode", "network.allow"],
            ),
            ("", "[network]\nallow = [\"x.org\"]", &["network.allow"]),
            (
                "[network]\nallow = [\"x.org\"]",
                "[network]\nmode = \"host\"",
                &["network.mode"],
            ),
            (
                "[network]\nallow = [\"x.org\"]",
                "[network]\nallow = [\"y.org\"]",
                &["network.allow"],
            ),
            (
                "[network]\nallow = [\"x.org:443\"]",
                "[network]\nallow = [\"x.org\"]",
                &["network.allow"],
            ),
            ("", "[env]\nallow = [\"AWS_SECRET\"]", &["env.allow"]),
            (
                "[env]\nallow = [\"A\"]",
                "[env]\nallow = [\"A\", \"B\"]",
                &["env.allow"],
            ),
            ("", "[exec]\nallow = [\"sh\"]", &["exec.allow"]),
            ("", "[resources]\npids = \"none\"", &["resources.pids"]),
            ("", "[resources]\npids = 99999", &["resources.pids"]),
            (
                "[resources]\nmemory = \"1GiB\"",
                "[resources]\nmemory = \"2GiB\"",
                &["resources.memory"],
            ),
            (
                "[resources]\ncpus = 1",
                "[resources]\ncpus = 2",
                &["resources.cpus"],
            ),
            (
                "[resources]\ntimeout = \"1m\"\ncpu_time = \"1m\"",
                "[resources]\ntimeout = \"2m\"\ncpu_time = \"2m\"",
                &["resources.timeout", "resources.cpu_time"],
            ),
            (
                "[resources]\nmax_file_size = \"1MiB\"\nopen_files = 8\nio_bps = \"1MiB\"",
                "[resources]\nmax_file_size = \"2MiB\"\nopen_files = 9\nio_bps = \"2MiB\"",
                &[
                    "resources.max_file_size",
                    "resources.open_files",
                    "resources.io_bps",
                ],
            ),
            (
                "[resources]\ntmp_size = \"1MiB\"\nstage_size = \"1MiB\"",
                "[resources]\ntmp_size = \"2MiB\"\nstage_size = \"2MiB\"",
                &["resources.tmp_size", "resources.stage_size"],
            ),
        ];
        for (user, m, want) in cases {
            assert_eq!(keys(user, m), *want, "user {user:?} manifest {m:?}");
        }
    }

    #[test]
    fn what_the_user_already_grants_is_not_widening() {
        let cases: &[(&str, &str)] = &[
            ("containment = \"advisory\"", "containment = \"advisory\""),
            (
                "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"write\"",
                "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"read\"",
            ),
            (
                "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"write\"",
                "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"stage\"",
            ),
            (
                "[network]\nmode = \"host\"",
                "[network]\nallow = [\"x.org\"]",
            ),
            (
                "[network]\nallow = [\"*.x.org\"]",
                "[network]\nallow = [\"a.x.org:443\"]",
            ),
            ("[env]\nallow = [\"A\", \"B\"]", "[env]\nallow = [\"B\"]"),
            ("[resources]\npids = \"none\"", "[resources]\npids = 99999"),
            (
                "[resources]\nmemory = \"2GiB\"",
                "[resources]\nmemory = \"2GiB\"",
            ),
        ];
        for (user, m) in cases {
            assert_eq!(
                keys(user, m),
                Vec::<String>::new(),
                "user {user:?} manifest {m:?}"
            );
        }
        // A read mount the config lends read-only does not cover a write of it.
        assert_eq!(
            keys(
                "[[filesystem.mounts]]\nsource = \"/srv\"\nmode = \"read\"",
                "[[filesystem.mounts]]\nsource = \"/srv\"\nmode = \"write\""
            ),
            ["filesystem.mounts[0]"]
        );
        // Nor does the same source at another target.
        assert_eq!(
            keys(
                "[[filesystem.mounts]]\nsource = \"/srv\"\nmode = \"read\"",
                "[[filesystem.mounts]]\nsource = \"/srv\"\ntarget = \"/x\"\nmode = \"read\""
            ),
            ["filesystem.mounts[0]"]
        );
    }

    #[test]
    fn flags_are_the_baseline_too() {
        let flags = RunFlags {
            network: Some("host".into()),
            containment: None,
            mounts: vec!["/srv/out:write".into()],
            env: vec!["TOKEN".into()],
            memory: Some("8GiB".into()),
            ..RunFlags::default()
        };
        let m = "[network]\nmode = \"host\"\n[env]\nallow = [\"TOKEN\"]\n\
                 [[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"write\"\n\
                 [resources]\nmemory = \"16GiB\"";
        // The flag overrides the manifest's memory, so 16GiB never applies.
        assert_eq!(keys_with("", m, &flags), Vec::<String>::new());
        assert_eq!(
            keys(
                "",
                "[network]\nmode = \"host\"\n[env]\nallow = [\"TOKEN\"]\n\
                 [resources]\nmemory = \"16GiB\""
            ),
            ["network.mode", "env.allow"]
        );
        // A config limit the manifest raises, then a flag that raises it further.
        let flags = RunFlags {
            containment: Some(cofferdam_record::ContainmentClass::Sealed),
            ..RunFlags::default()
        };
        assert_eq!(
            keys_with("", "containment = \"advisory\"", &flags),
            Vec::<String>::new()
        );
    }

    #[test]
    fn why_says_what_is_granted() {
        let u = loaded("/c/config.toml", "");
        let l = loaded(
            "/w/proj/cofferdam.toml",
            "[[filesystem.mounts]]\nsource = \"/srv/out\"\nmode = \"write\"",
        );
        let base = resolve_layered(Some(&u), None, &RunFlags::default(), &places()).unwrap();
        let eff = resolve_layered(Some(&u), Some(&l), &RunFlags::default(), &places()).unwrap();
        let w = widening(&l.manifest, &base, &eff);
        assert_eq!(w.len(), 1);
        assert!(w[0].why.contains("/srv/out"), "{w:?}");
        assert!(w[0].why.contains("write"), "{w:?}");
    }
}
