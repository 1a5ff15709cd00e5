//! agentctl's supervisor side (issue 21, `docs/agentctl.md`): the run's control socket, in
//! a fresh private directory (`$XDG_RUNTIME_DIR/cofferdam-ctl-XXXXXX/ctl.sock`, else under
//! `/run` or `/tmp`; the directory 0700 and the caller's), served on threads while the run lives; the requests it accepted and
//! refused, counted; and, once the run has ended and its stage is sealed, the checkpoints
//! clients asked for (deferred, so a checkpoint never races the workload's writes).
//!
//! Owns the socket, its threads and the snapshot they fill. The protocol (limits, parser,
//! replies) and how the plan lends the socket are `cofferdam_policy::agentctl`'s. It may
//! not touch the run's plan, the job's records or its stage except through [`Ended::honour`]
//! after the seal; nothing here is evidence of enforcement (the snapshot goes only to the
//! bundle's `agentctl`).
//!
//! A hostile client cannot crash or stall the supervisor: each line is bounded
//! ([`MESSAGE_MAX`]), each read times out, each connection has a deadline and a number of
//! lines, at most [`CONCURRENT_MAX`] connections are served at once and [`CONNECTIONS_MAX`]
//! in the run; everything beyond is refused at once and counted. The accept loop never
//! reads from a client; a connection thread that is still waiting when the run ends is
//! left to its timeout and records nothing more.

use super::RunRequest;
use crate::now_ms;
use cofferdam_policy::agentctl::{
    CHECKPOINTS_MAX, CLIENTS_MAX, CONCURRENT_MAX, CONNECTION_MAX_MS, CONNECTIONS_MAX, CtlHost,
    MESSAGE_MAX, PROTOCOL, READ_TIMEOUT_MS, REQUESTS_MAX, REQUESTS_PER_CONNECTION_MAX, Reply,
    Request, RequestKind, parse_request,
};
use cofferdam_policy::plan::{Invoker, SandboxPlan};
use cofferdam_policy::{ScopeInputs, agentctl, build_scope_report};
use cofferdam_record::EnforcementTier;
use cofferdam_record::HostFacts;
use cofferdam_record::bundle::{
    AgentCtlClient, AgentCtlCounters, AgentCtlDirective, AgentCtlRequest, AgentCtlSnapshot,
};
use cofferdam_stage::job::Job;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The client name of a request that names none.
const ANONYMOUS: &str = "anonymous";

/// The control socket could not be offered.
#[derive(Debug, thiserror::Error)]
#[error("cannot offer the agentctl socket ({what}: {source}); the run goes on without it")]
pub(crate) struct CtlError {
    what: String,
    #[source]
    source: io::Error,
}

fn ctl_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> CtlError {
    let what = what.into();
    move |source| CtlError { what, source }
}

/// A checkpoint a client asked for, to be taken after the seal.
#[derive(Debug, Clone)]
struct Deferred {
    client: String,
    name: Option<String>,
}

#[derive(Default)]
struct State {
    clients: Vec<AgentCtlClient>,
    requests: Vec<AgentCtlRequest>,
    checkpoints: Vec<Deferred>,
    counters: AgentCtlCounters,
    /// Set when the run ended: nothing more is recorded.
    closed: bool,
    /// Where the job's journal of accepted clients and requests goes ([`JOURNAL`]),
    /// appended as they come, so that a supervisor killed mid-run leaves them for the
    /// recovered seal; `None` once a write failed, or for a server without a job.
    journal_path: Option<PathBuf>,
    /// The journal, opened at its first line: a run no agent talks to makes no file.
    journal: Option<std::fs::File>,
    /// Why the journal stopped being written, when it did.
    journal_error: Option<String>,
}

/// The journal's file in the job's directory: one JSON line per accepted client
/// (`{"client": …}`) or request (`{"request": …}`), bounded by [`CLIENTS_MAX`] and
/// [`REQUESTS_MAX`] lines of at most [`MESSAGE_MAX`] bytes each.
const JOURNAL: &str = "agentctl.jsonl";

