//! Trace events: the lines of `trace.jsonl` (DESIGN.md §9).
//!
//! Owns the versioned event envelope (`{"v": 1, "seq", "at_unix_ms", "event": {"type", ..}}`),
//! the event variants, and two pure functions: `encode_line` (one event → one line) and
//! `parse_lines` (text → events, reporting a torn last line instead of failing on it). It may
//! not open, append to, lock or repair the file: the job store does that, using the
//! `TornTail` offset this module reports.
//!
//! A line is committed by its newline: the writer appends `encode_line`'s output in one
//! write, so text after the last `\n` is a torn tail, even if it happens to parse.

use crate::bundle::{ChangeKind, ControlObservation, InterceptedProtocol, ResourceDimension};
use serde::{Deserialize, Serialize};

/// The envelope version this module writes and reads.
pub const TRACE_VERSION: u32 = 1;

/// The first sequence number of a trace.
pub const FIRST_SEQ: u64 = 1;

/// One line of `trace.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Envelope version: [`TRACE_VERSION`].
    pub v: u32,
    /// Sequence number, strictly increasing within a file, starting at [`FIRST_SEQ`].
    pub seq: u64,
    /// When it happened, Unix milliseconds (passed in by the caller).
    pub at_unix_ms: u64,
    /// What happened.
    pub event: TraceEventKind,
}

impl TraceEvent {
    /// An event in the current envelope version.
    pub fn new(seq: u64, at_unix_ms: u64, event: TraceEventKind) -> Self {
        Self {
            v: TRACE_VERSION,
            seq,
            at_unix_ms,
            event,
        }
    }
}

/// What happened, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceEventKind {
    /// The run began; carries the scope report as the effective grants.
    SessionStart {
        /// The run's id.
        run_id: String,
        /// The argument vector.
        command: Vec<String>,
        /// The scope report (`spec/scope-report.txt`) the run was admitted under.
        effective_grants: serde_json::Value,
    },
    /// The executor installed (or failed to install) one control.
    ControlInstalled(ControlObservation),
    /// The workload process started.
    ProcessStarted {
        /// Its pid as the supervisor sees it.
        pid: u32,
    },
    /// The egress driver allowed or denied a destination.
    NetworkDecision {
        /// How the request arrived.
        protocol: InterceptedProtocol,
        /// The destination name checked.
        host: String,
        /// The destination port, when there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<u16>,
        /// The decision.
        decision: NetworkVerdict,
        /// The allowlist entry that matched, for allowed destinations.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// Why, for denied destinations.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A resource limit was reached.
    LimitHit {
        /// Which limit.
        limit: ResourceDimension,
        /// What happened, e.g. `killed the workload`.
        message: String,
    },
    /// The workload exited.
    ProcessExited {
        /// Its exit status, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The signal that ended it, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// How long it ran, milliseconds.
        duration_ms: u64,
    },
    /// The stage was scanned and sealed.
    StageSealed {
        /// Changed paths.
        changed_files: usize,
        /// Deletion/opacity markers.
        whiteouts: usize,
    },
    /// An apply batch began.
    ApplyStarted {
        /// Paths selected (after dependency closure).
        paths: usize,
        /// Whether it is a dry run.
        dry_run: bool,
    },
    /// One path of an apply batch.
    ApplyPath {
        /// The path, relative to the target.
        path: String,
        /// Its change kind.
        kind: ChangeKind,
        /// What happened to it.
        outcome: ApplyPathOutcome,
    },
    /// An apply batch ended.
    ApplyFinished {
        /// How it ended.
        outcome: ApplyOutcome,
        /// Paths written.
        applied: usize,
        /// Paths that changed on the host since the run (the batch is refused when any).
        conflicts: usize,
    },
    /// The stage was discarded, or some of its changes (`drop JOB --path P`).
    Dropped {
        /// Changes thrown away.
        discarded_changes: usize,
        /// For a per-path drop: the paths discarded (display form, as `apply_path`'s);
        /// absent when the whole stage was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paths: Option<Vec<String>>,
    },
}

/// A network decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkVerdict {
    /// Connected upstream.
    Allowed,
    /// Refused.
    Denied,
}

