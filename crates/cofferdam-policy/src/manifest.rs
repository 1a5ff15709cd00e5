//! `cofferdam.toml`: the manifest's shape and its parser (DESIGN.md §11).
//!
//! Owns the file format only: turning text into a [`Manifest`] value, and every parse
//! failure into one [`ManifestError`] that names the file, the line, the key and a fix.
//! It reads no file itself (the caller passes the text) and resolves no path: combining the
//! manifest with flags is `crate::policy`'s job.

use crate::allow::{AllowEntry, NetworkMode};
use crate::units::{ByteSize, Span};
use cofferdam_record::ContainmentClass;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use std::fmt;

/// The whole manifest. Every section is optional; unknown keys are errors.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The declared containment floor.
    pub containment: Option<ContainmentClass>,
    /// `[filesystem]`.
    #[serde(default)]
    pub filesystem: FilesystemSection,
    /// `[network]`.
    #[serde(default)]
    pub network: NetworkSection,
    /// `[env]`.
    #[serde(default)]
    pub env: EnvSection,
    /// `[resources]`.
    #[serde(default)]
    pub resources: ResourcesSection,
    /// `[exec]`.
    #[serde(default)]
    pub exec: ExecSection,
    /// `[profiles.NAME]`: agent profiles (`crate::profiles`); the user config's only, a
    /// workdir manifest that has them is refused by the caller.
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, ProfileSection>,
    /// Whether the installs under HOME on the caller's `PATH` are lent read-only
    /// (`--lend-path-toolchains` / `--no-lend-path-toolchains`; default: with an agent
    /// profile). The user config's only, like `profiles`: the caller refuses it in a workdir
    /// manifest.
    pub lend_path_toolchains: Option<bool>,
}

/// `[profiles.NAME]`: an agent profile, with the keys of the built-in ones (a user profile
/// replaces a built-in of the same name whole). Paths are `~/…` or absolute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSection {
    /// Program basenames that select it.
    #[serde(default)]
    pub programs: Vec<String>,
    /// Pieces of an install path that select it.
    #[serde(default)]
    pub install_paths: Vec<String>,
    /// Variable names passed in.
    #[serde(default)]
    pub env_pass: Vec<String>,
    /// Variables set inside, name = value.
    #[serde(default)]
    pub env_set: std::collections::BTreeMap<String, String>,
    /// API destinations, `HOST[:PORT]`.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Base-URL variables whose URL replaces `hosts` when set.
    #[serde(default)]
    pub base_url_vars: Vec<String>,
    /// State directories lent writable on the host (they persist, outside review).
    #[serde(default)]
    pub state_dirs: Vec<String>,
    /// Paths lent read-only.
    #[serde(default)]
    pub read_paths: Vec<String>,
    /// Whether a run under this profile lends the installs on the caller's `PATH`; over the
    /// config's top-level key, under the flags.
    pub lend_path_toolchains: Option<bool>,
}

/// `[filesystem]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSection {
    /// The workdir, relative to the manifest's folder or absolute.
    pub workdir: Option<String>,
    /// Workdir-relative subtrees the command may read but not write.
    #[serde(default, deserialize_with = "de_relative_paths")]
    pub read_only: Vec<String>,
    /// Whether files in the workdir may be executed (default true).
    pub workdir_exec: Option<bool>,
    /// Extra host paths.
    #[serde(default)]
    pub mounts: Vec<MountEntry>,
}

/// One `[[filesystem.mounts]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountEntry {
    /// Host path: absolute, `~/…`, or relative to the manifest's folder.
    pub source: String,
    /// Path inside the sandbox; defaults to the source's resolved path.
    pub target: Option<String>,
    /// What the command may do there.
    pub mode: MountMode,
    /// A missing source skips the mount (recorded as skipped) instead of refusing the run.
    #[serde(default)]
    pub optional: bool,
}

/// What a lent host path allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountMode {
    /// Read-only.
    Read,
    /// Writable, with writes staged like the workdir's.
    Stage,
    /// Writable directly on the host (a cache): bypasses the stage.
    Write,
    /// Invisible.
    Hide,
}

impl MountMode {
    /// The manifest word.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Stage => "stage",
            Self::Write => "write",
            Self::Hide => "hide",
        }
    }

    /// Parse the manifest / flag word.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "read" => Some(Self::Read),
            "stage" => Some(Self::Stage),
            "write" => Some(Self::Write),
            "hide" => Some(Self::Hide),
            _ => None,
        }
    }
}

