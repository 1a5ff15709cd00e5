//! The user config and `cofferdam trust` (issue 19): the config is refused when another
//! user could change it; its grants are the baseline a workdir manifest is held to; a
//! trusted manifest is pinned by content in `$XDG_STATE_HOME`.

use crate::common::{Sandbox, json_of};
use std::os::unix::fs::PermissionsExt as _;

/// The user config's path in `s`'s home.
fn config(s: &Sandbox) -> std::path::PathBuf {
    s.home.path().join(".config/cofferdam/config.toml")
}

fn put_config(s: &Sandbox, text: &str) -> std::path::PathBuf {
    let p = config(s);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn scope_err(s: &Sandbox) -> (Option<i32>, String) {
    let out = s.cmd().args(["scope", "--json"]).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_user_config_sets_defaults_and_its_errors_name_file_line_and_key() {
    let s = Sandbox::new();
    put_config(
        &s,
        "[resources]\nmemory = \"3GiB\"\n[env]\nallow = [\"MY_TOKEN\"]\n",
    );
    let v = json_of(&s.cmd().args(["scope", "--json"]).output().unwrap());
    let mem = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "memory")
        .unwrap()
        .clone();
    assert_eq!(mem["requested"], (3u64 << 30) as f64, "{mem}");
    let p = put_config(&s, "\n[resources]\nmemroy = \"1GiB\"\n");
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    let want = format!("{}:3:", p.display());
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains("resources.memroy") && err.contains("fix:"),
        "{err}"
    );
    put_config(&s, "[filesystem]\nworkdir = \"/\"\n");
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(":2:1: filesystem.workdir"), "{err}");
}

#[test]
fn a_user_config_others_may_change_is_refused() {
    let s = Sandbox::new();
    let p = put_config(&s, "[network]\nmode = \"host\"\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o664)).unwrap();
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("writable by others") && err.contains("fix:"),
        "{err}"
    );
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o646)).unwrap();
    assert_eq!(scope_err(&s).0, Some(2));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(scope_err(&s).0, Some(0));
    // A symlink, even to a file of the user's own, is not followed.
    let real = s.home.path().join("real.toml");
    std::fs::rename(&p, &real).unwrap();
    std::os::unix::fs::symlink(&real, &p).unwrap();
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is a symlink"), "{err}");
    std::fs::remove_file(&p).unwrap();
    // Owned by someone else (root can make that so; others skip this part).
    // SAFETY: geteuid has no failure mode.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::copy(&real, &p).unwrap();
        std::os::unix::fs::chown(&p, Some(1002), None).unwrap();
        let (code, err) = scope_err(&s);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("owned by uid 1002"), "{err}");
    }
}

