//! The run's file accesses, seen from outside: a fanotify mark on the sealed tier's workdir
//! overlay mount, placed by the supervisor while pid 1 waits before the command
//! (`SetupStep::AwaitFileWatch`), and read by one thread until every process of the run is
//! gone. The group reports events with an open descriptor (not file handles, which an
//! overlay mounted in a user namespace cannot give); the kernel opens only regular files
//! and directories for it, so a FIFO or a device in the workdir never blocks the reader.
//!
//! Owns the fanotify group, its mark (read back before the watch counts: on an overlay,
//! the mount pid 1 named), the run's mount namespace held open while events are named
//! (once it is gone the kernel names them from a detached mount), and the reading thread.
//! What the events mean for the record is [`tally`]'s. It never acts on what it reads: a
//! name only feeds the tally.

pub mod tally;

use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use rustix::fs::{AtFlags, CWD, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;
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

/// `statfs.f_type` of an overlay.
const OVERLAYFS_SUPER_MAGIC: u64 = 0x794c_7630;

/// What the kernel appends to the name of a file with no name left.
const DELETED: &[u8] = b" (deleted)";

/// Why the watch could not be placed; the run goes on, without the observation.
#[derive(Debug, thiserror::Error)]
pub enum FanotifyError {
    /// The workdir's mount or the run's mount namespace could not be opened.
    #[error("open {path}: {errno}")]
    Open {
        /// What was opened.
        path: PathBuf,
        /// The error.
        errno: Errno,
    },
    /// `fanotify_init` failed (EPERM without `CAP_SYS_ADMIN` in the initial namespace,
    /// EMFILE past `fs.fanotify.max_user_groups`).
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
    /// The mark read back is not the one placed, or not on the workdir's overlay.
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
    /// The reader, which hands the group back with what it saw.
    thread: Option<JoinHandle<(Tally, OwnedFd)>>,
    /// The run's mount namespace, held until the last event is named.
    mount_ns: Option<OwnedFd>,
}

/// Watch the workdir of the sandbox whose init is `init_pid` (`workdir` is its path inside,
/// the same as on the host); `mnt_id` is the mount id pid 1 read of it, which the mark must
/// be on.
pub fn place(
    init_pid: u32,
    workdir: &Path,
    mnt_id: Option<u64>,
) -> Result<FileWatch, FanotifyError> {
    let proc = PathBuf::from(format!("/proc/{init_pid}"));
    let mount = proc
        .join("root")
        .join(workdir.strip_prefix("/").unwrap_or(workdir));
    let open = |path: &Path, flags: OFlags| {
        rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty()).map_err(|errno| {
            FanotifyError::Open {
                path: path.to_path_buf(),
                errno,
            }
        })
    };
    let mount_ns = open(&proc.join("ns/mnt"), OFlags::RDONLY)?;
    // Opened once: the checks and the mark are of this directory, not of a second lookup.
    let dir = open(
        &mount,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    )?;
    let fail = |why: String| FanotifyError::ReadBack {
        path: mount.clone(),
        why,
    };
    let is = rustix::fs::fstatfs(&dir).map_err(|e| fail(format!("fstatfs: {e}")))?;
    if is.f_type as u64 != OVERLAYFS_SUPER_MAGIC {
        return Err(fail(format!("not an overlay (f_type {:x})", is.f_type)));
    }
    let here = rustix::fs::statx(&dir, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        .map_err(|e| fail(format!("statx: {e}")))?
        .stx_mnt_id;
    match mnt_id {
        Some(id) if id == here => {}
        other => {
            return Err(fail(format!(
                "mount {here:x}, but pid 1 named {}",
                other.map_or("none".to_owned(), |i| format!("{i:x}"))
            )));
        }
    }
    let fan = init()?;
    // A group that is not used is still let go of off this path (it may hold a mark).
    if let Err(e) =
        mark(&fan, dir.as_fd(), &mount).and_then(|()| read_back(&fan, here).map_err(fail))
    {
        close_elsewhere(vec![fan]);
        return Err(e);
    }
    let (stop_r, stop_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| FanotifyError::Reader(e.into()))?;
    let prefix = workdir.as_os_str().as_bytes().to_vec();
    let thread = std::thread::Builder::new()
        .name("file-watch".into())
        .spawn(move || (read_events(&fan, &stop_r, &Names { prefix, dir }), fan))
        .map_err(FanotifyError::Reader)?;
    Ok(FileWatch {
        stop: Some(stop_w),
        thread: Some(thread),
        mount_ns: Some(mount_ns),
    })
}

impl FileWatch {
    /// Stop the reader once the run is over: it reads what is still queued, then returns
    /// what it saw.
    pub fn finish(mut self) -> Tally {
        self.stop_thread().unwrap_or_else(|| {
            let mut t = Tally::default();
            t.lost_events();
            t
        })
    }

    fn stop_thread(&mut self) -> Option<Tally> {
        // Closing the pipe's write end wakes the reader with POLLHUP.
        drop(self.stop.take());
        let joined = self.thread.take().map(JoinHandle::join);
        let (tally, fan) = match joined {
            Some(Ok((t, fan))) => (Some(t), Some(fan)),
            _ => (None, None),
        };
        close_elsewhere(fan.into_iter().chain(self.mount_ns.take()).collect());
        tally
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        let _ = self.stop_thread();
    }
}

/// Let go of the group and the namespace without waiting for the kernel: the last close of
/// a fanotify group waits for its marks' destruction (an SRCU grace period, 6.6 ms measured
/// here, as long as the rest of a run), and the namespace's the unmount of its tree. A
/// child process holds the last references and closes them once this process has let go of
/// its own; it is reaped later ([`reap_closers`]). Without a child, they close here.
fn close_elsewhere(fds: Vec<OwnedFd>) {
    use std::sync::Mutex;
    static CLOSERS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    if fds.is_empty() {
        return;
    }
    reap_closers(&CLOSERS);
    let Ok((go_r, go_w)) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) else {
        return;
    };
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let wait = go_r.as_raw_fd();
    let own_end = go_w.as_raw_fd();
    // The child keeps `raw` and `wait` and closes every other descriptor first (this
    // process's pipes to its caller among them): the ranges from 3 the sandbox's init closes
    // too (`caps::ranges_to_close`), then 0 to 2 one by one; where close_range(2) fails, each
    // descriptor open now (`caps::open_fds`).
    let kept: Vec<i32> = raw.iter().copied().chain([wait]).collect();
    let ranges = crate::caps::ranges_to_close(&kept);
    let listed = crate::caps::open_fds().unwrap_or_default();
    // SAFETY: the child of a process that may have other threads runs only close(2),
    // close_range(2), poll(2) and _exit(2), which are async-signal-safe, on memory set up
    // before the fork (`raw`, `kept`, `ranges`, `listed`, `wait`, `own_end`); it takes no
    // lock and allocates nothing.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; `pfd` is a live pollfd. The wait ends when the parent closes its
        // end (its own references are gone then, so these are the last), or after
        // CLOSER_WAIT_MS at the latest: the child never outlives its purpose by much.
        unsafe {
            libc::close(own_end);
            for fd in (0..3).filter(|fd| !kept.contains(fd)) {
                libc::close(fd);
            }
            let closed = ranges
                .iter()
                .all(|(first, last)| crate::caps::close_range(*first, *last).is_ok());
            if !closed {
                for fd in listed.iter().filter(|fd| !kept.contains(fd)) {
                    libc::close(*fd);
                }
            }
            let mut pfd = libc::pollfd {
                fd: wait,
                events: libc::POLLIN,
                revents: 0,
            };
            libc::poll(&raw mut pfd, 1, CLOSER_WAIT_MS);
            for fd in &raw {
                libc::close(*fd);
            }
            libc::_exit(0);
        }
    }
    drop(fds);
    drop(go_r);
    drop(go_w);
    if pid > 0
        && let Ok(mut pending) = CLOSERS.lock()
    {
        pending.push(pid);
    }
}

