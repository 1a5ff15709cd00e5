//! The command line: clap definitions only. Parsing values into policy is
//! `cofferdam-policy`'s job, so every flag error is reported the same way as a manifest's.

use clap::{Args, Parser, Subcommand, ValueEnum};
use cofferdam_record::ContainmentClass;
use std::path::PathBuf;

/// Run AI coding agents and scripts inside a policy boundary; stage every write for review.
#[derive(Debug, Parser)]
#[command(name = "cofferdam", version, about, long_about = None, propagate_version = true,
    after_help = crate::manual::environment_help())]
pub struct Cli {
    /// The flags every subcommand takes.
    #[command(flatten)]
    pub global: Globals,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every subcommand takes.
#[derive(Debug, Args)]
pub struct Globals {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// When to use colour: auto (a terminal and no NO_COLOR), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// The command line of this process.
///
/// `cofferdam run …` is what agents' wrappers start many times a minute, so it is parsed
/// by a command line that holds only `run`: parsing with every subcommand's arguments
/// took 0.19 ms of a run's start here, this 0.12 ms. Anything that command cannot take as a successful
/// parse (help, version, a usage error) is parsed again by the whole one, whose messages
/// are the reference; so are all other subcommands.
pub fn parse() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse_run_only(&args) {
        Some(cli) => cli,
        None => Cli::try_parse_from(&args).unwrap_or_else(|e| {
            crate::exit::clap_exit(&e, &args, &<Cli as clap::CommandFactory>::command())
        }),
    }
}

/// `args` parsed by a command line that has only `run`; `None` when it is not a `run`
/// that such a command line parses.
fn parse_run_only(args: &[std::ffi::OsString]) -> Option<Cli> {
    use clap::FromArgMatches;
    if args.get(1).map(std::ffi::OsString::as_os_str) != Some(std::ffi::OsStr::new("run")) {
        return None;
    }
    let only_run = Globals::augment_args(clap::Command::new("cofferdam"))
        .subcommand(RunArgs::augment_args(clap::Command::new("run")));
    let matches = only_run.try_get_matches_from(args).ok()?;
    Cli::from_arg_matches(&matches).ok()
}

/// Colour choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal unless NO_COLOR is set.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command inside the boundary; every write is staged for review.
    Run(RunArgs),
    /// Show a job: what ran, how it ended, what was enforced, what changed.
    Status(StatusArgs),
    /// List jobs, newest first, with the disk they take and their total.
    Jobs(JobsArgs),
    /// Print the output `run --capture` saved of a job's command.
    Logs(LogsArgs),
    /// Remove finished jobs (stage and records) by state, age and workdir; never a live one.
    #[command(alias = "prune")]
    Gc(GcArgs),
    /// Show what applying a job's staged changes would do: unified diffs, one line for the rest.
    Diff(DiffArgs),
    /// Review a job like a pull request: `--web` serves a page on 127.0.0.1 to read the
    /// diffs and apply files or hunks; without it, `status --review`.
    Review(ReviewArgs),
    /// Let a job's staged changes into the workdir (all, or --path subsets); refuses on
    /// conflicts.
    Apply(ApplyArgs),
    /// Discard a job's stage, or with --path only some of its changes; the workdir is not
    /// touched.
    Drop(DropArgs),
    /// Write a sealed job (bundle, trace, stage, fingerprints) to one archive (tar + zstd).
    Export(ExportArgs),
    /// Make an archive from `export` a local job, checked, whose apply checks this tree.
    Import(ImportArgs),
    /// A new job on top of JOB's staged result (or --checkpoint's): `fork JOB -- CMD`.
    Fork(ForkArgs),
    /// Run CMD (default $SHELL) sealed on JOB's staged view; its writes are discarded
    /// unless --keep keeps them as a fork. Exit code: CMD's.
    Inspect(ForkArgs),
    /// Immutable savepoints of a stopped job's stage: create, list, show, delete.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// From inside a run: leave a note for the reviewer, ask for a checkpoint, read the
    /// run's policy (agentctl, over the socket in COFFERDAM_CTL).
    #[command(subcommand)]
    Ctl(CtlCommand),
    /// Run the tasks of a TOML or JSON Lines file, N at once, each a labelled job.
    Batch(BatchArgs),
    /// Print manifests that run cofferdam elsewhere: `k8s job` (a Kubernetes Job).
    #[command(subcommand)]
    K8s(K8sCommand),
    /// Stop a running job from another terminal (it ends `cancelled`, exit 130).
    Kill(KillArgs),
    /// A first run for newcomers: a scratch project, a scripted agent, its review.
    Demo,
    /// Explain what a policy would be allowed to do on this host, changing nothing.
    Scope(ScopeArgs),
    /// Check this host's kernel mechanisms and say how to get the missing ones.
    Doctor(DoctorArgs),
    /// Let a manifest grant more than your flags and user config (pins its content: any
    /// change untrusts it); --list, --remove.
    Trust(TrustArgs),
    /// List the agent profiles and what each grants on this host.
    Agents,
    /// Read and check Run Bundles.
    #[command(subcommand)]
    Bundle(BundleCommand),
    /// Print a shell completion script (bash, zsh and fish also complete job ids).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The jobs to offer when the word after WORDS is a JOB (the completion scripts call it).
    #[command(name = "__complete-jobs", hide = true)]
    CompleteJobs {
        /// The command line after `cofferdam`, up to the word being completed.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
    /// Print a man page (roff): cofferdam(1), or COMMAND's (`run`, `bundle-verify` and so on);
    /// `--out DIR` writes every page (cofferdam.1, cofferdam-run.1 and the rest) into DIR.
    Man(ManArgs),
}

/// `cofferdam batch`.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// The task file: `[[task]]` tables (TOML) or one JSON object a line (JSON Lines).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Run at most N tasks at once [default: from the CPUs and the available memory].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
}

