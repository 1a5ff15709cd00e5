//! Which staged changes run code, or change cofferdam's policy, once applied (DESIGN.md §5):
//! review marks them and a bare `apply` leaves them staged until `--path` names them or
//! `--allow-sensitive` is given.
//!
//! Owns [`sensitive`], the [`Reason`] it gives, and a small git-config reader
//! ([`git_config_keys`]). Pure: the caller hands in the change's facts and a reader for the
//! two sides of a git config file; nothing here opens a file. It may not decide what
//! apply does with the answer (that is `select`'s).
//!
//! # The list (the one place it is written down; README "Review and apply" repeats it)
//!
//! Only files whose purpose is to be run or obeyed by a tool *without the user asking for
//! that file* are on it; ordinary source (a `Makefile`, a test, a script that is not
//! executable) is not, since every edit could run code once the user builds, and flagging
//! everything would teach people to pass `--allow-sensitive` blindly.
//!
//! - `cofferdam.toml` at any depth: a later run in that directory reads it (policy).
//! - `cofferdam/config.toml` at any depth (the user config, when the workdir holds the
//!   user's config dir): policy for every run.
//! - `.git/hooks/**` and `.git/modules/**/hooks/**` (not directories): git runs them.
//! - `.git/config`, `.git/modules/**/config`, and `.gitconfig`/`.config/git/config` at the
//!   root (the workdir is a home): only when a key that names a program to run
//!   ([`runs_program`]) is added or changed; the reason names the keys. A file that
//!   cannot be read as git config is marked whole. Any other file named `config` is read
//!   the same way (a bare repository staged anywhere is found by git from inside it) but
//!   marked only for such keys, and a `.git` that is not a directory (a gitfile pointing
//!   git elsewhere) is marked.
//! - `.envrc` (direnv runs it on `cd`), `.exrc`, `.nvimrc`, `.nvim.lua` (vim/neovim with
//!   `exrc` source them on start).
//! - CI definitions: `.github/workflows/**`, `.github/actions/**`, `.gitlab-ci.yml`,
//!   `.circleci/**`, `.travis.yml`, `azure-pipelines.yml`, `.drone.yml`, `.buildkite/**`,
//!   `Jenkinsfile`; commit-hook managers `.pre-commit-config.yaml`, `.husky/**`.
//! - Editor task files that run on open: `.vscode/tasks.json` (`runOn: folderOpen`),
//!   `.vscode/settings.json` (terminal profiles, tool paths), `.devcontainer/**`
//!   (`postCreateCommand`, …).
//! - Shell start-up files at the root (the workdir is a home): `.bashrc`, `.bash_profile`,
//!   `.bash_login`, `.bash_logout`, `.profile`, `.zshrc`, `.zshenv`, `.zprofile`,
//!   `.zlogin`, `.config/fish/config.fish`.
//! - A new regular file with an execute bit, and a file whose change adds one.
//!
//! Deleting a `cofferdam.toml` is marked too (a manifest can only narrow, so removing one
//! widens); other deletions run nothing.

use std::collections::BTreeMap;

use cofferdam_record::bundle::{ChangeEntryType, ChangeKind};

/// Why a change is sensitive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Applying it lets code run later: the detail says what runs it.
    RunsCode(String),
    /// Applying it changes what a later cofferdam run is allowed.
    Policy(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::RunsCode(d) => write!(f, "runs code: {d}"),
            Reason::Policy(d) => write!(f, "changes policy: {d}"),
        }
    }
}

/// The facts about one change the classifier needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// How it changed.
    pub kind: ChangeKind,
    /// The staged type.
    pub new_type: Option<ChangeEntryType>,
    /// The staged permission bits.
    pub mode: Option<u32>,
    /// The host's permission bits before the run, when it had a regular file there.
    pub old_file_mode: Option<u32>,
}

/// Which side of a change a reader is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The host workdir, as it is.
    Host,
    /// The stage.
    Staged,
}

/// What a reader found: the bytes, nothing (no regular file there), or a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The file's bytes.
    Bytes(Vec<u8>),
    /// No regular file on that side.
    Absent,
    /// It could not be read (too large, an error): the detail says why.
    Failed(String),
}

