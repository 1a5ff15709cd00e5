//! The agent's notes in the review (issue 21): what cooperating clients said with
//! `cofferdam ctl note`, from the bundle's `agentctl.requests`. Owns the review's
//! `agent_notes` field (JSON, for `status --review --json` and the web page) and the text
//! section; it may not read anything but the bundle it is given. Notes are the agent's own
//! words, never evidence, and are shown escaped.

use crate::style::Style;
use cofferdam_record::bundle::RunBundle;
use cofferdam_record::shown::escape;
use serde::Serialize;
use std::fmt::Write as _;

/// One note, as the review JSON's `agent_notes[]` has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentNote {
    /// The client that sent it (its self-reported name).
    pub client: String,
    /// The note's text, as sent.
    pub text: String,
    /// When, Unix milliseconds (0 when the bundle does not say).
    pub at_unix_ms: u64,
}

/// The notes of `b`, in the order they were sent.
pub fn agent_notes(b: &RunBundle) -> Vec<AgentNote> {
    b.agentctl
        .requests
        .iter()
        .filter(|r| r.request == "note")
        .map(|r| AgentNote {
            client: r.client.clone(),
            text: r.argument.clone().unwrap_or_default(),
            at_unix_ms: r.at_unix_ms.unwrap_or(0),
        })
        .collect()
}

/// The review's "Agent notes" section, when there are notes.
pub fn render_review(o: &mut String, b: &RunBundle, s: Style) {
    let notes = agent_notes(b);
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{} {}",
        s.heading(&format!("Agent notes ({})", notes.len())),
        s.dim("the agent's own words, not evidence")
    );
    for n in notes {
        let _ = writeln!(o, "  {}  {}", s.dim(&escape(&n.client)), escape(&n.text));
    }
}
