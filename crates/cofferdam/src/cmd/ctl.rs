//! `cofferdam ctl note|checkpoint|status`: the agentctl client, run inside a job (issue 21,
//! `docs/agentctl.md`). Finds the run's control socket through `COFFERDAM_CTL`, sends one
//! request line and prints the one reply line. Owns only the client's side of the
//! exchange; the protocol is `cofferdam_policy::agentctl`'s, the server
//! `lifecycle::ctl`'s. It may not read or write any job: it knows only the socket.

use crate::cli::CtlCommand;
use crate::exit::{Failure, INVALID, NO_CTL, OK};
use cofferdam_policy::agentctl::{ENV, Reply, Request, RequestKind};
use std::io::{BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The longest reply read (a `status` reply carries the scope report).
const REPLY_MAX: u64 = 1 << 20;
/// How long the client waits for the supervisor.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The client name sent when `--client` is not given.
const DEFAULT_CLIENT: &str = "cofferdam-ctl";

/// `cofferdam ctl …`.
pub fn ctl(c: &CtlCommand, json: bool) -> Result<u8, Failure> {
    let (kind, argument, client) = match c {
        CtlCommand::Note { text, client } => (RequestKind::Note, Some(text.join(" ")), client),
        CtlCommand::Checkpoint { name, client } => (RequestKind::Checkpoint, name.clone(), client),
        CtlCommand::Status { client } => (RequestKind::Status, None, client),
    };
    let req = Request {
        request: kind,
        argument,
        client: Some(client.clone().unwrap_or_else(|| DEFAULT_CLIENT.to_owned())),
        version: Some(env!("CARGO_PKG_VERSION").to_owned()),
    };
    let reply = exchange(&req)?;
    if json {
        crate::print_json(&reply)?;
    } else if reply.ok {
        let mut out = String::new();
        if let Some(m) = &reply.message {
            out.push_str(&crate::shown_text(m));
            out.push('\n');
        }
        if let Some(status) = &reply.status {
            let text = serde_json::to_string_pretty(status).unwrap_or_default();
            out.push_str(&text);
            out.push('\n');
        }
        crate::write_stdout(out.as_bytes())?;
    }
    if reply.ok {
        Ok(OK)
    } else {
        Err(Failure {
            code: INVALID,
            message: reply
                .error
                .unwrap_or_else(|| "the run's supervisor refused the request".into()),
        })
    }
}

fn no_ctl(message: String) -> Failure {
    Failure {
        code: NO_CTL,
        message,
    }
}

/// Send `req` on the run's socket and read the reply.
fn exchange(req: &Request) -> Result<Reply, Failure> {
    let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) else {
        return Err(no_ctl(format!(
            "not inside a cofferdam run: {ENV} is not set (cofferdam sets it inside every \
             run; `cofferdam ctl` talks to the run it runs in)"
        )));
    };
    let shown = std::path::Path::new(&path).display().to_string();
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        no_ctl(format!(
            "cannot reach the run's control socket {shown} ({ENV}): {e}; the run may have \
             ended, or this is not a cofferdam run"
        ))
    })?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let mut line = serde_json::to_vec(req)
        .map_err(|e| Failure::setup(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    let lost = |e: std::io::Error| no_ctl(format!("the control socket {shown} failed: {e}"));
    // A refusal (a line too long) may close the socket before the whole line is written:
    // the reply, when there is one, says why, so it is read either way.
    let written = stream.write_all(&line);
    let mut text = String::new();
    let read = std::io::BufReader::new(stream.take(REPLY_MAX)).read_line(&mut text);
    match serde_json::from_str(&text) {
        Ok(reply) => Ok(reply),
        Err(e) => {
            written.map_err(lost)?;
            read.map_err(lost)?;
            Err(no_ctl(format!(
                "the control socket {shown} gave no reply cofferdam understands ({e})"
            )))
        }
    }
}
