//! Toolchain lending (issue 19): a program installed under HOME (a `~/.local/bin` link into a
//! venv whose interpreter is a link into `~/.pyenv`) runs inside with no flags; exactly the
//! install trees it needs are lent read-only and recorded, a sibling install is not; and a
//! script whose `#!` interpreter is not visible ends in exit 127 naming that interpreter and
//! the mount that lends it. What a rustup proxy and a `pip --user` script run from besides
//! their own tree is lent too. Under an agent profile the installs on the caller's PATH are
//! lent for the programs the agent's shell tool runs later, their tokens still hidden; the
//! exit-127 explanations land in the bundle's `run.failure` as well as on stderr.

use crate::common::{Sandbox, json_of, require, userns_independently};
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

/// The fake install under the sandbox's HOME; returns (link on PATH, venv, pyenv version).
fn install(home: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let version = home.join(".pyenv/versions/9.9");
    std::fs::create_dir_all(version.join("bin")).unwrap();
    // A python3 binary (not a pyenv shim, which is a script).
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter_map(|d| std::fs::canonicalize(d.join("python3")).ok())
        .find(|p| std::fs::read(p).is_ok_and(|b| b.starts_with(b"\x7fELF")))
        .expect("a python3 binary on PATH");
    let py = version.join("bin/python3");
    std::fs::copy(&real, &py).unwrap();
    // A sibling install the command does not need: never lent.
    let other = home.join(".pyenv/versions/other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("canary"), "not lent").unwrap();
    let venv = home.join("proj-venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    symlink(&py, venv.join("bin/python")).unwrap();
    let tool = venv.join("bin/tool");
    std::fs::write(
        &tool,
        format!(
            "#!{}/bin/python\nimport os\nopen('made-by-tool.txt', 'w').write('ok')\n\
             print('sibling', os.path.exists('{}'))\n\
             try:\n    open('{}', 'w').write('x'); print('planted')\n\
             except OSError as e:\n    print('plant-refused', e.errno)\n",
            venv.display(),
            other.join("canary").display(),
            venv.join("bin/planted").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let local = home.join(".local/bin");
    std::fs::create_dir_all(&local).unwrap();
    symlink(&tool, local.join("tool")).unwrap();
    for d in [home.to_path_buf(), home.join(".pyenv"), home.join(".local")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (local.join("tool"), venv, version)
}

fn ready() -> Option<Sandbox> {
    if !require("user namespaces (sealed tier)", userns_independently()) {
        return None;
    }
    let s = Sandbox::new();
    std::fs::set_permissions(s.work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(s)
}

#[test]
fn a_program_installed_under_home_runs_with_its_install_lent_read_only() {
    let Some(s) = ready() else { return };
    let (link, venv, version) = install(s.home.path());
    let out = s.cmd().args(["run", "--"]).arg(&link).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(stdout.contains("sibling False"), "{said}");
    assert!(!s.work.path().join("made-by-tool.txt").exists());
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    assert!(
        b["filesystem"]["changes"]
            .to_string()
            .contains("made-by-tool.txt"),
        "{}",
        b["filesystem"]["changes"]
    );
    // Exactly the three trees, read-only, in the bundle's access policy.
    let mounts = b["filesystem"]["access_policy"]["mounts"]
        .as_array()
        .unwrap();
    let lent: Vec<(String, String)> = mounts
        .iter()
        .map(|m| {
            (
                m["source"].as_str().unwrap().to_owned(),
                m["mode"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(p, _)| Path::new(p).starts_with(s.home.path()))
        .collect();
    let mut want: Vec<(String, String)> = [
        s.home.path().join(".local/bin"),
        venv.clone(),
        version.clone(),
    ]
    .iter()
    .map(|p| (p.display().to_string(), "read".to_owned()))
    .collect();
    want.sort();
    let mut got = lent.clone();
    got.sort();
    assert_eq!(got, want, "{mounts:?}");
    // The install cannot be changed from inside: it is lent read-only (EROFS).
    assert!(stdout.contains("plant-refused 30"), "{said}");
    assert!(!venv.join("bin/planted").exists());
}

#[test]
fn a_script_whose_interpreter_is_not_visible_exits_127_naming_it_and_the_fix() {
    let Some(s) = ready() else { return };
    let (_, venv, version) = install(s.home.path());
    // The venv lent by hand, toolchain lending off: its interpreter's target is not there.
    let lend = format!("{}:read", venv.display());
    let out = s
        .cmd()
        .args(["run", "--no-agent-defaults", "--mount", &lend, "--"])
        .arg(venv.join("bin/tool"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}/bin/python is a symlink to {}/bin/python3, which is not visible",
            venv.display(),
            version.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("--mount {}:read", version.display())),
        "{stderr}"
    );
    // The bundle's typed failure names the interpreter and the fix too.
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let message = b["run"]["failure"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is not visible")
            && message.contains(&format!("--mount {}:read", version.display())),
        "{}",
        b["run"]["failure"]
    );
    // A script in the workdir whose `#!` names a path that is nowhere.
    let script = s.write(
        "s.sh",
        "#!/nonexistent/cofferdam-test/bin/interp\necho hi\n",
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = s.cmd().args(["run", "--", "./s.sh"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr
            .contains("its `#!` interpreter /nonexistent/cofferdam-test/bin/interp is not visible")
            && stderr.contains("--mount /nonexistent/cofferdam-test:read"),
        "{stderr}"
    );
}

fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What a run that must exit 0 printed, both streams.
fn ok_output(out: &std::process::Output) -> String {
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    said
}

/// `cofferdam run -- ARGV`, which must exit 0; what it printed, both streams.
fn run_ok(s: &Sandbox, argv: &[&std::ffi::OsStr]) -> String {
    let out = s.cmd().args(["run", "--"]).args(argv).output().unwrap();
    ok_output(&out)
}

/// The host paths of `last`'s bundle lent from under `home`, with their modes, sorted.
fn lent_from(s: &Sandbox, home: &Path) -> Vec<(String, String)> {
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let mut lent: Vec<(String, String)> = b["filesystem"]["access_policy"]["mounts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["source"].as_str().unwrap().to_owned(),
                m["mode"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(p, _)| Path::new(p).starts_with(home))
        .collect();
    lent.sort();
    lent
}

/// A rustup layout: `~/.cargo/bin/cargo` is a proxy (here a script) that runs the toolchain
/// in `~/.rustup`; beside it `rustup`, as rustup installs it. Both trees are lent read-only.
/// Without `rustup` beside it (a cargo that is no proxy) `~/.rustup` is not lent, and the
/// proxy finds nothing.
#[test]
fn a_rustup_proxy_runs_with_its_rustup_home_lent_read_only() {
    let Some(s) = ready() else { return };
    let home = s.home.path();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cargo = home.join(".cargo/bin/cargo");
    script(
        &cargo,
        "#!/bin/sh\nexec \"$HOME/.rustup/toolchains/stable/bin/cargo\" \"$@\"\n",
    );
    script(
        &home.join(".rustup/toolchains/stable/bin/cargo"),
        "#!/bin/sh\necho real-cargo \"$@\"\n",
    );
    let rustup = home.join(".cargo/bin/rustup");
    script(&rustup, "#!/bin/sh\necho rustup\n");
    let said = run_ok(&s, &[cargo.as_os_str(), "build".as_ref()]);
    assert!(said.contains("real-cargo build"), "{said}");
    let read = |p: &str| (home.join(p).display().to_string(), "read".to_owned());
    assert_eq!(lent_from(&s, home), [read(".cargo"), read(".rustup")]);

    std::fs::remove_file(&rustup).unwrap();
    let out = s.cmd().args(["run", "--"]).arg(&cargo).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(lent_from(&s, home), [read(".cargo")]);
}

/// A `pip install --user` script: `~/.local/bin/TOOL` run by the system's `python3`, which
/// imports from `~/.local/lib/pythonX.Y` (the user site of that interpreter's version). That
/// tree is lent read-only beside `~/.local/bin`; another version's is not.
#[test]
fn a_pip_user_script_runs_with_its_user_site_lent_read_only() {
    let Some(s) = ready() else { return };
    let home = s.home.path();
    // The system interpreter as a script names it (a link on PATH to pythonX.Y).
    let Some((named, version)) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find_map(|p| {
            let real = std::fs::canonicalize(&p).ok()?;
            let name = real
                .file_name()?
                .to_str()?
                .strip_prefix("python")?
                .to_owned();
            name.contains('.').then_some((p, name))
        })
    else {
        require("a system python3 linked to pythonX.Y", false);
        return;
    };
    let site = home.join(format!(".local/lib/python{version}/site-packages"));
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("cofferdam_user_mod.py"), "WHO = 'user-site'\n").unwrap();
    let other = home.join(".local/lib/python0.1");
    std::fs::create_dir_all(&other).unwrap();
    let tool = home.join(".local/bin/usertool");
    script(
        &tool,
        &format!(
            "#!{}\nimport os, cofferdam_user_mod\nprint(cofferdam_user_mod.WHO)\n\
             print('other', os.path.exists('{}'))\n",
            named.display(),
            other.display()
        ),
    );
    for d in [home.to_path_buf(), home.join(".local")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let said = run_ok(&s, &[tool.as_os_str()]);
    assert!(said.contains("user-site"), "{said}");
    assert!(said.contains("other False"), "{said}");
    let read = |p: PathBuf| (p.display().to_string(), "read".to_owned());
    assert_eq!(
        lent_from(&s, home),
        [
            read(home.join(".local/bin")),
            read(home.join(format!(".local/lib/python{version}")))
        ]
    );
}

/// A bare command whose PATH entry is under HOME and not lent (toolchain lending off): exit
/// 127 names where the host's PATH has it and the mount that lends it.
#[test]
fn a_command_on_a_path_entry_that_is_not_lent_exits_127_naming_it_and_the_fix() {
    let Some(s) = ready() else { return };
    let home = s.home.path();
    let bin = home.join(".local/bin");
    script(&bin.join("cofferdam-test-tool"), "#!/bin/sh\necho ran\n");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = s
        .cmd()
        .env("PATH", &path)
        .args(["run", "--no-agent-defaults", "--", "cofferdam-test-tool"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    let entry = format!(
        "the host's PATH has it at {}/cofferdam-test-tool",
        bin.display()
    );
    let fix = format!("--mount {}:read", bin.display());
    assert!(
        stderr.contains(&entry)
            && stderr.contains(&fix)
            && stderr.contains("--lend-path-toolchains"),
        "{stderr}"
    );
    // The bundle's typed failure says the same.
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let failure = &b["run"]["failure"];
    let message = failure["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&entry) && message.contains(&fix) && failure["exit_code"] == 127,
        "{failure}"
    );
    // With toolchain lending on, it is lent and runs.
    let out = s
        .cmd()
        .env("PATH", &path)
        .args(["run", "--", "cofferdam-test-tool"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A fake HOME's toolchains, as installers lay them out: a cargo home with a program in
/// `bin/` and registry tokens beside it, a `~/.local/bin` tool, a pyenv root whose shim
/// runs a version, and a script folder under HOME that is no known install. Returns the
/// `PATH` that names them, in front of the test's own.
fn toolchains(home: &Path, cargo_home: &Path) -> String {
    script(
        &cargo_home.join("bin/fake-cargo"),
        "#!/bin/sh\necho \"fake-cargo ran $* home=${CARGO_HOME:-unset}\"\n",
    );
    for f in ["credentials.toml", "credentials"] {
        std::fs::write(
            cargo_home.join(f),
            "[registry]\ntoken = \"cofferdam-canary-token\"\n",
        )
        .unwrap();
    }
    script(&home.join(".local/bin/tool"), "#!/bin/sh\necho tool ran\n");
    script(
        &home.join(".pyenv/shims/fakepy"),
        "#!/bin/sh\nexec \"$HOME/.pyenv/versions/9.9/bin/fakepy\" \"$@\"\n",
    );
    script(
        &home.join(".pyenv/versions/9.9/bin/fakepy"),
        "#!/bin/sh\necho fakepy 9.9\n",
    );
    script(&home.join("scripts/mine"), "#!/bin/sh\necho mine ran\n");
    std::fs::write(home.join("notes.txt"), "private").unwrap();
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o755)).unwrap();
    for d in [".local", ".pyenv", ".pyenv/versions"] {
        std::fs::set_permissions(home.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dirs = [
        cargo_home.join("bin"),
        home.join(".local/bin"),
        home.join(".pyenv/shims"),
        home.join("scripts"),
    ];
    let mut path: Vec<PathBuf> = dirs.to_vec();
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(path)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A fake agent: a script named `claude` in a folder of its own (outside HOME, lent by the
/// test), whose body runs tools through `sh -c` the way an agent's shell tool does, and
/// tries what must fail: the cargo home's tokens, a PATH entry under HOME that is no
/// install, HOME's other files, and writing into a lent install.
fn fake_agent(cargo_home: &Path) -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    let c = cargo_home.display();
    script(
        &bin.path().join("claude"),
        &format!(
            "#!/bin/sh\n\
             sh -c 'fake-cargo test; tool; fakepy'\n\
             for f in {c}/credentials.toml {c}/credentials; do\n\
               sh -c \"cat $f\" 2>/dev/null && echo creds-read || echo creds-denied\n\
             done\n\
             sh -c mine 2>/dev/null || echo mine-not-found\n\
             test -e \"$HOME/notes.txt\" && echo notes-visible || echo notes-hidden\n\
             sh -c 'echo x > {c}/bin/planted' 2>/dev/null && echo planted || echo plant-refused\n\
             echo edit > edited.txt\n"
        ),
    );
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `cofferdam run` of the fake agent with `path` and `extra` flags; what it printed.
fn agent_run(s: &Sandbox, bin: &Path, path: &str, env: &[(&str, &Path)], extra: &[&str]) -> String {
    let path = format!("{}:{path}", bin.display());
    let lend = format!("{}:read", bin.display());
    let mut c = s.cmd();
    c.env("PATH", &path)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .args(["run", "--mount", &lend])
        .args(extra)
        .args(["--", "claude"])
        .output()
        .unwrap();
    ok_output(&out)
}

/// The grants `scope` credits to the toolchain, as `grant` = `value` pairs.
fn toolchain_grants(s: &Sandbox, path: &str, env: &[(&str, &Path)]) -> Vec<(String, String)> {
    let mut c = s.cmd();
    c.env("PATH", path);
    for (k, v) in env {
        c.env(k, v);
    }
    let v = json_of(
        &c.args(["scope", "--json", "--agent", "claude"])
            .output()
            .unwrap(),
    );
    let mut g: Vec<(String, String)> = v["grant_sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["source"] == "toolchain")
        .map(|g| {
            (
                g["grant"].as_str().unwrap().to_owned(),
                g["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    g.sort();
    g
}

/// Under an agent profile, the programs an agent's shell tool runs later find the known
/// toolchain installs on the caller's PATH (a cargo home, `~/.local/bin`, a pyenv root),
/// lent read-only, recorded in `scope` as `toolchain` and in the bundle's access policy;
/// the cargo home's tokens stay hidden; a PATH entry under HOME that is no known install
/// is not lent, nor is the rest of HOME. `--no-lend-path-toolchains` turns it off.
#[test]
fn an_agents_shell_commands_find_the_toolchains_on_path_and_not_their_tokens() {
    let Some(s) = ready() else { return };
    let home = s.home.path();
    std::fs::create_dir(home.join(".claude")).unwrap();
    let cargo_home = home.join(".cargo");
    let path = toolchains(home, &cargo_home);
    let bin = fake_agent(&cargo_home);
    let said = agent_run(&s, bin.path(), &path, &[], &[]);
    for want in [
        "fake-cargo ran test home=unset",
        "tool ran",
        "fakepy 9.9",
        "mine-not-found",
        "notes-hidden",
        "plant-refused",
    ] {
        assert!(said.contains(want), "{want}: {said}");
    }
    assert_eq!(said.matches("creds-denied").count(), 2, "{said}");
    assert!(!said.contains("cofferdam-canary-token"), "{said}");
    assert!(!cargo_home.join("bin/planted").exists());
    let read = |p: &str| (home.join(p).display().to_string(), "read".to_owned());
    let own_state = (
        home.join(".claude").display().to_string(),
        "write".to_owned(),
    );
    let mut want = vec![
        read(".cargo"),
        read(".local/bin"),
        read(".pyenv"),
        own_state,
    ];
    want.sort();
    assert_eq!(lent_from(&s, home), want);
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let hidden = b["filesystem"]["access_policy"]["hidden"].to_string();
    for f in ["credentials.toml", "credentials\""] {
        let p = format!("{}/{f}", cargo_home.display());
        assert!(hidden.contains(&p), "{p} not in {hidden}");
    }
    assert!(
        b["filesystem"]["changes"]
            .to_string()
            .contains("edited.txt"),
        "{}",
        b["filesystem"]["changes"]
    );
    let mount = |p: &str| {
        let p = home.join(p).display().to_string();
        ("filesystem.mounts".to_owned(), format!("{p} -> {p} (read)"))
    };
    assert_eq!(
        toolchain_grants(&s, &path, &[]),
        [mount(".cargo"), mount(".local/bin"), mount(".pyenv")]
    );

    // Off: the agent's tools are not found, and nothing is lent from HOME but its state.
    let out = s
        .cmd()
        .env("PATH", format!("{}:{path}", bin.path().display()))
        .args(["run", "--no-lend-path-toolchains", "--mount"])
        .arg(format!("{}:read", bin.path().display()))
        .args(["--", "claude"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains("tool ran") && !said.contains("fakepy 9.9"),
        "{said}"
    );
    assert_eq!(
        lent_from(&s, home),
        [(
            home.join(".claude").display().to_string(),
            "write".to_owned()
        )]
    );
}

/// A cargo home moved by `CARGO_HOME` is the one lent: the variable is passed in (so cargo
/// inside looks there), and its tokens, which the fixed secret list does not name, are
/// hidden by a mount of their own, recorded.
#[test]
fn a_cargo_home_moved_by_cargo_home_is_lent_with_its_variable_and_its_tokens_hidden() {
    let Some(s) = ready() else { return };
    let home = s.home.path();
    std::fs::create_dir(home.join(".claude")).unwrap();
    let cargo_home = home.join("toolchains/cargo");
    let path = toolchains(home, &cargo_home);
    std::fs::set_permissions(
        home.join("toolchains"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let bin = fake_agent(&cargo_home);
    let env = [("CARGO_HOME", cargo_home.as_path())];
    let said = agent_run(&s, bin.path(), &path, &env, &[]);
    assert!(
        said.contains(&format!(
            "fake-cargo ran test home={}",
            cargo_home.display()
        )),
        "{said}"
    );
    assert_eq!(said.matches("creds-denied").count(), 2, "{said}");
    assert!(!said.contains("cofferdam-canary-token"), "{said}");
    let grants = toolchain_grants(&s, &path, &env);
    assert!(
        grants.contains(&("env.allow".to_owned(), "CARGO_HOME".to_owned())),
        "{grants:?}"
    );
    for f in ["credentials", "credentials.toml"] {
        let p = cargo_home.join(f).display().to_string();
        assert!(
            grants.contains(&("filesystem.mounts".to_owned(), format!("{p} -> {p} (hide)"))),
            "{p}: {grants:?}"
        );
    }
    let lent = lent_from(&s, home);
    assert!(
        lent.contains(&(cargo_home.display().to_string(), "read".to_owned())),
        "{lent:?}"
    );
}