/// One line of the journal.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum JournalLine {
    Client(AgentCtlClient),
    Request(AgentCtlRequest),
}

impl State {
    /// Change the counters, unless the run has ended (the snapshot is taken then).
    fn count(&mut self, change: impl FnOnce(&mut AgentCtlCounters)) {
        if !self.closed {
            change(&mut self.counters);
        }
    }

    /// Append `line` to the journal; a failure stops it and is kept for the run's warnings.
    fn journal(&mut self, line: &JournalLine) {
        use std::os::unix::fs::OpenOptionsExt as _;
        let Some(path) = self.journal_path.as_deref() else {
            return;
        };
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(path)
        };
        let file = match self.journal.take() {
            Some(f) => Ok(f),
            None => open(),
        };
        let written = file.and_then(|mut f| {
            let mut bytes = serde_json::to_vec(line).map_err(io::Error::other)?;
            bytes.push(b'\n');
            f.write_all(&bytes)?;
            Ok(f)
        });
        match written {
            Ok(f) => self.journal = Some(f),
            Err(e) => {
                self.journal_path = None;
                self.journal_error = Some(format!(
                    "the agentctl journal could not be written ({e}): if cofferdam had \
                     died mid-run, the agent's later notes would have been lost with it"
                ));
            }
        }
    }
}

/// The `agentctl` of a job whose supervisor died mid-run, from its journal: the clients and
/// requests accepted before it died (a torn last line is left out), no counters (they were
/// not kept), and a directive for each checkpoint asked for, which was never taken. `None`
/// when the run kept no journal.
pub(crate) fn recovered(job: &Job) -> Option<AgentCtlSnapshot> {
    use std::io::Read;
    let bound = (CLIENTS_MAX + REQUESTS_MAX) * (MESSAGE_MAX + 512);
    let mut text = Vec::new();
    std::fs::File::open(job.dir().join(JOURNAL))
        .ok()?
        .take(bound as u64)
        .read_to_end(&mut text)
        .ok()?;
    Some(from_journal(&text))
}

/// [`recovered`]'s reading of the journal's bytes.
fn from_journal(text: &[u8]) -> AgentCtlSnapshot {
    let mut snapshot = AgentCtlSnapshot {
        protocol: Some(PROTOCOL.to_owned()),
        clients: Vec::new(),
        requests: Vec::new(),
        directives: Vec::new(),
        counters: None,
    };
    for line in text.split(|b| *b == b'\n') {
        match serde_json::from_slice::<JournalLine>(line) {
            Ok(JournalLine::Client(c)) if snapshot.clients.len() < CLIENTS_MAX => {
                snapshot.clients.push(c)
            }
            Ok(JournalLine::Request(r))
                if snapshot.requests.len() < REQUESTS_MAX
                    && snapshot.clients.iter().any(|c| c.name == r.client) =>
            {
                if r.request == RequestKind::Checkpoint.word() {
                    snapshot.directives.push(AgentCtlDirective {
                        client: r.client.clone(),
                        directive: "checkpoint not made: cofferdam died before the run ended"
                            .into(),
                        at_unix_ms: None,
                    });
                }
                snapshot.requests.push(r)
            }
            _ => {}
        }
    }
    snapshot
}