/// `[network]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// `none` (default), `allow` or `host`.
    #[serde(default, deserialize_with = "de_network_mode")]
    pub mode: Option<NetworkMode>,
    /// Allowed destinations.
    #[serde(default, deserialize_with = "de_allow_entries")]
    pub allow: Vec<AllowEntry>,
}

/// `[env]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSection {
    /// Host variable names passed in beyond the defaults.
    #[serde(default, deserialize_with = "de_env_names")]
    pub allow: Vec<String>,
}

/// `[exec]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSection {
    /// Programs the command is meant to run (recorded; not enforced yet).
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `[resources]`: every key optional; absent means the built-in default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesSection {
    /// Memory ceiling.
    pub memory: Option<ByteSize>,
    /// Process and thread count ceiling: a number, or `"none"` to remove cofferdam's
    /// default.
    #[serde(default, deserialize_with = "de_ceiling")]
    pub pids: Option<Ceiling>,
    /// CPU share, in CPUs.
    #[serde(default, deserialize_with = "de_cpus")]
    pub cpus: Option<f64>,
    /// Wall-clock limit.
    pub timeout: Option<Span>,
    /// CPU-time limit.
    pub cpu_time: Option<Span>,
    /// Largest file the command may write.
    pub max_file_size: Option<ByteSize>,
    /// Open file descriptors.
    #[serde(default, deserialize_with = "de_positive")]
    pub open_files: Option<u64>,
    /// Disk I/O bandwidth, bytes per second.
    pub io_bps: Option<ByteSize>,
    /// Size of the private /tmp.
    pub tmp_size: Option<ByteSize>,
    /// Size cap of the stage.
    pub stage_size: Option<ByteSize>,
}

/// A manifest that cannot be used, with where and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {key}: {message}\n  fix: {fix}")]
pub struct ManifestError {
    /// The manifest's path as the user gave it.
    pub file: String,
    /// 1-based line of the offending key or value (1 when unknown).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Dotted key path, e.g. `resources.memory` (`(top level)` for the root).
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

/// Parse manifest `text`; `file` is used only to name the file in errors.
pub fn parse_manifest(file: &str, text: &str) -> Result<Manifest, ManifestError> {
    let de = toml::Deserializer::parse(text).map_err(|e| to_error(file, text, "", &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        to_error(file, text, &path, e.inner())
    })
}

fn to_error(file: &str, text: &str, path: &str, e: &toml::de::Error) -> ManifestError {
    let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
    let mut message = e.message().trim().to_owned();
    let mut key = if path.is_empty() || path == "." {
        String::new()
    } else {
        path.to_owned()
    };
    let fix = if let Some(field) =
        backticked(&message).filter(|_| message.starts_with("unknown field"))
    {
        let allowed = message
            .split_once("expected")
            .map(|(_, rest)| rest.trim().to_owned())
            .unwrap_or_default();
        if key.is_empty() {
            key = field.clone();
        } else if leaf(&key) != field {
            key = format!("{key}.{field}");
        }
        let fix = format!("remove `{field}` or correct its spelling; allowed here: {allowed}");
        message = format!("unknown key `{field}`");
        fix
    } else if message.starts_with("unknown variant") {
        let allowed = message
            .split_once("expected")
            .map(|(_, r)| r.trim())
            .unwrap_or("");
        format!("use {allowed}")
    } else if message.starts_with("invalid type") {
        message = plain_types(&message);
        format!(
            "give `{}` a value of the type the message names",
            leaf(&key)
        )
    } else if path.is_empty() {
        "correct the TOML syntax at that position (see https://toml.io)".to_owned()
    } else {
        format!("correct the value of `{}` as the message says", leaf(&key))
    };
    if key.is_empty() {
        key = "(top level)".to_owned();
    }
    ManifestError {
        file: file.to_owned(),
        line,
        column,
        key,
        message,
        fix,
    }
}

/// serde's type words in the terms a manifest author uses.
fn plain_types(message: &str) -> String {
    message
        .replace("expected i64", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected a sequence", "expected a list like [\"a\", \"b\"]")
        .replace("expected a boolean", "expected true or false")
        .replace("expected a string", "expected a quoted string")
}

fn leaf(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

/// 1-based line and column of byte offset `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn de_network_mode<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NetworkMode>, D::Error> {
    let word = String::deserialize(d)?;
    word.parse().map(Some).map_err(de::Error::custom)
}

fn de_allow_entries<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<AllowEntry>, D::Error> {
    let words = Vec::<String>::deserialize(d)?;
    words
        .iter()
        .map(|w| w.parse().map_err(de::Error::custom))
        .collect()
}

/// Whether `name` is a portable environment variable name.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn de_env_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    for n in &names {
        if !is_env_name(n) {
            return Err(de::Error::custom(format!(
                "`{n}` is not a variable name (letters, digits and `_`, not starting with a digit)"
            )));
        }
    }
    Ok(names)
}