/// `cofferdam k8s …`.
#[derive(Debug, Subcommand)]
pub enum K8sCommand {
    /// Print a Kubernetes Job (JSON) that runs COMMAND under cofferdam and exports its job.
    Job(K8sJobArgs),
}

/// `cofferdam k8s job`.
#[derive(Debug, Args)]
pub struct K8sJobArgs {
    /// The policy (as `run`'s; not --workdir or --publish).
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The image: cofferdam and the agent installed.
    #[arg(long, value_name = "IMG", default_value = "cofferdam:latest")]
    pub image: String,
    /// The Job's name.
    #[arg(long, value_name = "N", default_value = "cofferdam-run")]
    pub name: String,
    /// The cluster has no user namespaces per pod (`hostUsers: false`): run on the scoped
    /// tier.
    #[arg(long = "no-user-namespaces")]
    pub no_user_namespaces: bool,
    /// Attach a label KEY=VALUE (repeatable): the run's (its bundle's `orchestration`) and
    /// the Job's and pod's, so it must be a Kubernetes label too.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `cofferdam man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print: `run`, `apply`, `bundle-verify` and so on.
    #[arg(value_name = "COMMAND", conflicts_with = "out")]
    pub command: Option<String>,
    /// Write every page into DIR (made if missing) and list the files written.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `cofferdam bundle …`.
#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Check a run-bundle.json against schema 4 (exit 0 valid, 1 invalid).
    Verify {
        /// The bundle file, or a job (`last`, an id prefix, a job directory) whose bundle to
        /// check.
        file: PathBuf,
    },
    /// Print the Run Bundle JSON Schema.
    Schema,
}

/// `cofferdam checkpoint …`.
#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Save a stopped job's staged tree and fingerprints as an immutable checkpoint.
    Create {
        /// The job: `last` (the newest job of this directory), an id prefix, or a path.
        job: String,
        /// A name for it (letters, digits, `.`, `_`, `-`; unique within the job).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// List checkpoints, of one job or of every job, oldest first.
    List {
        /// Only this job's (`last`, an id prefix, or a path).
        job: Option<String>,
    },
    /// Show a checkpoint and re-read it: exit 1 when it no longer has its digest.
    Show {
        /// The checkpoint: its id, 4 or more characters of one, or its name.
        id: String,
    },
    /// Delete a checkpoint (the job is not touched).
    Delete {
        /// The checkpoint: its id, 4 or more characters of one, or its name.
        id: String,
    },
}

