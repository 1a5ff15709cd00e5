//! The README's claims checked against the binary: every command of its ```sh blocks is
//! run (in a scratch git workdir with a temp `COFFERDAM_HOME`, `HOME` and `TMPDIR`, with
//! the built binary first on `PATH`) or skipped for a reason listed here; its exit-code
//! and environment tables are the ones the man pages print.

use crate::common::{Sandbox, landlock_abi_independently, require, userns_independently};
use std::path::{Path, PathBuf};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

/// Every command line of the README's ```sh blocks, comments removed, in order.
fn sh_commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("```") {
            inside = !inside && line.trim() == "```sh";
            continue;
        }
        let cmd = line.split(" #").next().unwrap_or("").trim();
        if inside && !cmd.is_empty() && !cmd.starts_with('#') {
            out.push(cmd.to_owned());
        }
    }
    out
}

/// Commands that cannot run here, and why.
const SKIPPED: &[(&str, &str)] = &[
    (
        "cargo install --locked --path crates/cofferdam",
        "installs into ~/.cargo/bin and rebuilds in release mode; the test puts the binary \
         cargo built for it first on PATH instead, the same crate",
    ),
    ("cargo test --workspace", "this test is part of it"),
    (
        "sudo install -m 644 packaging/apparmor/cofferdam /etc/apparmor.d/cofferdam",
        "changes the host's AppArmor configuration",
    ),
    (
        "sudo apparmor_parser -r /etc/apparmor.d/cofferdam",
        "changes the host's AppArmor configuration",
    ),
    (
        "apt-get install hyperfine bubblewrap jq bc gnuplot-nox",
        "installs host packages",
    ),
    (
        "cofferdam review last --web",
        "serves until its page closes; `web::the_review_page_applies_a_hunk_in_a_real_browser_\
         and_refuses_strangers` drives it in chromium",
    ),
    (
        "cofferdam apply last --interactive",
        "asks on a terminal; `hunks::interactive_apply_asks_per_hunk_on_a_terminal` drives \
         it on a pty",
    ),
];

/// Commands with placeholders or programs absent here, and the line run in their place.
const FILLED: &[(&str, &str)] = &[
    (
        "cofferdam run -- claude",
        // claude is not installed here: a scripted agent with the same kind of writes.
        "cofferdam run --capture -- sh -c 'mkdir -p src && echo hi > src/a.txt && echo n > notes.txt && echo done'",
    ),
    (
        "cofferdam jobs [--workdir DIR] [--state S] [-n N]",
        "cofferdam jobs --workdir . --state staged -n 5",
    ),
    (
        "cofferdam gc --older-than 7d [--dry-run]",
        "cofferdam gc --older-than 7d --dry-run",
    ),
    ("cofferdam diff last [--stat]", "cofferdam diff last --stat"),
    (
        "cofferdam apply last --hunks ID,...",
        // The first hunk id `diff --json` lists.
        "cofferdam apply last --hunks \"$(cofferdam diff last --json | tr -d ' \\n' | \
         grep -o '\"id\":\"[0-9a-f]*\"' | head -1 | cut -d'\"' -f4)\"",
    ),
    ("cofferdam trust [FILE]", "cofferdam trust cofferdam.toml"),
    (
        "cofferdam batch -j 2 tasks.toml",
        // The README's task file, the `make test` task as a command present here.
        "printf '[[task]]\\nworkdir = \".\"\\ncommand = [\"sh\", \"-c\", \"echo one > one.txt\"]\\n\
         task_id = \"one\"\\nlabels = { model = \"a\" }\\n\\n[[task]]\\ncopy_of = \".\"\\n\
         command = [\"true\"]\\ntimeout = \"10m\"\\n' > tasks.toml && cofferdam batch -j 2 tasks.toml",
    ),
    (
        "cofferdam bundle verify FILE|last",
        "cofferdam bundle verify last",
    ),
];

#[test]
fn every_readme_command_runs() {
    if !require(
        "user namespaces or Landlock (for the README's `run`)",
        userns_independently() || landlock_abi_independently() > 0,
    ) {
        return;
    }
    let s = Sandbox::new();
    let tmp = tempfile::tempdir().unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cofferdam"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(s.work.path())
            .env("HOME", s.home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    s.write("README.md", "# scratch\n");
    s.write("notes.txt", "old\n");
    s.write("cofferdam.toml", "[network]\nmode = \"none\"\n");
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "add", "."]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "start",
    ]);

    let text = readme();
    for (readme_line, _) in SKIPPED.iter().chain(FILLED) {
        assert!(
            sh_commands(&text).iter().any(|c| c == readme_line),
            "the README no longer shows `{readme_line}`: update SKIPPED/FILLED in this test"
        );
    }
    let mut ran = 0;
    for line in sh_commands(&text) {
        if let Some((_, why)) = SKIPPED.iter().find(|(c, _)| *c == line) {
            println!("SKIP `{line}`: {why}");
            continue;
        }
        let cmd = FILLED
            .iter()
            .find(|(c, _)| *c == line)
            .map_or(line.as_str(), |(_, f)| f);
        let out = std::process::Command::new("bash")
            .args(["-o", "pipefail", "-c", cmd])
            .env_clear()
            .env("PATH", &path)
            .env("HOME", s.home.path())
            .env("COFFERDAM_HOME", s.store.path())
            .env("TMPDIR", tmp.path())
            .current_dir(s.work.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README command `{line}` (run as `{cmd}`) failed: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!("RAN `{cmd}`");
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} README commands ran");
}

