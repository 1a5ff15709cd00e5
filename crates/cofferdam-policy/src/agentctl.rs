//! agentctl (issue 21): the line protocol a cooperating agent speaks to its supervisor from
//! inside a run, and how the run's plan lends it the control socket and the `cofferdam`
//! binary.
//!
//! Owns the protocol's limits, the request parser ([`parse_request`], fuzzed: every input is
//! hostile), the reply shapes and [`lend`], which edits a built plan (a mount, a Landlock
//! execute grant, two environment variables). Pure, like the rest of this crate: it may not
//! open the socket, read a file or look at the environment; the supervisor
//! (`cofferdam::lifecycle::ctl`) serves the socket and keeps the counters.
//!
//! Nothing a client says is evidence of enforcement: requests are recorded as the client's
//! own words in the bundle's `agentctl` and never feed `safety` or `executor_observations`.

use crate::plan::{MountPlan, PlanMountMode, SandboxPlan};
use cofferdam_record::EnforcementTier;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The protocol's name and version, as the bundle's `agentctl.protocol` records it.
pub const PROTOCOL: &str = "cofferdam-agentctl/1";
/// The variable naming the control socket inside the run.
pub const ENV: &str = "COFFERDAM_CTL";
/// Where the socket shows inside the sealed tier's composed root.
pub const SEALED_SOCKET: &str = "/run/cofferdam/ctl";
/// Where the `cofferdam` binary is lent inside the sealed tier's composed root.
pub const SEALED_BIN_DIR: &str = "/run/cofferdam/bin";
/// The longest request line, its newline included.
pub const MESSAGE_MAX: usize = 4096;
/// The most requests accepted in one run (refused beyond, counted).
pub const REQUESTS_MAX: usize = 128;
/// The most lines one connection may send.
pub const REQUESTS_PER_CONNECTION_MAX: usize = 32;
/// The most connections one run accepts (refused beyond, counted).
pub const CONNECTIONS_MAX: usize = 64;
/// The most connections served at once (refused beyond, counted).
pub const CONCURRENT_MAX: usize = 8;
/// The most checkpoints one run may request.
pub const CHECKPOINTS_MAX: usize = 8;
/// The most distinct clients listed.
pub const CLIENTS_MAX: usize = 16;
/// The longest client name or version.
pub const CLIENT_FIELD_MAX: usize = 64;
/// How long the supervisor waits for one line, milliseconds.
pub const READ_TIMEOUT_MS: u64 = 2000;
/// How long one connection may stay open, milliseconds.
pub const CONNECTION_MAX_MS: u64 = 10_000;

/// What a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A note for the reviewer (`argument`: its text).
    Note,
    /// A checkpoint of the stage, taken after the run ends (`argument`: its name, optional).
    Checkpoint,
    /// The run's policy and limits as planned.
    Status,
}

impl RequestKind {
    /// The word on the wire and in the bundle.
    pub fn word(self) -> &'static str {
        match self {
            RequestKind::Note => "note",
            RequestKind::Checkpoint => "checkpoint",
            RequestKind::Status => "status",
        }
    }
}

/// One request line, as sent: `{"request": "note", "argument": "…", "client": "…",
/// "version": "…"}` (`argument`, `client`, `version` optional; nothing else allowed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// What is asked.
    pub request: RequestKind,
    /// The note's text or the checkpoint's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// The client's self-reported name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The client's self-reported version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Why a request line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Longer than [`MESSAGE_MAX`].
    #[error("the request is longer than {MESSAGE_MAX} bytes")]
    TooLong,
    /// Not UTF-8 JSON of the request's shape.
    #[error("not a request: {0}")]
    Malformed(String),
    /// A field's value is not usable.
    #[error("{0}")]
    Invalid(String),
}

/// Parse one request line (without its newline). Total: any bytes give a request or an
/// error, never a panic, in time linear in the input.
pub fn parse_request(line: &[u8]) -> Result<Request, RequestError> {
    if line.len() >= MESSAGE_MAX {
        return Err(RequestError::TooLong);
    }
    let text = std::str::from_utf8(line)
        .map_err(|_| RequestError::Malformed("the line is not UTF-8".into()))?;
    let req: Request = serde_json::from_str(text.trim_end_matches('\r')).map_err(|e| {
        RequestError::Malformed(format!(
            "{e}; send one JSON object per line, e.g. {{\"request\":\"note\",\"argument\":\"hi\"}}"
        ))
    })?;
    for (what, v) in [("client", &req.client), ("version", &req.version)] {
        if let Some(v) = v
            && (v.is_empty()
                || v.len() > CLIENT_FIELD_MAX
                || v.chars().any(|c| c.is_control() || c.is_whitespace()))
        {
            return Err(RequestError::Invalid(format!(
                "`{what}` must be 1 to {CLIENT_FIELD_MAX} printable characters without spaces"
            )));
        }
    }
    match (req.request, req.argument.as_deref()) {
        (RequestKind::Note, None) => Err(RequestError::Invalid("a note needs its text".into())),
        (RequestKind::Note, Some(t)) if t.trim().is_empty() => {
            Err(RequestError::Invalid("a note needs its text".into()))
        }
        (RequestKind::Checkpoint, Some(name)) => {
            cofferdam_stage_name_check(name).map_err(RequestError::Invalid)?;
            Ok(req)
        }
        (RequestKind::Status, Some(_)) => {
            Err(RequestError::Invalid("`status` takes no argument".into()))
        }
        _ => Ok(req),
    }
}

