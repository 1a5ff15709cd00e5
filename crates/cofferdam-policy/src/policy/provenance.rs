//! Where each grant of a resolved policy came from: a flag, the user config, the manifest
//! (narrowing, or trusted to widen) or cofferdam's default (issue 19).
//!
//! Part of resolving (`super::resolve_layered` fills `Policy::grant_sources` with it), so it
//! lives under `policy` and reads its types from there. Pure: it reads the layers as given
//! and the policy resolved from them; it decides nothing. A grant several layers name is
//! credited to the user's own first (flag, then user config), since the manifest did not
//! widen it.

use super::{LEND_SECRET, Mount, Policy, RunFlags, USER_CONFIG_ORIGIN};
use crate::allow::AllowEntry;
use crate::manifest::Manifest;
use cofferdam_record::scope::{GrantSource, GrantSourceReport};

/// A mount as its grant is shown: `SRC -> TGT (MODE)`.
pub fn mount_value(m: &Mount) -> String {
    format!(
        "{} -> {} ({})",
        m.source.display(),
        m.target.display(),
        m.mode.wire_name()
    )
}

/// The grants of `p` and their sources. `manifest_source` is how the manifest's own grants
/// are labelled (`Manifest` or `TrustedManifest`).
pub fn grant_sources(
    user: Option<&Manifest>,
    manifest: Option<&Manifest>,
    flags: &RunFlags,
    p: &Policy,
    manifest_source: GrantSource,
) -> Vec<GrantSourceReport> {
    let empty = Manifest::default();
    let u = user.unwrap_or(&empty);
    let m = manifest.unwrap_or(&empty);
    let mut out = Vec::new();
    let mut push = |grant: &str, value: String, source: GrantSource| {
        out.push(GrantSourceReport {
            grant: grant.to_owned(),
            value,
            source,
            profile: None,
            absent: false,
        })
    };
    // A scalar: the highest layer that sets it.
    let scalar = |flag: bool, man: bool, usr: bool| {
        if flag {
            GrantSource::Flag
        } else if man {
            manifest_source
        } else if usr {
            GrantSource::UserConfig
        } else {
            GrantSource::Default
        }
    };
    // A list entry: the user's own layers first.
    let entry = |flag: bool, usr: bool| {
        if flag {
            GrantSource::Flag
        } else if usr {
            GrantSource::UserConfig
        } else {
            manifest_source
        }
    };

    push(
        "containment",
        p.floor.wire_name().to_owned(),
        if flags.containment == Some(p.floor) {
            GrantSource::Flag
        } else {
            scalar(
                false,
                m.containment == Some(p.floor),
                u.containment == Some(p.floor),
            )
        },
    );
    push(
        "filesystem.workdir",
        p.workdir.display().to_string(),
        scalar(
            flags.workdir.is_some(),
            m.filesystem.workdir.is_some(),
            false,
        ),
    );
    push(
        "filesystem.workdir_exec",
        p.workdir_exec.to_string(),
        scalar(
            false,
            m.filesystem.workdir_exec.is_some(),
            u.filesystem.workdir_exec.is_some(),
        ),
    );
    for r in &p.read_only {
        let flag = flags.read_only.iter().any(|f| f.trim_end_matches('/') == r);
        push(
            "filesystem.read_only",
            r.clone(),
            entry(flag, u.filesystem.read_only.contains(r)),
        );
    }
    for mt in &p.mounts {
        let source = if mt.origin == "--mount" || mt.origin == LEND_SECRET {
            GrantSource::Flag
        } else if mt.origin.starts_with(USER_CONFIG_ORIGIN) {
            GrantSource::UserConfig
        } else {
            manifest_source
        };
        push("filesystem.mounts", mount_value(mt), source);
    }
    let net_flag = flags.network.is_some() || !flags.allow_net.is_empty();
    let net_source = if net_flag {
        GrantSource::Flag
    } else if m.network.mode.is_some() {
        manifest_source
    } else if u.network.mode.is_some() {
        GrantSource::UserConfig
    } else {
        scalar(
            false,
            !m.network.allow.is_empty(),
            !u.network.allow.is_empty(),
        )
    };
    push(
        "network.mode",
        p.network.mode.wire_name().to_owned(),
        net_source,
    );
    let flag_allow: Vec<AllowEntry> = flags
        .allow_net
        .iter()
        .filter_map(|w| w.parse().ok())
        .collect();
    for a in &p.network.allow {
        push(
            "network.allow",
            a.to_string(),
            entry(flag_allow.contains(a), u.network.allow.contains(a)),
        );
    }
    for n in &p.env_allow {
        push(
            "env.allow",
            n.clone(),
            entry(flags.env.contains(n), u.env.allow.contains(n)),
        );
    }
    // Set values (`--env NAME=VALUE`; a profile's are credited when it is applied): the
    // name only, as values never appear in records.
    for (n, _) in &p.env_set {
        push("env.set", n.clone(), GrantSource::Flag);
    }
    for n in &p.exec_allow {
        push(
            "exec.allow",
            n.clone(),
            entry(false, u.exec.allow.contains(n)),
        );
    }
    let (fr, mr, ur, r) = (&flags, &m.resources, &u.resources, &p.resources);
    // One row per dimension: its value shown, and which layers set it.
    macro_rules! dim {
        ($name:ident, $show:expr) => {
            (
                stringify!($name),
                r.$name.map($show),
                fr.$name.is_some(),
                mr.$name.is_some(),
                ur.$name.is_some(),
            )
        };
    }
    let bytes = |v: crate::units::ByteSize| v.0.to_string();
    let ms = |v: crate::units::Span| format!("{}ms", v.as_millis_u64());
    let dims = [
        dim!(memory, bytes),
        dim!(pids, |v| v.to_string()),
        dim!(cpus, |v| v.to_string()),
        dim!(timeout, ms),
        dim!(cpu_time, ms),
        dim!(max_file_size, bytes),
        dim!(open_files, |v| v.to_string()),
        dim!(io_bps, bytes),
        dim!(tmp_size, bytes),
        dim!(stage_size, bytes),
    ];
    for (name, value, f, mm, uu) in dims {
        let source = scalar(f, mm, uu);
        // An unlimited dimension nobody asked about is not a grant worth a row.
        if value.is_none() && source == GrantSource::Default {
            continue;
        }
        push(
            &format!("resources.{name}"),
            value.unwrap_or_else(|| crate::manifest::NO_LIMIT.to_owned()),
            source,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse_manifest;
    use crate::policy::{LoadedManifest, Places, resolve_layered};

    fn source_of(rows: &[GrantSourceReport], grant: &str, value: &str) -> GrantSource {
        rows.iter()
            .find(|r| r.grant == grant && r.value.contains(value))
            .unwrap_or_else(|| panic!("no {grant} {value} in {rows:?}"))
            .source
    }

    #[test]
    fn each_grant_names_its_layer() {
        let places = Places {
            cwd: "/w/p".into(),
            home: "/home/u".into(),
        };
        let u = LoadedManifest {
            path: "/home/u/.config/cofferdam/config.toml".into(),
            manifest: parse_manifest(
                "c",
                "[env]\nallow = [\"A\"]\n[resources]\nmemory = \"1GiB\"\n\
                 [[filesystem.mounts]]\nsource = \"/opt/u\"\nmode = \"read\"",
            )
            .unwrap(),
        };
        let m = LoadedManifest {
            path: "/w/p/cofferdam.toml".into(),
            manifest: parse_manifest(
                "m",
                "containment = \"sealed\"\n[env]\nallow = [\"A\", \"B\"]\n\
                 [resources]\ncpus = 1\n[filesystem]\nread_only = [\".git\"]\n\
                 [[filesystem.mounts]]\nsource = \"/opt/m\"\nmode = \"write\"",
            )
            .unwrap(),
        };
        let flags = RunFlags {
            network: Some("host".into()),
            mounts: vec!["/opt/f".into()],
            env: vec!["C".into()],
            ..RunFlags::default()
        };
        let p = resolve_layered(Some(&u), Some(&m), &flags, &places).unwrap();
        let rows = grant_sources(
            Some(&u.manifest),
            Some(&m.manifest),
            &flags,
            &p,
            GrantSource::TrustedManifest,
        );
        use GrantSource::*;
        assert_eq!(source_of(&rows, "containment", "sealed"), TrustedManifest);
        assert_eq!(source_of(&rows, "filesystem.workdir", "/w/p"), Default);
        assert_eq!(source_of(&rows, "filesystem.workdir_exec", "true"), Default);
        assert_eq!(
            source_of(&rows, "filesystem.read_only", ".git"),
            TrustedManifest
        );
        assert_eq!(source_of(&rows, "filesystem.mounts", "/opt/u"), UserConfig);
        assert_eq!(
            source_of(&rows, "filesystem.mounts", "/opt/m"),
            TrustedManifest
        );
        assert_eq!(source_of(&rows, "filesystem.mounts", "/opt/f"), Flag);
        assert_eq!(source_of(&rows, "network.mode", "host"), Flag);
        assert_eq!(source_of(&rows, "env.allow", "A"), UserConfig);
        assert_eq!(source_of(&rows, "env.allow", "B"), TrustedManifest);
        assert_eq!(source_of(&rows, "env.allow", "C"), Flag);
        assert_eq!(
            source_of(&rows, "resources.memory", "1073741824"),
            UserConfig
        );
        assert_eq!(source_of(&rows, "resources.cpus", "1"), TrustedManifest);
        assert_eq!(source_of(&rows, "resources.pids", "4096"), Default);
        assert!(!rows.iter().any(|r| r.grant == "resources.timeout"));
    }
}