/// Remove `job`'s journal: its requests are in the bundle now.
pub(crate) fn forget_journal(job: &Job) {
    let _ = std::fs::remove_file(job.dir().join(JOURNAL));
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    live: AtomicUsize,
    /// The `status` reply's payload.
    status: serde_json::Value,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread leaves counters, never a broken invariant.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The control socket, served while the run lives.
pub(crate) struct CtlServer {
    host: CtlHost,
    /// The private directory [`CtlServer::start`] made, removed when serving stops.
    dir: Option<PathBuf>,
    /// A copy of the listening socket, shut down to end the accept loop.
    wake: UnixListener,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// Whether [`CtlServer::start`] makes the `bin/cofferdam` link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bin {
    /// The tiers without a mount namespace put the link's directory on `PATH`.
    Link,
    /// The sealed tier binds the binary itself into the sandbox.
    None,
}

/// What the socket saw, once the run has ended.
pub(crate) struct Ended {
    snapshot: AgentCtlSnapshot,
    checkpoints: Vec<Deferred>,
    /// Why the journal stopped being written, for the run's warnings.
    pub(crate) journal_error: Option<String>,
}

impl CtlServer {
    /// Make the private directory, bind the socket and start serving it; `bin` also makes
    /// the directory's `bin/cofferdam` link (for the tiers that put it on `PATH`). `status`
    /// is what a `status` request is answered with.
    pub(crate) fn start(
        status: serde_json::Value,
        journal: Option<&Path>,
        bin: Bin,
    ) -> Result<Self, CtlError> {
        let exe = std::env::current_exe().map_err(ctl_err("find the cofferdam binary"))?;
        let dir = private_dir()?;
        let made = Self::in_private_dir(&dir, exe, bin, status, journal);
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// The socket, and with [`Bin::Link`] a `bin/cofferdam` link to `exe`, in the new
    /// private directory `dir`.
    fn in_private_dir(
        dir: &Path,
        exe: PathBuf,
        bin: Bin,
        status: serde_json::Value,
        journal: Option<&Path>,
    ) -> Result<Self, CtlError> {
        let socket = dir.join("ctl.sock");
        let listener = UnixListener::bind(&socket).map_err(ctl_err("bind the socket"))?;
        let bin_dir = match bin {
            Bin::Link => {
                let bin_dir = dir.join("bin");
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&bin_dir)
                    .map_err(ctl_err("make its bin directory"))?;
                std::os::unix::fs::symlink(&exe, bin_dir.join("cofferdam"))
                    .map_err(ctl_err("link the cofferdam binary"))?;
                Some(bin_dir)
            }
            Bin::None => None,
        };
        let host = CtlHost {
            socket,
            exe,
            bin_dir,
        };
        Self::serve(listener, host, dir.to_path_buf(), status, journal)
    }

    fn serve(
        listener: UnixListener,
        host: CtlHost,
        dir: PathBuf,
        status: serde_json::Value,
        journal: Option<&Path>,
    ) -> Result<Self, CtlError> {
        // The accept loop is woken at the end by a shutdown of this copy, not by a
        // connection to the socket's path.
        let wake = listener.try_clone().map_err(ctl_err("copy the socket"))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                journal_path: journal.map(Path::to_path_buf),
                ..State::default()
            }),
            stop: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            status,
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("agentctl".into())
            .spawn(move || accept_loop(&listener, &s))
            .map_err(ctl_err("start its thread"))?;
        Ok(CtlServer {
            host,
            dir: Some(dir),
            wake,
            shared,
            accept: Some(accept),
        })
    }

    /// Where the socket and the binary are, for the plan (`agentctl::lend`).
    pub(crate) fn host(&self) -> &CtlHost {
        &self.host
    }

    /// Stop serving (every process of the run is gone) and remove the socket's directory;
    /// what was recorded.
    pub(crate) fn stop(mut self) -> Ended {
        self.shutdown();
        let mut st = self.shared.lock();
        st.closed = true;
        Ended {
            snapshot: AgentCtlSnapshot {
                protocol: Some(PROTOCOL.to_owned()),
                clients: std::mem::take(&mut st.clients),
                requests: std::mem::take(&mut st.requests),
                directives: Vec::new(),
                counters: Some(st.counters.clone()),
            },
            checkpoints: std::mem::take(&mut st.checkpoints),
            journal_error: st.journal_error.take(),
        }
    }

    fn shutdown(&mut self) {
        if let Some(accept) = self.accept.take() {
            self.shared.stop.store(true, Ordering::SeqCst);
            // A blocked accept returns EINVAL once its socket is shut down for reading;
            // the loop sees `stop` and ends. It is not waited for (its exit is a scheduling
            // round trip at the end of every run): what it might still count after `stop`
            // is dropped, since it records only while the state is not `closed`.
            let _ = rustix::net::shutdown(&self.wake, rustix::net::Shutdown::Read);
            drop(accept);
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Ended {
    /// Take the deferred checkpoints of `job`, whose run has ended and whose stage was just
    /// sealed (the caller holds the job lock): each one becomes a directive naming the
    /// checkpoint's id, or why it was not made. Returns the bundle's `agentctl`.
    pub(crate) fn honour(self, job: &Job) -> AgentCtlSnapshot {
        let Ended {
            mut snapshot,
            checkpoints,
            ..
        } = self;
        for d in checkpoints {
            let directive = match cofferdam_stage::checkpoint::create(
                job,
                job.id(),
                d.name.as_deref(),
                now_ms(),
            ) {
                Ok(c) => format!(
                    "checkpoint {}{} made after the run ended and its stage was sealed",
                    c.manifest.id,
                    d.name.map_or(String::new(), |n| format!(" ({n})"))
                ),
                Err(e) => format!("checkpoint not made: {e}"),
            };
            snapshot.directives.push(AgentCtlDirective {
                client: d.client,
                directive,
                at_unix_ms: Some(now_ms()),
            });
        }
        snapshot
    }
}

/// Offer agentctl to the run of `plan`: start the server and lend its socket and the
/// binary to the plan (`agentctl::lend`). When the socket cannot be made the run goes on
/// without it; the warning says so (for stderr and the bundle).
pub(super) fn offer(
    req: &RunRequest,
    facts: &HostFacts,
    inv: &Invoker,
    job: &Job,
    plan: &mut SandboxPlan,
) -> (Option<CtlServer>, Option<String>) {
    let scope = build_scope_report(&ScopeInputs {
        policy: &req.policy,
        facts,
        storage_root: &req.env.storage_root,
        home: &req.env.places.home,
        ssh_host_keys: &inv.ssh_host_keys,
        cap: req.tier_cap,
    });
    let status = serde_json::json!({
        "run_id": job.id(),
        "tier": plan.tier,
        "class": plan.tier.class(),
        "workdir": req.policy.workdir,
        "evidence": false,
        "scope": scope,
    });
    // The sealed tier binds the binary itself: no link is made for it. The socket is not
    // put in the job's directory, which would save its directory: the job store is hidden
    // from every run, so a mount from it counts as a secret lent (`secrets_hidden`).
    let bin = if plan.tier == EnforcementTier::MountnsPivotRootLandlockSeccomp {
        Bin::None
    } else {
        Bin::Link
    };
    match CtlServer::start(status, Some(&job.dir().join(JOURNAL)), bin) {
        Ok(server) => {
            agentctl::lend(plan, server.host());
            (Some(server), None)
        }
        Err(e) => {
            let w = e.to_string();
            eprintln!("cofferdam: warning: {w}");
            (None, Some(w))
        }
    }
}

/// `<parent>/cofferdam-ctl-XXXXXX`, new, 0700 (`tempfile` makes it so), in the parent
/// [`socket_parent`] picks.
fn private_dir() -> Result<PathBuf, CtlError> {
    let parent = socket_parent();
    let dir = tempfile::Builder::new()
        .prefix("cofferdam-ctl-")
        .tempdir_in(&parent)
        .map_err(ctl_err(format!(
            "make its directory in {}",
            parent.display()
        )))?
        .keep();
    // The mode asked for, whatever the umask.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(ctl_err("set its directory's mode"))?;
    Ok(dir)
}

/// The longest parent a socket path `<parent>/cofferdam-ctl-XXXXXX/ctl.sock` may have and
/// still fit in `sun_path` (108 bytes with its NUL).
const PARENT_MAX: usize = 107 - "/cofferdam-ctl-XXXXXX/ctl.sock".len();

/// Where the socket's directory is made: the caller's runtime directory when it has one
/// (`$XDG_RUNTIME_DIR`, else `/run/user/<uid>`; `/run` for root), the place the XDG
/// convention gives sockets, else `/dev/shm` when it is a sticky directory (a tmpfs, shared
/// like `/tmp`: the private directory in it is what keeps others out), else `/tmp`. Not
/// `$TMPDIR`, which may be too long for a socket path. The runtime directory is a tmpfs
/// where it exists; `/tmp` on a disk charges the directory and the socket (and `bin/` with
/// its link) to the disk's inode allocator on every run, which on ext4 soon after many
/// deletions costs milliseconds (issue 18's startup measurement found it).
fn socket_parent() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let mut candidates = Vec::new();
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        candidates.push(PathBuf::from(x));
    }
    candidates.push(PathBuf::from(format!("/run/user/{uid}")));
    if uid == 0 {
        candidates.push(PathBuf::from("/run"));
    }
    pick_parent(&candidates, &[PathBuf::from("/dev/shm")], uid, |p| {
        let m = std::fs::symlink_metadata(p).ok()?;
        use std::os::unix::fs::MetadataExt;
        Some(ParentFacts {
            is_dir: m.is_dir(),
            uid: m.uid(),
            mode: m.mode(),
        })
    })
}

