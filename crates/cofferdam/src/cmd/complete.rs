//! `cofferdam completions SHELL` and the hidden `cofferdam __complete-jobs`: clap's static
//! script for the shell, plus (bash, zsh, fish) a small hook that asks this binary for job
//! ids when the word being completed is a JOB argument. The binary, not shell code, decides
//! whether it is, from the same clap definitions that parse the command line.

use crate::cli::Cli;
use crate::exit::{Failure, OK};
use clap::CommandFactory;
use clap_complete::Shell;

/// The hidden command the hooks call (also the name in `cli`).
pub const HIDDEN: &str = "__complete-jobs";

/// Print `shell`'s completion script.
pub fn script(shell: Shell) -> Result<u8, Failure> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "cofferdam", &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let text = match shell {
        Shell::Bash => format!("{text}{BASH}"),
        Shell::Zsh => zsh(&text),
        Shell::Fish => format!("{text}{FISH}"),
        _ => text,
    };
    crate::write_stdout(text.as_bytes())?;
    Ok(OK)
}

/// bash: when the current word is a JOB, offer the jobs; else clap's completion.
const BASH: &str = r#"
_cofferdam_with_jobs() {
    local cur="${COMP_WORDS[COMP_CWORD]}" jobs
    if [[ "$cur" != -* ]]; then
        jobs="$("${COMP_WORDS[0]}" __complete-jobs -- "${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)"
        if [[ -n "$jobs" ]]; then
            COMPREPLY=($(compgen -W "$jobs" -- "$cur"))
            return 0
        fi
    fi
    _cofferdam "$@"
}
complete -F _cofferdam_with_jobs -o bashdefault -o default cofferdam
"#;

/// zsh: the same hook; it replaces clap's dispatch at the end of the script, so the file
/// works both sourced and autoloaded from `$fpath` as `_cofferdam`.
const ZSH: &str = r#"
_cofferdam_with_jobs() {
    if [[ "$PREFIX" != -* ]]; then
        local -a jobs
        jobs=(${(f)"$(${words[1]} __complete-jobs -- ${words[2,CURRENT-1]} 2>/dev/null)"})
        if (( ${#jobs} )); then
            compadd -a jobs
            return
        fi
    fi
    _cofferdam "$@"
}

if [ "$funcstack[1]" = "_cofferdam" ]; then
    _cofferdam_with_jobs "$@"
else
    compdef _cofferdam_with_jobs cofferdam
fi
"#;

/// The dispatch clap's zsh script ends with, which [`ZSH`] replaces.
const ZSH_DISPATCH: &str = "if [ \"$funcstack[1]\" = \"_cofferdam\" ]; then";

fn zsh(generated: &str) -> String {
    let body = generated
        .rfind(ZSH_DISPATCH)
        .map_or(generated, |at| &generated[..at]);
    format!("{body}{ZSH}")
}

/// fish: a JOB position offers the jobs (and no files).
const FISH: &str = r#"
function __cofferdam_jobs
    set -l words (commandline -opc)
    set -e words[1]
    cofferdam __complete-jobs -- $words 2>/dev/null
end
complete -c cofferdam -f -n '__cofferdam_jobs | string length -q' -a '(__cofferdam_jobs)'
"#;

/// `cofferdam __complete-jobs -- WORDS…`: when the word after `words` (the command line
/// after `cofferdam`, up to the one being completed) is a JOB argument, print `last` and
/// the id of every job in the store, one per line; else print nothing. Never fails: a
/// store that cannot be read just offers `last`.
pub fn jobs(words: &[String]) -> Result<u8, Failure> {
    if !at_job(words) {
        return Ok(OK);
    }
    let mut out = String::from("last\n");
    if let Ok(env) = crate::context::env()
        && let Ok(store) = cofferdam_stage::job::JobStore::open(&env.storage_root)
        && let Ok(list) = store.list()
    {
        for j in list {
            out.push_str(j.id());
            out.push('\n');
        }
    }
    crate::write_stdout(out.as_bytes())?;
    Ok(OK)
}

/// Whether the next word after `words` is a JOB argument (the `job` of `status`, `diff`,
/// `apply`, `drop`, `kill`, `logs`, the `file` of `bundle verify`).
pub fn at_job(words: &[String]) -> bool {
    let mut top = Cli::command();
    top.build();
    let mut cmd = &top;
    let mut given = 0;
    let mut dashdash = false;
    let mut i = 0;
    while let Some(w) = words.get(i) {
        i += 1;
        if !dashdash && w == "--" {
            dashdash = true;
            continue;
        }
        if !dashdash && w.len() > 1 && w.starts_with('-') {
            if !w.contains('=') && takes_value(cmd, w) {
                // bash splits `--opt=value` into `--opt`, `=`, `value`.
                if words.get(i).map(String::as_str) == Some("=") {
                    i += 1;
                }
                if i >= words.len() {
                    return false; // the word being completed is this option's value
                }
                i += 1;
            }
            continue;
        }
        if given == 0
            && !dashdash
            && let Some(sub) = cmd.find_subcommand(w)
        {
            cmd = sub;
            continue;
        }
        given += 1;
    }
    cmd.get_positionals().nth(given).is_some_and(|a| {
        a.get_id() == "job" || (cmd.get_name() == "verify" && a.get_id() == "file")
    })
}

/// Whether option word `w` (`--name` or `-c`) of `cmd` takes a value in the next word.
fn takes_value(cmd: &clap::Command, w: &str) -> bool {
    let found = if let Some(long) = w.strip_prefix("--") {
        cmd.get_arguments().find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|v| v.contains(&long))
        })
    } else {
        let c = w.chars().nth(1);
        cmd.get_arguments()
            .find(|a| w.len() == 2 && a.get_short() == c)
    };
    found.is_some_and(|a| a.get_action().takes_values())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: &str) -> bool {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        at_job(&words)
    }

    #[test]
    fn job_positions_are_found_from_the_clap_definitions() {
        for yes in [
            "status",
            "apply --path src",
            "apply --dry-run",
            "diff --path = src --stat",
            "--color never drop",
            "--json kill",
            "logs",
            "bundle verify",
            "status --review",
        ] {
            assert!(at(yes), "`{yes}` is at a JOB");
        }
        for no in [
            "",
            "run",
            "run --",
            "apply last",
            "apply --path",
            "jobs",
            "bundle",
            "gc --workdir",
            "doctor",
        ] {
            assert!(!at(no), "`{no}` is not at a JOB");
        }
    }
}
