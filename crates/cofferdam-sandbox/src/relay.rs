//! The supervisor's loop while the sandbox runs: one `poll(2)` over the status pipe and, when
//! the run has them, the terminal socket, the pty master and the caller's stdin (pty mode),
//! the command's stdin, stdout and stderr pipes (every run without a pty), and a self-pipe
//! for signals.
//!
//! The pipes are relayed with `splice(2)` (one side is always the sandbox's pipe, so the
//! bytes are moved inside the kernel) unless the caller's descriptor refuses it (a terminal,
//! an `O_APPEND` file) or the output is also captured; then by `read`/`write`. The caller's
//! stdin is read only when it has data and, when it is a terminal, only while cofferdam is
//! in its foreground (a background run is not stopped by SIGTTIN for input the command may
//! never want); its end closes the command's stdin. A caller's stream that is gone (a closed
//! pipe) closes the command's pipe, so the command gets EPIPE or SIGPIPE as it would have.
//! The caller's descriptors are never made non-blocking (their file descriptions are
//! shared with the caller's shell): where bytes pass through this process (`--capture`, a
//! terminal, a descriptor that refuses `splice`) they are written only when `poll(2)` says
//! the caller's stream has room, a bounded chunk at a time ([`write_some`]), and the rest
//! waits in a buffer while the loop goes on serving the status, signals and the timeout; the
//! command's pipe or terminal is not read again until that buffer is empty.
//!
//! Owns copying bytes and nothing else: status lines are collected unread, capture files are
//! written up to their limit with every byte counted, the caller's terminal is put in raw
//! mode only once the command's terminal exists and is restored on every way out of the loop
//! (end, error, panic, a signal to the supervisor: SIGINT/SIGTERM/SIGHUP cancel the run
//! through `crate::watch`, which also keeps the timeout and the stage cap; SIGTSTP gives the terminal back before stopping). It runs on the
//! supervisor's thread, so it may allocate freely; the init is unaffected.

use crate::pty::{self, RawMode};
use crate::spawn::Spawned;
use crate::status::StatusMessage;
use crate::watch::Watch;
use cofferdam_policy::verdict::Cause;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::process::{Pid, Signal};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How long the loop keeps draining output after the init has exited. Every process of the
/// sandbox is gone by then (pid 1 exits last), so whatever is buffered is read at once; this
/// only bounds a descriptor smuggled to a process outside.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// One capture file: the first `limit` bytes of a stream, with every byte counted.
#[derive(Debug)]
pub(crate) struct Sink {
    file: Option<std::fs::File>,
    path: PathBuf,
    limit: u64,
    total: u64,
    kept: u64,
    error: Option<String>,
}

impl Sink {
    pub(crate) fn new(file: std::fs::File, path: PathBuf, limit: u64) -> Sink {
        Sink {
            file: Some(file),
            path,
            limit,
            total: 0,
            kept: 0,
            error: None,
        }
    }

    fn feed(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        let room = usize::try_from(self.limit.saturating_sub(self.kept)).unwrap_or(usize::MAX);
        let take = room.min(data.len());
        if take == 0 {
            return;
        }
        if let Some(f) = &mut self.file {
            match f.write_all(&data[..take]) {
                Ok(()) => self.kept += take as u64,
                Err(e) => {
                    // The file keeps what it has; `truncated` says the rest is missing.
                    self.error = Some(format!("cannot write {}: {e}", self.path.display()));
                    self.file = None;
                }
            }
        }
    }

    pub(crate) fn finish(self) -> Captured {
        Captured {
            truncated: self.kept < self.total,
            path: self.path,
            total_bytes: self.total,
            kept_bytes: self.kept,
            error: self.error,
        }
    }
}

/// What a capture file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// The file.
    pub path: PathBuf,
    /// Every byte the stream produced.
    pub total_bytes: u64,
    /// The bytes the file holds (the first ones).
    pub kept_bytes: u64,
    /// Whether the file holds less than `total_bytes`.
    pub truncated: bool,
    /// Why writing the file stopped early, when it did.
    pub error: Option<String>,
}

/// The command's output streams as captured: `terminal` in pty mode (stdout and stderr share
/// the terminal), `stdout` and `stderr` otherwise; all `None` without `--capture`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// The command's stdout.
    pub stdout: Option<Captured>,
    /// The command's stderr.
    pub stderr: Option<Captured>,
    /// Everything the command's terminal showed.
    pub terminal: Option<Captured>,
}

static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = u8::try_from(sig).unwrap_or(0);
        // SAFETY: write(2) is async-signal-safe; errno is saved and restored around it so the
        // interrupted code sees its own. `fd` is the non-blocking self-pipe, open while the
        // handler is installed; a full pipe drops the byte, which is fine (one is enough).
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&raw const byte).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// A self-pipe the signals in `SIGNALS` are written to, installed until dropped (then the
/// previous dispositions are back). One per process at a time.
pub(crate) struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
    previous: Vec<crate::sigaction::Saved>,
}

