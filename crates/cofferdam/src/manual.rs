//! The manual: one man page per command (`cofferdam(1)`, `cofferdam-run(1)`, …) rendered
//! from the clap definitions, and the tables every page, `--help` and the README share:
//! exit status, environment, files. It owns text only; the codes are `exit`'s and the
//! variables are read where they take effect (`context`, `config_files`, `style`).

use std::fmt::Write as _;

/// The exit status of every command, in the README's order; text is Markdown (`code`).
/// The README's "Exit codes" table must say the same (a CLI test compares them).
pub const EXIT_STATUS: &[(&str, &str)] = &[
    (
        "0",
        "success (`scope` and `doctor` exit 0 even when the floor is not met: they are reports)",
    ),
    (
        "1",
        "`bundle verify`: the bundle is invalid (the error names the field); `checkpoint show`: the checkpoint no longer has its digest",
    ),
    (
        "2",
        "usage: a bad flag, manifest (file:line:key) or input file; a `--workdir` that is not a directory, a `--stage` that is not new or empty or is inside the workdir, a missing `--mount` source, a `--publish` host port in use or malformed, a limit below its usable minimum (memory 16MiB, pids 8, open-files 16, tmp-size and stage-size 1MiB) — all checked before a job is made; a workdir manifest that grants more than your flags and user config and is not trusted (or changed since); a user config that is a symlink, not yours or writable by others; an `--path` that names no staged change; a job whose stage cannot be applied (dropped, or interrupted before its run left anything to seal it from) or checkpointed (not `staged`); a bad or taken checkpoint `--name`",
    ),
    (
        "3",
        "`apply` refused: a selected path changed on the host since the run, or a staged special file without `--allow-special`; nothing was written",
    ),
    (
        "1",
        "`kill`: the job is not running (its run has ended, or its supervisor is gone)",
    ),
    (
        "1",
        "`import`: the archive is refused (the message names the entry and what is wrong with it); no job is made",
    ),
    (
        "2",
        "`export`: the output file exists, or the stage holds a device, fifo or socket; `import`: the workdir is not a directory on this machine",
    ),
    (
        "4",
        "no such job (`status`, `diff`, `apply`, `drop`, `kill`, `logs`, `bundle verify last`, `checkpoint`), or no such checkpoint",
    ),
    (
        "5",
        "the job is busy: its run is still going, or another `apply`, `drop` or `checkpoint` holds it",
    ),
    (
        "1",
        "`ctl`: the run's supervisor refused the request (the message says why: a bad checkpoint name, a limit of the run)",
    ),
    (
        "6",
        "`ctl`: not inside a cofferdam run (`COFFERDAM_CTL` is unset), or the run's control socket cannot be reached",
    ),
    (
        "125",
        "cofferdam failed before the command started: a floor the host cannot meet, a request this build cannot honour, or a sandbox setup step (the bundle names it); for `apply`, a write that failed part-way (what was written is recorded; run `apply` again to finish)",
    ),
    ("126", "the command is not executable"),
    (
        "127",
        "the command was not found in the sandbox's `PATH`, or it is a script whose `#!` interpreter is not visible inside (the message names it and the `--mount` that lends it)",
    ),
    (
        "124",
        "`run`: the `--timeout` expired (`failure.kind` `timeout`)",
    ),
    (
        "130",
        "`run`: cancelled by Ctrl-C, SIGTERM/SIGHUP to cofferdam or `cofferdam kill`",
    ),
    (
        "128+N",
        "the command was killed by signal N (also `oom`, 137, and a `limit` such as SIGXFSZ, 153)",
    ),
    (
        "123",
        "`run`: the command exited 0 but the run failed a limit afterwards (the stage was over `--stage-size` when sealed); review it before applying",
    ),
    ("other", "`run` exits with the command's own exit code"),
];

/// The environment variables cofferdam reads; the README's "Environment" table matches.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "COFFERDAM_HOME",
        "the job store; must be an absolute path (a relative one is refused with exit 2 and the fix)",
    ),
    (
        "XDG_DATA_HOME",
        "the store is `$XDG_DATA_HOME/cofferdam` when `COFFERDAM_HOME` is unset",
    ),
    (
        "HOME",
        "must be absolute; the store is `~/.local/share/cofferdam` when neither is set",
    ),
    (
        "XDG_CONFIG_HOME",
        "the user config is `$XDG_CONFIG_HOME/cofferdam/config.toml` (default `~/.config/cofferdam/config.toml`)",
    ),
    ("NO_COLOR", "no colour with `--color auto`"),
    ("TMPDIR", "where `cofferdam demo` makes its scratch project"),
    (
        "COFFERDAM_CTL",
        "`cofferdam ctl`: the run's control socket (cofferdam sets it inside every run)",
    ),
];

/// The files cofferdam reads and writes.
pub const FILES: &[(&str, &str)] = &[
    (
        "~/.config/cofferdam/config.toml",
        "your user config: defaults for every run key (refused when a symlink, not yours, or writable by others)",
    ),
    (
        "cofferdam.toml",
        "the workdir's manifest; it may only narrow your policy unless `cofferdam trust` pinned it",
    ),
    (
        "~/.local/share/cofferdam/jobs/ID/",
        "a job: its stage, its Run Bundle (`run-bundle.json`) and its records, 0700, yours alone",
    ),
];

