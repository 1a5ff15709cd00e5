//! The sandbox init's setup loop, one for every tier: for each step of the plan's program
//! (`SandboxPlan::setup_program`), apply it, report every row it reads back, then check the
//! rows against the plan's requirements (`SandboxPlan::requirements`); the first row that does
//! not hold refuses the run, naming the step and the row's reason. The namespaces the init
//! makes before its plan arrives are checked against the same requirements (`crate::init`).
//!
//! Owns the effect of each step (a call into its mechanism's module) and the status messages
//! of a refusal. May not decide an order or a requirement: both are the plan's. Runs in the
//! single-threaded init (the sealed tier's pid 1, or the init of a tier without namespaces).

use crate::fds;
use crate::plan_channel::PlanChannel;
use crate::setup_error::{SETUP_FAILED, SetupError, StepContext};
use crate::status::StatusMessage;
use crate::{caps, egress, landlock, memfd, metafilter, mounts, pty, rlimit, seccomp, sockfilter};
use cofferdam_policy::controls::{SetupStep, refusal};
use cofferdam_policy::plan::{LandlockPlan, SandboxPlan, TerminalPlan};
use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::io::Errno;
use serde_json::json;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The Landlock ABI from which `connect(2)` to a pathname unix socket is a handled right.
pub const UNIX_CONNECT_ABI: u32 = 9;

/// Send one control row over the status channel.
pub(crate) fn report(o: ControlObservation) {
    fds::send_status(&StatusMessage::Control { observation: o });
}

/// Report a failed step; the init's exit code.
pub(crate) fn fail(e: &SetupError) -> i32 {
    refuse(e.step.clone(), e.to_string())
}

/// Report a refusal of `step` for `error`; the init's exit code.
pub(crate) fn refuse(step: String, error: String) -> i32 {
    fds::send_status(&StatusMessage::SetupFailed { step, error });
    SETUP_FAILED
}

/// The first of `rows` that does not hold its requirement in `plan`: the step (named by
/// `step` for that row) and the row's reason. Pure.
pub(crate) fn first_refusal(
    plan: &SandboxPlan,
    rows: &[ControlObservation],
    step: impl Fn(&ControlObservation) -> String,
) -> Option<(String, String)> {
    rows.iter()
        .find_map(|o| refusal(&plan.requirements, o).map(|why| (step(o), why)))
}

/// Report every row, then refuse the run on the first that does not hold.
pub(crate) fn check(
    plan: &SandboxPlan,
    rows: Vec<ControlObservation>,
    step: impl Fn(&ControlObservation) -> String,
) -> Result<(), i32> {
    let refused = first_refusal(plan, &rows, step);
    rows.into_iter().for_each(report);
    match refused {
        Some((step, error)) => Err(refuse(step, error)),
        None => Ok(()),
    }
}

/// The name a refusal gives the step whose row `o` did not hold.
fn step_name(step: SetupStep, o: &ControlObservation) -> String {
    match step {
        SetupStep::ComposeRoot => format!("compose the root ({})", o.mechanism),
        SetupStep::Network => "unshare (netns)".into(),
        SetupStep::CloseFds => "close inherited file descriptors".into(),
        SetupStep::DropCapabilities => "drop capabilities".into(),
        SetupStep::NoNewPrivs => "set no_new_privs".into(),
        SetupStep::Landlock => "install Landlock".into(),
        SetupStep::MetadataFilter => "install the metadata filter".into(),
        SetupStep::SocketFilter => "install the socket filter".into(),
        SetupStep::Seccomp => "install the seccomp filter".into(),
        other => format!("{other:?} ({})", o.mechanism),
    }
}

/// What the steps carry from one to the next.
struct Setup<'a> {
    plan: &'a SandboxPlan,
    /// Built by [`SetupStep::BuildSeccomp`], installed by [`SetupStep::Seccomp`].
    filter: Option<seccomp::SeccompFilter>,
    /// The command's terminal, when [`SetupStep::Terminal`] allocated it.
    slave: Option<OwnedFd>,
    /// The plan's ruleset, with the allocated terminal's slave granted.
    ruleset: LandlockPlan,
    /// The ABI Landlock's write row read (0 before it, or without Landlock).
    landlock_abi: u32,
    /// The plan channel, for [`SetupStep::AwaitFileWatch`]; closed by it.
    channel: Option<PlanChannel>,
}