/// `cofferdam ctl …` (run inside a job; `docs/agentctl.md`).
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Leave a note for the reviewer: `status --review` shows it, as the agent's words.
    Note {
        /// The note (the words are joined with spaces; at most about 4 KiB).
        #[arg(required = true, num_args = 1.., value_name = "TEXT")]
        text: Vec<String>,
        /// The client's name as recorded (default `cofferdam-ctl`).
        #[arg(long, value_name = "NAME")]
        client: Option<String>,
    },
    /// Ask for a checkpoint of the stage: taken when the run has ended and its stage is
    /// sealed; its id is in the bundle's agentctl.directives and `checkpoint list`.
    Checkpoint {
        /// A name for it (letters, digits, `.`, `_`, `-`; unique within the job).
        name: Option<String>,
        /// The client's name as recorded (default `cofferdam-ctl`).
        #[arg(long, value_name = "NAME")]
        client: Option<String>,
    },
    /// The run's policy and limits as cofferdam planned them (not evidence of enforcement).
    Status {
        /// The client's name as recorded (default `cofferdam-ctl`).
        #[arg(long, value_name = "NAME")]
        client: Option<String>,
    },
}

/// `cofferdam trust [FILE]`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The manifest (default: ./cofferdam.toml).
    #[arg(value_name = "FILE", conflicts_with = "list")]
    pub file: Option<PathBuf>,
    /// List the trusted manifests and whether each is unchanged.
    #[arg(long)]
    pub list: bool,
    /// Forget FILE instead of trusting it.
    #[arg(long, conflicts_with = "list")]
    pub remove: bool,
}

/// The policy flags shared by `run` and `scope`.
#[derive(Debug, Clone, Args, Default)]
pub struct PolicyArgs {
    /// The manifest (default: cofferdam.toml in the workdir, when present).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// The folder the command works in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// The containment floor; the strongest of this and the manifest's wins (default:
    /// scoped, when neither declares one).
    #[arg(long, value_name = "CLASS", value_parser = parse_class)]
    pub containment: Option<ContainmentClass>,
    /// Lend a host path (sealed tier only): SRC[:TGT][:MODE][?], MODE one of read
    /// (default), write, hide (stage is parsed but refused: not supported by this build);
    /// a trailing ? makes it optional (a missing source is skipped and recorded, not an
    /// error; quote it from the shell).
    #[arg(long = "mount", value_name = "SPEC")]
    pub mounts: Vec<String>,
    /// Lend PATH, an entry of the secret list (e.g. ~/.config/gcloud), read-only at its own
    /// path: it is hidden inside every run otherwise, and --mount refuses it.
    #[arg(long = "lend-secret", value_name = "PATH")]
    pub lend_secrets: Vec<String>,
    /// Make a workdir subtree read-only (kernel-enforced).
    #[arg(long = "read-only", value_name = "PATH")]
    pub read_only: Vec<String>,
    /// Pass a host environment variable in by name, or set one with NAME=VALUE (records
    /// keep the name only; a value given here is visible in the host's process list, so
    /// pass secrets by name).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Use this agent profile whatever the program is (see `cofferdam agents`).
    #[arg(long, value_name = "NAME", conflicts_with = "no_agent_defaults")]
    pub agent: Option<String>,
    /// Use no agent profile, even for a program that has one.
    #[arg(long = "no-agent-defaults")]
    pub no_agent_defaults: bool,
    /// Lend read-only the toolchain installs under HOME that your PATH names (cargo home,
    /// rustup, pyenv, an nvm node, a venv, ~/.local/bin, bun, go), for the programs the
    /// command runs later; on under an agent profile.
    #[arg(
        long = "lend-path-toolchains",
        conflicts_with = "no_lend_path_toolchains"
    )]
    pub lend_path_toolchains: bool,
    /// Lend none of them, even under an agent profile.
    #[arg(long = "no-lend-path-toolchains")]
    pub no_lend_path_toolchains: bool,
    /// Network mode: none (default; `allow` under an agent profile), allow, host.
    #[arg(long, value_name = "MODE")]
    pub network: Option<String>,
    /// Allow a destination HOST[:PORT] (implies --network allow; *.domain wildcards).
    #[arg(long = "allow-net", value_name = "HOST[:PORT]")]
    pub allow_net: Vec<String>,
    /// Let the host reach a TCP port the command listens on inside the sandbox (sealed
    /// tier): HOST_ADDR:HOST_PORT (HOST_ADDR 127.0.0.1 unless given; another address
    /// warns) is relayed to 127.0.0.1:PORT inside. Inbound only; repeatable.
    #[arg(long = "publish", value_name = "[HOST_ADDR:]HOST_PORT:PORT")]
    pub publish: Vec<String>,
    /// Memory ceiling, e.g. 4GiB.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// Process and thread ceiling [default: 4096]; `none` removes it.
    #[arg(long, value_name = "N|none")]
    pub pids: Option<String>,
    /// CPU share, e.g. 1.5.
    #[arg(long, value_name = "FLOAT")]
    pub cpus: Option<f64>,
    /// Wall-clock limit, e.g. 30m. Time suspended by Ctrl-Z counts: a run resumed past its
    /// deadline ends then (exit 124).
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// CPU-time limit, e.g. 1h.
    #[arg(long = "cpu-time", value_name = "DURATION")]
    pub cpu_time: Option<String>,
    /// Largest file the command may write, e.g. 1GiB.
    #[arg(long = "max-file-size", value_name = "SIZE")]
    pub max_file_size: Option<String>,
    /// Open file descriptor ceiling.
    #[arg(long = "open-files", value_name = "N")]
    pub open_files: Option<u64>,
    /// Disk bandwidth ceiling per second, e.g. 50MiB.
    #[arg(long = "io-bps", value_name = "SIZE")]
    pub io_bps: Option<String>,
    /// Size of the private /tmp, e.g. 1GiB.
    #[arg(long = "tmp-size", value_name = "SIZE")]
    pub tmp_size: Option<String>,
    /// Size cap of the stage, e.g. 10GiB.
    #[arg(long = "stage-size", value_name = "SIZE")]
    pub stage_size: Option<String>,
}

