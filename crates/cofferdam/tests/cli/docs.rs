//! Shell completion of job ids, driven through the real shells: bash always, zsh and fish
//! where installed (CI installs them; `COFFERDAM_TEST_REQUIRE=sealed` makes their absence
//! fail).

use crate::common::{Sandbox, landlock_abi_independently, require, userns_independently};
use std::path::PathBuf;

/// A store with one job; its id.
fn with_a_job(s: &Sandbox) -> Option<String> {
    if !require(
        "user namespaces or Landlock (to make a job)",
        userns_independently() || landlock_abi_independently() > 0,
    ) {
        return None;
    }
    let out = s
        .cmd()
        .args(["--json", "run", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc = crate::common::json_of(&out);
    Some(
        doc["job"]
            .as_str()
            .or(doc["job_id"].as_str())
            .unwrap()
            .to_owned(),
    )
}

/// Run `shell` with `args`, the built binary first on PATH and the sandbox's store.
fn shell(s: &Sandbox, shell: &str, args: &[&str]) -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cofferdam"));
    let out = std::process::Command::new(shell)
        .args(args)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", bin.parent().unwrap().display()),
        )
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .current_dir(s.work.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{shell} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn installed(name: &str) -> bool {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(name).is_file())
}

#[test]
fn bash_completes_job_ids_at_a_job_argument_only() {
    let s = Sandbox::new();
    let Some(id) = with_a_job(&s) else { return };
    let complete = |words: &str| {
        let script = format!(
            "source <(cofferdam completions bash)\nCOMP_WORDS=({words})\n\
             COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\n\
             _cofferdam_with_jobs cofferdam \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        shell(&s, "bash", &["-c", &script])
    };
    for words in [
        "cofferdam apply ''",
        "cofferdam --color never status --review ''",
        "cofferdam bundle verify ''",
    ] {
        let got = complete(words);
        assert!(got.lines().any(|l| l == "last"), "{words}: {got}");
        assert!(got.lines().any(|l| l == id), "{words}: {got}");
    }
    let got = complete(&format!("cofferdam drop {}", &id[..4]));
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        [id.as_str()],
        "a prefix completes to the id"
    );
    for words in [
        "cofferdam apply --path ''",
        "cofferdam apply last ''",
        "cofferdam jobs ''",
    ] {
        let got = complete(words);
        assert!(!got.lines().any(|l| l == id), "{words}: {got}");
    }
    let got = complete("cofferdam sta");
    assert!(
        got.lines().any(|l| l == "status"),
        "clap's completion still runs: {got}"
    );
}

#[test]
fn zsh_completes_job_ids() {
    if !require("zsh", installed("zsh")) {
        return;
    }
    let s = Sandbox::new();
    let Some(id) = with_a_job(&s) else { return };
    // compsys needs a terminal; compadd and compdef are stood in for, the hook runs as is.
    let script = "compdef() { :; }\ncompadd() { [[ $1 == -a ]] && print -l -- ${(P)2} }\n\
                  source <(cofferdam completions zsh)\n\
                  words=(cofferdam kill ''); CURRENT=3; PREFIX=''\n_cofferdam_with_jobs";
    let got = shell(&s, "zsh", &["-c", script]);
    assert!(got.lines().any(|l| l == "last"), "{got}");
    assert!(got.lines().any(|l| l == id), "{got}");
}

#[test]
fn fish_completes_job_ids() {
    if !require("fish", installed("fish")) {
        return;
    }
    let s = Sandbox::new();
    let Some(id) = with_a_job(&s) else { return };
    let got = shell(
        &s,
        "fish",
        &[
            "-c",
            "cofferdam completions fish | source; complete -C 'cofferdam diff '",
        ],
    );
    let words: Vec<&str> = got
        .lines()
        .map(|l| l.split('\t').next().unwrap_or(l))
        .collect();
    assert!(words.contains(&"last"), "{got}");
    assert!(words.contains(&id.as_str()), "{got}");
    let got = shell(
        &s,
        "fish",
        &[
            "-c",
            "cofferdam completions fish | source; complete -C 'cofferdam jobs '",
        ],
    );
    assert!(!got.contains(&id), "{got}");
}
