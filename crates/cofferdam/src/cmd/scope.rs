//! `cofferdam scope` and `cofferdam run --explain-scope`: build the scope report and render
//! it. Exit 0 whether or not the floor is met: it is a report.

use crate::cli::PolicyArgs;
use crate::context;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_policy::{ScopeInputs, build_scope_report};
use cofferdam_record::ContainmentClass;
use cofferdam_record::scope::ScopeReport;
use cofferdam_record::shown::escape;
use std::fmt::Write as _;
use std::path::Path;

/// Build the report for `args` on the probed (or given) host, capped at `tier` like
/// `run --tier`, and print it.
pub fn run(
    args: &PolicyArgs,
    host_facts: Option<&Path>,
    tier: Option<ContainmentClass>,
    json: bool,
    style: Style,
) -> Result<u8, Failure> {
    let env = context::env()?;
    let mut policy = context::policy(args, &env, &[])?;
    super::preflight::skip_missing_optional(&mut policy);
    let facts = context::host_facts(host_facts)?;
    let report = build_scope_report(&ScopeInputs {
        policy: &policy,
        facts: &facts,
        storage_root: &env.storage_root,
        home: &env.places.home,
        ssh_host_keys: &cofferdam_sandbox::probe::ssh::host_keys(),
        cap: tier,
    });
    if json {
        crate::print_json(&report)?;
    } else {
        crate::write_stdout(render(&report, style).as_bytes())?;
    }
    Ok(OK)
}

/// A requested limit in the unit its key is written in.
fn quantity(name: &str, v: f64) -> String {
    match name {
        "memory" | "max_file_size" | "tmp_size" | "stage_size" => bytes(v),
        "io_bps" => format!("{}/s", bytes(v)),
        "timeout" | "cpu_time" => {
            humantime::format_duration(std::time::Duration::from_millis(v as u64)).to_string()
        }
        _ => format!("{v}"),
    }
}