fn parse_class(s: &str) -> Result<ContainmentClass, String> {
    s.parse()
        .map_err(|e: cofferdam_record::containment::UnknownClass| e.to_string())
}

/// `cofferdam run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print the scope report for this policy and exit without running anything.
    #[arg(long = "explain-scope")]
    pub explain_scope: bool,
    /// Keep the job (stage and records) in this empty or new directory instead of the store.
    #[arg(long, value_name = "PATH")]
    pub stage: Option<PathBuf>,
    /// Do not print the job id and summary at the end.
    #[arg(long, short)]
    pub quiet: bool,
    /// Run on at most this class's tier (scoped or advisory) although the host offers a
    /// stronger one. Only lowers: a class above the host's changes nothing, and one below
    /// the floor refuses like any shortfall.
    #[arg(long, value_name = "CLASS", value_parser = parse_class)]
    pub tier: Option<ContainmentClass>,
    /// Also save the command's stdout and stderr (or its terminal) in the job, up to 16 MiB
    /// each, recorded in the bundle's run.output.
    #[arg(long)]
    pub capture: bool,
    /// Give the command its own pseudo-terminal even when stdin or stdout is not a terminal
    /// (default: only when both are). Its output then comes with a terminal's line endings.
    #[arg(long, conflicts_with = "no_tty")]
    pub tty: bool,
    /// Never a pseudo-terminal: the command's stdin, stdout and stderr are pipes relayed to
    /// cofferdam's own (the default unless stdin and stdout are both terminals).
    #[arg(long = "no-tty")]
    pub no_tty: bool,
    /// Attach a label KEY=VALUE (repeatable): the bundle's `orchestration`, shown and
    /// filtered by `jobs`. KEY: letters, digits, `.`, `_`, `-`, `/`.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// The orchestrator's task id: the bundle's `run.task_id`, shown and filtered by `jobs`.
    #[arg(long = "task-id", value_name = "ID")]
    pub task_id: Option<String>,
    /// Run on top of a job's staged result (a fork of JOB): review and apply then bring
    /// JOB's changes too. Sealed tier only.
    #[arg(long, value_name = "JOB")]
    pub on: Option<String>,
    /// With `--on` (or `fork`, `inspect`): start from this checkpoint of the job instead of
    /// a new one of its current stage.
    #[arg(long, value_name = "ID")]
    pub checkpoint: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `cofferdam fork JOB` and `cofferdam inspect JOB`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The parent job: `last` (the newest job of this directory), an id prefix, or a path.
    pub job: String,
    /// `inspect`: keep the run's stage as a fork instead of discarding it.
    #[arg(long, hide = true)]
    pub keep: bool,
    /// The run's flags, as `run` takes them.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `cofferdam scope`.