#[test]
fn the_config_is_found_through_xdg_config_home() {
    let s = Sandbox::new();
    let xdg = s.home.path().join("elsewhere");
    std::fs::create_dir_all(xdg.join("cofferdam")).unwrap();
    std::fs::write(xdg.join("cofferdam/config.toml"), "bogus = 1\n").unwrap();
    let out = s
        .cmd()
        .env("XDG_CONFIG_HOME", &xdg)
        .args(["scope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

#[test]
fn what_the_user_config_grants_a_manifest_may_ask_without_trust() {
    let s = Sandbox::new();
    s.write("cofferdam.toml", "[network]\nmode = \"host\"\n");
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("  network.mode: "), "{err}");
    put_config(&s, "[network]\nmode = \"host\"\n");
    assert_eq!(scope_err(&s).0, Some(0));
    // A flag is a baseline too.
    std::fs::remove_file(config(&s)).unwrap();
    let out = s
        .cmd()
        .args(["scope", "--network", "host"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn trust_pins_lists_untrusts_on_change_and_removes() {
    let s = Sandbox::new();
    let state = s.home.path().join("state");
    let cmd = || {
        let mut c = s.cmd();
        c.env("XDG_STATE_HOME", &state);
        c
    };
    s.write("cofferdam.toml", "[env]\nallow = [\"TOKEN\"]\n");
    let out = cmd().args(["--json", "trust"]).output().unwrap();
    let v = json_of(&out);
    assert_eq!(v["widening"][0]["key"], "env.allow", "{v}");
    assert!(state.join("cofferdam/trusted.toml").exists());
    assert!(cmd().args(["scope"]).output().unwrap().status.success());
    let list = json_of(&cmd().args(["--json", "trust", "--list"]).output().unwrap());
    assert_eq!(list[0]["state"], "unchanged", "{list}");
    s.write("cofferdam.toml", "[env]\nallow = [\"TOKEN\", \"OTHER\"]\n");
    let list = json_of(&cmd().args(["--json", "trust", "--list"]).output().unwrap());
    assert_eq!(list[0]["state"], "changed (untrusted)", "{list}");
    let out = cmd().args(["scope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("changed since you trusted it"));
    let out = cmd().args(["trust", "--remove"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no longer trusted"),
        "{out:?}"
    );
    let list = json_of(&cmd().args(["--json", "trust", "--list"]).output().unwrap());
    assert_eq!(list.as_array().unwrap().len(), 0);
    // A symlinked state directory is refused, not written through.
    std::fs::remove_dir_all(state.join("cofferdam")).unwrap();
    let elsewhere = s.home.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, state.join("cofferdam")).unwrap();
    let out = cmd().args(["trust"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!elsewhere.join("trusted.toml").exists());
}

/// `scope --json` with `~/.local/bin` (a known install root) on PATH: the
/// `lend_path_toolchains` row (value, source) and whether that directory is lent.
fn lending(s: &Sandbox, args: &[&str]) -> (String, String, bool) {
    let bin = s.home.path().join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = s
        .cmd()
        .env("PATH", path)
        .args(["scope", "--json"])
        .args(args)
        .output()
        .unwrap();
    let v = json_of(&out);
    let rows = v["grant_sources"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|g| g["grant"] == "lend_path_toolchains")
        .unwrap_or_else(|| panic!("no lend_path_toolchains row: {rows:?}"));
    let shown = bin.display().to_string();
    let lent = v["host_paths"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["source"] == shown && h["mode"] == "read");
    (
        row["value"].as_str().unwrap().to_owned(),
        row["source"].as_str().unwrap().to_owned(),
        lent,
    )
}

#[test]
fn lend_path_toolchains_in_the_user_config_and_its_profiles_under_the_flags() {
    let s = Sandbox::new();
    let v = |a: &str, b: &str, lent: bool| (a.to_owned(), b.to_owned(), lent);
    // cofferdam's default: off without a profile, on with one.
    assert_eq!(lending(&s, &[]), v("false", "default", false));
    assert_eq!(
        lending(&s, &["--agent", "claude"]),
        v("true", "profile", true)
    );
    // The config over the default, for any command, and for a profile.
    put_config(&s, "lend_path_toolchains = true\n");
    assert_eq!(lending(&s, &[]), v("true", "user_config", true));
    put_config(&s, "lend_path_toolchains = false\n");
    assert_eq!(
        lending(&s, &["--agent", "claude"]),
        v("false", "user_config", false)
    );
    // The flags over the config.
    assert_eq!(
        lending(&s, &["--agent", "claude", "--lend-path-toolchains"]),
        v("true", "flag", true)
    );
    put_config(&s, "lend_path_toolchains = true\n");
    assert_eq!(
        lending(&s, &["--no-lend-path-toolchains"]),
        v("false", "flag", false)
    );
    // A user profile's key over the top-level one, under the flags.
    put_config(
        &s,
        "lend_path_toolchains = true\n[profiles.mine]\nprograms = [\"mine\"]\n\
         lend_path_toolchains = false\n",
    );
    assert_eq!(
        lending(&s, &["--agent", "mine"]),
        v("false (profiles.mine)", "user_config", false)
    );
    assert_eq!(
        lending(&s, &["--agent", "mine", "--lend-path-toolchains"]),
        v("true", "flag", true)
    );
    assert_eq!(
        lending(&s, &["--agent", "claude"]),
        v("true", "user_config", true)
    );
    // The text report names the source.
    let out = s.cmd().args(["scope"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("granted by      lend_path_toolchains true: user config"),
        "{text}"
    );

    // Errors name the file, line, key and fix, as the other keys' do.
    let p = put_config(&s, "\nlend_path_toolchains = \"yes\"\n");
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:2:", p.display()))
            && err.contains("lend_path_toolchains")
            && err.contains("true or false")
            && err.contains("fix:"),
        "{err}"
    );
    put_config(
        &s,
        "[profiles.mine]\nprograms = [\"mine\"]\nlend_path_toolchains = 1\n",
    );
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(":3:")
            && err.contains("profiles.mine.lend_path_toolchains")
            && err.contains("fix:"),
        "{err}"
    );
    // A workdir manifest cannot say: the caller's PATH is the user's.
    std::fs::remove_file(config(&s)).unwrap();
    s.write(
        "cofferdam.toml",
        "containment = \"sealed\"\n\nlend_path_toolchains = false\n[network]\nmode = \"none\"\n",
    );
    let (code, err) = scope_err(&s);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("cofferdam.toml:3:1: lend_path_toolchains: a workdir manifest cannot")
            && err.contains("fix: remove the key"),
        "{err}"
    );
}