/// What [`pick_parent`] needs to know of a candidate (read without following a symlink).
#[derive(Debug, Clone, Copy)]
struct ParentFacts {
    is_dir: bool,
    uid: u32,
    mode: u32,
}

/// The first of `candidates` that is an absolute, short enough directory (not a symlink)
/// owned by `uid` and writable by no one else; else the first of `shared` that is a sticky
/// directory (not a symlink) anyone may write, as `/tmp` is; `/tmp` when none is.
fn pick_parent(
    candidates: &[PathBuf],
    shared: &[PathBuf],
    uid: u32,
    facts: impl Fn(&Path) -> Option<ParentFacts>,
) -> PathBuf {
    let usable = |p: &&PathBuf| p.is_absolute() && p.as_os_str().len() <= PARENT_MAX;
    let private =
        |p: &&PathBuf| facts(p).is_some_and(|f| f.is_dir && f.uid == uid && f.mode & 0o022 == 0);
    let sticky = |p: &&PathBuf| facts(p).is_some_and(|f| f.is_dir && f.mode & 0o1777 == 0o1777);
    candidates
        .iter()
        .filter(usable)
        .find(private)
        .or_else(|| shared.iter().filter(usable).find(sticky))
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// Refuse `stream` at once with `why`, without ever waiting on it.
fn refuse_connection(stream: UnixStream, why: &str) {
    let _ = stream.set_nonblocking(true);
    let _ = (&stream).write(&Reply::refused(why).line());
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    let mut accepted = 0usize;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let refusal = if accepted >= CONNECTIONS_MAX {
            Some(format!(
                "refused: this run already served {CONNECTIONS_MAX} connections"
            ))
        } else if shared.live.load(Ordering::SeqCst) >= CONCURRENT_MAX {
            Some(format!(
                "refused: {CONCURRENT_MAX} connections are open already; close one and retry"
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            shared.lock().count(|c| c.connections_refused += 1);
            refuse_connection(stream, &why);
            continue;
        }
        shared.live.fetch_add(1, Ordering::SeqCst);
        let s = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("agentctl-conn".into())
            .spawn(move || {
                serve_connection(stream, &s);
                s.live.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.live.fetch_sub(1, Ordering::SeqCst);
            shared.lock().count(|c| c.connections_refused += 1);
            continue;
        }
        accepted += 1;
        shared.lock().count(|c| c.connections_accepted += 1);
    }
}

/// Serve one connection: lines in, one reply line each, until EOF, an error, a limit or
/// the deadline.
fn serve_connection(mut stream: UnixStream, shared: &Shared) {
    let deadline = Instant::now() + Duration::from_millis(CONNECTION_MAX_MS);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(READ_TIMEOUT_MS)));
    let mut who = Client {
        name: None,
        version: None,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(MESSAGE_MAX);
    let mut chunk = [0u8; 1024];
    let mut lines = 0usize;
    loop {
        // Every complete line in the buffer first.
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            lines += 1;
            let reply = if lines > REQUESTS_PER_CONNECTION_MAX {
                shared.lock().counters.requests_refused += 1;
                let _ = stream.write_all(
                    &Reply::refused(format!(
                        "refused: at most {REQUESTS_PER_CONNECTION_MAX} requests per \
                         connection"
                    ))
                    .line(),
                );
                return;
            } else {
                handle_line(&line[..line.len() - 1], &mut who, shared)
            };
            if stream.write_all(&reply.line()).is_err() {
                return;
            }
        }
        if buf.len() >= MESSAGE_MAX {
            shared.lock().counters.requests_refused += 1;
            let _ = stream.write_all(
                &Reply::refused(format!(
                    "refused: a request line is at most {MESSAGE_MAX} bytes; the connection is closed"
                ))
                .line(),
            );
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || shared.stop.load(Ordering::SeqCst) {
            if !buf.is_empty() {
                shared.lock().counters.requests_refused += 1;
            }
            return;
        }
        let _ = stream.set_read_timeout(Some(left.min(Duration::from_millis(READ_TIMEOUT_MS))));
        // Never more than a line's worth in the buffer.
        let room = (MESSAGE_MAX - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => {
                if !buf.is_empty() {
                    // A last line without its newline.
                    let line = std::mem::take(&mut buf);
                    let reply = handle_line(&line, &mut who, shared);
                    let _ = stream.write_all(&reply.line());
                }
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // A timeout (a slow or silent writer) or a broken connection.
                if !buf.is_empty() {
                    shared.lock().counters.requests_refused += 1;
                    let _ = stream.write_all(
                        &Reply::refused("refused: the request line did not end in time").line(),
                    );
                }
                return;
            }
        }
    }
}

/// Who spoke on a connection: the first name and version it gave.
struct Client {
    name: Option<String>,
    version: Option<String>,
}

fn handle_line(line: &[u8], who: &mut Client, shared: &Shared) -> Reply {
    let req = match parse_request(line) {
        Ok(r) => r,
        Err(e) => {
            shared.lock().counters.requests_refused += 1;
            return Reply::refused(format!("refused: {e}"));
        }
    };
    if who.name.is_none() {
        who.name.clone_from(&req.client);
        who.version.clone_from(&req.version);
    }
    let name = who.name.clone().unwrap_or_else(|| ANONYMOUS.to_owned());
    let mut st = shared.lock();
    let refused = |st: &mut State, why: String| {
        st.counters.requests_refused += 1;
        Reply::refused(why)
    };
    if st.closed {
        return refused(&mut st, "refused: the run has ended".into());
    }
    if st.requests.len() >= REQUESTS_MAX {
        return refused(
            &mut st,
            format!("refused: this run already took {REQUESTS_MAX} requests"),
        );
    }
    if !st.clients.iter().any(|c| c.name == name) {
        if st.clients.len() >= CLIENTS_MAX {
            return refused(
                &mut st,
                format!("refused: this run already heard {CLIENTS_MAX} clients"),
            );
        }
        let client = AgentCtlClient {
            name: name.clone(),
            version: who.version.clone(),
        };
        st.journal(&JournalLine::Client(client.clone()));
        st.clients.push(client);
    }
    let reply = match req.request {
        RequestKind::Note => Reply::accepted(
            RequestKind::Note,
            "noted: the reviewer sees it in `cofferdam status --review`",
        ),
        RequestKind::Checkpoint => {
            if st.checkpoints.len() >= CHECKPOINTS_MAX {
                return refused(
                    &mut st,
                    format!("refused: this run already asked for {CHECKPOINTS_MAX} checkpoints"),
                );
            }
            if let Some(n) = &req.argument
                && st.checkpoints.iter().any(|d| d.name.as_ref() == Some(n))
            {
                return refused(
                    &mut st,
                    format!("refused: a checkpoint named `{n}` is already asked for"),
                );
            }
            st.checkpoints.push(Deferred {
                client: name.clone(),
                name: req.argument.clone(),
            });
            Reply::accepted(
                RequestKind::Checkpoint,
                "deferred: the checkpoint is taken when the run has ended and its stage is \
                 sealed, so it never races the run's writes; its id will be in the run \
                 bundle's agentctl.directives and in `cofferdam checkpoint list`",
            )
        }
        RequestKind::Status => {
            let mut r = Reply::accepted(
                RequestKind::Status,
                "the run's policy and limits as cofferdam planned them; this is not evidence \
                 of enforcement (the run bundle's executor_observations is)",
            );
            r.status = Some(shared.status.clone());
            r
        }
    };
    record(&mut st, &name, &req);
    reply
}

fn record(st: &mut State, client: &str, req: &Request) {
    st.counters.requests_accepted += 1;
    let r = AgentCtlRequest {
        client: client.to_owned(),
        request: req.request.word().to_owned(),
        argument: req.argument.clone(),
        at_unix_ms: Some(now_ms()),
    };
    st.journal(&JournalLine::Request(r.clone()));
    st.requests.push(r);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn ask(sock: &Path, line: &[u8]) -> String {
        let mut s = UnixStream::connect(sock).unwrap();
        s.write_all(line).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = String::new();
        std::io::BufReader::new(s).read_line(&mut out).unwrap();
        out
    }

    #[test]
    fn a_journal_gives_back_what_was_accepted_and_leaves_out_a_torn_or_orphan_line() {
        let client = |n: &str| {
            JournalLine::Client(AgentCtlClient {
                name: n.into(),
                version: None,
            })
        };
        let req = |c: &str, kind: &str, arg: &str| {
            JournalLine::Request(AgentCtlRequest {
                client: c.into(),
                request: kind.into(),
                argument: Some(arg.into()),
                at_unix_ms: Some(1),
            })
        };
        let mut text = Vec::new();
        for l in [
            client("a"),
            req("a", "note", "one"),
            req("ghost", "note", "not listed"),
            req("a", "checkpoint", "cp"),
        ] {
            text.extend(serde_json::to_vec(&l).unwrap());
            text.push(b'\n');
        }
        let torn = serde_json::to_vec(&req("a", "note", "torn")).unwrap();
        text.extend(&torn[..torn.len() / 2]);
        let s = from_journal(&text);
        assert_eq!(s.protocol.as_deref(), Some(PROTOCOL));
        assert_eq!(s.clients.len(), 1);
        let args: Vec<_> = s
            .requests
            .iter()
            .map(|r| r.argument.clone().unwrap())
            .collect();
        assert_eq!(args, ["one", "cp"]);
        assert!(s.counters.is_none());
        assert_eq!(s.directives.len(), 1);
        assert!(s.directives[0].directive.contains("not made"));
    }

    #[test]
    fn the_socket_goes_in_the_first_private_runtime_dir_else_tmp() {
        let own = ParentFacts {
            is_dir: true,
            uid: 7,
            mode: 0o40700,
        };
        let facts = |p: &Path| match p.to_str() {
            Some("/run/user/7") | Some("/xdg") => Some(own),
            Some("/shared") => Some(ParentFacts {
                mode: 0o41777,
                ..own
            }),
            Some("/theirs") => Some(ParentFacts { uid: 8, ..own }),
            Some("/link") => Some(ParentFacts {
                is_dir: false,
                ..own
            }),
            _ => None,
        };
        let pick = |c: &[&str]| {
            let c: Vec<PathBuf> = c.iter().map(PathBuf::from).collect();
            pick_parent(&c, &[], 7, facts)
        };
        // With no private candidate, a sticky shared directory before /tmp; one that is
        // not sticky, or not a directory, is passed over.
        let shared = |s: &[&str]| {
            let s: Vec<PathBuf> = s.iter().map(PathBuf::from).collect();
            pick_parent(&[PathBuf::from("/theirs")], &s, 7, facts)
        };
        assert_eq!(shared(&["/shared"]), Path::new("/shared"));
        assert_eq!(shared(&["/xdg", "/link", "/absent"]), Path::new("/tmp"));
        assert_eq!(
            pick_parent(
                &[PathBuf::from("/xdg")],
                &[PathBuf::from("/shared")],
                7,
                facts
            ),
            Path::new("/xdg")
        );
        assert_eq!(pick(&["/xdg", "/run/user/7"]), Path::new("/xdg"));
        // Writable by others, another's, a symlink, relative, absent: skipped.
        for bad in ["/shared", "/theirs", "/link", "xdg", "/absent"] {
            assert_eq!(
                pick(&[bad, "/run/user/7"]),
                Path::new("/run/user/7"),
                "{bad}"
            );
            assert_eq!(pick(&[bad]), Path::new("/tmp"), "{bad}");
        }
        // Too long for a socket path under it.
        let long = format!("/{}", "x".repeat(PARENT_MAX));
        assert_eq!(pick(&[long.as_str()]), Path::new("/tmp"));
        assert!(PARENT_MAX + "/cofferdam-ctl-XXXXXX/ctl.sock".len() < 108);
    }

    #[test]
    fn a_server_for_the_sealed_tier_makes_no_bin_link_and_removes_its_directory() {
        let server = CtlServer::start(serde_json::json!({"tier": "x"}), None, Bin::None).unwrap();
        let sock = server.host().socket.clone();
        assert_eq!(server.host().bin_dir, None);
        let r = ask(&sock, b"{\"request\":\"status\"}\n");
        assert!(r.contains("\"tier\":\"x\""), "{r}");
        let dir = sock.parent().unwrap().to_path_buf();
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ctl.sock"]);
        let ended = server.stop();
        assert!(!dir.exists());
        assert_eq!(ended.snapshot.counters.unwrap().connections_accepted, 1);
    }

    #[test]
    fn a_server_counts_what_it_accepts_and_refuses_and_cleans_up() {
        let server = CtlServer::start(serde_json::json!({"tier": "x"}), None, Bin::Link).unwrap();
        let sock = server.host().socket.clone();
        let dir = sock.parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let bin = server.host().bin_dir.clone().unwrap();
        assert_eq!(
            std::fs::read_link(bin.join("cofferdam")).unwrap(),
            server.host().exe
        );
        let r = ask(
            &sock,
            b"{\"request\":\"note\",\"argument\":\"hi\",\"client\":\"t\"}\n",
        );
        assert!(r.contains("\"ok\":true"), "{r}");
        let r = ask(&sock, b"{\"request\":\"status\"}\n");
        assert!(r.contains("\"tier\":\"x\""), "{r}");
        let r = ask(&sock, &[0xff, 0, 1, b'\n']);
        assert!(r.contains("\"ok\":false"), "{r}");
        let r = ask(&sock, &vec![b'x'; MESSAGE_MAX * 3]);
        assert!(r.contains("at most"), "{r}");
        let r = ask(
            &sock,
            b"{\"request\":\"checkpoint\",\"argument\":\"a/../b\"}\n",
        );
        assert!(r.contains("\"ok\":false"), "{r}");
        let r = ask(
            &sock,
            b"{\"request\":\"checkpoint\",\"argument\":\"one\"}\n",
        );
        assert!(r.contains("deferred"), "{r}");
        let ended = server.stop();
        assert!(!dir.exists());
        let s = &ended.snapshot;
        let c = s.counters.clone().unwrap();
        assert_eq!(c.requests_accepted, 3);
        assert_eq!(c.requests_refused, 3);
        assert_eq!(c.connections_accepted, 6);
        assert_eq!(s.requests[0].client, "t");
        assert_eq!(s.requests[1].client, "anonymous");
        assert_eq!(s.clients.len(), 2);
        assert_eq!(ended.checkpoints.len(), 1);
    }
}