#[derive(Debug, Args)]
pub struct ScopeArgs {
    /// The policy.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Report for the host whose facts were saved with `cofferdam doctor --json` instead of
    /// probing this one.
    #[arg(long = "host-facts", value_name = "FILE")]
    pub host_facts: Option<PathBuf>,
    /// Report for at most this class's tier, as `cofferdam run --tier CLASS` would run.
    #[arg(long, value_name = "CLASS", value_parser = parse_class)]
    pub tier: Option<ContainmentClass>,
}

/// `cofferdam doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Check the facts saved with `cofferdam doctor --json` instead of probing this host.
    #[arg(long = "host-facts", value_name = "FILE")]
    pub host_facts: Option<PathBuf>,
}

/// `cofferdam status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job: `last` (default: the newest job of this directory or the nearest folder above
    /// it that has jobs), an id prefix, or a path.
    #[arg(default_value = "last")]
    pub job: String,
    /// The full review: safety with the mechanism behind each answer, changes by kind,
    /// warnings.
    #[arg(long)]
    pub review: bool,
    /// List every entry of a directory added whole (the review rolls one up into a line
    /// with its count and size; changes that run code are listed either way).
    #[arg(long)]
    pub all: bool,
    /// Print directly, never through `$PAGER` (by default output taller than the terminal
    /// goes through `$PAGER`, or `less -FRX`; `PAGER=` or `PAGER=cat` turn that off too).
    #[arg(long)]
    pub no_pager: bool,
}

/// `cofferdam review`.
#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// The job: `last` (default), an id prefix, or a path.
    #[arg(default_value = "last")]
    pub job: String,
    /// Serve the review page on loopback and print its URL (holding a random token).
    #[arg(long)]
    pub web: bool,
    /// Listen on ADDR (a loopback address and port) instead of 127.0.0.1 on a free port.
    #[arg(long, value_name = "ADDR", requires = "web")]
    pub listen: Option<std::net::SocketAddr>,
    /// Print the URL only; do not start a browser (one is started only with a display).
    #[arg(long = "no-open", requires = "web")]
    pub no_open: bool,
    /// Keep TEXT as a review comment on the file --path (or --path-bytes) names, or with
    /// --hunk and --line on one line of a hunk; `status --review` lists the comments.
    #[arg(
        long,
        value_name = "TEXT",
        conflicts_with = "web",
        allow_hyphen_values = true
    )]
    pub comment: Option<String>,
    /// The staged file the comment is on (relative to the current directory).
    #[arg(
        long = "path",
        value_name = "PATH",
        requires = "comment",
        allow_hyphen_values = true
    )]
    pub path: Option<PathBuf>,
    /// Like --path, for a name that is not UTF-8: its bytes as hex (`diff --json`'s
    /// `path_bytes`).
    #[arg(
        long = "path-bytes",
        value_name = "HEX",
        requires = "comment",
        conflicts_with = "path"
    )]
    pub path_bytes: Option<String>,
    /// The hunk the comment is on (an id `diff --json` lists).
    #[arg(long, value_name = "ID", requires = "comment")]
    pub hunk: Option<String>,
    /// The line of the staged file the comment is on (1-based; needs --hunk).
    #[arg(long, value_name = "N", requires = "hunk")]
    pub line: Option<u64>,
}

impl ReviewArgs {
    /// The `status --review` a plain `review` is.
    pub fn as_status(&self) -> StatusArgs {
        StatusArgs {
            job: self.job.clone(),
            review: true,
            all: false,
            no_pager: false,
        }
    }
}