/// The checkpoint name rule of `cofferdam checkpoint create --name` (kept here, pure, so a
/// name with a path in it is refused before anything is deferred; the checkpoint module
/// checks it again when it makes the checkpoint).
fn cofferdam_stage_name_check(name: &str) -> Result<(), String> {
    const NAME_MAX: usize = 64;
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !name.starts_with("ckpt-");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "checkpoint name {:?} refused: use 1 to {NAME_MAX} letters, digits, `.`, `_` or \
             `-`, starting with a letter or digit (not `ckpt-`)",
            name.chars().take(80).collect::<String>()
        ))
    }
}

/// A reply line: `{"ok": true, "request": "…", …}` or `{"ok": false, "error": "…"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was accepted.
    pub ok: bool,
    /// The request answered, when it parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestKind>,
    /// What happens now, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `status`: the run's plan as the supervisor made it (never evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

impl Reply {
    /// A refusal.
    pub fn refused(error: impl Into<String>) -> Self {
        Reply {
            ok: false,
            request: None,
            message: None,
            error: Some(error.into()),
            status: None,
        }
    }

    /// An acceptance of `kind`, saying what happens now.
    pub fn accepted(kind: RequestKind, message: impl Into<String>) -> Self {
        Reply {
            ok: true,
            request: Some(kind),
            message: Some(message.into()),
            error: None,
            status: None,
        }
    }

    /// The reply as one line, its newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        v.push(b'\n');
        v
    }
}

/// Where the supervisor's control socket and the binary are on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtlHost {
    /// The socket, `…/cofferdam-ctl-XXXX/ctl.sock`.
    pub socket: PathBuf,
    /// The running `cofferdam` binary, as the host resolves it.
    pub exe: PathBuf,
    /// A directory holding only a `cofferdam` symlink to `exe`, which the tiers without a
    /// mount namespace put on `PATH`; `None` where none was made (the sealed tier binds
    /// `exe` itself).
    pub bin_dir: Option<PathBuf>,
}