/// Run the plan's setup program, then send the ready marker. Returns the command's terminal
/// when a step allocated it; `Err` is the init's exit code (the refusal is reported).
/// `channel` is the plan channel when the plan watches files.
pub(crate) fn run(
    plan: &SandboxPlan,
    channel: Option<PlanChannel>,
) -> Result<Option<OwnedFd>, i32> {
    let mut s = Setup {
        plan,
        filter: None,
        slave: None,
        ruleset: plan.landlock.clone(),
        landlock_abi: 0,
        channel,
    };
    for step in plan.setup_program() {
        let rows = s.apply(step).map_err(|e| fail(&e))?;
        check(plan, rows, |o| step_name(step, o))?;
    }
    fds::send_status(&StatusMessage::Ready);
    Ok(s.slave)
}

impl Setup<'_> {
    /// Apply one step; the rows it read back.
    fn apply(&mut self, step: SetupStep) -> Result<Vec<ControlObservation>, SetupError> {
        let plan = self.plan;
        let sealed = plan.tier == EnforcementTier::MountnsPivotRootLandlockSeccomp;
        Ok(match step {
            SetupStep::EnterWorkdir => {
                rustix::process::chdir(&plan.fs.workdir)
                    .step(|| format!("chdir {}", plan.fs.workdir.display()))?;
                Vec::new()
            }
            SetupStep::NoPidNamespace => vec![process_view()],
            // Sealed: through the host's procfs, before the composed root makes /proc/sys
            // read-only, the value is the new pid namespace's; otherwise the host's, read.
            SetupStep::MemfdNoexec => vec![memfd::seal_exec(sealed)],
            SetupStep::ComposeRoot => mounts::compose_and_pivot(&plan.fs, &mounts::program(plan)?)?,
            SetupStep::Hostname => {
                rustix::system::sethostname(plan.hostname.as_bytes())
                    .step(|| "sethostname".into())?;
                Vec::new()
            }
            SetupStep::Network => vec![egress::configure(&plan.network)?],
            SetupStep::AwaitFileWatch => {
                // The workdir is mounted and nothing of the command runs yet: the
                // supervisor marks the mount, then says so (`crate::fanotify`). Its
                // observation is evidence of accesses only, never a control row.
                let channel = self.channel.take().ok_or_else(|| SetupError {
                    step: "wait for the file watch: no plan channel".into(),
                    errno: Errno::BADF,
                })?;
                let mnt_id = rustix::fs::statx(
                    rustix::fs::CWD,
                    &plan.fs.workdir,
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                    rustix::fs::StatxFlags::MNT_ID,
                )
                .ok()
                .map(|st| st.stx_mnt_id);
                fds::send_status(&StatusMessage::AwaitFileWatch { mnt_id });
                channel.file_watched().map_err(|e| SetupError {
                    step: format!("wait for the file watch: {e}"),
                    errno: Errno::PIPE,
                })?;
                Vec::new()
            }
            SetupStep::Rlimits => rlimit::apply(&plan.rlimits),
            SetupStep::BuildSeccomp => {
                // Built before any restriction: building allocates and may fail on its own.
                let filter = seccomp::build_filter().map_err(|e| SetupError {
                    step: format!("build the seccomp filter: {e}"),
                    errno: Errno::INVAL,
                })?;
                self.filter = Some(filter);
                Vec::new()
            }
            SetupStep::CloseFds => {
                // The terminal socket stays open for the command's pty to be sent over; it
                // is closed before the command starts.
                let keep: &[i32] = if plan.terminal.is_some() {
                    &[fds::STATUS, fds::TERMINAL]
                } else {
                    &[fds::STATUS]
                };
                vec![caps::close_fds(keep)]
            }
            SetupStep::StatusCloexec => {
                // The status channel must not reach the command.
                fds::status_cloexec().step(|| "mark the status channel close-on-exec".into())?;
                Vec::new()
            }
            SetupStep::NotDumpable => {
                // The init must not be readable through /proc/<pid> (fd, mem, environ) by
                // the command, which runs as the same uid.
                rustix::process::set_dumpable_behavior(
                    rustix::process::DumpableBehavior::NotDumpable,
                )
                .step(|| "make the sandbox init non-dumpable".into())?;
                Vec::new()
            }
            SetupStep::Terminal => {
                // Allocated before Landlock so that its slave, alone of the host's /dev/pts,
                // can be granted: the plan grants no /dev/pts, /dev/ptmx or /dev/shm.
                if let Some(size) = plan.terminal {
                    let slave = open_terminal(size)?;
                    if let Ok(name) = rustix::termios::ttyname(&slave, Vec::new()) {
                        self.ruleset
                            .devices
                            .push(PathBuf::from(OsStr::from_bytes(name.as_bytes())));
                    }
                    self.slave = Some(slave);
                }
                Vec::new()
            }
            SetupStep::DropCapabilities => vec![caps::drop_all()],
            SetupStep::NoNewPrivs => vec![caps::no_new_privs()],
            SetupStep::Landlock => {
                let rows = landlock::install(&self.ruleset);
                if let Some(abi) = rows
                    .iter()
                    .find(|o| o.dimension == ControlDimension::FilesystemWrite)
                    .and_then(|o| o.details.get("abi"))
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|a| u32::try_from(a).ok())
                {
                    self.landlock_abi = abi;
                }
                rows
            }
            // Landlock has no right for modes, owners, times or xattrs: the metadata filter
            // closes what it can (everything but descriptor touch for root).
            SetupStep::MetadataFilter => {
                vec![metafilter::install(rustix::process::geteuid().is_root())]
            }
            SetupStep::SocketFilter => match &plan.landlock.tcp {
                Some(tcp) => vec![unix_sockets(self.landlock_abi), sockfilter::install(tcp)],
                None => Vec::new(),
            },
            SetupStep::HiddenPaths => vec![hidden_paths(&plan.fs.hidden)],
            SetupStep::AdvisoryAbsences => advisory_absences(),
            SetupStep::Seccomp => match &self.filter {
                Some(filter) => vec![seccomp::install(filter)],
                None => {
                    return Err(SetupError {
                        step: "install the seccomp filter: the plan's program built none".into(),
                        errno: Errno::INVAL,
                    });
                }
            },
        })
    }
}

