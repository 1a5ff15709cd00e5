//! Long human output through the user's pager, as git does: `$PAGER` (default
//! `less -FRX`) when stdout is a terminal and the text is taller than it; never when
//! piped, for JSON, with `--no-pager`, or when `PAGER` is empty or `cat`.
//!
//! Owns the decision ([`pager_for`], pure) and the effect ([`show`]: run the pager through
//! `sh -c`, feed it, wait). It may not decide what is printed.

use std::ffi::OsString;
use std::io::{IsTerminal as _, Write as _};

use crate::exit::Failure;

/// The pager when `PAGER` is unset.
const DEFAULT: &str = "less -FRX";

/// The pager command to run, or `None` to print directly. `pager_env`: `$PAGER`; `rows`:
/// the terminal's height, `None` when stdout is not a terminal; `lines`: the text's.
pub fn pager_for(
    pager_env: Option<OsString>,
    rows: Option<u16>,
    lines: usize,
    no_pager: bool,
) -> Option<OsString> {
    let rows = usize::from(rows.filter(|r| *r > 0)?);
    // The shell's prompt takes a line: text of `rows` lines already scrolls.
    if no_pager || lines < rows {
        return None;
    }
    let pager = pager_env.unwrap_or_else(|| DEFAULT.into());
    let trimmed = pager.to_string_lossy().trim().to_owned();
    (!trimmed.is_empty() && trimmed != "cat").then_some(pager)
}

/// The height of the terminal on stdout, `None` when stdout is not a terminal.
fn stdout_rows() -> Option<u16> {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return None;
    }
    rustix::termios::tcgetwinsize(&out).ok().map(|w| w.ws_row)
}

/// Print `text` on stdout, through the pager when [`pager_for`] says so. A pager that
/// cannot be started is reported on stderr and the text printed directly.
pub fn show(text: &[u8], no_pager: bool) -> Result<(), Failure> {
    let lines = text.iter().filter(|b| **b == b'\n').count();
    let Some(pager) = pager_for(std::env::var_os("PAGER"), stdout_rows(), lines, no_pager) else {
        return crate::write_stdout(text);
    };
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&pager)
        .stdin(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "cofferdam: cannot start the pager {:?}: {e}; printing directly (set PAGER, \
                 or pass --no-pager)",
                pager.to_string_lossy()
            );
            return crate::write_stdout(text);
        }
    };
    // Ctrl-C in the pager is the pager's: cofferdam waits for it, as git does.
    let _ignore = crate::signals::IgnoreTerminalSignals::new();
    if let Some(mut stdin) = child.stdin.take() {
        // The pager quitting early closes the pipe: not an error.
        match stdin.write_all(text) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(Failure::setup(format!("cannot write to the pager: {e}")));
            }
            _ => {}
        }
    }
    child
        .wait()
        .map(|_| ())
        .map_err(|e| Failure::setup(format!("cannot wait for the pager: {e}")))
}

#[cfg(test)]
mod tests {
    use super::pager_for;

    #[test]
    fn pages_only_tall_output_on_a_terminal_with_a_real_pager() {
        let tall = 100;
        assert_eq!(
            pager_for(None, Some(24), tall, false),
            Some("less -FRX".into())
        );
        assert_eq!(
            pager_for(Some("most".into()), Some(24), tall, false),
            Some("most".into())
        );
        assert_eq!(pager_for(Some("most".into()), Some(24), 23, false), None);
        assert_eq!(
            pager_for(Some("most".into()), Some(24), 24, false),
            Some("most".into())
        );
        // Not a terminal, --no-pager, PAGER empty or cat: printed directly.
        assert_eq!(pager_for(None, None, tall, false), None);
        assert_eq!(pager_for(None, Some(0), tall, false), None);
        assert_eq!(pager_for(None, Some(24), tall, true), None);
        assert_eq!(pager_for(Some("".into()), Some(24), tall, false), None);
        assert_eq!(pager_for(Some(" cat ".into()), Some(24), tall, false), None);
    }
}