impl std::fmt::Debug for SignalPipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let signals: Vec<_> = self.previous.iter().map(|s| s.signal()).collect();
        f.debug_struct("SignalPipe")
            .field("read", &self.read)
            .field("signals", &signals)
            .finish()
    }
}

/// The signals pty mode handles.
pub(crate) const SIGNALS: &[libc::c_int] = &[
    libc::SIGWINCH,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGTSTP,
    libc::SIGCONT,
];

/// The signals every mode handles: they cancel the run (`crate::watch`).
pub(crate) const CANCEL_SIGNALS: &[libc::c_int] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

impl SignalPipe {
    /// Install handling of `signals` (before the init is started, so a SIGTERM during setup
    /// is not lost). `Err(BUSY)` when another relay in this process has it.
    pub(crate) fn install(signals: &[libc::c_int]) -> Result<SignalPipe, Errno> {
        let (read, write) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )?;
        SIGNAL_PIPE
            .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
            .map_err(|_| Errno::BUSY)?;
        let mut previous = Vec::with_capacity(signals.len());
        for &sig in signals {
            // SAFETY: `on_signal` only makes async-signal-safe calls (write(2) to the
            // self-pipe) and restores errno; the old disposition is saved for Drop.
            let mask = crate::sigaction::Mask::Empty;
            if let Ok(old) = unsafe { crate::sigaction::set_handler(sig, on_signal, mask, true) } {
                previous.push(old);
            }
        }
        Ok(SignalPipe {
            read,
            _write: write,
            previous,
        })
    }

    /// The signals received since the last call.
    fn drain(&self) -> Vec<libc::c_int> {
        let mut buf = [0u8; 64];
        let mut out = Vec::new();
        while let Ok(n @ 1..) = rustix::io::read(&self.read, &mut buf) {
            out.extend(buf[..n].iter().map(|&b| libc::c_int::from(b)));
        }
        out
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        for old in &self.previous {
            let _ = old.restore();
        }
        SIGNAL_PIPE.store(-1, Ordering::SeqCst);
    }
}

/// The most bytes one `splice(2)` moves, and the size asked for the sandbox's pipes (the
/// default `fs.pipe-max-size`; a smaller pipe only means more rounds).
const CHUNK: usize = 1024 * 1024;

/// Make one of the sandbox's own pipe ends non-blocking and as large as [`CHUNK`]. Failures
/// only cost throughput (a blocking end is still polled first).
fn prepare_pipe(fd: &OwnedFd) {
    let _ = rustix::pipe::fcntl_setpipe_size(fd, CHUNK);
    if let Ok(fl) = rustix::fs::fcntl_getfl(fd) {
        let _ = rustix::fs::fcntl_setfl(fd, fl | rustix::fs::OFlags::NONBLOCK);
    }
}

/// Whether a `splice(2)` error means the descriptor does not take splicing (so `read`/`write`
/// will do), rather than that the stream failed.
fn splice_refused(e: Errno) -> bool {
    matches!(e, Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS)
}

/// One of the command's output pipes (every run without a pty) and where it goes.
pub(crate) struct OutPipe {
    pub(crate) fd: OwnedFd,
    /// 1 or 2: the supervisor's own stdout or stderr.
    pub(crate) to: i32,
    /// The capture file, with `--capture`.
    pub(crate) sink: Option<Sink>,
    /// Still trying `splice(2)` (no capture, and the caller's descriptor has not refused it).
    splice: bool,
    /// The caller's stream was full with bytes waiting here: poll it for room instead of
    /// this pipe for data, so the loop keeps serving signals, the status and the timeout.
    blocked: bool,
    /// Read from the pipe (and captured) but not yet taken by the caller's stream.
    pending: Vec<u8>,
}

impl OutPipe {
    /// The read end `fd` of the command's stdout (`to` 1) or stderr (2) pipe.
    pub(crate) fn new(fd: OwnedFd, to: i32, sink: Option<Sink>) -> OutPipe {
        prepare_pipe(&fd);
        OutPipe {
            splice: sink.is_none(),
            blocked: false,
            pending: Vec::new(),
            fd,
            to,
            sink,
        }
    }
}

/// The command's stdin pipe (every run without a pty): its write end, fed from the caller's
/// stdin.
pub(crate) struct InPipe {
    fd: OwnedFd,
    /// Still trying `splice(2)` (the caller's stdin has not refused it).
    splice: bool,
    /// Read from the caller but not yet taken by the pipe (`read`/`write` relay).
    pending: Vec<u8>,
    /// The pipe was full: wait until it takes more before reading the caller's stdin.
    full: bool,
    /// The caller's stdin ended: close the pipe once `pending` is written.
    ended: bool,
    /// The caller's stdin is a terminal (read only in the foreground).
    terminal: bool,
}

