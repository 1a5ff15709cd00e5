//! Stable exit codes (documented in the README) and the error type that carries one.

use std::fmt;

/// Success.
pub const OK: u8 = 0;
/// `kill`: the job is not running.
pub const NOT_RUNNING: u8 = 1;
/// A checked thing is invalid (`bundle verify`).
pub const INVALID: u8 = 1;
/// Bad usage: a flag, a manifest or an input file that cannot be used.
pub const USAGE: u8 = 2;
/// `apply` refused: conflicts or refused special files; nothing was written.
pub const CONFLICT: u8 = 3;
/// No such job (or checkpoint).
pub const NOT_FOUND: u8 = 4;
/// The job is busy (its run is live, or another apply/drop/checkpoint holds it).
pub const BUSY: u8 = 5;
/// `ctl`: not inside a run (no `COFFERDAM_CTL`), or its control socket cannot be reached.
pub const NO_CTL: u8 = 6;
/// cofferdam failed before the command started, including a floor the host cannot meet.
pub const SETUP: u8 = 125;

/// Every code cofferdam's own commands exit with (a run's other codes are its command's,
/// `cofferdam_policy::outcome`'s): each is a row of `manual::EXIT_STATUS`, which the
/// README's "Exit codes" table repeats (both are tested).
#[cfg(test)]
pub const CODES: &[u8] = &[
    OK,
    NOT_RUNNING,
    INVALID,
    USAGE,
    CONFLICT,
    NOT_FOUND,
    BUSY,
    NO_CTL,
    SETUP,
];

/// A failure with the exit code it maps to and a message a person can act on.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: u8,
    /// The whole message (cause and fix).
    pub message: String,
}

impl Failure {
    /// A usage failure (exit 2).
    pub fn usage(message: impl fmt::Display) -> Self {
        Failure {
            code: USAGE,
            message: message.to_string(),
        }
    }

    /// A setup failure (exit 125).
    pub fn setup(message: impl fmt::Display) -> Self {
        Failure {
            code: SETUP,
            message: message.to_string(),
        }
    }
}

impl Failure {
    /// The `--json` form of this failure: `{"error": {"code", "exit_code", "message",
    /// "hint"}}`. `code` is a stable word for the exit code; `message` is the text printed
    /// on stderr (cause and fix); `hint` is where to look next.
    pub fn to_json(&self, command: &str) -> serde_json::Value {
        let (code, hint) = describe(self.code, command);
        serde_json::json!({"error": {
            "code": code,
            "exit_code": self.code,
            "message": self.message,
            "hint": hint,
        }})
    }
}

/// The stable word and the next step for an exit code of a failed `command`.
pub fn describe(code: u8, command: &str) -> (&'static str, String) {
    match code {
        USAGE => (
            "usage",
            format!("`cofferdam {command} --help` shows the usage").replace("  ", " "),
        ),
        INVALID if command == "import" => (
            "invalid",
            "the message names what is wrong with the archive; export the job again".to_owned(),
        ),
        INVALID if command == "ctl" => (
            "refused",
            "the message says why the run's supervisor refused the request".to_owned(),
        ),
        NO_CTL => (
            "no_ctl",
            "`cofferdam ctl` talks to the run it runs inside; outside a run there is none"
                .to_owned(),
        ),
        NOT_RUNNING => (
            "not_running",
            "`cofferdam status JOB` shows how the job ended".to_owned(),
        ),
        CONFLICT => (
            "conflict",
            "`cofferdam diff JOB` shows the staged changes; `apply --force PATH` or \
             `--exclude PATH` resolves a conflict"
                .to_owned(),
        ),
        NOT_FOUND => ("not_found", "`cofferdam jobs` lists the jobs".to_owned()),
        BUSY => (
            "busy",
            "wait for the job's run or the other command to end; `cofferdam kill JOB` stops a run"
                .to_owned(),
        ),
        _ => (
            "setup",
            "`cofferdam doctor` checks what this host offers".to_owned(),
        ),
    }
}

/// End the process for a command line clap refused (or `--help`/`--version`, which are
/// not errors): with `--json` before any `--`, a refusal is the JSON error document on
/// stdout (and clap's text on stderr), exit 2. `names` is the whole command line's
/// definition (it names the subcommand the document is about).
pub fn clap_exit(e: &clap::Error, args: &[std::ffi::OsString], names: &clap::Command) -> ! {
    let json = args
        .iter()
        .skip(1)
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a.as_os_str() == "--json");
    if !json || !e.use_stderr() {
        e.exit()
    }
    let _ = e.print();
    let command = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find(|a| names.find_subcommand(a).is_some())
        .unwrap_or("");
    let text = e.render().to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    let _ = crate::print_json(&Failure::usage(message).to_json(command));
    std::process::exit(i32::from(USAGE))
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure {
            code: SETUP,
            message: format!("{e:#}"),
        }
    }
}