/// Whether `path` is a clean workdir-relative path: not absolute, no `..`, not empty.
pub fn is_relative_subpath(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path.split('/').all(|c| c != "..")
        && path.split('/').any(|c| !c.is_empty() && c != ".")
}

fn de_relative_paths<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let paths = Vec::<String>::deserialize(d)?;
    for p in &paths {
        if !is_relative_subpath(p) {
            return Err(de::Error::custom(format!(
                "`{p}` must be a path inside the workdir, relative to it, without `..`"
            )));
        }
    }
    Ok(paths)
}

fn de_positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = i64::deserialize(d)?;
    match u64::try_from(n) {
        Ok(v) if v > 0 => Ok(Some(v)),
        _ => Err(de::Error::custom(format!(
            "{n} must be a whole number above zero; leave the key out for no limit"
        ))),
    }
}

/// A count limit that may also be removed: `N` (above zero) or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// At most this many.
    Max(u64),
    /// No limit, not even cofferdam's default.
    Unlimited,
}

/// The word that removes a limit, in flags and in the manifest.
pub const NO_LIMIT: &str = "none";

impl Ceiling {
    /// Parse `N` or `none`; the error says what to write instead.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case(NO_LIMIT) {
            return Ok(Self::Unlimited);
        }
        match t.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Self::Max(n)),
            Ok(_) => Err(format!(
                "0 would forbid every process; write `{NO_LIMIT}` to remove the limit"
            )),
            Err(_) => Err(format!(
                "expected a whole number above zero or `{NO_LIMIT}` (no limit)"
            )),
        }
    }

    /// The limit as an option: `None` is unlimited.
    pub fn limit(self) -> Option<u64> {
        match self {
            Self::Max(n) => Some(n),
            Self::Unlimited => None,
        }
    }
}

fn de_ceiling<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ceiling>, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = Ceiling;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a whole number above zero or \"{NO_LIMIT}\"")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ceiling, E> {
            Ceiling::parse(&v.to_string()).map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ceiling, E> {
            Ceiling::parse(&v.to_string()).map_err(E::custom)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Ceiling, E> {
            Ceiling::parse(v).map_err(E::custom)
        }
    }
    d.deserialize_any(V).map(Some)
}

/// A CPU share: finite, above zero, at most 4096.
pub fn valid_cpus(v: f64) -> bool {
    v.is_finite() && v > 0.0 && v <= 4096.0
}

