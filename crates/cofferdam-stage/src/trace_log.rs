//! `trace.jsonl` on disk: open (repairing a torn last line left by a crash), and append one
//! event per line with the next sequence number. The line format is the record crate's
//! (`encode_line`, `parse_lines`); this module owns only the file.

use cofferdam_record::trace::{TraceEvent, TraceEventKind, encode_line, next_seq, parse_lines};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The trace file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceLogError {
    /// Reading, repairing or appending failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A complete line is not a trace event.
    #[error("{path}: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The first bad line.
        source: cofferdam_record::trace::TraceError,
    },
}

/// An open trace, positioned after its last complete event.
#[derive(Debug)]
pub struct TraceLog {
    path: PathBuf,
    file: File,
    next: u64,
    /// The length of the complete events, where a failed append is cut back to.
    len: u64,
}

impl TraceLog {
    /// Open (creating, mode 0600) and repair: a torn last line is cut off.
    pub fn open(path: &Path) -> Result<Self, TraceLogError> {
        let io = |source| TraceLogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let text = std::fs::read_to_string(path).map_err(io)?;
        let (events, torn) = parse_lines(&text).map_err(|source| TraceLogError::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
        let mut len = text.len() as u64;
        if let Some(t) = torn {
            len = t.offset as u64;
            file.set_len(len).map_err(io)?;
        }
        Ok(TraceLog {
            path: path.to_path_buf(),
            file,
            next: next_seq(&events),
            len,
        })
    }

    /// Append one event at `at_unix_ms` in a single write. A write that fails part-way (a
    /// full disk) is cut back off, so the file never keeps a torn line that a later append
    /// would turn into a corrupt one.
    pub fn append(&mut self, at_unix_ms: u64, kind: TraceEventKind) -> Result<(), TraceLogError> {
        self.append_all([(at_unix_ms, kind)])
    }

    /// Append `events` in order, numbered in sequence, with one write: a run's end reports
    /// some twenty events at once. On a failure none of them is kept.
    pub fn append_all(
        &mut self,
        events: impl IntoIterator<Item = (u64, TraceEventKind)>,
    ) -> Result<(), TraceLogError> {
        let mut text = String::new();
        let mut next = self.next;
        for (at_unix_ms, kind) in events {
            let event = TraceEvent::new(next, at_unix_ms, kind);
            let line = encode_line(&event).map_err(|source| TraceLogError::Corrupt {
                path: self.path.clone(),
                source,
            })?;
            text.push_str(&line);
            next += 1;
        }
        if text.is_empty() {
            return Ok(());
        }
        if let Err(source) = self.file.write_all(text.as_bytes()) {
            let _ = self.file.set_len(self.len);
            return Err(TraceLogError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.len += text.len() as u64;
        self.next = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_in_sequence_and_repairs_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.jsonl");
        let mut t = TraceLog::open(&p).unwrap();
        t.append(1, TraceEventKind::ProcessStarted { pid: 7 })
            .unwrap();
        t.append(
            2,
            TraceEventKind::StageSealed {
                changed_files: 1,
                whiteouts: 0,
            },
        )
        .unwrap();
        drop(t);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"v\":1,\"seq\":3,\"at_un").unwrap();
        drop(f);
        let mut t = TraceLog::open(&p).unwrap();
        t.append(
            3,
            TraceEventKind::Dropped {
                discarded_changes: 1,
                paths: None,
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let (events, torn) = parse_lines(&text).unwrap();
        assert!(torn.is_none());
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        let mode = std::fs::metadata(&p).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
    }

    #[test]
    fn a_batch_is_numbered_in_order_after_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.jsonl");
        let mut t = TraceLog::open(&p).unwrap();
        t.append(1, TraceEventKind::ProcessStarted { pid: 7 })
            .unwrap();
        t.append_all((2..5).map(|pid| (u64::from(pid), TraceEventKind::ProcessStarted { pid })))
            .unwrap();
        t.append_all(Vec::new()).unwrap();
        t.append(9, TraceEventKind::ProcessStarted { pid: 9 })
            .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let (events, torn) = parse_lines(&text).unwrap();
        assert!(torn.is_none());
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(
            events.iter().map(|e| e.at_unix_ms).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 9]
        );
    }
}