/// What happened to one path during apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyPathOutcome {
    /// Written (or removed) on the host.
    Applied,
    /// Would be applied (dry run).
    Planned,
    /// The host path changed since the run.
    Conflict,
    /// Refused by policy (device node, fifo, socket, setuid).
    Refused,
    /// Some of its hunks written (`apply --hunks`, `--interactive`); the rest stays staged.
    Partial,
    /// Three-way merged with the host's edits since the run, cleanly (`apply --merge`).
    Merged,
    /// Merged with conflict markers written where both sides changed the same lines
    /// (`apply --merge=markers`).
    MergedWithMarkers,
}

/// How an apply batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyOutcome {
    /// Every selected path was applied.
    Applied,
    /// A dry run finished.
    DryRun,
    /// Refused before the first write (conflicts).
    Refused,
    /// Failed part-way; the ledger completes or reports it.
    Failed,
}

/// A last line without its newline: a write that was cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Its 1-based line number.
    pub line: usize,
    /// Byte offset where it starts: truncating the file here repairs it.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// A trace line that cannot be read, or an event that cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// A complete line is not a valid event.
    #[error("trace line {line}: {message}")]
    Invalid {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A line has an envelope version this reader does not know.
    #[error(
        "trace line {line}: unsupported event version {found}: this reader accepts {TRACE_VERSION}"
    )]
    UnsupportedVersion {
        /// 1-based line number.
        line: usize,
        /// The `v` found.
        found: u64,
    },
    /// Sequence numbers went backwards or repeated.
    #[error("trace line {line}: seq {seq} does not follow {previous}")]
    OutOfOrder {
        /// 1-based line number.
        line: usize,
        /// Its seq.
        seq: u64,
        /// The previous line's seq.
        previous: u64,
    },
    /// The event could not be serialized (not expected for these types).
    #[error("could not encode a trace event: {message}")]
    Encode {
        /// The serializer's message.
        message: String,
    },
}

/// One event as one line: compact JSON and a trailing newline.
pub fn encode_line(event: &TraceEvent) -> Result<String, TraceError> {
    let mut line = serde_json::to_string(event).map_err(|e| TraceError::Encode {
        message: e.to_string(),
    })?;
    line.push('\n');
    Ok(line)
}

/// The sequence number the next appended event gets.
pub fn next_seq(events: &[TraceEvent]) -> u64 {
    events.last().map_or(FIRST_SEQ, |e| e.seq.saturating_add(1))
}

/// Parses `trace.jsonl` text. Every newline-terminated line must be an event of version
/// [`TRACE_VERSION`] with a `seq` greater than the one before; text after the last newline
/// is reported as a [`TornTail`] and not parsed.
pub fn parse_lines(text: &str) -> Result<(Vec<TraceEvent>, Option<TornTail>), TraceError> {
    let mut events: Vec<TraceEvent> = Vec::new();
    let mut offset = 0;
    for (index, segment) in text.split_inclusive('\n').enumerate() {
        let line = index + 1;
        let Some(body) = segment.strip_suffix('\n') else {
            let torn = TornTail {
                line,
                offset,
                len: segment.len(),
            };
            return Ok((events, Some(torn)));
        };
        offset += segment.len();
        let event = parse_one(body, line)?;
        let previous = events.last().map_or(0, |e| e.seq);
        if !events.is_empty() && event.seq <= previous {
            return Err(TraceError::OutOfOrder {
                line,
                seq: event.seq,
                previous,
            });
        }
        events.push(event);
    }
    Ok((events, None))
}