/// Whether the change at `path` (target-relative bytes) is sensitive, and why (see the
/// module docs). `read` is asked only for git config files.
pub fn sensitive(path: &[u8], c: &Change, read: &dyn Fn(Side, &[u8]) -> Read) -> Option<Reason> {
    let comps: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let name = comps.last().copied().unwrap_or_default();
    // A directory is never marked itself (what is in it is), so the parent of a held file
    // can always be applied without it.
    if c.new_type == Some(ChangeEntryType::Directory) {
        return None;
    }
    if name == b"cofferdam.toml" {
        return Some(Reason::Policy(
            "a cofferdam.toml is read by the next run in its directory".into(),
        ));
    }
    if c.kind == ChangeKind::Deleted {
        return None;
    }
    if ends_with(&comps, &[b"cofferdam", b"config.toml"]) {
        return Some(Reason::Policy("cofferdam's user config".into()));
    }
    if let Some(why) = by_path(&comps) {
        return Some(Reason::RunsCode(why.into()));
    }
    if name == b".git" {
        return Some(Reason::RunsCode(
            "a .git that is not a directory points git at another repository".into(),
        ));
    }
    if is_git_config(&comps) {
        return git_config_reason(path, read, true);
    }
    if name == b"config"
        && let Some(r) = git_config_reason(path, read, false)
    {
        // A bare repository anywhere in the tree: git finds it from a directory inside.
        return Some(r);
    }
    let is_file = c.new_type == Some(ChangeEntryType::File);
    let x = |m: Option<u32>| m.is_some_and(|m| m & 0o111 != 0);
    if is_file && x(c.mode) {
        let mode = c.mode.unwrap_or(0);
        match c.kind {
            ChangeKind::Added | ChangeKind::TypeChanged => {
                return Some(Reason::RunsCode(format!(
                    "a new executable (mode {mode:04o})"
                )));
            }
            ChangeKind::Modified if !x(c.old_file_mode) => {
                let was = c.old_file_mode.map_or("?".into(), |m| format!("{m:04o}"));
                return Some(Reason::RunsCode(format!(
                    "made executable ({was} → {mode:04o})"
                )));
            }
            _ => {}
        }
    }
    None
}

fn ends_with(comps: &[&[u8]], tail: &[&[u8]]) -> bool {
    comps.len() >= tail.len() && comps[comps.len() - tail.len()..] == *tail
}

/// Whether `comps` lie beneath a `.git` directory's `sub` (`.git/sub/…`, or a submodule's
/// `.git/modules/…/sub/…`).
fn in_git_dir(comps: &[&[u8]], sub: &[u8]) -> bool {
    comps.iter().enumerate().any(|(i, &c)| {
        c == b".git"
            && comps
                .get(i + 1..comps.len().saturating_sub(1))
                .is_some_and(|rest| rest.contains(&sub))
    })
}

/// The path rules that mark a file whatever its content.
fn by_path(comps: &[&[u8]]) -> Option<&'static str> {
    let name = comps.last().copied().unwrap_or_default();
    let dirs = comps
        .get(..comps.len().saturating_sub(1))
        .unwrap_or_default();
    let under = |dir: &[u8]| dirs.contains(&dir);
    let under2 = |a: &[u8], b: &[u8]| dirs.windows(2).any(|w| w[0] == a && w[1] == b);
    if in_git_dir(comps, b"hooks") {
        return Some("a git hook");
    }
    if ends_with(comps, &[b".git", b"hooks"]) {
        return Some("git's hooks directory replaced by something else");
    }
    Some(match name {
        b".envrc" => "direnv runs .envrc on entering the directory",
        b".exrc" | b".nvimrc" | b".nvim.lua" => "vim/neovim with `exrc` run it on start",
        b".gitlab-ci.yml"
        | b".travis.yml"
        | b"azure-pipelines.yml"
        | b".drone.yml"
        | b"Jenkinsfile" => "a CI definition",
        b".pre-commit-config.yaml" => "pre-commit runs the hooks it lists",
        _ if under2(b".github", b"workflows") || under2(b".github", b"actions") => {
            "a CI definition"
        }
        _ if under(b".circleci") || under(b".buildkite") => "a CI definition",
        _ if under(b".husky") => "husky installs it as a git hook",
        _ if under(b".devcontainer") => "a dev container definition (its commands run on open)",
        b"tasks.json" if ends_with(comps, &[b".vscode", b"tasks.json"]) => {
            "VS Code tasks can run on folder open"
        }
        b"settings.json" if ends_with(comps, &[b".vscode", b"settings.json"]) => {
            "VS Code workspace settings name programs it runs"
        }
        b".bashrc" | b".bash_profile" | b".bash_login" | b".bash_logout" | b".profile"
        | b".zshrc" | b".zshenv" | b".zprofile" | b".zlogin"
            if comps.len() == 1 =>
        {
            "a shell start-up file (the workdir is a home)"
        }
        b"config.fish" if comps == [&b".config"[..], b"fish", b"config.fish"] => {
            "a shell start-up file (the workdir is a home)"
        }
        _ => return None,
    })
}