/// The command's pseudo-terminal, allocated from the sandbox's own devpts (sealed: a real
/// `/dev/pts/N` inside) or the host's (scoped) with the plan's window size; the master goes
/// to the supervisor over the terminal socket, which is closed afterwards. Returns the slave
/// (close-on-exec).
pub(crate) fn open_terminal(size: TerminalPlan) -> Result<OwnedFd, SetupError> {
    let socket = fds::take_terminal();
    let pair = pty::open_pair(size).step(|| "allocate the command's terminal".into())?;
    pty::send_master(socket.as_fd(), pair.master.as_fd())
        .step(|| "hand the command's terminal to the supervisor".into())?;
    Ok(pair.slave)
}

/// What the advisory tier does not install, said as observations so that no dimension is
/// left to look covered by an unrelated control (closing descriptors is not a syscall
/// filter).
fn advisory_absences() -> Vec<ControlObservation> {
    let why = "the advisory tier installs no Landlock ruleset and no seccomp filter";
    [
        (ControlMechanism::Landlock, ControlDimension::FilesystemRead),
        (
            ControlMechanism::Landlock,
            ControlDimension::FilesystemWrite,
        ),
        (ControlMechanism::Landlock, ControlDimension::Network),
        (ControlMechanism::Seccomp, ControlDimension::KernelSurface),
    ]
    .into_iter()
    .map(|(m, d)| {
        let mut o = ControlObservation::new(m, d, ControlStatus::Unavailable);
        o.reason = Some(why.to_owned());
        o
    })
    .collect()
}

/// No pid namespace on these tiers: the command sees and shares the host's process view.
fn process_view() -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Pidns,
        ControlDimension::Process,
        ControlStatus::Unavailable,
    );
    o.reason = Some(
        "no pid namespace on this tier: the command is a host process and sees the host's \
         processes"
            .into(),
    );
    o
}

/// Whether `connect(2)` to a pathname unix socket outside the sandbox is confined: Landlock
/// handles it from ABI 9; below, a reachable socket file (an ssh-agent, a container
/// runtime's socket) is a way out.
pub fn unix_sockets(abi: u32) -> ControlObservation {
    let enforced = abi >= UNIX_CONNECT_ABI;
    let mut o = ControlObservation::new(
        ControlMechanism::Landlock,
        ControlDimension::Network,
        if enforced {
            ControlStatus::Enforced
        } else {
            ControlStatus::Partial
        },
    );
    o.details.insert("control".into(), json!("unix_connect"));
    o.details.insert("abi".into(), json!(abi));
    if !enforced {
        o.reason = Some(format!(
            "Landlock ABI {abi} does not confine connect(2) to pathname unix sockets (ABI \
             {UNIX_CONNECT_ABI} does) and the socket filter cannot see the path: a socket file \
             anywhere on the host, such as an ssh-agent's or a container runtime's, stays \
             reachable; run on a kernel with Landlock ABI {UNIX_CONNECT_ABI} or use the sealed \
             tier, whose root shows no host socket that is not lent"
        ));
    }
    o
}

