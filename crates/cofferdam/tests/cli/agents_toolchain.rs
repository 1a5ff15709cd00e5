//! Toolchain lending (issue 19): a program installed under HOME (a `~/.local/bin` link into a
//! venv whose interpreter is a link into `~/.pyenv`) runs inside with no flags; exactly the
//! install trees it needs are lent read-only and recorded, a sibling install is not; and a
//! script whose `#!` interpreter is not visible ends in exit 127 naming that interpreter and
//! the mount that lends it. What a rustup proxy and a `pip --user` script run from besides
//! their own tree is lent too.

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

/// `cofferdam run -- ARGV`, which must exit 0; what it printed, both streams.
fn run_ok(s: &Sandbox, argv: &[&std::ffi::OsStr]) -> String {
    let out = s.cmd().args(["run", "--"]).args(argv).output().unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    said
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
    assert!(
        stderr.contains(&format!(
            "the host's PATH has it at {}/cofferdam-test-tool",
            bin.display()
        )) && stderr.contains(&format!("--mount {}:read", bin.display())),
        "{stderr}"
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