/// The rows of the README table under `heading`: (first cell without backticks, second).
fn table(text: &str, heading: &str) -> Vec<(String, String)> {
    let rest = &text[text.find(heading).unwrap()..];
    rest.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let (k, v) = l.trim_matches('|').split_once(" | ").unwrap();
            (k.trim().trim_matches('`').to_owned(), v.trim().to_owned())
        })
        .collect()
}

/// The tagged paragraphs of the man page's section `title`, roff undone back to Markdown.
fn man_section(page: &str, title: &str) -> Vec<(String, String)> {
    let start = page.find(&format!(".SH \"{title}\"\n")).unwrap();
    let body = &page[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with(".SH"))
        .collect::<Vec<_>>();
    let plain = |s: &str| {
        s.replace("\\&", "")
            .replace("\\fB", "`")
            .replace("\\fR", "`")
            .replace("\\-", "-")
            .replace("\\(aq", "'")
            .replace("\\e", "\\")
    };
    // `\[uXXXX]` back to the character.
    let chars = |s: String| {
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(at) = rest.find("\\[u") {
            out.push_str(&rest[..at]);
            let end = rest[at..].find(']').unwrap() + at;
            let code = u32::from_str_radix(&rest[at + 3..end], 16).unwrap();
            out.push(char::from_u32(code).unwrap());
            rest = &rest[end + 1..];
        }
        out + rest
    };
    body.chunks(3)
        .map(|c| {
            assert_eq!(c[0], ".TP", "{title}: {c:?}");
            (
                chars(plain(c[1])).trim_matches('`').to_owned(),
                chars(plain(c[2])),
            )
        })
        .collect()
}

#[test]
fn exit_status_and_environment_tables_match_the_man_pages() {
    let s = Sandbox::new();
    let text = readme();
    for page in ["run", "apply", "bundle-verify"] {
        let out = s.cmd().args(["man", page]).output().unwrap();
        assert!(out.status.success());
        let roff = String::from_utf8(out.stdout).unwrap();
        assert!(roff.contains(&format!(".TH cofferdam-{page} 1")), "{page}");
        assert_eq!(
            man_section(&roff, "EXIT STATUS"),
            table(&text, "\n## Exit codes\n")
        );
        assert_eq!(
            man_section(&roff, "ENVIRONMENT"),
            table(&text, "\n## Environment\n")
        );
        assert!(roff.contains(".SH \"FILES\"\n"));
    }
    let help = s.cmd().arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for (var, _) in table(&text, "\n## Environment\n") {
        assert!(help.contains(&format!("\n  {var} ")), "--help lacks {var}");
    }
}

#[test]
fn man_out_writes_a_page_per_command() {
    let s = Sandbox::new();
    let dir = s.home.path().join("man1");
    let out = s.cmd().args(["man", "--out"]).arg(&dir).output().unwrap();
    assert!(out.status.success());
    for name in [
        "cofferdam.1",
        "cofferdam-run.1",
        "cofferdam-apply.1",
        "cofferdam-jobs.1",
        "cofferdam-bundle-verify.1",
    ] {
        assert!(dir.join(name).is_file(), "{name}");
    }
    s.cmd().args(["man", "no-such"]).assert().code(2);
}

#[test]
fn demo_next_lines_work_with_cofferdam_on_path() {
    if !require(
        "user namespaces or Landlock (for the demo's run)",
        userns_independently() || landlock_abi_independently() > 0,
    ) {
        return;
    }
    let s = Sandbox::new();
    let tmp = tempfile::tempdir().unwrap();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_cofferdam"));
    let on_path = format!("{}:/usr/bin:/bin", bin.parent().unwrap().display());
    let text = s
        .cmd()
        .env("TMPDIR", tmp.path())
        .env("PATH", "/usr/bin:/bin")
        .arg("demo")
        .output()
        .unwrap();
    assert!(text.status.success(), "{text:?}");
    let shown = String::from_utf8(text.stdout).unwrap();
    assert!(!shown.contains("cargo run"), "{shown}");
    assert!(shown.contains("is not on your PATH"), "{shown}");
    let out = s
        .cmd()
        .env("TMPDIR", tmp.path())
        .args(["demo", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc = crate::common::json_of(&out);
    let project = PathBuf::from(doc["project"].as_str().unwrap());
    assert!(project.starts_with(tmp.path()), "{project:?}");
    let next: Vec<&str> = doc["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        next,
        [
            "cofferdam diff last",
            "cofferdam apply last",
            "cofferdam drop last"
        ]
    );
    for line in next {
        let out = std::process::Command::new("sh")
            .args(["-c", line])
            .env_clear()
            .env("PATH", &on_path)
            .env("HOME", s.home.path())
            .env("COFFERDAM_HOME", s.store.path())
            .current_dir(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "`{line}`: {out:?}");
    }
    assert!(
        project.join("src/hello.py").is_file(),
        "apply last let the demo's change in"
    );
    let with_path = s
        .cmd()
        .env("TMPDIR", tmp.path())
        .env("PATH", &on_path)
        .arg("demo")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&with_path.stdout).contains("is not on your PATH"));
}