/// Offer agentctl to the run of `plan`: the socket's path in [`ENV`] and the binary's
/// directory appended (last) to `PATH`. On the sealed tier the socket and the binary are
/// lent read-only at [`SEALED_SOCKET`] and [`SEALED_BIN_DIR`] (two binds of the composed
/// root) and that directory is granted execute in the Landlock ruleset; on the scoped tier,
/// which mounts nothing, the variable names the host socket (a pathname unix socket, which
/// Landlock below ABI 9 does not restrict) and only the binary itself is granted execute;
/// the advisory tier restricts neither.
pub fn lend(plan: &mut SandboxPlan, host: &CtlHost) {
    let (socket, bin_dir) = match plan.tier {
        EnforcementTier::MountnsPivotRootLandlockSeccomp => {
            plan.fs.mounts.push(MountPlan {
                source: host.socket.clone(),
                target: SEALED_SOCKET.into(),
                mode: PlanMountMode::Read,
            });
            let bin = Path::new(SEALED_BIN_DIR);
            plan.fs.mounts.push(MountPlan {
                source: host.exe.clone(),
                target: bin.join("cofferdam"),
                mode: PlanMountMode::Read,
            });
            plan.landlock.read_exec.push(bin.to_path_buf());
            (PathBuf::from(SEALED_SOCKET), Some(bin.to_path_buf()))
        }
        EnforcementTier::LandlockSeccomp => {
            plan.landlock.read_exec.push(host.exe.clone());
            (host.socket.clone(), host.bin_dir.clone())
        }
        EnforcementTier::None => (host.socket.clone(), host.bin_dir.clone()),
    };
    plan.env.retain(|(k, _)| k != ENV);
    plan.env
        .push((ENV.to_owned(), socket.to_string_lossy().into_owned()));
    let Some(bin_dir) = bin_dir else { return };
    let bin = bin_dir.to_string_lossy().into_owned();
    match plan.env.iter_mut().find(|(k, _)| k == "PATH") {
        Some((_, v)) if v.is_empty() => *v = bin,
        Some((_, v)) => {
            v.push(':');
            v.push_str(&bin);
        }
        None => plan.env.push(("PATH".into(), bin)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Request, RequestError> {
        parse_request(s.as_bytes())
    }

    #[test]
    fn requests_parse_and_refusals_say_why() {
        let r = parse(r#"{"request":"note","argument":"hi","client":"claude","version":"1.0"}"#)
            .unwrap();
        assert_eq!(r.request, RequestKind::Note);
        assert_eq!(r.argument.as_deref(), Some("hi"));
        assert!(parse(r#"{"request":"checkpoint"}"#).is_ok());
        assert!(parse(r#"{"request":"checkpoint","argument":"before-tests"}"#).is_ok());
        assert!(parse(r#"{"request":"status"}"#).is_ok());
        for bad in [
            r#"{"request":"note"}"#,
            r#"{"request":"note","argument":"  "}"#,
            r#"{"request":"status","argument":"x"}"#,
            r#"{"request":"checkpoint","argument":"../../etc/passwd"}"#,
            r#"{"request":"checkpoint","argument":"ckpt-0000"}"#,
            r#"{"request":"exec","argument":"sh"}"#,
            r#"{"request":"note","argument":"x","extra":1}"#,
            r#"{"request":"note","argument":"x","client":"a b"}"#,
            r#"[1,2]"#,
            "\u{0}\u{1}",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_request(&vec![b'a'; MESSAGE_MAX]),
            Err(RequestError::TooLong)
        );
        assert!(matches!(
            parse_request(&[0xff, 0xfe, b'{']),
            Err(RequestError::Malformed(_))
        ));
    }

    #[test]
    fn replies_are_one_line() {
        let l = Reply::refused("a\nb").line();
        assert_eq!(l.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(l.ends_with(b"\n"));
    }

    fn plan(tier: EnforcementTier) -> SandboxPlan {
        use crate::plan::tests::{inv, job, policy};
        let mut p = crate::plan::build_plan(
            &policy(crate::policy::RunFlags::default()),
            &cofferdam_record::HostFacts::capable_example(),
            &inv(),
            &job(),
            vec!["true".into()],
        );
        p.tier = tier;
        p
    }

    fn host() -> CtlHost {
        CtlHost {
            socket: "/tmp/cofferdam-ctl-x/ctl.sock".into(),
            exe: "/opt/cd/cofferdam".into(),
            bin_dir: Some("/tmp/cofferdam-ctl-x/bin".into()),
        }
    }

    fn env<'a>(p: &'a SandboxPlan, k: &str) -> &'a str {
        p.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap()
    }

    #[test]
    fn the_sealed_tier_lends_the_socket_and_the_binary_read_only() {
        let mut p = plan(EnforcementTier::MountnsPivotRootLandlockSeccomp);
        let before = p.clone();
        lend(&mut p, &host());
        assert_eq!(env(&p, ENV), SEALED_SOCKET);
        assert!(env(&p, "PATH").ends_with(":/run/cofferdam/bin"));
        assert!(env(&p, "PATH").starts_with(env(&before, "PATH")));
        let added: Vec<_> = p.fs.mounts[before.fs.mounts.len()..].to_vec();
        assert_eq!(added.len(), 2);
        assert!(added.iter().all(|m| m.mode == PlanMountMode::Read));
        assert_eq!(added[0].target, Path::new(SEALED_SOCKET));
        assert_eq!(added[1].source, Path::new("/opt/cd/cofferdam"));
        assert_eq!(
            p.landlock.read_exec.last().map(PathBuf::as_path),
            Some(Path::new(SEALED_BIN_DIR))
        );
        // Nothing writable is added.
        assert_eq!(p.landlock.read_write, before.landlock.read_write);
    }

    #[test]
    fn the_scoped_tier_names_the_host_socket_and_grants_only_the_binary() {
        let mut p = plan(EnforcementTier::LandlockSeccomp);
        p.fs.mounts.clear();
        let before = p.clone();
        lend(&mut p, &host());
        assert_eq!(env(&p, ENV), "/tmp/cofferdam-ctl-x/ctl.sock");
        assert!(env(&p, "PATH").ends_with(":/tmp/cofferdam-ctl-x/bin"));
        assert!(p.fs.mounts.is_empty());
        assert_eq!(
            p.landlock.read_exec.last().map(PathBuf::as_path),
            Some(Path::new("/opt/cd/cofferdam"))
        );
        assert_eq!(p.landlock.read_write, before.landlock.read_write);
        // A host value of the variable never survives.
        let mut q = before.clone();
        q.env.push((ENV.into(), "/elsewhere".into()));
        lend(&mut q, &host());
        assert_eq!(q.env.iter().filter(|(k, _)| k == ENV).count(), 1);
    }
}