/// The `--help` epilogue: the environment variables, as plain text.
pub fn environment_help() -> String {
    let width = ENVIRONMENT.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut s = String::from("Environment:");
    for (k, v) in ENVIRONMENT {
        let _ = write!(s, "\n  {k:width$}  {}", v.replace('`', ""));
    }
    s
}

/// Every page of the command line `top` defines (`crate::cli::Cli`'s): (file name such as
/// `cofferdam-run.1`, roff), the top command first.
pub fn pages(top: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut top = top.disable_help_subcommand(true);
    top.build();
    let mut out = Vec::new();
    collect(&top, &mut out)?;
    Ok(out)
}

/// The page of `name` (`run`, `bundle-verify`, or `cofferdam` itself); `None` when no
/// command has that name.
pub fn page(top: clap::Command, name: &str) -> std::io::Result<Option<Vec<u8>>> {
    let file = if name == "cofferdam" {
        "cofferdam.1".to_owned()
    } else {
        format!("cofferdam-{name}.1")
    };
    Ok(pages(top)?
        .into_iter()
        .find(|(f, _)| *f == file)
        .map(|(_, p)| p))
}

fn collect(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("cofferdam {}", env!("CARGO_PKG_VERSION")))
        .manual("cofferdam manual");
    let mut roff = Vec::new();
    man.render_title(&mut roff)?;
    man.render_name_section(&mut roff)?;
    man.render_synopsis_section(&mut roff)?;
    man.render_description_section(&mut roff)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut roff)?;
    }
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    if !subs.is_empty() {
        man.render_subcommands_section(&mut roff)?;
    }
    roff.extend_from_slice(section("EXIT STATUS", EXIT_STATUS).as_bytes());
    roff.extend_from_slice(section("ENVIRONMENT", ENVIRONMENT).as_bytes());
    roff.extend_from_slice(section("FILES", FILES).as_bytes());
    roff.extend_from_slice(see_also(cmd).as_bytes());
    man.render_version_section(&mut roff)?;
    out.push((man.get_filename(), roff));
    for sub in subs {
        collect(sub, out)?;
    }
    Ok(())
}

/// A `.SH` section of tagged paragraphs.
fn section(title: &str, rows: &[(&str, &str)]) -> String {
    let mut s = format!(".SH \"{title}\"\n");
    for (k, v) in rows {
        let _ = write!(s, ".TP\n\\fB{}\\fR\n{}\n", text(k), text(v));
    }
    s
}

fn see_also(cmd: &clap::Command) -> String {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let others: Vec<String> = if name == "cofferdam" {
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| {
                format!(
                    "\\fB{}\\fR(1)",
                    text(s.get_display_name().unwrap_or(s.get_name()))
                )
            })
            .collect()
    } else {
        vec!["\\fBcofferdam\\fR(1)".to_owned()]
    };
    format!(".SH \"SEE ALSO\"\n{}\n", others.join(", "))
}

/// Markdown text as one roff text line: `code` in bold, dashes, backslashes and
/// apostrophes escaped, other than ASCII as `\[uXXXX]`, a leading control character
/// neutralised.
fn text(md: &str) -> String {
    let mut s = String::from("\\&");
    for (i, part) in md.split('`').enumerate() {
        if i % 2 == 1 {
            s.push_str("\\fB");
        }
        for c in part.chars() {
            match c {
                '\\' => s.push_str("\\e"),
                '-' => s.push_str("\\-"),
                '\'' => s.push_str("\\(aq"),
                c if c.is_ascii() => s.push(c),
                c => {
                    let _ = write!(s, "\\[u{:04X}]", u32::from(c));
                }
            }
        }
        if i % 2 == 1 {
            s.push_str("\\fR");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_code_of_exit_is_documented() {
        for &code in crate::exit::CODES {
            assert!(
                EXIT_STATUS.iter().any(|(k, _)| *k == code.to_string()),
                "exit {code} is not in EXIT_STATUS"
            );
        }
    }

    #[test]
    fn every_command_has_a_page_with_the_shared_sections() {
        let pages = pages(<crate::cli::Cli as clap::CommandFactory>::command()).unwrap();
        for name in [
            "cofferdam.1",
            "cofferdam-run.1",
            "cofferdam-apply.1",
            "cofferdam-bundle-verify.1",
        ] {
            let (_, p) = pages.iter().find(|(f, _)| f == name).unwrap();
            let p = String::from_utf8(p.clone()).unwrap();
            for s in [
                ".SH \"EXIT STATUS\"",
                ".SH \"ENVIRONMENT\"",
                ".SH \"FILES\"",
                ".SH SYNOPSIS",
            ] {
                assert!(p.contains(s), "{name} lacks {s}");
            }
        }
    }

    #[test]
    fn markdown_becomes_escaped_roff() {
        assert_eq!(text("`--x` it's"), "\\&\\fB\\-\\-x\\fR it\\(aqs");
        assert_eq!(text("a — b"), "\\&a \\[u2014] b");
    }
}