impl InPipe {
    /// The write end `fd` of the command's stdin pipe.
    pub(crate) fn new(fd: OwnedFd) -> InPipe {
        prepare_pipe(&fd);
        InPipe {
            fd,
            splice: true,
            pending: Vec::new(),
            full: false,
            ended: false,
            terminal: rustix::termios::isatty(std_fd(0)),
        }
    }
}

/// What one round of copying an output pipe did.
enum Pumped {
    /// Copied what there was; the pipe is open.
    Open,
    /// The command's end is closed, or the caller's stream is gone.
    Closed,
    /// The caller's descriptor does not take `splice(2)`: copy by `read`/`write`.
    Refused,
    /// Bytes are waiting but the caller's stream is full (a pipe it reads slowly).
    Blocked,
}

/// The loop's inputs.
pub(crate) struct Relay {
    pub(crate) status: OwnedFd,
    /// The terminal socket, in pty mode.
    pub(crate) socket: Option<OwnedFd>,
    pub(crate) terminal_sink: Option<Sink>,
    pub(crate) out: Option<OutPipe>,
    pub(crate) err: Option<OutPipe>,
    /// The command's stdin pipe, without a pty.
    pub(crate) input: Option<InPipe>,
    /// The signal self-pipe.
    pub(crate) signals: Option<SignalPipe>,
    /// The timeout, cancellation and stage cap.
    pub(crate) watch: Watch,
    /// A tier without a pid namespace: this process is the command's child subreaper, and
    /// orphans of the run reach it only once the init is reaped.
    pub(crate) subreaper: bool,
    /// The file watch pid 1 will ask for, when the plan watches files.
    pub(crate) file_watch: Option<FileWatchRequest>,
}

/// Where to place the file watch once pid 1 asks (`StatusMessage::AwaitFileWatch`), and the
/// plan channel to tell it on.
pub(crate) struct FileWatchRequest {
    /// The init, whose root and mount namespace are the sandbox's.
    pub(crate) init_pid: u32,
    /// The workdir's path inside the sandbox.
    pub(crate) workdir: std::path::PathBuf,
    /// The plan channel's write end.
    pub(crate) reply: OwnedFd,
}

/// What the loop collected.
#[derive(Debug)]
pub(crate) struct Relayed {
    pub(crate) stream: Vec<u8>,
    pub(crate) output: CapturedOutput,
    pub(crate) terminal: bool,
    pub(crate) warnings: Vec<String>,
    /// Why the supervisor stopped the run, if it did.
    pub(crate) stop: Option<Cause>,
    /// The file watch placed when pid 1 asked (`Err`: why none was).
    pub(crate) file_watch: Option<Result<crate::fanotify::FileWatch, String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Status,
    Socket,
    Master,
    Stdin,
    Out,
    Err,
    /// The caller's stdin, for the command's stdin pipe.
    StdinPipe,
    /// The command's stdin pipe has room again (or its reader is gone).
    InPipe,
    /// The caller's stdout has room for what the command's terminal showed (pty mode).
    TermOut,
    Signal,
}

fn std_fd(n: i32) -> BorrowedFd<'static> {
    // SAFETY: the standard descriptors 0, 1 and 2 stay open for the life of the process
    // (cofferdam never closes them); they are only read, written and ioctl'd here.
    unsafe { BorrowedFd::borrow_raw(n) }
}

/// The most bytes [`write_some`] hands a caller's pipe at once once `poll(2)` said it has
/// room: a pipe that polls writable has a free page, and a write of at most `PIPE_BUF`
/// fits in it without blocking.
const PIPE_ROOM: usize = 4096;
/// The same for the caller's other streams (a terminal, a socket), whose room when they
/// poll writable is smaller: a terminal's write wake-up mark is 256 bytes.
const OTHER_ROOM: usize = 256;

