//! The run's file accesses, seen from outside: a fanotify mark on the sealed tier's workdir
//! overlay mount, placed by the supervisor while pid 1 waits before the command
//! (`SetupStep::AwaitFileWatch`), and read by one thread until every process of the run is
//! gone. The group reports events with an open descriptor (not file handles, which an
//! overlay mounted in a user namespace cannot give); the kernel opens only regular files
//! and directories for it, so a FIFO or a device in the workdir never blocks the reader.
//!
//! Owns the fanotify group, its mark (read back from `/proc/self/fdinfo` against the
//! mount's id before the watch counts) and the reading thread. What the events mean for
//! the record is [`tally`]'s. It never acts on what it reads: a path only feeds the tally.

pub mod tally;

use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, FromRawFd, OwnedFd};
use rustix::fs::{AtFlags, CWD, StatxFlags};
use rustix::io::Errno;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use tally::{EXECUTE, READ, Tally, WRITE};

/// The events watched: reads, writes and closes (which say whether the file was open for
/// writing), and opens to execute, on files and directories.
const MASK: u64 = libc::FAN_ACCESS
    | libc::FAN_MODIFY
    | libc::FAN_CLOSE_WRITE
    | libc::FAN_CLOSE_NOWRITE
    | libc::FAN_OPEN_EXEC
    | libc::FAN_ONDIR;

/// `struct fanotify_event_metadata`'s size and the version it is read as.
const METADATA_LEN: usize = 24;
const METADATA_VERSION: u8 = 3;

/// One read's buffer: the kernel opens a descriptor for every event it returns, so a read
/// takes at most this many bytes' worth (128 events), far below the descriptor limit.
const READ_BUF: usize = 128 * METADATA_LEN;

/// Why the watch could not be placed; the run goes on, without the observation.
#[derive(Debug, thiserror::Error)]
pub enum FanotifyError {
    /// `fanotify_init` failed (EPERM without `CAP_SYS_ADMIN` in the initial namespace).
    #[error("fanotify_init: {0}")]
    Init(Errno),
    /// The mark on the mount failed.
    #[error("fanotify_mark on {path}: {errno}")]
    Mark {
        /// The mount's path.
        path: PathBuf,
        /// The error.
        errno: Errno,
    },
    /// The mark read back is not the one placed.
    #[error("the fanotify mark on {path} did not read back: {why}")]
    ReadBack {
        /// The mount's path.
        path: PathBuf,
        /// What was found instead.
        why: String,
    },
    /// No thread or pipe for the reader.
    #[error("the file watch's reader: {0}")]
    Reader(std::io::Error),
}

/// A placed watch and its reader; [`FileWatch::finish`] stops it and hands the tally over.
#[derive(Debug)]
pub struct FileWatch {
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<Tally>>,
}

/// Watch the mount at `mount` (a path that reaches the sandbox's workdir overlay, e.g.
/// through `/proc/<init>/root`), whose files the kernel names below `workdir` (the
/// workdir's path inside the sandbox).
pub fn place(mount: &Path, workdir: &Path) -> Result<FileWatch, FanotifyError> {
    let fan = init()?;
    mark(&fan, mount)?;
    read_back(&fan, mount)?;
    let (stop_r, stop_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| FanotifyError::Reader(e.into()))?;
    let prefix = workdir.as_os_str().as_bytes().to_vec();
    let thread = std::thread::Builder::new()
        .name("file-watch".into())
        .spawn(move || read_events(&fan, &stop_r, &prefix))
        .map_err(FanotifyError::Reader)?;
    Ok(FileWatch {
        stop: Some(stop_w),
        thread: Some(thread),
    })
}

impl FileWatch {
    /// Stop the reader once the run is over: it reads what is still queued, then returns
    /// what it saw.
    pub fn finish(mut self) -> Tally {
        self.stop_thread().unwrap_or_default()
    }

    fn stop_thread(&mut self) -> Option<Tally> {
        // Closing the pipe's write end wakes the reader with POLLHUP.
        drop(self.stop.take());
        self.thread.take()?.join().ok()
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        let _ = self.stop_thread();
    }
}

