//! The one parser of `/proc/self/mountinfo` (proc(5)): each line as a [`MountLine`], its path
//! fields unescaped. The host probe's cgroup facts (`probe::cgroup`) and the composed root's
//! read-back (`mounts`) both read mountinfo through it.
//!
//! Owns the line format. Pure: it takes the file's text and may not read it, nor decide what
//! a mount means.

use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`: `id parent maj:min root mount_point mount_options
/// [optional…] - fstype source super_options`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    /// The path inside its filesystem shown at the mount point (field 4; for a cgroup mount,
    /// the cgroup).
    pub root: String,
    /// Where it is mounted.
    pub point: PathBuf,
    /// The per-mount options (`ro`/`rw`, `nosuid`, …).
    pub options: String,
    /// The filesystem type.
    pub fstype: String,
    /// The superblock's options (`size=` of a tmpfs, a v1 cgroup's controllers).
    pub super_options: String,
}

impl MountLine {
    /// Whether `opt` is one of its per-mount or superblock options.
    pub fn has_option(&self, opt: &str) -> bool {
        self.options
            .split(',')
            .chain(self.super_options.split(','))
            .any(|o| o == opt)
    }
}

/// The mounts of a mountinfo text, in order; a line that does not parse is left out.
pub fn parse(text: &str) -> Vec<MountLine> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountLine> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    if sep < 6 {
        return None;
    }
    Some(MountLine {
        root: unescape_mount_field(fields.get(3)?),
        point: PathBuf::from(unescape_mount_field(fields.get(4)?)),
        options: (*fields.get(5)?).to_owned(),
        fstype: (*fields.get(sep + 1)?).to_owned(),
        super_options: fields.get(sep + 3).copied().unwrap_or("").to_owned(),
    })
}

/// Undo the octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash) the
/// kernel writes in mountinfo path fields.
pub fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match (b, bytes.get(i + 1..i + 4).and_then(octal_byte)) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Three octal digits as one byte (`040` → b' '); `None` for anything else.
fn octal_byte(digits: &[u8]) -> Option<u8> {
    if digits.len() != 3 || !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
    u8::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_is_read_with_optional_fields_and_escapes() {
        let m = parse(
            "42 31 0:39 /sub /mnt/my\\040cg rw,nosuid shared:3 master:1 - cgroup2 none rw,ro\n\
             short 1 - x\n\
             43 42 0:40 / /t ro - tmpfs\n",
        );
        assert_eq!(
            m[0],
            MountLine {
                root: "/sub".into(),
                point: "/mnt/my cg".into(),
                options: "rw,nosuid".into(),
                fstype: "cgroup2".into(),
                super_options: "rw,ro".into(),
            }
        );
        assert!(m[0].has_option("ro") && m[0].has_option("nosuid") && !m[0].has_option("r"));
        // A line without the six fields is left out; one without a source keeps its type.
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[1].fstype.as_str(), m[1].super_options.as_str()),
            ("tmpfs", "")
        );
    }
}