/// Write a prefix of `data` to the caller's `fd` (blocking, shared with the caller's
/// shell) without waiting: bounded chunks, each only after `poll(2)` says there is room.
/// Returns how much was written (0: the stream is full now); an error when the stream is
/// gone. A regular file (or a block device) always takes the write.
fn write_some(fd: BorrowedFd<'_>, data: &[u8]) -> Result<usize, Errno> {
    let kind = rustix::fs::fstat(fd).map(|st| FileType::from_raw_mode(st.st_mode));
    if matches!(kind, Ok(FileType::RegularFile | FileType::BlockDevice)) {
        return loop {
            match rustix::io::write(fd, data) {
                Err(Errno::INTR) => {}
                Ok(0) if !data.is_empty() => break Err(Errno::IO),
                other => break other,
            }
        };
    }
    let room = if matches!(kind, Ok(FileType::Fifo)) {
        PIPE_ROOM
    } else {
        OTHER_ROOM
    };
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut done = 0;
    // At most 1 MiB to a pipe, 64 KiB to a terminal per call: one stream does not starve
    // the loop.
    for _ in 0..256 {
        let Some(rest) = data.get(done..).filter(|r| !r.is_empty()) else {
            break;
        };
        let mut p = [PollFd::from_borrowed_fd(fd, PollFlags::OUT)];
        match rustix::event::poll(&mut p, Some(&zero)) {
            Ok(0) | Err(Errno::INTR) => break,
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        let ev = p[0].revents();
        if ev.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) {
            return Err(Errno::PIPE);
        }
        if !ev.contains(PollFlags::OUT) {
            break;
        }
        let take = rest.get(..room.min(rest.len())).unwrap_or(rest);
        match rustix::io::write(fd, take) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Write as much of `pending` to the caller's `fd` as it takes now, dropping what was
/// written; `Err` when the stream is gone.
fn flush_to(fd: BorrowedFd<'_>, pending: &mut Vec<u8>) -> Result<(), Errno> {
    let n = write_some(fd, pending)?;
    pending.drain(..n);
    Ok(())
}

/// Read once, retrying on EINTR: `None` at end of stream or on an error (EIO is a pty's
/// hang-up), `Some(0)` when there is nothing right now.
fn read_some(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Option<usize> {
    loop {
        return match rustix::io::read(fd, &mut *buf) {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => Some(0),
            Err(_) => None,
        };
    }
}

/// Whether the caller's stdin, a terminal, may be read now: this process is in its
/// foreground process group (a read from the background would stop cofferdam by SIGTTIN).
fn foreground(fd: BorrowedFd<'_>) -> bool {
    rustix::termios::tcgetpgrp(fd).map_or(true, |pgrp| pgrp == rustix::process::getpgrp())
}

/// Move what the command wrote to its output pipe to the caller's stream by `splice(2)`,
/// a few rounds at most, so the rest of the loop is not starved.
fn splice_out(p: &OutPipe) -> Pumped {
    let to = std_fd(p.to);
    for _ in 0..8 {
        match rustix::pipe::splice(
            &p.fd,
            None,
            to,
            None,
            CHUNK,
            rustix::pipe::SpliceFlags::NONBLOCK,
        ) {
            Ok(0) => return Pumped::Closed,
            Ok(_) | Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                // The pipe is empty, or the caller's stream is full (a pipe it reads
                // slowly): then the loop waits for it, as a blocking write would, without
                // stalling the rest of the loop.
                let mut pf = [PollFd::new(&p.fd, PollFlags::IN)];
                let zero = Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let has_data = matches!(rustix::event::poll(&mut pf, Some(&zero)), Ok(1..))
                    && pf[0].revents().contains(PollFlags::IN);
                return if has_data {
                    Pumped::Blocked
                } else {
                    Pumped::Open
                };
            }
            Err(e) if splice_refused(e) => return Pumped::Refused,
            // EPIPE and the rest: the caller's stream is gone.
            Err(_) => return Pumped::Closed,
        }
    }
    Pumped::Open
}

/// One `read` of the command's output pipe: to the capture file and, as far as it takes
/// them now, the caller's stream. Bytes the caller's stream did not take are written first
/// (the pipe is read again only once they are): `Blocked` while some wait.
fn copy_out(p: &mut OutPipe, buf: &mut [u8]) -> Pumped {
    if p.pending.is_empty() {
        match read_some(p.fd.as_fd(), buf) {
            Some(0) => return Pumped::Open,
            Some(n) => {
                let data = &buf[..n];
                if let Some(sink) = &mut p.sink {
                    sink.feed(data);
                }
                p.pending.extend_from_slice(data);
            }
            None => return Pumped::Closed,
        }
    }
    match flush_to(std_fd(p.to), &mut p.pending) {
        Err(_) => Pumped::Closed,
        Ok(()) if p.pending.is_empty() => Pumped::Open,
        Ok(()) => Pumped::Blocked,
    }
}

/// The loop's state.
struct Loop {
    status: Option<OwnedFd>,
    stream: Vec<u8>,
    /// How far `stream` was scanned for messages the loop acts on (pty mode).
    scanned: usize,
    terminal_mode: bool,
    socket: Option<OwnedFd>,
    master: Option<OwnedFd>,
    /// The master once no slave is open, kept so the terminal is not hung up early.
    closed_master: Option<OwnedFd>,
    had_master: bool,
    raw: Option<RawMode>,
    stdin_open: bool,
    pending: Vec<u8>,
    /// Read from the command's terminal but not yet taken by the caller's stdout: the
    /// master is read again only once this is empty.
    shown_pending: Vec<u8>,
    terminal_sink: Option<Sink>,
    out: Option<OutPipe>,
    err: Option<OutPipe>,
    input: Option<InPipe>,
    out_sink: Option<Sink>,
    err_sink: Option<Sink>,
    init: Option<Pid>,
    watch: Watch,
    warnings: Vec<String>,
    buf: Vec<u8>,
    file_watch_request: Option<FileWatchRequest>,
    file_watch: Option<Result<crate::fanotify::FileWatch, String>>,
}

impl Relay {
    /// Run the loop until the sandbox is over: the status pipe, the terminal and the output
    /// pipes all at end of stream (or `DRAIN_AFTER_EXIT` past the init's exit). The caller's
    /// terminal is restored, then the signal handlers, before this returns or unwinds.
    pub(crate) fn run(self, child: &mut Spawned) -> Result<Relayed, Errno> {
        let Relay {
            status,
            socket,
            terminal_sink,
            out,
            err,
            input,
            signals,
            watch,
            subreaper,
            file_watch,
        } = self;
        let mut l = Loop {
            status: Some(status),
            stream: Vec::new(),
            scanned: 0,
            terminal_mode: socket.is_some(),
            socket,
            master: None,
            closed_master: None,
            had_master: false,
            raw: None,
            stdin_open: true,
            pending: Vec::new(),
            shown_pending: Vec::new(),
            terminal_sink,
            out,
            err,
            input,
            out_sink: None,
            err_sink: None,
            init: i32::try_from(child.id()).ok().and_then(Pid::from_raw),
            watch,
            warnings: Vec::new(),
            buf: vec![0u8; 64 * 1024],
            file_watch_request: file_watch,
            file_watch: None,
        };
        let result = l.run(child, signals.as_ref());
        // Terminal first (RawMode's Drop), then the handlers (SignalPipe's Drop).
        drop(l.raw.take());
        drop(signals);
        result?;
        let output = CapturedOutput {
            terminal: l.terminal_sink.take().map(Sink::finish),
            stdout: l
                .out_sink
                .take()
                .or(l.out.take().and_then(|p| p.sink))
                .map(Sink::finish),
            stderr: l
                .err_sink
                .take()
                .or(l.err.take().and_then(|p| p.sink))
                .map(Sink::finish),
        };
        for c in [&output.stdout, &output.stderr, &output.terminal]
            .into_iter()
            .flatten()
        {
            if let Some(e) = &c.error {
                l.warnings.push(e.clone());
            }
        }
        if subreaper {
            // The copy tiers: the init's end can be seen (its status channel closes) before
            // the kernel has handed its orphans to this process; once it is reaped they are
            // here, for `into_parts` to end.
            let _ = child.wait();
        }
        let (stop, watch_warnings) = l.watch.into_parts(child.id());
        l.warnings.extend(watch_warnings);
        Ok(Relayed {
            stream: l.stream,
            output,
            terminal: l.had_master,
            warnings: l.warnings,
            stop,
            file_watch: l.file_watch,
        })
    }
}

impl Loop {
    fn run(&mut self, child: &mut Spawned, signals: Option<&SignalPipe>) -> Result<(), Errno> {
        let mut exited_at: Option<Instant> = None;
        loop {
            let mut want: Vec<(BorrowedFd<'_>, PollFlags, Role)> = Vec::with_capacity(7);
            if let Some(fd) = &self.status {
                want.push((fd.as_fd(), PollFlags::IN, Role::Status));
            }
            if let Some(fd) = &self.socket {
                want.push((fd.as_fd(), PollFlags::IN, Role::Socket));
            }
            if let Some(fd) = &self.master {
                // While the caller's stdout is full the master is not read (and not
                // polled, unless typed bytes wait for it: a hang-up would spin the loop).
                let mut ev = PollFlags::empty();
                if self.shown_pending.is_empty() {
                    ev |= PollFlags::IN;
                }
                if !self.pending.is_empty() {
                    ev |= PollFlags::OUT;
                }
                if !ev.is_empty() {
                    want.push((fd.as_fd(), ev, Role::Master));
                }
                if self.stdin_open && self.pending.is_empty() {
                    want.push((std_fd(0), PollFlags::IN, Role::Stdin));
                }
            }
            if !self.shown_pending.is_empty() {
                want.push((std_fd(1), PollFlags::OUT, Role::TermOut));
            }
            for (p, role) in [(&self.out, Role::Out), (&self.err, Role::Err)] {
                match p {
                    Some(p) if p.blocked => want.push((std_fd(p.to), PollFlags::OUT, role)),
                    Some(p) => want.push((p.fd.as_fd(), PollFlags::IN, role)),
                    None => {}
                }
            }
            if want.is_empty() {
                // The caller's stdin keeps nothing alive: a command that never reads it ends
                // the run all the same.
                return Ok(());
            }
            let mut stdin_waits = false;
            if let Some(i) = &self.input {
                if i.full || !i.pending.is_empty() {
                    want.push((i.fd.as_fd(), PollFlags::OUT, Role::InPipe));
                } else if !i.terminal || foreground(std_fd(0)) {
                    want.push((std_fd(0), PollFlags::IN, Role::StdinPipe));
                } else {
                    // In the background of the caller's terminal: look again now and then.
                    stdin_waits = true;
                }
            }
            if want.len() == 1
                && want[0].2 == Role::Status
                && signals.is_none()
                && !self.watch.active()
            {
                // Pass-through: only the status pipe; a blocking read is all it takes.
                drop(want);
                self.handle(Role::Status, PollFlags::IN);
                continue;
            }
            if let Some(s) = signals {
                want.push((s.read.as_fd(), PollFlags::IN, Role::Signal));
            }
            let mut fds: Vec<PollFd<'_>> = want
                .iter()
                .map(|(fd, ev, _)| PollFd::from_borrowed_fd(*fd, *ev))
                .collect();
            // Once the status pipe is at its end the init is exiting: look at it now and
            // then, and give up on the streams a while after it is gone.
            let tick = Duration::from_millis(100);
            let live = self.status.is_some();
            let sleep = [
                (!live || stdin_waits).then_some(tick),
                self.watch.wake_in(Instant::now()).filter(|_| live),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|d| Timespec {
                tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(d.subsec_nanos()),
            });
            match rustix::event::poll(&mut fds, sleep.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
            let ready: Vec<(Role, PollFlags)> = fds
                .iter()
                .zip(&want)
                .map(|(f, (_, _, r))| (*r, f.revents()))
                .filter(|(_, ev)| !ev.is_empty())
                .collect();
            drop(fds);
            drop(want);
            for (role, ev) in ready {
                self.handle(role, ev);
            }
            if let Some(s) = signals {
                for sig in s.drain() {
                    self.on_signal(sig, child);
                }
            }
            // Once the status stream has ended pid 1 is gone and the workload with it: a
            // deadline passing while the output drains is not a timeout.
            if self.status.is_some() {
                self.watch.tick(Instant::now(), child);
            }
            if self.status.is_none() {
                match exited_at {
                    // A caller reading slowly still gets every byte the command wrote.
                    Some(t) if t.elapsed() >= DRAIN_AFTER_EXIT && !self.output_blocked() => {
                        return Ok(());
                    }
                    Some(_) => {}
                    None => {
                        if child.try_wait().ok().flatten().is_some() {
                            exited_at = Some(Instant::now());
                        }
                    }
                }
            }
        }
    }

    fn handle(&mut self, role: Role, ev: PollFlags) {
        match role {
            Role::Status => {
                let Some(fd) = &self.status else { return };
                match read_some(fd.as_fd(), &mut self.buf) {
                    Some(n) => {
                        self.stream.extend_from_slice(&self.buf[..n]);
                        if self.terminal_mode || self.file_watch_request.is_some() {
                            self.scan_status();
                        }
                    }
                    None => self.status = None,
                }
            }
            Role::Socket => {
                let Some(fd) = &self.socket else { return };
                match pty::recv_master(fd.as_fd()) {
                    Ok(Some(master)) => {
                        self.socket = None;
                        self.attach(master);
                    }
                    Ok(None) => self.socket = None,
                    Err(e) => {
                        self.warnings
                            .push(format!("cannot receive the command's terminal: {e}"));
                        self.socket = None;
                    }
                }
            }
            Role::Master => {
                if ev.contains(PollFlags::OUT) {
                    self.flush_pending();
                }
                if ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                    let _ = self.relay_master();
                }
            }
            Role::Stdin => self.relay_stdin(),
            Role::TermOut => self.flush_shown(),
            Role::Out | Role::Err => self.relay_pipe(role == Role::Out),
            Role::StdinPipe => self.pump_stdin(),
            Role::InPipe => {
                if let Some(i) = &mut self.input {
                    i.full = false;
                }
                if ev.contains(PollFlags::OUT) {
                    self.flush_input();
                } else {
                    // POLLERR: the command's end is closed; what is left is not wanted.
                    self.input = None;
                }
            }
            Role::Signal => {}
        }
    }

    /// Act on the status messages that concern the relay: a stopped command.
    fn scan_status(&mut self) {
        while let Some((msg, used)) = self
            .stream
            .get(self.scanned..)
            .and_then(crate::status::next)
        {
            self.scanned += used;
            if let Ok(StatusMessage::AwaitFileWatch { mnt_id }) = msg {
                self.place_file_watch(mnt_id);
            }
            if let Ok(StatusMessage::Stopped { .. }) = msg {
                self.stop_with_command();
            }
        }
    }

    /// Pid 1 waits before the command: place the file watch (once), then let it go on
    /// whether or not the watch could be placed (the records say which).
    fn place_file_watch(&mut self, mnt_id: Option<u64>) {
        let Some(req) = self.file_watch_request.take() else {
            return;
        };
        let placed =
            crate::fanotify::place(req.init_pid, &req.workdir, mnt_id).map_err(|e| e.to_string());
        // A write error means pid 1 is gone; its status says why.
        let _ = crate::plan_channel::send_file_watched(req.reply.as_fd());
        self.file_watch = Some(placed);
    }

    /// The command stopped on its terminal: give the caller's terminal back and stop this
    /// process group as the caller's Ctrl-Z would; once continued, take the terminal again
    /// and continue the command.
    fn stop_with_command(&mut self) {
        // Pid 1 sends the master before it starts the command, so when the stop is reported
        // first (the status pipe polled before the socket) the master is already waiting on
        // the socket: take it now, or what the command wrote would stay unshown.
        if let Some(socket) = self.socket.take() {
            match pty::recv_master(socket.as_fd()) {
                Ok(Some(master)) => self.attach(master),
                Ok(None) => {}
                Err(e) => self
                    .warnings
                    .push(format!("cannot receive the command's terminal: {e}")),
            }
        }
        // Show what the command wrote before it stopped (the master is non-blocking).
        while self.master.is_some() && self.relay_master() {}
        if let Some(raw) = &mut self.raw {
            raw.suspend();
        }
        // SIGSTOP cannot be caught: this returns once the group is continued.
        let _ = rustix::process::kill_current_process_group(Signal::STOP);
        self.resume();
        if let Some(pid) = self.init {
            let _ = rustix::process::kill_process(pid, Signal::CONT);
        }
    }

    /// The command's terminal exists: relay the caller's to it.
    fn attach(&mut self, master: OwnedFd) {
        if let Err(e) = rustix::fs::fcntl_getfl(&master)
            .and_then(|fl| rustix::fs::fcntl_setfl(&master, fl | rustix::fs::OFlags::NONBLOCK))
        {
            self.warnings
                .push(format!("cannot make the terminal master non-blocking: {e}"));
        }
        self.master = Some(master);
        self.had_master = true;
        self.sync_size();
        // With `--tty` and a stdin that is no terminal there is nothing to put in raw mode.
        if !rustix::termios::isatty(std_fd(0)) {
            return;
        }
        match RawMode::enter(std_fd(0)) {
            Ok(raw) => self.raw = Some(raw),
            Err(e) => self
                .warnings
                .push(format!("cannot put the terminal in raw mode: {e}")),
        }
    }

    /// Copy the caller's window size to the command's terminal when they differ (the kernel
    /// then sends the command SIGWINCH).
    fn sync_size(&mut self) {
        let Some(master) = &self.master else { return };
        let Some(want) = pty::window_size(std_fd(0)) else {
            return;
        };
        let have = pty::window_size(master.as_fd());
        if have != Some(want) {
            let _ = rustix::termios::tcsetwinsize(master, want);
        }
    }

    /// Copy one read's worth from the master; whether there was any.
    fn relay_master(&mut self) -> bool {
        if !self.shown_pending.is_empty() {
            self.flush_shown();
            return false;
        }
        let Some(master) = &self.master else {
            return false;
        };
        match read_some(master.as_fd(), &mut self.buf) {
            Some(0) => false,
            Some(n) => {
                let data = &self.buf[..n];
                if let Some(sink) = &mut self.terminal_sink {
                    sink.feed(data);
                }
                self.shown_pending.extend_from_slice(data);
                self.flush_shown();
                self.shown_pending.is_empty()
            }
            None => {
                // Every slave is closed (EIO): the command is ending, or closed its terminal
                // before it exits, as coreutils do. Closing the master now would hang the
                // terminal up and kill a command still on its way out with SIGHUP; it stays
                // open, unpolled, until the loop ends.
                self.closed_master = self.master.take();
                self.pending.clear();
                false
            }
        }
    }

    fn close_master(&mut self) {
        self.master = None;
        self.pending.clear();
    }

    /// Write what the command's terminal showed to the caller's stdout as far as it takes
    /// it now. The caller's output gone: hang up the command's terminal, as a closed
    /// terminal would.
    fn flush_shown(&mut self) {
        if flush_to(std_fd(1), &mut self.shown_pending).is_err() {
            self.shown_pending.clear();
            self.close_master();
        }
    }

    fn relay_stdin(&mut self) {
        let mut buf = [0u8; 4096];
        match read_some(std_fd(0), &mut buf) {
            Some(0) => {}
            Some(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                self.flush_pending();
            }
            None => {
                self.stdin_open = false;
                // `--tty` with a stdin that is no terminal (a file, a pipe): its end reaches
                // the command as its terminal's end-of-file character, as if typed.
                if !rustix::termios::isatty(std_fd(0))
                    && let Some(eof) = self.master.as_ref().and_then(|m| pty::eof_char(m.as_fd()))
                {
                    self.pending.push(eof);
                    self.flush_pending();
                }
            }
        }
    }

    /// Write what the caller typed to the master as far as it takes it now.
    fn flush_pending(&mut self) {
        let Some(master) = &self.master else { return };
        while !self.pending.is_empty() {
            match rustix::io::write(master, &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return,
                Err(_) => {
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    fn relay_pipe(&mut self, stdout: bool) {
        let pipe = if stdout { &mut self.out } else { &mut self.err };
        let Some(p) = pipe else { return };
        p.blocked = false;
        let mut pumped = if p.splice {
            splice_out(p)
        } else {
            Pumped::Refused
        };
        if let Pumped::Refused = pumped {
            p.splice = false;
            pumped = copy_out(p, &mut self.buf);
        }
        if let Pumped::Blocked = pumped {
            p.blocked = true;
        }
        if let Pumped::Closed = pumped
            && let Some(p) = pipe.take()
        {
            // Dropping the read end: a command still writing gets EPIPE or SIGPIPE, as it
            // would have writing to the caller's closed stream itself.
            let slot = if stdout {
                &mut self.out_sink
            } else {
                &mut self.err_sink
            };
            *slot = p.sink;
        }
    }

    /// Whether an output pipe has bytes the caller's full stream has not taken yet.
    fn output_blocked(&self) -> bool {
        !self.shown_pending.is_empty()
            || [&self.out, &self.err]
                .into_iter()
                .flatten()
                .any(|p| p.blocked)
    }

    /// The caller's stdin has data (or its end): move it into the command's stdin pipe.
    fn pump_stdin(&mut self) {
        let Some(i) = &mut self.input else { return };
        if i.splice {
            match rustix::pipe::splice(
                std_fd(0),
                None,
                &i.fd,
                None,
                CHUNK,
                rustix::pipe::SpliceFlags::NONBLOCK,
            ) {
                Ok(0) => i.ended = true,
                Ok(_) | Err(Errno::INTR) => {}
                // Polled readable, so it is the command's pipe that is full (or another
                // reader of the caller's stdin took the data first: the pipe then has room
                // at once and this is asked again).
                Err(Errno::AGAIN) => i.full = true,
                Err(e) if splice_refused(e) => i.splice = false,
                Err(Errno::PIPE) => {
                    self.input = None;
                    return;
                }
                // A read error on the caller's stdin ends it, as for the command outside.
                Err(_) => i.ended = true,
            }
        }
        if !i.splice && !i.ended {
            match read_some(std_fd(0), &mut self.buf) {
                Some(0) => {}
                Some(n) => i.pending.extend_from_slice(&self.buf[..n]),
                None => i.ended = true,
            }
        }
        self.flush_input();
    }

    /// Write what was read of the caller's stdin as far as the command's pipe takes it now;
    /// close the pipe once the caller's stdin ended and everything is written.
    fn flush_input(&mut self) {
        let Some(i) = &mut self.input else { return };
        while !i.pending.is_empty() {
            match rustix::io::write(&i.fd, &i.pending) {
                Ok(n) => {
                    i.pending.drain(..n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    i.full = true;
                    return;
                }
                Err(_) => {
                    // EPIPE: the command closed its stdin; the rest is not wanted.
                    self.input = None;
                    return;
                }
            }
        }
        if i.ended {
            self.input = None;
        }
    }

    fn on_signal(&mut self, sig: libc::c_int, child: &mut Spawned) {
        match sig {
            libc::SIGWINCH => self.sync_size(),
            libc::SIGTERM | libc::SIGHUP | libc::SIGINT if self.status.is_some() => {
                self.watch.on_signal(sig, child);
            }
            libc::SIGTSTP => {
                // Give the terminal back, stop, and take it again when continued.
                if let Some(raw) = &mut self.raw {
                    raw.suspend();
                }
                let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP);
                self.resume();
            }
            libc::SIGCONT => self.resume(),
            _ => {}
        }
    }

    fn resume(&mut self) {
        if let Some(raw) = &mut self.raw {
            let _ = raw.resume();
        }
        self.sync_size();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_keeps_the_first_bytes_and_counts_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = std::fs::File::create(&path).unwrap();
        let mut s = Sink::new(file, path.clone(), 5);
        s.feed(b"abc");
        s.feed(b"defg");
        s.feed(b"hij");
        let c = s.finish();
        assert_eq!(c.total_bytes, 10);
        assert_eq!(c.kept_bytes, 5);
        assert!(c.truncated);
        assert_eq!(std::fs::read(&path).unwrap(), b"abcde");
    }

    #[test]
    fn a_sink_under_its_limit_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = std::fs::File::create(&path).unwrap();
        let mut s = Sink::new(file, path.clone(), 5);
        s.feed(b"abcde");
        let c = s.finish();
        assert_eq!((c.total_bytes, c.kept_bytes, c.truncated), (5, 5, false));
    }
}