fn init() -> Result<OwnedFd, FanotifyError> {
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
    let event_flags =
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_LARGEFILE | libc::O_NOATIME;
    // SAFETY: fanotify_init takes two integers and returns a new descriptor or -1; the
    // descriptor is owned by nothing else.
    let fd = unsafe { libc::fanotify_init(flags, event_flags as u32) };
    if fd < 0 {
        return Err(FanotifyError::Init(
            Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO),
        ));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mark(fan: &OwnedFd, mount: &Path) -> Result<(), FanotifyError> {
    let err = |errno| FanotifyError::Mark {
        path: mount.to_path_buf(),
        errno,
    };
    let path = CString::new(mount.as_os_str().as_bytes()).map_err(|_| err(Errno::INVAL))?;
    if crate::mutant::active(crate::mutant::FILE_WATCH_UNMARKED) {
        return Ok(());
    }
    use std::os::fd::AsRawFd;
    // SAFETY: `fan` is an open fanotify descriptor for the duration of the call, and `path`
    // a NUL-terminated string that outlives it; the call reads nothing else of ours.
    let r = unsafe {
        libc::fanotify_mark(
            fan.as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
            MASK,
            libc::AT_FDCWD,
            path.as_ptr(),
        )
    };
    if r < 0 {
        return Err(err(
            Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)
        ));
    }
    Ok(())
}

/// The group's one mark, from `/proc/self/fdinfo`: on the mount of `mount` (its id by
/// `statx`), with every event of [`MASK`].
fn read_back(fan: &OwnedFd, mount: &Path) -> Result<(), FanotifyError> {
    use std::os::fd::AsRawFd;
    let fail = |why: String| FanotifyError::ReadBack {
        path: mount.to_path_buf(),
        why,
    };
    let want = rustix::fs::statx(CWD, mount, AtFlags::empty(), StatxFlags::MNT_ID)
        .map_err(|e| fail(format!("statx: {e}")))?
        .stx_mnt_id;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fan.as_raw_fd()))
        .map_err(|e| fail(format!("fdinfo: {e}")))?;
    let marks = marks_in(&info);
    match marks.as_slice() {
        [(mnt, mask)] if *mnt == want && mask & MASK == MASK => Ok(()),
        other => Err(fail(format!(
            "marks {other:x?}, expected mount {want:x} with mask {MASK:x}"
        ))),
    }
}

/// The mount marks an fdinfo lists: `(mnt_id, mask)` of each `fanotify mnt_id:` line.
fn marks_in(info: &str) -> Vec<(u64, u64)> {
    info.lines()
        .filter_map(|l| l.strip_prefix("fanotify mnt_id:"))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let mnt = u64::from_str_radix(words.next()?, 16).ok()?;
            let mask = words
                .find_map(|w| w.strip_prefix("mask:"))
                .and_then(|m| u64::from_str_radix(m, 16).ok())?;
            Some((mnt, mask))
        })
        .collect()
}

/// The reader: every event until the stop pipe closes, then what is still queued.
fn read_events(fan: &OwnedFd, stop: &OwnedFd, prefix: &[u8]) -> Tally {
    let mut tally = Tally::default();
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let mut fds = [
            PollFd::new(fan, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return tally,
        }
        let stopping = !fds[1].revents().is_empty();
        // Everything queued now (the fd is non-blocking).
        loop {
            match rustix::io::read(fan, &mut buf) {
                Ok(0) | Err(Errno::AGAIN) => break,
                Ok(n) => fold(&buf[..n], prefix, &mut tally),
                Err(Errno::INTR) => {}
                Err(Errno::BADF | Errno::INVAL | Errno::FAULT) => {
                    tally.lost_events();
                    return tally;
                }
                // The kernel could not open an event's file for us (EMFILE, ENFILE, or the
                // open itself failed): that event is gone, the rest are still queued.
                Err(_) => {
                    tally.lost_events();
                    break;
                }
            }
        }
        if stopping {
            return tally;
        }
    }
}

/// One read's events into `tally`; each event's descriptor is closed.
fn fold(mut bytes: &[u8], prefix: &[u8], tally: &mut Tally) {
    while let Some(ev) = Event::parse(bytes) {
        bytes = &bytes[ev.len..];
        if ev.mask & libc::FAN_Q_OVERFLOW != 0 {
            tally.lost_events();
        }
        if ev.fd < 0 {
            continue;
        }
        // SAFETY: the kernel installed this descriptor in our table for this event; nothing
        // else knows it, so it is owned here and closed on drop.
        let file = unsafe { OwnedFd::from_raw_fd(ev.fd) };
        match name_of(&file).and_then(|p| relative(&p, prefix)) {
            Some(rel) => tally.note(&rel, kinds(ev.mask)),
            None => tally.unnamed(),
        }
    }
}

/// One event's header.
struct Event {
    len: usize,
    mask: u64,
    fd: i32,
}

impl Event {
    /// The event at the start of `bytes`; `None` when none is whole there (or its header is
    /// not one this reader knows).
    fn parse(bytes: &[u8]) -> Option<Event> {
        let head = bytes.get(..METADATA_LEN)?;
        let len = u32::from_ne_bytes(head[0..4].try_into().ok()?) as usize;
        if head[4] != METADATA_VERSION || len < METADATA_LEN || len > bytes.len() {
            return None;
        }
        Some(Event {
            len,
            mask: u64::from_ne_bytes(head[8..16].try_into().ok()?),
            fd: i32::from_ne_bytes(head[16..20].try_into().ok()?),
        })
    }
}