/// Whether the path is a git config file git reads.
fn is_git_config(comps: &[&[u8]]) -> bool {
    ends_with(comps, &[b".git", b"config"])
        || (comps.last() == Some(&&b"config"[..]) && in_git_dir(comps, b"modules"))
        || comps == [&b".gitconfig"[..]]
        || comps == [&b".config"[..], b"git", b"config"]
}

/// The program-running keys a git config file adds or changes. `strict` (a file git
/// certainly reads): one that cannot be read or parsed is marked whole; otherwise (any
/// other file named `config`, which may be a bare repository's) it is not.
fn git_config_reason(
    path: &[u8],
    read: &dyn Fn(Side, &[u8]) -> Read,
    strict: bool,
) -> Option<Reason> {
    let staged = match read(Side::Staged, path) {
        Read::Bytes(b) => b,
        Read::Absent => return None,
        Read::Failed(why) => {
            return strict.then(|| {
                Reason::RunsCode(format!("a git config file that could not be read ({why})"))
            });
        }
    };
    let Some(new) = git_config_keys(&staged) else {
        return strict.then(|| {
            Reason::RunsCode("a git config file that is not plain git config syntax".into())
        });
    };
    let old = match read(Side::Host, path) {
        Read::Bytes(b) => git_config_keys(&b).unwrap_or_default(),
        Read::Absent | Read::Failed(_) => BTreeMap::new(),
    };
    let mut what = Vec::new();
    for (key, values) in &new {
        let risky = values.iter().any(|v| runs_program(key, v));
        if !risky {
            continue;
        }
        match old.get(key) {
            None => what.push(format!("{key} added")),
            Some(was) if was != values => what.push(format!("{key} changed")),
            Some(_) => {}
        }
    }
    (!what.is_empty()).then(|| Reason::RunsCode(what.join(", ")))
}

/// Whether git config key `key` (lower-case section and name, subsection as written:
/// `diff.x.textconv`) with `value` makes git run a program or read more config.
pub fn runs_program(key: &str, value: &str) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let (sub, name) = match rest.rsplit_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, rest),
    };
    match (section, sub, name) {
        ("core", None, n) => matches!(
            n,
            "fsmonitor"
                | "hookspath"
                | "pager"
                | "editor"
                | "sshcommand"
                | "askpass"
                | "gitproxy"
                | "alternaterefscommand"
        ),
        ("alias", None, _) => value.trim_start().starts_with('!'),
        ("submodule", Some(_), "update") => value.trim_start().starts_with('!'),
        ("filter", Some(_), _) => true,
        ("include", None, "path") | ("includeif", Some(_), "path") => true,
        ("diff", None, "external") => true,
        ("diff" | "merge" | "difftool" | "mergetool", Some(_), n) => {
            matches!(n, "textconv" | "command" | "driver" | "cmd")
        }
        ("credential", _, "helper") => true,
        ("pager", None, _) => true,
        ("sequence", None, "editor") => true,
        ("gpg", _, "program") => true,
        ("uploadpack", None, "packobjectshook") => true,
        ("remote", Some(_), "uploadpack" | "receivepack" | "vcs") => true,
        ("protocol", _, "allow") => true,
        ("url", Some(_), "insteadof" | "pushinsteadof") => true,
        ("browser" | "man", Some(_), "cmd" | "path") => true,
        ("web", None, "browser") => true,
        ("interactive", None, "difffilter") => true,
        ("sendemail", _, n) => matches!(n, "smtpserver" | "tocmd" | "cccmd" | "headercmd"),
        _ => false,
    }
}