fn parse_one(body: &str, line: usize) -> Result<TraceEvent, TraceError> {
    #[derive(Deserialize)]
    struct Envelope {
        v: u64,
    }
    let version = serde_json::from_str::<Envelope>(body).map(|e| e.v);
    match version {
        Ok(found) if found != u64::from(TRACE_VERSION) => {
            Err(TraceError::UnsupportedVersion { line, found })
        }
        _ => serde_json::from_str(body).map_err(|e| TraceError::Invalid {
            line,
            message: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{ControlDimension, ControlMechanism, ControlStatus};

    fn sample() -> Vec<TraceEvent> {
        let mut landlock = ControlObservation::new(
            ControlMechanism::Landlock,
            ControlDimension::FilesystemWrite,
            ControlStatus::Enforced,
        );
        landlock
            .details
            .insert("abi".into(), serde_json::Value::from(7));
        let kinds = vec![
            TraceEventKind::SessionStart {
                run_id: "run-1".into(),
                command: vec!["claude".into()],
                effective_grants: serde_json::json!({"achieved_containment": "sealed"}),
            },
            TraceEventKind::ControlInstalled(landlock),
            TraceEventKind::ProcessStarted { pid: 4242 },
            TraceEventKind::NetworkDecision {
                protocol: InterceptedProtocol::HttpConnect,
                host: "crates.io".into(),
                port: Some(443),
                decision: NetworkVerdict::Allowed,
                rule: Some("crates.io".into()),
                reason: None,
            },
            TraceEventKind::LimitHit {
                limit: ResourceDimension::TimeoutMs,
                message: "killed the workload".into(),
            },
            TraceEventKind::ProcessExited {
                exit_code: None,
                signal: Some(9),
                duration_ms: 1000,
            },
            TraceEventKind::StageSealed {
                changed_files: 4,
                whiteouts: 1,
            },
            TraceEventKind::ApplyStarted {
                paths: 2,
                dry_run: false,
            },
            TraceEventKind::ApplyPath {
                path: "src/lib.rs".into(),
                kind: ChangeKind::Modified,
                outcome: ApplyPathOutcome::Applied,
            },
            TraceEventKind::ApplyFinished {
                outcome: ApplyOutcome::Applied,
                applied: 2,
                conflicts: 0,
            },
            TraceEventKind::Dropped {
                discarded_changes: 2,
                paths: None,
            },
            TraceEventKind::Dropped {
                discarded_changes: 1,
                paths: Some(vec!["a/b.txt".into()]),
            },
        ];
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, k)| TraceEvent::new(i as u64 + 1, 1_700_000_000_000 + i as u64, k))
            .collect()
    }

    fn encode_all(events: &[TraceEvent]) -> String {
        events.iter().map(|e| encode_line(e).unwrap()).collect()
    }

    #[test]
    fn every_variant_round_trips() {
        let events = sample();
        let text = encode_all(&events);
        assert_eq!(text.lines().count(), events.len());
        let (parsed, torn) = parse_lines(&text).unwrap();
        assert_eq!(parsed, events);
        assert_eq!(torn, None);
        assert_eq!(next_seq(&parsed), 13);
        assert_eq!(next_seq(&[]), FIRST_SEQ);
    }

    #[test]
    fn the_envelope_is_flat_and_tagged() {
        let line = encode_line(&sample()[1]).unwrap();
        assert_eq!(
            line,
            "{\"v\":1,\"seq\":2,\"at_unix_ms\":1700000000001,\"event\":{\"type\":\"control_installed\",\"mechanism\":\"landlock\",\"dimension\":\"filesystem_write\",\"status\":\"enforced\",\"details\":{\"abi\":7}}}\n"
        );
        let line = encode_line(&sample()[10]).unwrap();
        assert!(line.contains(r#""event":{"type":"dropped","discarded_changes":2}"#));
    }

    #[test]
    fn a_torn_last_line_is_reported_not_fatal() {
        let text = encode_all(&sample()[..3]);
        let cut = text.len() - 10;
        let (events, torn) = parse_lines(&text[..cut]).unwrap();
        assert_eq!(events.len(), 2);
        let torn = torn.unwrap();
        assert_eq!(torn.line, 3);
        assert_eq!(&text[..torn.offset], encode_all(&sample()[..2]));
        assert_eq!(torn.offset + torn.len, cut);
        // A complete event without its newline is still torn: the newline commits a line.
        let (events, torn) = parse_lines(&text[..text.len() - 1]).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(torn.map(|t| t.line), Some(3));
    }

    #[test]
    fn a_bad_complete_line_is_an_error_with_its_number() {
        let mut text = encode_all(&sample()[..1]);
        text.push_str("{\"v\":1,\"seq\":2\n");
        text.push_str(&encode_line(&sample()[2]).unwrap());
        let err = parse_lines(&text).unwrap_err();
        assert!(matches!(err, TraceError::Invalid { line: 2, .. }), "{err}");
    }

    #[test]
    fn unknown_versions_and_reordered_lines_are_rejected() {
        let mut future = sample()[0].clone();
        future.v = 2;
        let err = parse_lines(&encode_line(&future).unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "trace line 1: unsupported event version 2: this reader accepts 1"
        );
        let mut events = sample();
        events.swap(0, 1);
        let err = parse_lines(&encode_all(&events)).unwrap_err();
        assert_eq!(
            err,
            TraceError::OutOfOrder {
                line: 2,
                seq: 1,
                previous: 2
            }
        );
    }

    #[test]
    fn empty_text_is_an_empty_trace() {
        assert_eq!(parse_lines("").unwrap(), (vec![], None));
    }
}
