//! Why `execve` of a file that is there said `ENOENT`: the interpreter its `#!` line names
//! (or that line's symlink target) is not visible inside the sandbox. Owns reading that line
//! and wording the message the init reports with exit 127; it reads the first bytes of one
//! file and stats one path, and decides nothing about what to lend.

use std::ffi::{CStr, OsStr};
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// How much of a script is read for its `#!` line (the kernel reads 256 bytes).
const HEAD: usize = 256;

/// The interpreter a `#!` line names: its first word, when `head` starts with `#!`.
pub fn interpreter(head: &[u8]) -> Option<PathBuf> {
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let word = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())?;
    Some(PathBuf::from(OsStr::from_bytes(word)))
}

/// The directory to lend for a missing interpreter: its install's top when it sits in a
/// `bin/` (`~/.pyenv/versions/3.12.1/bin/python3` gives `~/.pyenv/versions/3.12.1`, which
/// holds its standard library too), else its own directory.
pub fn install_top(interp: &Path) -> PathBuf {
    let dir = interp.parent().unwrap_or(Path::new("/"));
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(up)) if n == "bin" && up != Path::new("/") => up.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// The message for `script`, whose `#!` interpreter `interp` cannot be reached; `target` is
/// where `interp` leads when it is a symlink (a venv's `python` into `~/.pyenv`).
pub fn missing_message(script: &Path, interp: &Path, target: Option<&Path>) -> String {
    let gone = target.unwrap_or(interp);
    let how = match target {
        Some(t) => format!(
            "its `#!` interpreter {} is a symlink to {}, which is not visible inside the sandbox",
            interp.display(),
            t.display()
        ),
        None => format!(
            "its `#!` interpreter {} is not visible inside the sandbox",
            interp.display()
        ),
    };
    format!(
        "{}: {how}; lend it read-only with `--mount {}:read` (an install under HOME is lent \
         when the command itself is; see `cofferdam scope`)",
        script.display(),
        install_top(gone).display()
    )
}

/// For the first of `candidates` that is a file: the missing-interpreter message, when it is
/// a script whose interpreter cannot be reached; `None` otherwise (the plain error stands).
pub fn explain_enoent(candidates: &[&CStr]) -> Option<String> {
    let script = candidates
        .iter()
        .map(|c| Path::new(OsStr::from_bytes(c.to_bytes())))
        .find(|p| p.is_file())?;
    let mut head = Vec::with_capacity(HEAD);
    std::fs::File::open(script)
        .ok()?
        .take(HEAD as u64)
        .read_to_end(&mut head)
        .ok()?;
    let interp = interpreter(&head)?;
    if interp.exists() {
        return None;
    }
    let target = std::fs::read_link(&interp)
        .ok()
        .map(|t| match t.is_absolute() {
            true => t,
            false => interp.parent().unwrap_or(Path::new("/")).join(t),
        });
    Some(missing_message(script, &interp, target.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_of_a_shebang_line_is_the_interpreter() {
        assert_eq!(
            interpreter(b"#!/usr/bin/env python3\nprint()\n"),
            Some(PathBuf::from("/usr/bin/env"))
        );
        assert_eq!(
            interpreter(b"#! \t/h/u/.venv/bin/python -E\n"),
            Some(PathBuf::from("/h/u/.venv/bin/python"))
        );
        assert_eq!(interpreter(b"\x7fELF"), None);
        assert_eq!(interpreter(b"#!\n"), None);
    }

    #[test]
    fn the_message_names_the_interpreter_and_the_mount_that_lends_its_install() {
        let m = missing_message(
            Path::new("/h/u/.local/bin/tool"),
            Path::new("/h/u/.pyenv/versions/3.12.1/bin/python3"),
            None,
        );
        assert!(
            m.contains("/h/u/.pyenv/versions/3.12.1/bin/python3 is not visible"),
            "{m}"
        );
        assert!(
            m.contains("--mount /h/u/.pyenv/versions/3.12.1:read"),
            "{m}"
        );
        let m = missing_message(
            Path::new("/w/.venv/bin/aider"),
            Path::new("/w/.venv/bin/python"),
            Some(Path::new("/h/u/.pyenv/versions/3.11/bin/python3.11")),
        );
        assert!(
            m.contains("symlink to /h/u/.pyenv/versions/3.11/bin/python3.11"),
            "{m}"
        );
        assert!(m.contains("--mount /h/u/.pyenv/versions/3.11:read"), "{m}");
        assert_eq!(install_top(Path::new("/bin/sh")), PathBuf::from("/bin"));
        assert_eq!(
            install_top(Path::new("/opt/x/tool")),
            PathBuf::from("/opt/x")
        );
    }
}
