//! The status channel: the messages the sandbox init and its pid 1 send to the supervisor,
//! one `cofferdam_channel` frame each over an inherited pipe (fd `fds::STATUS`). Every control reports here after it was
//! installed (or failed), so the supervisor records observations, never intentions.
//!
//! Owns the message vocabulary (the framing is `cofferdam_channel`'s). It decides nothing about what a message
//! means for the run; the supervisor does.

use cofferdam_record::bundle::ControlObservation;
use serde::{Deserialize, Serialize};
use std::os::fd::BorrowedFd;

/// One status line. Externally tagged (`{"control":{…}}`, `"ready"`): serde reads an
/// internally tagged enum through a buffered copy of each message, which cost the
/// supervisor about 0.1 ms of a run's 30-odd messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// Pid 1 has mounted the workdir and waits, on the plan channel, for the supervisor to
    /// watch it (`SandboxPlan::watch_files`); sent once, before the command.
    AwaitFileWatch {
        /// The workdir's mount id as pid 1 reads it (`statx`), which the supervisor's mark
        /// must be on; `None` when it could not be read (no watch is placed then).
        mnt_id: Option<u64>,
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

/// The channel's name in its errors.
pub const CHANNEL: &str = "status";

/// Write one message as one frame. A frame under `PIPE_BUF` (4096 bytes) is written
/// atomically; longer ones are still written whole by one writer at a time.
pub fn send(fd: BorrowedFd<'_>, msg: &StatusMessage) {
    // The supervisor is gone (or the message cannot be framed, which no status message
    // is): nothing useful can be done with the report.
    let _ = cofferdam_channel::send_pipe(fd, CHANNEL, msg);
}

/// The first whole message at the start of `stream` and the bytes it took; `None` while no
/// whole frame is there (`Some((Err, n))` for a frame that is not a status message).
pub fn next(stream: &[u8]) -> Option<(Result<StatusMessage, String>, usize)> {
    match cofferdam_channel::decode_one(CHANNEL, stream) {
        Ok(Some((msg, _, used))) => Some((Ok(msg), used)),
        Ok(None) => None,
        Err(e) => {
            // A frame that will not decode: skip it when its length is known.
            let used = cofferdam_channel::frame_len(stream).filter(|n| *n <= stream.len())?;
            Some((Err(e.to_string()), used))
        }
    }
}

/// Parse a status stream. Frames that are not messages are returned as errors in order, so
/// a corrupted stream is visible rather than silently dropped.
pub fn parse(stream: &[u8]) -> Vec<Result<StatusMessage, String>> {
    cofferdam_channel::decode(CHANNEL, stream)
        .into_iter()
        .map(|m| m.map_err(|e| format!("unreadable status message: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::{ControlDimension, ControlMechanism, ControlStatus};

    #[test]
    fn messages_round_trip_as_frames() {
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
            stream.extend(cofferdam_channel::encode(CHANNEL, m, 0).unwrap());
        }
        let first = next(&stream).unwrap();
        assert_eq!(first.0.as_ref().unwrap(), &msgs[0]);
        assert!(next(&stream[..first.1 - 1]).is_none());
        stream.extend(cofferdam_channel::encode(CHANNEL, &"garbage", 0).unwrap());
        let parsed = parse(&stream);
        assert_eq!(parsed.len(), 4);
        for (p, m) in parsed.iter().zip(&msgs) {
            assert_eq!(p.as_ref().unwrap(), m);
        }
        assert!(parsed[3].is_err());
    }
}
