//! The `cofferdam` binary: parses the command line, dispatches to one module per
//! subcommand, prints errors with their fix, and exits with the stable codes of `exit`.
//! It holds no policy or record logic: those live in the library crates. It starts at the
//! C `main` below, not std's wrapper (see `entry`).
#![cfg_attr(not(test), no_main)]

mod batch;
mod cli;
mod cmd;
mod config_files;
mod context;
mod egress;
mod entry;
mod exit;
mod k8s;
mod lifecycle;
mod manual;
mod pager;
mod profile_apply;
mod progress;
mod publish;
mod signals;
mod style;
mod trace_append;
mod web;

use cli::{BundleCommand, Cli, Command, K8sCommand};
use exit::Failure;
use std::io::Write as _;

/// The process entry (`no_main`: see `entry`). The arguments are read through
/// `std::env`, which glibc's `.init_array` hook filled.
#[cfg_attr(not(test), unsafe(no_mangle))]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    entry::prepare();
    let code = std::panic::catch_unwind(run).map_or(entry::PANICKED, i32::from);
    std::process::exit(code)
}

fn run() -> u8 {
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(cofferdam_sandbox::init::INIT_ARG))
    {
        cofferdam_sandbox::entry::init_main();
    }
    let cli = cli::parse();
    match dispatch(&cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("cofferdam: {}", shown_text(&f.message));
            if cli.global.json {
                let _ = print_json(&f.to_json(command_name(&cli.command)));
            }
            f.code
        }
    }
}

/// Where `print_json` writes when the process's stdout was handed to something else
/// (`run --json`: the command's stdout is relayed to stderr; see [`json_run_stdout`]).
static JSON_OUT: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// `run --json`: stdout carries one JSON document, the run's summary, so the command's own
/// stdout cannot go there too. Keep stdout for the summary and point descriptor 1, which
/// the command inherits (or its relay writes to), at stderr: a script reads the summary
/// from stdout and still sees the command's output on stderr, interleaved with cofferdam's
/// own messages in the order they happened. `--capture` keeps the streams apart in the
/// job when they must be told apart.
fn json_run_stdout() -> Result<(), Failure> {
    let saved = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3)
        .map_err(|e| Failure::setup(format!("cannot keep stdout for the JSON summary: {e}")))?;
    rustix::stdio::dup2_stdout(std::io::stderr())
        .map_err(|e| Failure::setup(format!("cannot relay the command's stdout to stderr: {e}")))?;
    let _ = JSON_OUT.set(std::fs::File::from(saved));
    Ok(())
}

