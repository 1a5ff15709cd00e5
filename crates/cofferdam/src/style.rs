//! Terminal styling: colour only on a terminal, never with NO_COLOR set (unless forced).

use crate::cli::ColorChoice;
use std::io::IsTerminal;

/// Whether to colour, decided once.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    /// Decide from the flag, NO_COLOR and whether stdout is a terminal.
    pub fn new(choice: ColorChoice) -> Self {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                    && std::io::stdout().is_terminal()
            }
        };
        Style { color }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    /// A heading.
    pub fn heading(&self, s: &str) -> String {
        self.paint("1", s)
    }
    /// Something good.
    pub fn good(&self, s: &str) -> String {
        self.paint("32", s)
    }
    /// Something to look at.
    pub fn warn(&self, s: &str) -> String {
        self.paint("33", s)
    }
    /// Something missing or refused.
    pub fn bad(&self, s: &str) -> String {
        self.paint("31", s)
    }
    /// Secondary text.
    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
}
