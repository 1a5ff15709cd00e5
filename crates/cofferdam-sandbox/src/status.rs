//! The status channel: the messages the sandbox init and its pid 1 send to the supervisor,
//! one JSON object per line over an inherited pipe. Every control reports here after it was
//! installed (or failed), so the supervisor records observations, never intentions.
//!
//! Owns the message vocabulary and the line codec. It decides nothing about what a message
//! means for the run; the supervisor does.

use cofferdam_record::bundle::ControlObservation;
use serde::{Deserialize, Serialize};
use std::os::fd::BorrowedFd;

/// One status line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StatusMessage {
    /// A control was installed, or tried and found unavailable or failed.
    Control {
        /// What the sandbox observed.
        observation: ControlObservation,
    },
    /// A setup step failed before the ready marker: the command never ran.
    SetupFailed {
        /// The step, e.g. `mount workdir overlay`.
        step: String,
        /// The error, with errno name.
        error: String,
    },
    /// Every control is installed; the command is about to start.
    Ready,
    /// The command's process started (pid inside the sandbox).
    Started {
        /// Its pid in the sandbox's pid namespace.
        pid: i32,
    },
    /// `execve` of the command failed.
    ExecFailed {
        /// Why.
        error: String,
        /// 126 (not executable) or 127 (not found).
        code: i32,
    },
    /// The command's main process was stopped (on its own terminal: Ctrl-Z, or a
    /// `SIGSTOP`). The supervisor gives the caller's terminal back and stops its process
    /// group, as the caller's Ctrl-Z would have; when continued it continues the command
    /// (SIGCONT to the init, passed on to the command's process group).
    Stopped {
        /// The stopping signal.
        signal: i32,
    },
    /// The command's main process ended.
    Exited {
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal that killed it, when it was killed.
        signal: Option<i32>,
    },
}

/// Write one message as a single line. A line under `PIPE_BUF` (4096 bytes) is written
/// atomically; longer ones are still written whole by one writer at a time.
pub fn send(fd: BorrowedFd<'_>, msg: &StatusMessage) {
    let Ok(mut line) = serde_json::to_vec(msg) else {
        return;
    };
    line.push(b'\n');
    let mut rest = &line[..];
    while !rest.is_empty() {
        match rustix::io::write(fd, rest) {
            Ok(0) => return,
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            // The supervisor is gone; nothing useful can be done with the report.
            Err(_) => return,
        }
    }
}

/// Parse a status stream. Lines that are not messages are returned as errors in order, so a
/// corrupted stream is visible rather than silently dropped.
pub fn parse(stream: &[u8]) -> Vec<Result<StatusMessage, String>> {
    stream
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l).map_err(|e| {
                format!(
                    "unreadable status line ({e}): {}",
                    String::from_utf8_lossy(l)
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::{ControlDimension, ControlMechanism, ControlStatus};

    #[test]
    fn messages_round_trip_as_lines() {
        let msgs = vec![
            StatusMessage::Control {
                observation: ControlObservation::new(
                    ControlMechanism::Userns,
                    ControlDimension::Process,
                    ControlStatus::Enforced,
                ),
            },
            StatusMessage::Ready,
            StatusMessage::Exited {
                code: Some(3),
                signal: None,
            },
        ];
        let mut stream = Vec::new();
        for m in &msgs {
            stream.extend(serde_json::to_vec(m).unwrap());
            stream.push(b'\n');
        }
        stream.extend(b"garbage\n");
        let parsed = parse(&stream);
        assert_eq!(parsed.len(), 4);
        for (p, m) in parsed.iter().zip(&msgs) {
            assert_eq!(p.as_ref().unwrap(), m);
        }
        assert!(parsed[3].is_err());
    }
}