fn dispatch(cli: &Cli) -> Result<u8, Failure> {
    let style = style::Style::new(cli.global.color);
    match &cli.command {
        Command::Scope(a) => cmd::scope::run(
            &a.policy,
            a.host_facts.as_deref(),
            a.tier,
            cli.global.json,
            style,
        ),
        Command::Run(a) if a.explain_scope => {
            cmd::scope::run(&a.policy, None, a.tier, cli.global.json, style)
        }
        Command::Run(a) => {
            if cli.global.json {
                json_run_stdout()?;
            }
            match &a.on {
                Some(parent) => {
                    cmd::fork::run_on(parent, a, cmd::fork::Mode::Fork, cli.global.json)
                }
                None => cmd::run::run(a, cli.global.json),
            }
        }
        Command::Status(a) => cmd::status::status(a, cli.global.json, style),
        Command::Jobs(a) => cmd::status::jobs(a, cli.global.json, style),
        Command::Logs(a) => cmd::logs::logs(&a.job, cli.global.json),
        Command::Gc(a) => cmd::gc::gc(a, cli.global.json, style),
        Command::Diff(a) => cmd::diff::diff(a, cli.global.json, style),
        Command::Review(a) if a.web => web::serve(a),
        Command::Review(a) if a.comment.is_some() => cmd::comment::comment(a, cli.global.json),
        Command::Review(a) => cmd::status::status(&a.as_status(), cli.global.json, style),
        Command::Apply(a) => cmd::apply::apply(a, cli.global.json, style),
        Command::Drop(a) => cmd::drop::drop_job(a, cli.global.json, style),
        Command::Checkpoint(c) => cmd::checkpoint::checkpoint(c, cli.global.json),
        Command::Fork(a) | Command::Inspect(a) => {
            if cli.global.json {
                json_run_stdout()?;
            }
            cmd::fork::fork(
                a,
                matches!(cli.command, Command::Inspect(_)),
                cli.global.json,
            )
        }
        Command::Export(a) => cmd::export::export(a, cli.global.json),
        Command::Import(a) => cmd::import::import(a, cli.global.json),
        Command::Ctl(c) => cmd::ctl::ctl(c, cli.global.json),
        Command::Batch(a) => cmd::batch::batch(a, cli.global.json),
        Command::K8s(K8sCommand::Job(a)) => cmd::k8s::job(a),
        Command::Kill(a) => cmd::kill::kill(a, cli.global.json),
        Command::Demo => cmd::demo::demo(style, cli.global.json),
        Command::Trust(a) => cmd::trust::trust(a, cli.global.json),
        Command::Agents => cmd::agents::list(cli.global.json),
        Command::Doctor(a) => cmd::doctor::run(a.host_facts.as_deref(), cli.global.json, style),
        Command::Bundle(BundleCommand::Verify { file }) => {
            cmd::bundle::verify(file, cli.global.json)
        }
        Command::Bundle(BundleCommand::Schema) => cmd::bundle::schema(),
        Command::Completions { shell } => cmd::complete::script(*shell),
        Command::CompleteJobs { words } => cmd::complete::jobs(words),
        Command::Man(a) => cmd::man::man(a.command.as_deref(), a.out.as_deref()),
    }
}

/// The subcommand's name as typed (for the `--help` hint of a JSON error).
fn command_name(c: &Command) -> &'static str {
    match c {
        Command::Run(_) => "run",
        Command::Status(_) => "status",
        Command::Jobs(_) => "jobs",
        Command::Logs(_) => "logs",
        Command::Gc(_) => "gc",
        Command::Diff(_) => "diff",
        Command::Review(_) => "review",
        Command::Apply(_) => "apply",
        Command::Drop(_) => "drop",
        Command::Checkpoint(_) => "checkpoint",
        Command::Fork(_) => "fork",
        Command::Inspect(_) => "inspect",
        Command::Export(_) => "export",
        Command::Import(_) => "import",
        Command::Ctl(_) => "ctl",
        Command::Batch(_) => "batch",
        Command::K8s(_) => "k8s",
        Command::Kill(_) => "kill",
        Command::Demo => "demo",
        Command::Trust(_) => "trust",
        Command::Agents => "agents",
        Command::Scope(_) => "scope",
        Command::Doctor(_) => "doctor",
        Command::Bundle(_) => "bundle",
        Command::Completions { .. } => "completions",
        Command::CompleteJobs { .. } => cmd::complete::HIDDEN,
        Command::Man(_) => "man",
    }
}

/// Write bytes to stdout; a closed pipe is not an error worth a message.
pub(crate) fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::setup(format!("cannot write to stdout: {e}"))),
    }
}

/// Print `value` as pretty JSON with a trailing newline.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::setup(format!("cannot serialize the output: {e}")))?;
    text.push('\n');
    match JSON_OUT.get() {
        Some(mut out) => match out.write_all(text.as_bytes()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Failure::setup(format!("cannot write to stdout: {e}")))
            }
            _ => Ok(()),
        },
        None => write_stdout(text.as_bytes()),
    }
}

/// Milliseconds since the Unix epoch, for records (0 before 1970).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A message shown over several lines with every workload-controlled character escaped
/// (`cofferdam_record::shown`): newline and tab kept.
pub(crate) fn shown_text(s: &str) -> String {
    cofferdam_record::shown::escape_text(s)
}

/// A path shown on one line, its bytes escaped where they are not plain UTF-8 text.
pub(crate) fn shown_path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    cofferdam_record::shown::escape_bytes(
        p.as_os_str().as_bytes(),
        cofferdam_record::shown::Keep::LINE,
    )
    .0
}