/// The keys of a git config file, each with its values in order: `section.key` or
/// `section.subsection.key`, section and key lower-cased (git compares them so), the
/// subsection as written. `None` when the text is not git config syntax as far as this
/// reader knows it (then the caller marks the file whole rather than guess).
pub fn git_config_keys(text: &[u8]) -> Option<BTreeMap<String, Vec<String>>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section: Option<String> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        if let Some(after) = rest.strip_prefix('[') {
            let (head, tail) = parse_header(after)?;
            section = Some(head);
            rest = tail.trim_start();
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        let sect = section.as_ref()?;
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if name_len == 0 {
            return None;
        }
        let name = rest[..name_len].to_ascii_lowercase();
        let after = rest[name_len..].trim_start();
        let value = if let Some(v) = after.strip_prefix('=') {
            let mut raw = v.to_owned();
            // A backslash at the end continues the value on the next line.
            while raw.ends_with('\\') && !raw.ends_with("\\\\") {
                raw.pop();
                raw.push_str(lines.next().unwrap_or(""));
            }
            parse_value(&raw)?
        } else if after.is_empty() || after.starts_with('#') || after.starts_with(';') {
            "true".to_owned()
        } else {
            return None;
        };
        out.entry(format!("{sect}.{name}")).or_default().push(value);
    }
    Some(out)
}

/// A section header after its `[`: the section name (with `.subsection`), and what
/// follows `]`.
fn parse_header(s: &str) -> Option<(String, &str)> {
    if let Some(q) = s.find('"').filter(|&q| s[..q].find(']').is_none()) {
        let name = s[..q].trim().to_ascii_lowercase();
        let mut sub = String::new();
        let mut chars = s[q + 1..].char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => sub.push(chars.next()?.1),
                (i, '"') => break q + 1 + i + 1,
                (_, c) => sub.push(c),
            }
        };
        let tail = s[end..].trim_start().strip_prefix(']')?;
        if name.is_empty() {
            return None;
        }
        return Some((format!("{name}.{sub}"), tail));
    }
    let close = s.find(']')?;
    let head = s[..close].trim();
    if head.is_empty() {
        return None;
    }
    // The old `[section.subsection]` form: the subsection is lower-cased by git too.
    Some((head.to_ascii_lowercase(), &s[close + 1..]))
}

