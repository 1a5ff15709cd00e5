//! Sizes and durations as people write them in `cofferdam.toml` and on the command line
//! (`4GiB`, `512M`, `30m`, `1h30m`). Pure parsing, no I/O.
//!
//! Size units are binary (`K`/`KiB` = 1024) or decimal (`KB` = 1000) as written; a bare
//! number is bytes. Durations use humantime's grammar (`90s`, `30m`, `1h 30m`); a bare
//! number is refused because seconds-or-milliseconds is a guess.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// A size in bytes, written with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ByteSize(pub u64);

/// A wall-clock or CPU duration, written with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl Span {
    /// Whole milliseconds, saturating.
    pub fn as_millis_u64(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A size or duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// Not a number followed by a known size unit.
    #[error("invalid size `{0}`: write a number with a unit, like 512MiB, 4GiB or 100M")]
    Size(String),
    /// A size past 2^64 bytes.
    #[error("size `{0}` is too large")]
    SizeOverflow(String),
    /// Not a humantime duration.
    #[error("invalid duration `{0}`: write a number with a unit, like 90s, 30m or 1h30m")]
    Duration(String),
    /// Zero is never a useful limit.
    #[error("`{0}` is zero: leave the key out for no limit")]
    Zero(String),
}

/// Parse a size: `4GiB`, `4G`, `4 GiB`, `1.5GiB`, `100MB`, `4096`.
pub fn parse_size(text: &str) -> Result<ByteSize, UnitError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return Err(UnitError::Size(text.to_owned()));
    }
    let multiplier: u64 = match unit {
        "" | "B" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(UnitError::Size(text.to_owned())),
    };
    let bytes = match num.split_once('.') {
        None => num
            .parse::<u64>()
            .map_err(|_| UnitError::SizeOverflow(text.to_owned()))?
            .checked_mul(multiplier)
            .ok_or_else(|| UnitError::SizeOverflow(text.to_owned()))?,
        Some(_) => {
            let value: f64 = num.parse().map_err(|_| UnitError::Size(text.to_owned()))?;
            let bytes = value * multiplier as f64;
            if !bytes.is_finite() || bytes >= u64::MAX as f64 {
                return Err(UnitError::SizeOverflow(text.to_owned()));
            }
            bytes.round() as u64
        }
    };
    if bytes == 0 {
        return Err(UnitError::Zero(text.to_owned()));
    }
    Ok(ByteSize(bytes))
}

/// Parse a duration: `90s`, `30m`, `1h30m`, `2h 15m`, `500ms`.
pub fn parse_duration(text: &str) -> Result<Span, UnitError> {
    let t = text.trim();
    if t.chars().all(|c| c.is_ascii_digit()) {
        return Err(UnitError::Duration(text.to_owned()));
    }
    let d = humantime::parse_duration(t).map_err(|_| UnitError::Duration(text.to_owned()))?;
    if d.is_zero() {
        return Err(UnitError::Zero(text.to_owned()));
    }
    Ok(Span(d))
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size like \"4GiB\" or a whole number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                match u64::try_from(v) {
                    Ok(0) | Err(_) => Err(E::custom(format!(
                        "size {v} must be a positive number of bytes"
                    ))),
                    Ok(b) => Ok(ByteSize(b)),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Span;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration like \"30m\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Span, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("4GiB"), Ok(ByteSize(4 << 30)));
        assert_eq!(parse_size("4G"), Ok(ByteSize(4 << 30)));
        assert_eq!(parse_size(" 512 MiB "), Ok(ByteSize(512 << 20)));
        assert_eq!(parse_size("100MB"), Ok(ByteSize(100_000_000)));
        assert_eq!(parse_size("1.5KiB"), Ok(ByteSize(1536)));
        assert_eq!(parse_size("4096"), Ok(ByteSize(4096)));
    }

    #[test]
    fn bad_sizes_are_refused_with_the_text() {
        for bad in [
            "lots",
            "",
            "GiB",
            "4 parsecs",
            "1..2G",
            ".5G",
            "-1G",
            "4GiBs",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("`{bad}`")), "{bad}: {e}");
        }
        assert!(matches!(parse_size("0"), Err(UnitError::Zero(_))));
        assert!(matches!(
            parse_size("99999999999999999999T"),
            Err(UnitError::SizeOverflow(_))
        ));
        assert!(matches!(
            parse_size("20000000T"),
            Err(UnitError::SizeOverflow(_))
        ));
    }

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("30m").unwrap().0, Duration::from_secs(1800));
        assert_eq!(
            parse_duration("1h30m").unwrap().0,
            Duration::from_secs(5400)
        );
        assert_eq!(parse_duration("90s").unwrap().as_millis_u64(), 90_000);
        for bad in ["30", "soon", "", "0s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