/// The longest a closer child waits for this process to let go (it takes microseconds).
const CLOSER_WAIT_MS: i32 = 5000;

/// Reap the closer children that have ended.
fn reap_closers(pending: &std::sync::Mutex<Vec<i32>>) {
    let Ok(mut pending) = pending.lock() else {
        return;
    };
    // Kept while it runs; gone once reaped, or when it cannot be waited for.
    pending.retain(|&pid| {
        rustix::process::Pid::from_raw(pid).is_some_and(|p| {
            matches!(
                rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG),
                Ok(None)
            )
        })
    });
}

fn last_errno() -> Errno {
    Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)
}

fn init() -> Result<OwnedFd, FanotifyError> {
    let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
    let event_flags =
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_LARGEFILE | libc::O_NOATIME;
    // SAFETY: fanotify_init takes two integers and returns a new descriptor or -1; the
    // descriptor is owned by nothing else.
    let fd = unsafe { libc::fanotify_init(flags, event_flags as u32) };
    if fd < 0 {
        return Err(FanotifyError::Init(last_errno()));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Mark the mount of the open directory `dir` (`mount` names it in errors).
fn mark(fan: &OwnedFd, dir: BorrowedFd<'_>, mount: &Path) -> Result<(), FanotifyError> {
    if crate::mutant::active(crate::mutant::FILE_WATCH_UNMARKED) {
        return Ok(());
    }
    // SAFETY: `fan` and `dir` are open descriptors for the duration of the call; a null
    // path makes the kernel mark what `dir` refers to, and it reads nothing else of ours.
    let r = unsafe {
        libc::fanotify_mark(
            fan.as_raw_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_MOUNT,
            MASK,
            dir.as_raw_fd(),
            std::ptr::null(),
        )
    };
    if r < 0 {
        return Err(FanotifyError::Mark {
            path: mount.to_path_buf(),
            errno: last_errno(),
        });
    }
    Ok(())
}

/// The group's one mark, from `/proc/self/fdinfo`: on mount `want`, with every event of
/// [`MASK`].
fn read_back(fan: &OwnedFd, want: u64) -> Result<(), String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fan.as_raw_fd()))
        .map_err(|e| format!("fdinfo: {e}"))?;
    match marks_in(&info).as_slice() {
        [(mnt, mask)] if *mnt == want && mask & MASK == MASK => Ok(()),
        other => Err(format!(
            "marks {other:x?}, expected mount {want:x} with mask {MASK:x}"
        )),
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

/// How an event's file is named: below `prefix` (the workdir inside), checked against
/// `dir` (the workdir's mount root, open) where the kernel's name is in doubt.
struct Names {
    prefix: Vec<u8>,
    dir: OwnedFd,
}

/// The reader: every event until the stop pipe closes, then what is still queued.
fn read_events(fan: &OwnedFd, stop: &OwnedFd, names: &Names) -> Tally {
    let mut tally = Tally::default();
    let mut buf = vec![0u8; READ_BUF];
    let mut link = vec![0u8; libc::PATH_MAX as usize + DELETED.len() + 1];
    loop {
        let mut fds = [
            PollFd::new(fan, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => {
                tally.lost_events();
                return tally;
            }
        }
        let stopping = !fds[1].revents().is_empty();
        // Everything queued now (the fd is non-blocking).
        loop {
            match rustix::io::read(fan, &mut buf) {
                Ok(0) | Err(Errno::AGAIN) => break,
                Ok(n) => fold(&buf[..n], names, &mut link, &mut tally),
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
fn fold(mut bytes: &[u8], names: &Names, link: &mut [u8], tally: &mut Tally) {
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
        match name_of(&file, names, link) {
            Some(rel) => tally.note(&rel, kinds(ev.mask)),
            None => tally.unnamed(),
        }
    }
    if !bytes.is_empty() {
        // A header this reader does not know: the rest (and their descriptors) are lost.
        tally.lost_events();
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

/// The event's file by its name now, relative to the workdir; `None` when it has none the
/// kernel can give (longer than `link`, outside the workdir, or removed while other names
/// remain).
fn name_of(file: &OwnedFd, names: &Names, link: &mut [u8]) -> Option<Vec<u8>> {
    let n = rustix::fs::readlinkat_raw(
        CWD,
        format!("/proc/self/fd/{}", file.as_raw_fd()),
        &mut *link,
    )
    .ok()?;
    if n >= link.len() {
        return None;
    }
    let rel = relative(&link[..n], &names.prefix)?;
    let Some(stripped) = rel.strip_suffix(DELETED) else {
        return Some(rel);
    };
    // The suffix is the kernel's for a file with no name left, or part of a real name.
    let st = rustix::fs::fstat(file).ok()?;
    // The name is the workload's: it is resolved beneath the workdir only, through no
    // symlink (one could point the supervisor's lookup at the host's tree) and no other
    // mount.
    let resolve = ResolveFlags::BENEATH
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_XDEV;
    let same = rustix::fs::openat2(
        &names.dir,
        std::ffi::OsStr::from_bytes(&rel),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        resolve,
    )
    .and_then(rustix::fs::fstat)
    .is_ok_and(|o| (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino));
    if same {
        Some(rel)
    } else if st.st_nlink == 0 && !stripped.is_empty() {
        Some(stripped.to_vec())
    } else {
        None
    }
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

    /// The closer child holds what it is given and nothing else, and lets go of it.
    #[test]
    fn the_closer_child_closes_what_it_is_given_and_holds_nothing_else() {
        use std::time::{Duration, Instant};
        let eof_within = |r: &OwnedFd, limit: Duration| {
            let start = Instant::now();
            let mut fds = [PollFd::new(r, PollFlags::IN)];
            let ms = i64::try_from(limit.as_millis()).unwrap();
            let t = rustix::event::Timespec {
                tv_sec: ms / 1000,
                tv_nsec: (ms % 1000) * 1_000_000,
            };
            let _ = rustix::event::poll(&mut fds, Some(&t));
            let mut b = [0u8; 1];
            rustix::fs::fcntl_setfl(r, OFlags::NONBLOCK).unwrap();
            matches!(rustix::io::read(r, &mut b), Ok(0)) && start.elapsed() < limit
        };
        let (given_r, given_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        let (other_r, other_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
        close_elsewhere(vec![given_w]);
        assert!(
            eof_within(&given_r, Duration::from_secs(5)),
            "the child let go of it"
        );
        drop(other_w);
        assert!(
            eof_within(&other_r, Duration::from_secs(5)),
            "the child holds no other descriptor of this process"
        );
    }

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

    /// A name with the kernel's suffix is the file's own when it resolves to the file; a
    /// removed file keeps the name it had; a removed name of a file with others left has
    /// no name to give.
    #[test]
    fn the_deleted_suffix_is_believed_only_when_the_file_has_no_name_left() {
        let tmp = tempfile::tempdir().unwrap();
        let w = tmp.path();
        let dir = rustix::fs::open(w, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let names = Names {
            prefix: w.as_os_str().as_bytes().to_vec(),
            dir,
        };
        let mut link = vec![0u8; 4200];
        let open = |p: &Path| rustix::fs::open(p, OFlags::RDONLY, Mode::empty()).unwrap();
        std::fs::write(w.join("real (deleted)"), "r").unwrap();
        let real = open(&w.join("real (deleted)"));
        assert_eq!(
            name_of(&real, &names, &mut link).unwrap(),
            b"real (deleted)"
        );
        std::fs::write(w.join("gone"), "g").unwrap();
        let gone = open(&w.join("gone"));
        std::fs::remove_file(w.join("gone")).unwrap();
        assert_eq!(name_of(&gone, &names, &mut link).unwrap(), b"gone");
        std::fs::write(w.join("l1"), "l").unwrap();
        std::fs::hard_link(w.join("l1"), w.join("l2")).unwrap();
        let l1 = open(&w.join("l1"));
        std::fs::remove_file(w.join("l1")).unwrap();
        assert_eq!(name_of(&l1, &names, &mut link), None);
        // A name checked through a symlink the workload planted would be the host's: the
        // check goes through none, so a file whose other name lies outside stays unnamed.
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(w.join("d")).unwrap();
        std::fs::write(w.join("d/f"), "f").unwrap();
        std::fs::hard_link(w.join("d/f"), outside.path().join("f (deleted)")).unwrap();
        let f = open(&w.join("d/f"));
        std::fs::remove_file(w.join("d/f")).unwrap();
        std::fs::remove_dir(w.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), w.join("d")).unwrap();
        assert_eq!(name_of(&f, &names, &mut link), None);
        // Too long for the buffer: unnamed, never cut short.
        assert_eq!(name_of(&real, &names, &mut [0u8; 8]), None);
    }

    #[test]
    fn torn_or_foreign_headers_end_the_parse_and_count_as_lost() {
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
        let tmp = tempfile::tempdir().unwrap();
        let names = Names {
            prefix: b"/w".to_vec(),
            dir: rustix::fs::open(tmp.path(), OFlags::RDONLY, Mode::empty()).unwrap(),
        };
        let shown = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut t = Tally::default();
        fold(&ev, &names, &mut [0u8; 64], &mut t);
        assert_eq!(t.observation(shown).0.allowed, None, "an overflow");
        let mut t = Tally::default();
        fold(&other, &names, &mut [0u8; 64], &mut t);
        assert_eq!(t.observation(shown).0.allowed, None, "an unknown header");
    }
}