fn de_cpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct V;
    impl de::Visitor<'_> for V {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number of CPUs like 2 or 1.5")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            if valid_cpus(v) {
                Ok(v)
            } else {
                Err(E::custom(format!(
                    "{v} CPUs is out of range (above 0, at most 4096)"
                )))
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
    }
    d.deserialize_any(V).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ManifestError {
        parse_manifest("cofferdam.toml", text).unwrap_err()
    }

    #[test]
    fn full_manifest_parses() {
        let m = parse_manifest(
            "cofferdam.toml",
            r#"
containment = "sealed"
[filesystem]
workdir = "."
read_only = [".git", "vendor/lib"]
workdir_exec = false
mounts = [
  { source = "~/.cache/pip", mode = "write" },
  { source = "/opt/sdk", target = "/sdk", mode = "read" },
]
[network]
mode = "allow"
allow = ["api.anthropic.com", "*.pypi.org:443", "127.0.0.1:8080"]
[env]
allow = ["ANTHROPIC_API_KEY"]
[resources]
memory = "4GiB"
pids = 512
cpus = 1.5
timeout = "30m"
cpu_time = "1h"
max_file_size = "1GiB"
open_files = 1024
io_bps = "50MiB"
tmp_size = "1GiB"
stage_size = "10GiB"
[exec]
allow = ["python3", "git"]
"#,
        )
        .unwrap();
        assert_eq!(m.containment, Some(ContainmentClass::Sealed));
        assert_eq!(m.filesystem.read_only, vec![".git", "vendor/lib"]);
        assert_eq!(m.filesystem.mounts[0].mode, MountMode::Write);
        assert_eq!(m.network.mode, Some(NetworkMode::Allow));
        assert_eq!(m.network.allow.len(), 3);
        assert_eq!(m.resources.memory, Some(ByteSize(4 << 30)));
        assert_eq!(m.resources.cpus, Some(1.5));
        assert_eq!(m.resources.pids, Some(Ceiling::Max(512)));
        assert_eq!(m.resources.timeout.unwrap().as_millis_u64(), 1_800_000);
        let m = parse_manifest("m.toml", "[resources]\npids = \"none\"\n").unwrap();
        assert_eq!(m.resources.pids, Some(Ceiling::Unlimited));
    }

    #[test]
    fn empty_manifest_is_the_default() {
        let m = parse_manifest("m.toml", "").unwrap();
        assert!(m.containment.is_none());
        assert!(m.network.allow.is_empty());
    }

    #[test]
    fn unknown_key_names_line_key_and_the_allowed_ones() {
        let e = err("[resources]\nmemory = \"1GiB\"\nmemroy = \"2GiB\"\n");
        assert_eq!(e.line, 3, "{e}");
        assert_eq!(e.key, "resources.memroy");
        assert!(e.fix.contains("memory"), "{e}");
        let e = err("containment = \"sealed\"\n[filesystm]\n");
        assert_eq!(e.key, "filesystm");
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let e = err("[resources]\npids = \"many\"\n");
        assert_eq!((e.line, e.key.as_str()), (2, "resources.pids"), "{e}");
        assert!(e.message.contains("none"), "{e}");
        let e = err("[resources]\npids = 1.5\n");
        assert_eq!((e.line, e.key.as_str()), (2, "resources.pids"), "{e}");
        let e = err("[filesystem]\nread_only = \".git\"\n");
        assert_eq!((e.line, e.key.as_str()), (2, "filesystem.read_only"), "{e}");
    }

    #[test]
    fn bad_values_name_line_key_and_value() {
        let e = err("\n[resources]\nmemory = \"lots\"\n");
        assert_eq!((e.line, e.key.as_str()), (3, "resources.memory"), "{e}");
        assert!(e.message.contains("`lots`"), "{e}");
        let e = err("containment = \"strong\"\n");
        assert_eq!((e.line, e.key.as_str()), (1, "containment"), "{e}");
        assert!(e.fix.contains("sealed"), "{e}");
        let e = err("[network]\nallow = [\"https://x.com/\"]\n");
        assert_eq!((e.line, e.key.as_str()), (2, "network.allow"), "{e}");
        let e = err("[network]\nmode = \"open\"\n");
        assert_eq!(e.key, "network.mode", "{e}");
        let e = err("[env]\nallow = [\"1BAD\"]\n");
        assert_eq!(e.key, "env.allow", "{e}");
        let e = err("[filesystem]\nread_only = [\"../up\"]\n");
        assert_eq!(e.key, "filesystem.read_only", "{e}");
        let e = err("[resources]\npids = 0\n");
        assert_eq!(e.key, "resources.pids", "{e}");
        let e = err("[resources]\ncpus = -1\n");
        assert_eq!(e.key, "resources.cpus", "{e}");
        let e = err("[[filesystem.mounts]]\nsource = \"/x\"\nmode = \"rw\"\n");
        assert!(e.key.starts_with("filesystem.mounts"), "{e}");
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn syntax_errors_name_the_position() {
        let e = err("containment = \n");
        assert_eq!(e.line, 1, "{e}");
        assert_eq!(e.key, "(top level)");
        let e = err("[resources]\nmemory = \"1G\"\nmemory = \"2G\"\n");
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn display_is_one_actionable_message() {
        let e = err("[resources]\nmemory = \"lots\"\n");
        let s = e.to_string();
        assert!(s.starts_with("cofferdam.toml:2:"), "{s}");
        assert!(s.contains("fix:"), "{s}");
    }
}