/// Try to open each path that must be hidden, after Landlock: any that opens is exposed.
fn hidden_paths(paths: &[PathBuf]) -> ControlObservation {
    let mut exposed = Vec::new();
    for p in paths {
        let flags = rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::CLOEXEC
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::NOCTTY;
        if rustix::fs::open(p, flags, rustix::fs::Mode::empty()).is_ok() {
            exposed.push(p.display().to_string());
        }
    }
    let mut o = ControlObservation::new(
        ControlMechanism::SecretsHidden,
        ControlDimension::FilesystemRead,
        if exposed.is_empty() {
            ControlStatus::Enforced
        } else {
            ControlStatus::Partial
        },
    );
    o.details.insert("checked".into(), json!(paths.len()));
    if !exposed.is_empty() {
        o.reason = Some(format!(
            "readable despite Landlock (they lie beneath a granted system directory and \
             file permissions allow this user): {}",
            exposed.join(", ")
        ));
        o.details.insert("exposed".into(), json!(exposed));
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sealed plan of the default policy on a capable host (shared with `crate::init`'s
    /// tests).
    pub(crate) fn sealed_plan() -> SandboxPlan {
        let places = cofferdam_policy::policy::Places {
            cwd: "/work".into(),
            home: "/home/me".into(),
        };
        let policy = cofferdam_policy::policy::resolve_policy(
            None,
            &cofferdam_policy::policy::RunFlags::default(),
            &places,
        )
        .unwrap();
        cofferdam_policy::plan::build_plan(
            &policy,
            &cofferdam_record::HostFacts::capable_example(),
            &cofferdam_policy::plan::Invoker {
                uid: 1000,
                gid: 1000,
                user: "me".into(),
                home: "/home/me".into(),
                env: Vec::new(),
                ssh_host_keys: Vec::new(),
            },
            &cofferdam_policy::plan::JobPaths {
                run_id: "run-x".into(),
                new_root: "/s/root".into(),
                upper: "/s/upper".into(),
                overlay_work: "/s/work".into(),
                inherited: None,
                storage_root: "/s".into(),
            },
            vec!["true".into()],
        )
    }

    #[test]
    fn the_first_row_that_does_not_hold_names_its_step_and_reason() {
        let plan = sealed_plan();
        let mut landlock = ControlObservation::new(
            ControlMechanism::Landlock,
            ControlDimension::FilesystemWrite,
            ControlStatus::Unavailable,
        );
        landlock.reason = Some("no Landlock".into());
        let mut tmpfs = ControlObservation::new(
            ControlMechanism::Tmpfs,
            ControlDimension::FilesystemWrite,
            ControlStatus::Failed,
        );
        tmpfs.reason = Some("/tmp reads rw,exec".into());
        let partial_mask = ControlObservation::new(
            ControlMechanism::SecretsHidden,
            ControlDimension::FilesystemRead,
            ControlStatus::Partial,
        );
        let rows = vec![landlock.clone(), partial_mask, tmpfs];
        assert_eq!(
            first_refusal(&plan, &rows, |o| step_name(SetupStep::ComposeRoot, o)),
            Some((
                "compose the root (tmpfs)".to_owned(),
                "/tmp reads rw,exec".to_owned()
            ))
        );
        // Landlock is best effort on the sealed tier.
        assert_eq!(first_refusal(&plan, &[landlock], |_| String::new()), None);
        let seccomp = ControlObservation::new(
            ControlMechanism::Seccomp,
            ControlDimension::KernelSurface,
            ControlStatus::Partial,
        );
        assert_eq!(
            first_refusal(&plan, &[seccomp], |o| step_name(SetupStep::Seccomp, o)),
            Some((
                "install the seccomp filter".to_owned(),
                "partial".to_owned()
            ))
        );
    }

    #[test]
    fn unix_sockets_are_confined_only_from_abi_9() {
        assert_eq!(unix_sockets(7).status, ControlStatus::Partial);
        assert!(
            unix_sockets(7)
                .reason
                .unwrap_or_default()
                .contains("ssh-agent")
        );
        assert_eq!(unix_sockets(9).status, ControlStatus::Enforced);
    }

    #[test]
    fn a_path_that_cannot_be_opened_counts_as_hidden() {
        let o = hidden_paths(&[PathBuf::from("/nonexistent/cofferdam-test")]);
        assert_eq!(o.status, ControlStatus::Enforced);
        let o = hidden_paths(&[PathBuf::from("/")]);
        assert_eq!(o.status, ControlStatus::Partial);
    }
}