/// `cofferdam diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The job: `last` (default: the newest job of this directory or the nearest folder above
    /// it that has jobs), an id prefix, or a path.
    #[arg(default_value = "last")]
    pub job: String,
    /// Only changes at or beneath PATH (relative to the current directory; repeatable).
    #[arg(long = "path", value_name = "PATH", allow_hyphen_values = true)]
    pub paths: Vec<PathBuf>,
    /// One line per path with the count of added and removed lines.
    #[arg(long)]
    pub stat: bool,
    /// With `--stat`, list every entry of a directory added whole instead of one line with
    /// its count and size (changes that run code or conflict are listed either way).
    #[arg(long)]
    pub all: bool,
    /// For a fork: list what it changed on top of the checkpoint it started from (new,
    /// changed differently, or reverted to the host's), instead of against the host.
    #[arg(long = "against-parent")]
    pub against_parent: bool,
    /// Print directly, never through `$PAGER` (by default output taller than the terminal
    /// goes through `$PAGER`, or `less -FRX`; `PAGER=` or `PAGER=cat` turn that off too).
    #[arg(long)]
    pub no_pager: bool,
}

/// `cofferdam apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The job: `last` (default: the newest job of this directory or the nearest folder above
    /// it that has jobs), an id prefix, or a path.
    #[arg(default_value = "last")]
    pub job: String,
    /// Apply only changes at or beneath PATH (repeatable; default: everything staged). New
    /// parent directories and directories replaced whole come along.
    #[arg(long = "path", value_name = "PATH", allow_hyphen_values = true)]
    pub paths: Vec<PathBuf>,
    /// Like --path, for a name that is not UTF-8: the path relative to the workdir as hex
    /// bytes (what `diff --json` lists as `path_bytes`, hex-encoded; repeatable).
    #[arg(long = "path-bytes", value_name = "HEX", conflicts_with = "hunks")]
    pub path_bytes: Vec<String>,
    /// Leave out paths matching GLOB (repeatable): `*.log` matches any component,
    /// `build/**` is anchored at the workdir.
    #[arg(long = "exclude", value_name = "GLOB", allow_hyphen_values = true)]
    pub exclude: Vec<PathBuf>,
    /// Check and show what would be applied; write nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Apply PATH (and what is beneath it) even though it changed on the host since the run
    /// (repeatable). Never overrides a symlink on the way or a missing directory.
    #[arg(long = "force", value_name = "PATH", allow_hyphen_values = true)]
    pub force: Vec<PathBuf>,
    /// Recreate staged device nodes, fifos and sockets instead of refusing the apply.
    #[arg(long = "allow-special")]
    pub allow_special: bool,
    /// Apply staged changes that run code or change policy later (git hooks, program keys
    /// of .git/config, cofferdam.toml, new executables, …), which are otherwise left staged
    /// unless a --path names them.
    #[arg(long = "allow-sensitive")]
    pub allow_sensitive: bool,
    /// Apply only these hunks of modified or added text files (comma-separated ids, as
    /// `cofferdam diff JOB --json` lists them); the rest of each file stays staged.
    #[arg(long = "hunks", value_name = "ID,...", value_delimiter = ',',
          conflicts_with_all = ["paths", "exclude", "interactive"])]
    pub hunks: Vec<String>,
    /// Choose hunk by hunk on the terminal, like `git add -p` (y, n, s to split, q, ?).
    #[arg(long = "interactive", short = 'i', conflicts_with = "dry_run")]
    pub interactive: bool,
    /// Three-way merge staged text files the host changed since the run, instead of
    /// refusing them: `--merge` refuses a merge whose sides change the same lines,
    /// `--merge=markers` writes it with conflict markers.
    #[arg(long = "merge", value_name = "HOW", num_args = 0..=1, require_equals = true,
          default_missing_value = "clean", value_parser = ["clean", "markers"])]
    pub merge: Option<String>,
}

/// `cofferdam jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only jobs whose workdir is DIR or beneath it.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Only jobs in this state: active, staged, applied, discarded, interrupted.
    #[arg(long, value_name = "STATE")]
    pub state: Option<String>,
    /// At most N jobs (the newest).
    #[arg(short = 'n', long = "limit", value_name = "N")]
    pub limit: Option<usize>,
    /// Only jobs run with this label (repeatable: every one must match).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
    /// Only jobs run with this `--task-id`.
    #[arg(long = "task-id", value_name = "ID")]
    pub task_id: Option<String>,
}