/// The kinds of access an event's mask says. Pure.
fn kinds(mask: u64) -> u8 {
    let mut k = 0;
    if mask & (libc::FAN_ACCESS | libc::FAN_CLOSE_NOWRITE) != 0 {
        k |= READ;
    }
    if mask & (libc::FAN_MODIFY | libc::FAN_CLOSE_WRITE) != 0 {
        k |= WRITE;
    }
    if mask & libc::FAN_OPEN_EXEC != 0 {
        k |= EXECUTE;
    }
    k
}

/// The path the kernel gives the event's file (as the sandbox sees it), without the mark
/// of a removed file.
fn name_of(file: &OwnedFd) -> Option<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let link = rustix::fs::readlink(format!("/proc/self/fd/{}", file.as_raw_fd()), Vec::new())
        .ok()?
        .into_bytes();
    let removed = rustix::fs::fstat(file.as_fd()).is_ok_and(|st| st.st_nlink == 0);
    Some(match link.strip_suffix(b" (deleted)") {
        Some(name) if removed => name.to_vec(),
        _ => link,
    })
}

/// `path` relative to `prefix` (`.` for `prefix` itself); `None` outside it. Pure.
fn relative(path: &[u8], prefix: &[u8]) -> Option<Vec<u8>> {
    let rest = path.strip_prefix(prefix)?;
    if rest.is_empty() {
        return Some(b".".to_vec());
    }
    let rest = if prefix.ends_with(b"/") {
        rest
    } else {
        rest.strip_prefix(b"/")?
    };
    Some(rest.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_say_read_write_execute() {
        assert_eq!(kinds(libc::FAN_ACCESS), READ);
        assert_eq!(kinds(libc::FAN_CLOSE_NOWRITE | libc::FAN_ONDIR), READ);
        assert_eq!(kinds(libc::FAN_MODIFY | libc::FAN_CLOSE_WRITE), WRITE);
        assert_eq!(
            kinds(libc::FAN_OPEN_EXEC | libc::FAN_CLOSE_NOWRITE),
            EXECUTE | READ
        );
        assert_eq!(kinds(libc::FAN_Q_OVERFLOW), 0);
    }

    #[test]
    fn paths_are_taken_relative_to_the_workdir_only() {
        assert_eq!(relative(b"/w/p/src/a.rs", b"/w/p").unwrap(), b"src/a.rs");
        assert_eq!(relative(b"/w/p", b"/w/p").unwrap(), b".");
        assert_eq!(relative(b"/w/p2/x", b"/w/p"), None);
        assert_eq!(relative(b"/w/other", b"/w/p"), None);
        assert_eq!(relative(b"/x", b"/").unwrap(), b"x");
    }

    #[test]
    fn an_fdinfo_mark_reads_as_mount_and_mask() {
        let info = "pos:\t0\nflags:\t02004000\nmnt_id:\t15\nino:\t1057\n\
                    fanotify flags:10 event-flags:8c0800\n\
                    fanotify mnt_id:2a mflags:0 mask:4000101b ignored_mask:0\n";
        assert_eq!(marks_in(info), vec![(0x2a, 0x4000_101b)]);
        assert!(marks_in("fanotify mnt_id:zz mask:1\n").is_empty());
    }

    #[test]
    fn torn_or_foreign_headers_end_the_parse() {
        let mut ev = Vec::new();
        ev.extend_from_slice(&24u32.to_ne_bytes());
        ev.extend_from_slice(&[METADATA_VERSION, 0, 24, 0]);
        ev.extend_from_slice(&libc::FAN_Q_OVERFLOW.to_ne_bytes());
        ev.extend_from_slice(&(-1i32).to_ne_bytes());
        ev.extend_from_slice(&0i32.to_ne_bytes());
        let e = Event::parse(&ev).unwrap();
        assert_eq!((e.len, e.fd), (24, -1));
        assert!(Event::parse(&ev[..23]).is_none());
        let mut other = ev.clone();
        other[4] = 9;
        assert!(Event::parse(&other).is_none());
        let mut long = ev.clone();
        long[0] = 200;
        assert!(Event::parse(&long).is_none());
        let mut t = Tally::default();
        fold(&ev, b"/w", &mut t);
        assert_eq!(
            t.observation(|b| String::from_utf8_lossy(b).into())
                .0
                .allowed,
            None
        );
    }
}
