//! `cofferdam agents`, which lists every profile with its grants on this host. Choosing and
//! adding a run's profile is `crate::profile_apply`; the decisions are
//! `cofferdam_policy::profiles`; this only reads the disk and prints.

use crate::exit::{Failure, OK};
use crate::profile_apply::expand;
use cofferdam_policy::profiles;
use cofferdam_record::shown::escape;

/// One profile as `agents --json` prints it.
#[derive(serde::Serialize)]
struct Listed {
    name: String,
    programs: Vec<String>,
    install_paths: Vec<String>,
    env_pass: Vec<String>,
    /// Names only: values are not shown.
    env_set: Vec<String>,
    network_mode: &'static str,
    network_allow: Vec<String>,
    network_allow_from: String,
    paths: Vec<ListedPath>,
    /// Arguments added after the program (unless the command chooses itself), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    args_added: Option<ArgsAdded>,
}

#[derive(serde::Serialize)]
struct ArgsAdded {
    args: Vec<String>,
    unless_the_command_has: Vec<String>,
    why: String,
}

#[derive(serde::Serialize)]
struct ListedPath {
    written: String,
    path: String,
    mode: &'static str,
    persists_on_host: bool,
    present: bool,
}

/// `cofferdam agents`: every profile and what it would grant on this host.
pub fn list(json: bool) -> Result<u8, Failure> {
    let home = crate::context::env()?.places.home;
    let user = crate::config_files::load_user_config(&home)?;
    let listed: Vec<Listed> = profiles::with_user(user.as_ref().map(|u| &u.manifest))
        .iter()
        .map(|p| {
            let x = expand(p, &home);
            Listed {
                name: p.name.clone(),
                programs: p.programs.clone(),
                install_paths: p.install_paths.clone(),
                env_pass: x.env_pass.clone(),
                env_set: x.env_set.iter().map(|(k, _)| k.clone()).collect(),
                network_mode: "allow",
                network_allow: x.allow.clone(),
                network_allow_from: x.allow_from.clone(),
                paths: x
                    .paths
                    .iter()
                    .map(|pp| ListedPath {
                        written: pp.written.clone(),
                        path: pp.path.display().to_string(),
                        mode: pp.mode.wire_name(),
                        persists_on_host: pp.mode == cofferdam_policy::MountMode::Write,
                        present: pp.present,
                    })
                    .collect(),
                args_added: x.arg_patch.as_ref().map(|a| ArgsAdded {
                    args: a.insert.clone(),
                    unless_the_command_has: a.unless.clone(),
                    why: a.why.clone(),
                }),
            }
        })
        .collect();
    if json {
        crate::print_json(&serde_json::json!({ "profiles": listed }))?;
        return Ok(OK);
    }
    let mut o = String::new();
    for l in &listed {
        o.push_str(&format!(
            "{} (programs: {}; or --agent {})\n",
            l.name,
            l.programs.join(", "),
            l.name
        ));
        o.push_str(&format!("  env passed:  {}\n", l.env_pass.join(", ")));
        if !l.env_set.is_empty() {
            o.push_str(&format!("  env set:     {}\n", l.env_set.join(", ")));
        }
        o.push_str(&format!(
            "  network:     allow (unless you choose a mode) to {} (from {})\n",
            escape(&l.network_allow.join(", ")),
            l.network_allow_from
        ));
        if let Some(a) = &l.args_added {
            o.push_str(&format!(
                "  args added:  {} after the program, unless the command has {}: {}\n",
                escape(&a.args.join(" ")),
                a.unless_the_command_has.join(", "),
                a.why
            ));
        }
        for pp in &l.paths {
            let how = if pp.persists_on_host {
                "write, on the host, outside review"
            } else {
                "read-only"
            };
            let state = if pp.present {
                "present"
            } else {
                "absent, skipped"
            };
            o.push_str(&format!(
                "  path:        {} ({how}; {state})\n",
                escape(&pp.path)
            ));
        }
    }
    o.push_str("--no-agent-defaults turns profiles off; --agent NAME picks one.\n");
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}