/// `cofferdam gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only jobs that ended (or were made) at least this long ago, e.g. 7d, 12h.
    #[arg(long = "older-than", value_name = "DURATION")]
    pub older_than: Option<String>,
    /// Only jobs in this state (repeatable): staged, applied, discarded, interrupted
    /// [default: applied and discarded]. A staged job's changes are lost with it.
    #[arg(long, value_name = "STATE")]
    pub state: Vec<String>,
    /// Only jobs whose workdir is DIR or beneath it.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<std::path::PathBuf>,
    /// Say what would be removed and freed; remove nothing.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Also remove jobs that hold checkpoints, with their checkpoints (kept otherwise).
    #[arg(long)]
    pub force: bool,
}

/// `cofferdam logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job: `last` (default), an id prefix, or a path.
    #[arg(default_value = "last")]
    pub job: String,
}

/// `cofferdam kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// The job: `last` (the newest job of this directory), an id prefix, or a path.
    pub job: String,
}

/// `cofferdam drop`.
#[derive(Debug, Args)]
pub struct DropArgs {
    /// The job: `last` (the newest job of this directory), an id prefix, or a path.
    pub job: String,
    /// Discard only the staged changes at or beneath PATH (repeatable); the rest stays
    /// staged. A directory replaced whole goes with any path inside it.
    #[arg(long = "path", value_name = "PATH", allow_hyphen_values = true)]
    pub paths: Vec<PathBuf>,
    /// Like --path, for a name that is not UTF-8: the path relative to the workdir as hex
    /// bytes (what `diff --json` lists as `path_bytes`, hex-encoded; repeatable).
    #[arg(long = "path-bytes", value_name = "HEX")]
    pub path_bytes: Vec<String>,
    /// Leave paths matching GLOB staged (repeatable; as apply's --exclude).
    #[arg(long = "exclude", value_name = "GLOB", allow_hyphen_values = true)]
    pub exclude: Vec<PathBuf>,
}

/// `cofferdam export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The job: `last` (the newest job of this directory), an id prefix, or a path.
    pub job: String,
    /// The archive to write (a new file); default `JOB-ID.tar.zst` in the current directory.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `cofferdam import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The archive `cofferdam export` wrote.
    pub file: PathBuf,
    /// The tree the job applies onto; default the exported job's workdir.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn args(line: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("cofferdam")
            .chain(line.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn the_whole_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_parses_the_same_by_the_run_only_command_line() {
        for line in [
            &["run"][..],
            &["run", "--", "true"],
            &["run", "-q", "--pids", "none", "--", "/bin/true"],
            &["run", "--json", "--color", "never", "--", "sh", "-c", "x"],
            &[
                "run",
                "--workdir",
                "/w",
                "--stage",
                "/s",
                "--capture",
                "--",
                "true",
            ],
            &[
                "run",
                "--mount",
                "/a:/b:read",
                "--mount",
                "/c",
                "--env",
                "HOME",
                "--",
                "x",
            ],
            &[
                "run",
                "--read-only",
                "sub",
                "--containment",
                "sealed",
                "--",
                "x",
                "--help",
            ],
            &[
                "run",
                "--explain-scope",
                "--network",
                "none",
                "--",
                "x",
                "-v",
            ],
            &["run", "--quiet", "--", "--weird", "-x", "--json"],
            &["run", "--tty", "--", "x"],
            &["run", "--no-tty", "-q", "--", "x"],
        ] {
            let full = Cli::try_parse_from(args(line)).expect("the whole command line parses");
            let only = parse_run_only(&args(line)).expect("the run-only one parses too");
            assert_eq!(format!("{only:?}"), format!("{full:?}"), "{line:?}");
        }
    }

    #[test]
    fn anything_else_goes_to_the_whole_command_line() {
        for line in [
            &["run", "--help"][..],
            &["run", "--version"],
            &["run", "--no-such-flag", "--", "x"],
            &["--json", "run", "--", "x"],
            &["status"],
            &["help", "run"],
            &["run", "--tty", "--no-tty", "--", "x"],
        ] {
            assert!(parse_run_only(&args(line)).is_none(), "{line:?}");
        }
    }
}