/// Bytes with a binary unit, e.g. `1.5 GiB`.
fn bytes(v: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut i = 0;
    while x >= 1024.0 && i < units.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    if x.fract() == 0.0 {
        format!("{x} {}", units[i])
    } else {
        format!("{x:.1} {}", units[i])
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        // Paths and names from the manifest, which a workload may have written.
        items
            .iter()
            .map(|i| escape(i))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The human rendering: Containment, Not protected here, Effective grants, Resource plane.
pub fn render(r: &ScopeReport, s: Style) -> String {
    let mut o = String::new();
    let row = |o: &mut String, k: &str, v: &str| {
        let _ = writeln!(o, "  {:<16}{v}", k);
    };
    let _ = writeln!(o, "{}", s.heading("Containment"));
    row(&mut o, "declared", r.declared_containment.wire_name());
    let met = if r.floor_met {
        s.good("floor met")
    } else {
        s.bad("FLOOR NOT MET: cofferdam run would refuse (exit 125)")
    };
    row(
        &mut o,
        "achieved",
        &format!("{}  ({met})", r.achieved_containment),
    );
    row(&mut o, "tier", r.enforcement_tier.wire_name());
    row(
        &mut o,
        "landlock",
        &r.landlock_abi
            .map_or_else(|| "not installed".to_owned(), |a| format!("ABI {a}")),
    );
    row(
        &mut o,
        "user ns",
        r.userns_grant.map_or("unknown", |g| g.wire_name()),
    );
    if let Some(reason) = &r.shortfall_reason {
        let _ = writeln!(o, "  {}", s.bad(&format!("shortfall: {reason}")));
    }
    for route in &r.routes {
        let state = if route.active { "" } else { " (inactive)" };
        row(
            &mut o,
            &format!("route {}", route.route),
            &format!("{}{state}", route.mechanism),
        );
    }

    let _ = writeln!(o, "\n{}", s.heading("Not protected here"));
    for line in &r.filesystem_boundary.not_protected {
        let _ = writeln!(o, "  {} {line}", s.warn("-"));
    }

    let _ = writeln!(o, "\n{}", s.heading("Effective grants"));
    row(
        &mut o,
        "workdir",
        &format!(
            "{} (writes staged; exec {})",
            escape(r.filesystem_scope.as_deref().unwrap_or("?")),
            if r.workdir_exec { "allowed" } else { "refused" }
        ),
    );
    row(&mut o, "read-only", &list(&r.read_only_paths));
    // A skipped mount (its source absent here) lends nothing: listed as skipped, not a mount.
    for p in &r.host_paths {
        let skipped = p.effect.starts_with("skipped");
        row(
            &mut o,
            &format!("{} {}", if skipped { "skipped" } else { "mount" }, p.mode),
            &format!(
                "{} -> {}: {}",
                escape(&p.source),
                escape(&p.target),
                p.effect
            ),
        );
    }
    let advisory = r.enforcement_tier == cofferdam_record::EnforcementTier::None;
    let hidden = if advisory {
        "none: nothing is hidden on the advisory tier".to_owned()
    } else {
        format!("{} paths (secrets and the job store)", r.hidden_paths.len())
    };
    row(&mut o, "hidden", &hidden);
    let net = match r.network_mode.as_str() {
        _ if advisory => "host: the host's network, unfiltered (nothing is enforced on the \
                          advisory tier)"
            .to_owned(),
        "none" => "none: loopback only".to_owned(),
        "allow" => format!("allow: {}", list(&r.network_allow)),
        other => format!("{other}: the host's network, unfiltered"),
    };
    row(&mut o, "network", &net);
    for p in &r.network_publish {
        row(
            &mut o,
            "publish",
            &format!("{} -> port {}: {}", p.host, p.port, p.effect),
        );
    }
    row(
        &mut o,
        "unix sockets",
        if r.unix_sockets {
            "host pathname sockets in visible paths are reachable"
        } else {
            "confined"
        },
    );
    row(&mut o, "env", &list(&r.env_projected));
    row(&mut o, "env injected", &list(&r.env_injected));
    row(&mut o, "exec allow", &list(&r.shell_allow));
    row(&mut o, "trust store", &list(&r.trust_store));
    // Where each grant came from (flag, user config, manifest); defaults are not listed, nor
    // a mount whose source is absent here (it is listed as skipped above).
    for g in r
        .grant_sources
        .iter()
        .filter(|g| g.source != cofferdam_record::scope::GrantSource::Default && !g.absent)
    {
        row(
            &mut o,
            "granted by",
            &format!("{} {}: {}", g.grant, escape(&g.value), g.shown_source()),
        );
    }

    let _ = writeln!(o, "\n{}", s.heading("Resource plane"));
    let cg = &r.cgroup_scope;
    let mut cgline = cg.status.clone();
    if let Some(p) = &cg.parent {
        let _ = write!(cgline, " under {p}");
    }
    if !cg.controllers.is_empty() {
        let _ = write!(cgline, " [{}]", cg.controllers.join(" "));
    }
    row(&mut o, "cgroup", &cgline);
    if let Some(reason) = &cg.reason {
        let _ = writeln!(o, "  {:<16}{}", "", s.dim(reason));
    }
    if r.resources.is_empty() {
        row(&mut o, "limits", "none requested");
    }
    for l in &r.resources {
        let how = match (&l.mechanism, &l.limitation) {
            (Some(m), None) => s.good(m),
            (Some(m), Some(q)) => format!("{} ({q})", s.warn(m)),
            (None, Some(q)) => s.bad(&format!("nothing: not enforced ({q})")),
            (None, None) => s.bad("nothing: not enforced"),
        };
        let default = if l.default {
            format!(
                " {}",
                s.dim(&format!(
                    "[cofferdam's default; --{} none removes it]",
                    l.name
                ))
            )
        } else {
            String::new()
        };
        row(
            &mut o,
            &l.name,
            &format!("{} via {how}{default}", quantity(&l.name, l.requested)),
        );
    }
    row(&mut o, "io.max", &r.io_max.status);
    let t = &r.temp_dir;
    row(
        &mut o,
        "temp",
        &format!(
            "{} ({}{})",
            t.path,
            t.backing,
            t.size_limit_bytes
                .map_or(String::new(), |b| format!(", at most {}", bytes(b as f64)))
        ),
    );
    row(&mut o, "processes", &r.process_view.proc);
    if let Some(u) = &r.unconfined {
        row(&mut o, "unconfined", &s.bad(&u.note));
    }
    o
}
