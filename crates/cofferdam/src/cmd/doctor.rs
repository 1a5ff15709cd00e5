//! `cofferdam doctor`: the host facts as a checklist with a fix for each missing mechanism.

use crate::context;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_policy::{CheckStatus, DoctorReport, doctor};
use std::fmt::Write as _;
use std::path::Path;

/// Probe (or read) the facts and print the checklist.
pub fn run(host_facts: Option<&Path>, json: bool, style: Style) -> Result<u8, Failure> {
    let facts = context::host_facts(host_facts)?;
    let report = doctor(&facts);
    if json {
        crate::print_json(&report)?;
    } else {
        crate::write_stdout(render(&report, style).as_bytes())?;
    }
    Ok(OK)
}

fn render(r: &DoctorReport, s: Style) -> String {
    let mut o = String::new();
    for c in &r.checks {
        let mark = match c.status {
            CheckStatus::Ok => s.good("ok     "),
            CheckStatus::Warn => s.warn("warn   "),
            CheckStatus::Missing => s.bad("missing"),
            CheckStatus::Info => s.dim("info   "),
        };
        let _ = writeln!(o, "{mark} {:<38} {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            let _ = writeln!(o, "        {:<38} {}", "", s.dim(&format!("fix: {fix}")));
        }
    }
    let _ = writeln!(
        o,
        "\nThis host backs {} ({}).",
        s.heading(r.host_containment.wire_name()),
        r.enforcement_tier
    );
    o
}