/// A value: quotes removed, escapes resolved, an unquoted comment cut, outer space trimmed.
fn parse_value(raw: &str) -> Option<String> {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.chars();
    let mut pending_space = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                out.push_str(&pending_space);
                pending_space.clear();
                match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'b' => {
                        out.pop();
                    }
                    c @ ('\\' | '"') => out.push(c),
                    _ => return None,
                }
            }
            '#' | ';' if !quoted => break,
            c if c.is_whitespace() && !quoted => pending_space.push(c),
            c => {
                if !out.is_empty() {
                    out.push_str(&pending_space);
                }
                pending_space.clear();
                out.push(c);
            }
        }
    }
    if quoted {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    fn file(kind: ChangeKind, mode: u32, old: Option<u32>) -> Change {
        Change {
            kind,
            new_type: Some(ChangeEntryType::File),
            mode: Some(mode),
            old_file_mode: old,
        }
    }

    fn none(_: Side, _: &[u8]) -> Read {
        Read::Absent
    }

    fn is(path: &str, c: &Change) -> Option<String> {
        sensitive(path.as_bytes(), c, &none).map(|r| r.to_string())
    }

    #[test]
    fn paths_on_the_list() {
        let f = file(Modified, 0o644, Some(0o644));
        for p in [
            "cofferdam.toml",
            "sub/dir/cofferdam.toml",
            ".config/cofferdam/config.toml",
            ".git/hooks/pre-commit",
            ".git/hooks/sub/x",
            ".git/modules/lib/hooks/post-checkout",
            "sub/.git/hooks/pre-push",
            ".envrc",
            "pkg/.envrc",
            ".github/workflows/ci.yml",
            ".github/actions/setup/action.yml",
            ".gitlab-ci.yml",
            ".circleci/config.yml",
            "Jenkinsfile",
            ".pre-commit-config.yaml",
            ".husky/pre-commit",
            ".vscode/tasks.json",
            ".vscode/settings.json",
            ".devcontainer/devcontainer.json",
            ".bashrc",
            ".config/fish/config.fish",
            ".exrc",
        ] {
            assert!(is(p, &f).is_some(), "{p} should be marked");
        }
        for p in [
            "Makefile",
            "src/main.rs",
            "hooks/pre-commit",
            ".git/HEAD",
            ".git/index",
            ".git/objects/ab/cdef",
            "docs/.bashrc",
            ".github/CODEOWNERS",
            ".vscode/launch.json",
            "tasks.json",
            "config.toml",
            "cofferdam.toml.bak",
        ] {
            assert_eq!(is(p, &f), None, "{p} should not be marked");
        }
        assert!(
            is("cofferdam.toml", &f)
                .unwrap()
                .starts_with("changes policy")
        );
        assert!(
            is(".git/hooks/x", &f)
                .unwrap()
                .starts_with("runs code: a git hook")
        );
    }

    #[test]
    fn directories_and_deletions() {
        let dir = Change {
            kind: Added,
            new_type: Some(ChangeEntryType::Directory),
            mode: Some(0o755),
            old_file_mode: None,
        };
        assert_eq!(is(".git/hooks", &dir), None);
        assert_eq!(is(".git/hooks/d", &dir), None);
        assert_eq!(is("cofferdam.toml", &dir), None);
        assert_eq!(is("bin", &dir), None);
        let del = Change {
            kind: Deleted,
            new_type: None,
            mode: None,
            old_file_mode: Some(0o755),
        };
        assert_eq!(is(".git/hooks/pre-commit", &del), None);
        assert!(is("cofferdam.toml", &del).is_some());
        // A symlink into the hooks directory is marked; an executable symlink elsewhere not.
        let link = Change {
            kind: Added,
            new_type: Some(ChangeEntryType::Symlink),
            mode: Some(0o777),
            old_file_mode: None,
        };
        assert!(is(".git/hooks/pre-commit", &link).is_some());
        assert_eq!(is("bin/tool", &link), None);
    }

    #[test]
    fn executables() {
        assert_eq!(
            is("run.sh", &file(Added, 0o755, None)).as_deref(),
            Some("runs code: a new executable (mode 0755)")
        );
        assert!(is("run.sh", &file(TypeChanged, 0o700, None)).is_some());
        assert_eq!(is("run.sh", &file(Added, 0o644, None)), None);
        assert_eq!(
            is("run.sh", &file(Modified, 0o755, Some(0o644))).as_deref(),
            Some("runs code: made executable (0644 → 0755)")
        );
        // An executable that stays executable, edited: ordinary source.
        assert_eq!(is("run.sh", &file(Modified, 0o755, Some(0o755))), None);
        assert_eq!(is("run.sh", &file(Modified, 0o644, Some(0o755))), None);
    }

    fn with_config(host: Option<&'static str>, staged: &'static str) -> Option<String> {
        let read = move |side: Side, _: &[u8]| match side {
            Side::Staged => Read::Bytes(staged.as_bytes().to_vec()),
            Side::Host => host.map_or(Read::Absent, |h| Read::Bytes(h.as_bytes().to_vec())),
        };
        sensitive(b".git/config", &file(Modified, 0o644, Some(0o644)), &read).map(|r| r.to_string())
    }

    const BASE: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";

    #[test]
    fn git_config_keys_that_run_programs() {
        assert_eq!(
            with_config(Some(BASE), format!("{BASE}\tfsmonitor = /tmp/x\n").leak()),
            Some("runs code: core.fsmonitor added".into())
        );
        // Unrelated keys are ordinary edits.
        assert_eq!(
            with_config(Some(BASE), "[core]\n\tbare = true\n[user]\n\tname = a\n"),
            None
        );
        assert_eq!(
            with_config(
                None,
                "[alias]\n\tco = checkout\n\tx = \"!sh -c evil\"\n[filter \"lfs\"]\n\tsmudge = x\n"
            ),
            Some("runs code: alias.x added, filter.lfs.smudge added".into())
        );
        assert_eq!(
            with_config(Some("[alias]\n\tx = !a\n"), "[alias]\n\tx = !b\n"),
            Some("runs code: alias.x changed".into())
        );
        assert_eq!(
            with_config(
                Some("[alias]\n\tx = !a\n"),
                "[alias]\n\tx = !a\n[user]\n\tname=b\n"
            ),
            None
        );
        assert_eq!(
            with_config(None, "[diff \"pdf\"]\n\ttextconv = pdftotext\n"),
            Some("runs code: diff.pdf.textconv added".into())
        );
        assert_eq!(
            with_config(None, "[includeIf \"gitdir:/x\"]\n\tpath = ../evil\n"),
            Some("runs code: includeif.gitdir:/x.path added".into())
        );
        assert_eq!(
            with_config(None, "[Core]\n\tFSMonitor\n"),
            Some("runs code: core.fsmonitor added".into())
        );
        assert_eq!(
            with_config(
                None,
                "[credential]\n\thelper = store\n[core] sshCommand = ssh -o x\n"
            ),
            Some("runs code: core.sshcommand added, credential.helper added".into())
        );
        // What this reader cannot read is marked whole.
        assert!(
            with_config(None, "[core\n\tfsmonitor = x\n")
                .unwrap()
                .contains("not plain git config")
        );
        assert!(with_config(None, "\u{0}\u{ff}").is_some());
    }

    #[test]
    fn git_config_syntax() {
        let k = git_config_keys(
            b"# c\n[a \"Sub \\\"q\\\"\"] k = \"v 1\" ; c\n[b.C]\n  x = one \\\n two\n  y\n",
        )
        .unwrap();
        assert_eq!(k["a.Sub \"q\".k"], vec!["v 1".to_owned()]);
        assert_eq!(k["b.c.x"], vec!["one  two".to_owned()]);
        assert_eq!(k["b.c.y"], vec!["true".to_owned()]);
        assert!(git_config_keys(b"k = v\n").is_none());
        assert!(git_config_keys(b"[a]\n k = \"open\n").is_none());
        assert!(runs_program("core.fsmonitor", "x"));
        assert!(!runs_program("alias.co", "checkout"));
        assert!(runs_program("alias.co", " !rm"));
        assert!(!runs_program("core.bare", "true"));
        assert!(runs_program("url.ext::sh -c x.insteadof", "https://"));
    }

    #[test]
    fn bare_repositories_and_gitfiles() {
        let f = file(Added, 0o644, None);
        let read = |side: Side, p: &[u8]| match p {
            _ if side == Side::Host => Read::Absent,
            b"sub/config" => Read::Bytes(b"[core]\n\tfsmonitor = x\n".to_vec()),
            b"app/config" => Read::Bytes(b"port: 80\n".to_vec()),
            b"plain/config" => Read::Bytes(b"[core]\n\tbare = true\n".to_vec()),
            _ => Read::Failed("no".into()),
        };
        let r = |p: &str| sensitive(p.as_bytes(), &f, &read).map(|r| r.to_string());
        assert_eq!(
            r("sub/config").as_deref(),
            Some("runs code: core.fsmonitor added")
        );
        assert_eq!(r("app/config"), None);
        assert_eq!(r("plain/config"), None);
        assert_eq!(r("other/config"), None);
        assert!(r("sub/.git").unwrap().contains("another repository"));
    }

    #[test]
    fn unreadable_staged_config_is_marked() {
        let read = |side: Side, _: &[u8]| match side {
            Side::Staged => Read::Failed("too large".into()),
            Side::Host => Read::Absent,
        };
        let r = sensitive(b".git/config", &file(Added, 0o644, None), &read).unwrap();
        assert!(r.to_string().contains("too large"));
        let gone = |_: Side, _: &[u8]| Read::Absent;
        assert_eq!(
            sensitive(b".git/config", &file(Added, 0o644, None), &gone),
            None
        );
    }
}
