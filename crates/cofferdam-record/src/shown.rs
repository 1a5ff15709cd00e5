//! How a workload-controlled string is shown to a person: the one escaping function every
//! human renderer uses (review, jobs, diff, apply, drop, error messages), so nothing the
//! workload wrote (a file name, an argument, a network name, a line of a file, a warning
//! quoting one) can drive the reviewer's terminal.
//!
//! Owns [`escape`], [`escape_text`] and [`escape_bytes`]. It may not know where the string
//! came from; JSON output needs none of it (serde escapes control characters there).
//!
//! # What is escaped, and how
//!
//! Every C0 control (U+0000–U+001F: ESC, BEL, CR, backspace, …), DEL (U+007F) and C1
//! control (U+0080–U+009F, CSI among them), and the characters that reorder displayed
//! text (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), are shown as text:
//! `\n`, `\t`, `\r` for those three, `\u{<hex>}` for the others (ESC is `\u{1b}`). An
//! escape *sequence* is thereby harmless as a whole: its introducer is shown, the rest is
//! plain text. Bytes that are not UTF-8 are shown as `\x<hex>` ([`escape_bytes`]).
//! Newline and tab are kept only where a renderer shows several lines ([`escape_text`]).
//! A backslash is left as it is, so the form is for reading, not for decoding: whether
//! it was lossless is what [`escape_bytes`] returns.

/// Which layout characters a renderer keeps raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// `\n`: the string is shown on several lines.
    pub newline: bool,
    /// `\t`.
    pub tab: bool,
}

impl Keep {
    /// One line: nothing kept.
    pub const LINE: Keep = Keep {
        newline: false,
        tab: false,
    };
    /// One line of a file's text (a diff line): tab kept.
    pub const TAB: Keep = Keep {
        newline: false,
        tab: true,
    };
    /// Several lines: newline and tab kept.
    pub const TEXT: Keep = Keep {
        newline: true,
        tab: true,
    };
}

/// Characters that reorder how text is displayed (a name could otherwise show as another).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Append `c` to `out` as shown; `false` when it had to be escaped.
fn push(out: &mut String, c: char, keep: Keep) -> bool {
    let escaped = match c {
        '\n' if keep.newline => None,
        '\t' if keep.tab => None,
        '\n' => Some("\\n".to_owned()),
        '\t' => Some("\\t".to_owned()),
        '\r' => Some("\\r".to_owned()),
        c if c.is_control() || is_bidi_control(c) => Some(format!("\\u{{{:x}}}", u32::from(c))),
        _ => None,
    };
    match escaped {
        None => {
            out.push(c);
            true
        }
        Some(e) => {
            out.push_str(&e);
            false
        }
    }
}

/// `s` as shown on one line: see the module docs.
pub fn escape(s: &str) -> String {
    escape_with(s, Keep::LINE)
}

/// `s` as shown over several lines (newline and tab kept).
pub fn escape_text(s: &str) -> String {
    escape_with(s, Keep::TEXT)
}

/// `s` as shown, keeping what `keep` says.
pub fn escape_with(s: &str, keep: Keep) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push(&mut out, c, keep);
    }
    out
}

/// `bytes` as shown (not UTF-8: `\x<hex>` per byte), and whether that was lossless
/// (nothing escaped).
pub fn escape_bytes(bytes: &[u8], keep: Keep) -> (String, bool) {
    let mut out = String::with_capacity(bytes.len());
    let mut lossless = true;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            lossless &= push(&mut out, c, keep);
        }
        for b in chunk.invalid() {
            lossless = false;
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    (out, lossless)
}

/// Whether `s` holds nothing [`escape`] would change with `keep`: what a test of a renderer
/// asserts of its output.
pub fn is_inert(s: &str, keep: Keep) -> bool {
    s.chars().all(|c| {
        !(c.is_control() || is_bidi_control(c))
            || (c == '\n' && keep.newline)
            || (c == '\t' && keep.tab)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every C0 and C1 control, DEL, the bidi controls, and sequences built of them.
    fn hostile() -> String {
        let mut s: String = (0u32..0x20)
            .chain(0x7f..0xa0)
            .filter_map(char::from_u32)
            .collect();
        s.push_str("\u{61c}\u{200e}\u{200f}\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}");
        s.push_str("\u{2066}\u{2067}\u{2068}\u{2069}");
        s.push_str("\x1b[2J\x1b[1A\x1b]0;title\x07\x1b]52;c;cHduZWQ=\x1b\\\u{9b}31m\x1bP+q\x1b\\");
        s
    }

    #[test]
    fn nothing_a_terminal_interprets_survives() {
        let h = hostile();
        for keep in [Keep::LINE, Keep::TAB, Keep::TEXT] {
            let shown = escape_with(&h, keep);
            assert!(is_inert(&shown, keep), "{keep:?}: {shown:?}");
        }
        assert!(!is_inert(&h, Keep::TEXT));
        assert_eq!(escape("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(escape_text("a\nb\tc\rd"), "a\nb\tc\\rd");
        assert_eq!(escape_with("a\tb\nc", Keep::TAB), "a\tb\\nc");
        assert_eq!(escape("\u{9b}\u{7f}\u{202e}x"), "\\u{9b}\\u{7f}\\u{202e}x");
        assert_eq!(escape("café ✓ -rf"), "café ✓ -rf");
    }

    #[test]
    fn bytes_not_utf8_are_shown_as_hex_and_reported_lossy() {
        assert_eq!(
            escape_bytes(b"src/main.rs", Keep::LINE),
            ("src/main.rs".into(), true)
        );
        assert_eq!(
            escape_bytes(b"bad\xff\xfe", Keep::LINE),
            ("bad\\xff\\xfe".into(), false)
        );
        assert_eq!(escape_bytes(b"a\nb", Keep::LINE), ("a\\nb".into(), false));
        assert_eq!(escape_bytes(b"a\nb", Keep::TEXT), ("a\nb".into(), true));
        assert_eq!(escape_bytes(b"\x1b", Keep::LINE), ("\\u{1b}".into(), false));
    }
}
