//! Agent profiles (issue 19): which agent a command is, and what its profile lends.
//!
//! Owns the built-in profile table (data), choosing a profile for a program (its basename,
//! the basename or install path it resolves to, or `--agent NAME`), expanding a profile
//! against the caller's HOME and environment, and adding the expansion to a resolved
//! [`Policy`] with every grant credited to `profile:<name>`. Pure: the caller resolves
//! symlinks and says which paths exist; this reads nothing itself.

use crate::allow::{AllowEntry, NetworkMode};
use crate::manifest::MountMode;
use crate::policy::{Mount, Policy};
use cofferdam_record::scope::{GrantSource, GrantSourceReport};
use std::path::{Path, PathBuf};

/// One agent profile. Paths are written `~/…` (the caller's HOME).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The name (`--agent NAME`, `profile:NAME` in records).
    pub name: String,
    /// Program basenames that select it.
    pub programs: Vec<String>,
    /// Pieces of an install path that select it when the program resolves there
    /// (e.g. `node_modules/@anthropic-ai/claude-code/`).
    pub install_paths: Vec<String>,
    /// Variable names passed in from the caller's environment.
    pub env_pass: Vec<String>,
    /// Variables set inside (`~/` in a value is the caller's HOME); a variable the caller
    /// has set is passed instead.
    pub env_set: Vec<(String, String)>,
    /// The vendor's API destinations, `HOST[:PORT]`.
    pub hosts: Vec<String>,
    /// Base-URL variables: when one is set, its URL's host:port replaces `hosts`.
    pub base_url_vars: Vec<String>,
    /// The agent's own state directories, lent writable on the host (they persist).
    pub state_dirs: Vec<String>,
    /// Paths lent read-only.
    pub read_paths: Vec<String>,
    /// A Codex-style `config.toml` (`~/…`) whose selected provider's `base_url` replaces
    /// `hosts` and whose `env_key` is passed; `None` for profiles without one.
    pub provider_config: Option<String>,
    /// Where the agent's config dir comes from when a variable names it (`CODEX_HOME`): the
    /// variable and the dir it replaces (`~/.codex`), in state dirs, read-only paths and
    /// `provider_config` alike.
    pub home_var: Option<(String, String)>,
    /// Arguments added to the command, when the agent needs them inside cofferdam.
    pub arg_patch: Option<ArgPatch>,
    /// Whether a run under it lends the installs on the caller's `PATH` (a user profile's
    /// `lend_path_toolchains`); `None`: the config's top-level key, else on.
    pub lend_path_toolchains: Option<bool>,
    /// Host files copied once into the state dir before a run, when the profile itself
    /// points the agent's config dir there (its `home_var` unset by the caller) and the copy
    /// is absent: `(from, to, why)`, `~/…` paths. Built-ins only.
    pub seeds: Vec<(String, String, String)>,
}

/// Arguments a profile adds right after the program, unless the command already chooses
/// what they choose (the user's own flag wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPatch {
    /// The arguments added after `argv[0]`.
    pub insert: Vec<String>,
    /// Arguments that mean the command chose itself: one equal to an entry, or starting
    /// with an entry and `=` (`--sandbox=…`, `sandbox_mode=…` as a `-c` value).
    pub unless: Vec<String>,
    /// Why, for the records.
    pub why: String,
}

impl ArgPatch {
    /// `argv` with the patch in it; `None` when the command already chooses (or is empty).
    pub fn patched(&self, argv: &[String]) -> Option<Vec<String>> {
        let (program, rest) = argv.split_first()?;
        let chosen = rest.iter().any(|a| {
            self.unless.iter().any(|u| {
                a == u
                    || a.strip_prefix(u.as_str())
                        .is_some_and(|tail| tail.starts_with('='))
            })
        });
        if chosen {
            return None;
        }
        let mut out = vec![program.clone()];
        out.extend(self.insert.iter().cloned());
        out.extend(rest.iter().cloned());
        Some(out)
    }

    /// The added arguments as one would type them.
    pub fn shown(&self) -> String {
        self.insert
            .iter()
            .map(|a| {
                if a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=./:".contains(c))
                {
                    a.clone()
                } else {
                    format!("'{}'", a.replace('\'', "'\\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Read-only paths every built-in lends: the user's git identity.
const GIT_CONFIG: &[&str] = &["~/.gitconfig", "~/.config/git/config"];

/// A built-in profile as data.
struct Builtin {
    name: &'static str,
    programs: &'static [&'static str],
    install_paths: &'static [&'static str],
    env_pass: &'static [&'static str],
    env_set: &'static [(&'static str, &'static str)],
    hosts: &'static [&'static str],
    base_url_vars: &'static [&'static str],
    state_dirs: &'static [&'static str],
    provider_config: Option<&'static str>,
    home_var: Option<(&'static str, &'static str)>,
    /// `(insert, unless, why)`, see [`ArgPatch`].
    arg_patch: Option<(
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
    )>,
    /// Files inside a state dir kept read-only (lent over it): ones that grant the next run
    /// more (network destinations) or run code later.
    read_only: &'static [&'static str],
    /// `(from, to, why)`, see [`Profile::seeds`].
    seeds: &'static [(&'static str, &'static str, &'static str)],
}

/// The built-in profiles, from what each CLI was measured to need (NOTES.md, "Real agent
/// CLIs inside the sandbox"). Telemetry, update and registry hosts are left out on purpose.
const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "claude",
        programs: &["claude"],
        install_paths: &["node_modules/@anthropic-ai/claude-code/"],
        env_pass: &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "CLAUDE_CONFIG_DIR",
        ],
        // `~/.claude.json` is saved by rename-over, which no single-file mount survives:
        // pointing the config dir at the lent `~/.claude` keeps that file inside it.
        // `IS_SANDBOX=1`: as uid 0, `--dangerously-skip-permissions` refuses to start
        // without it ("cannot be used with root/sudo privileges"); the run is a sandbox.
        env_set: &[
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CONFIG_DIR", "~/.claude"),
            ("IS_SANDBOX", "1"),
        ],
        // The API, and where a logged-in (claude.ai) user's OAuth access token is refreshed:
        // without it a run that starts with an expired token cannot refresh it (measured:
        // `platform.claude.com:443` was denied and the turn did not start).
        hosts: &["api.anthropic.com:443", "platform.claude.com:443"],
        base_url_vars: &["ANTHROPIC_BASE_URL"],
        state_dirs: &["~/.claude"],
        provider_config: None,
        // A `CLAUDE_CONFIG_DIR` of the caller's moves its config dir, and all of the above
        // with it.
        home_var: Some(("CLAUDE_CONFIG_DIR", "~/.claude")),
        arg_patch: None,
        // Claude Code on the host (outside cofferdam) reads the same `~/.claude`: its
        // `settings.json` holds hooks and helper commands it runs (and which plugins are
        // on), `hooks/` is the usual home of hook scripts, and under `plugins/` the
        // installed plugins' code (`cache/`, `marketplaces/`) and the lists saying where it
        // is are what it loads, hooks and MCP servers included. A run that could write them
        // would run code on the host later, outside the boundary. So would its custom slash
        // commands and skills (a command's `!` lines are shell it runs when invoked).
        // (`plugins/store/` is written at every start, so `plugins/` itself stays writable.)
        read_only: &[
            "~/.claude/settings.json",
            "~/.claude/hooks",
            "~/.claude/commands",
            "~/.claude/skills",
            "~/.claude/plugins/cache",
            "~/.claude/plugins/marketplaces",
            "~/.claude/plugins/installed_plugins.json",
            "~/.claude/plugins/known_marketplaces.json",
        ],
        // With `CLAUDE_CONFIG_DIR` pointed at `~/.claude` (above), Claude Code keeps its
        // settings, onboarding state and trusted folders in `~/.claude/.claude.json`
        // instead of `~/.claude.json`; a user logged in on the host would meet the
        // first-run screens again without this one copy.
        seeds: &[(
            "~/.claude.json",
            "~/.claude/.claude.json",
            "Claude Code's settings, onboarding state and trusted folders; with \
             CLAUDE_CONFIG_DIR=~/.claude it reads them from there, and later runs use and \
             change that copy, never ~/.claude.json",
        )],
    },
    Builtin {
        name: "codex",
        programs: &["codex"],
        install_paths: &["node_modules/@openai/codex/"],
        env_pass: &[
            "CODEX_API_KEY",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "CODEX_HOME",
        ],
        env_set: &[],
        hosts: &["api.openai.com:443"],
        base_url_vars: &["OPENAI_BASE_URL"],
        state_dirs: &["~/.codex"],
        // `codex exec` ignores OPENAI_BASE_URL: a custom endpoint is a provider in its
        // config, whose `env_key` names the variable holding that provider's key.
        provider_config: Some("~/.codex/config.toml"),
        // `CODEX_HOME` moves its config dir, config.toml with it.
        home_var: Some(("CODEX_HOME", "~/.codex")),
        // Codex's own sandbox (bubblewrap, else Landlock) cannot nest inside cofferdam's:
        // its namespace creation is refused, every tool call fails and the turn still exits
        // 0 having changed nothing. cofferdam's boundary replaces it. A command that picks
        // its own sandbox mode keeps it (and then gets neither argument).
        // Its shell tool starts a login shell, whose /etc/profile resets PATH; the user's
        // ~/.profile that puts ~/.local/bin and the like back is in the private HOME, so
        // the toolchains lent on the caller's PATH would not be found (exit 127): a plain
        // shell inherits the run's PATH. A later `-c allow_login_shell=true` wins.
        arg_patch: Some((
            &[
                "-c",
                "sandbox_mode=\"danger-full-access\"",
                "-c",
                "allow_login_shell=false",
            ],
            &[
                "-s",
                "--sandbox",
                "--dangerously-bypass-approvals-and-sandbox",
                "--yolo",
                "sandbox_mode",
            ],
            "Codex's own sandbox cannot nest inside cofferdam's (its tool calls would fail \
             while the turn exits 0); cofferdam's boundary replaces it; and its login shell \
             would reset PATH (the ~/.profile that restores it is in the private HOME), so \
             its commands would not find the toolchains lent on PATH",
        )),
        // That file names the next run's allowed destination (and its MCP servers, which
        // run code): the agent may not rewrite it for the run after.
        // Its `rules/` (exec-policy `.rules` files) decide which commands the host's Codex
        // runs outside its own sandbox without asking.
        read_only: &["~/.codex/config.toml", "~/.codex/rules"],
        seeds: &[],
    },
    Builtin {
        name: "gemini",
        programs: &["gemini"],
        install_paths: &["node_modules/@google/gemini-cli/"],
        env_pass: &[
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GOOGLE_GEMINI_BASE_URL",
            "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_CLOUD_PROJECT",
        ],
        // Gemini CLI in an untrusted folder turns `--yolo` into prompts and, headless, exits
        // 55; the workdir it runs in is inside the sandbox, which is the boundary here.
        env_set: &[("GEMINI_CLI_TRUST_WORKSPACE", "true")],
        hosts: &["generativelanguage.googleapis.com:443"],
        base_url_vars: &["GOOGLE_GEMINI_BASE_URL"],
        state_dirs: &["~/.gemini"],
        provider_config: None,
        home_var: None,
        arg_patch: None,
        // Its `settings.json` names MCP servers, tool discovery and call commands and hooks
        // that Gemini CLI starts; `extensions/` holds extensions (their MCP servers and
        // commands), `commands/` custom commands (their `!{…}` is shell run when invoked).
        // The host's Gemini CLI reads all three.
        read_only: &[
            "~/.gemini/settings.json",
            "~/.gemini/extensions",
            "~/.gemini/commands",
        ],
        seeds: &[],
    },
    Builtin {
        name: "aider",
        programs: &["aider"],
        install_paths: &["site-packages/aider/", "/aider-chat/"],
        env_pass: &[
            "OPENAI_API_KEY",
            "OPENAI_API_BASE",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
        ],
        env_set: &[],
        hosts: &["api.openai.com:443"],
        base_url_vars: &["OPENAI_API_BASE"],
        state_dirs: &[],
        provider_config: None,
        home_var: None,
        arg_patch: None,
        read_only: &[],
        seeds: &[],
    },
];

/// What a profile's read-only file would grant the next run, were a run to create it while
/// it is absent (its state dir is writable, so it can): `(profile, file name, grants)`.
const CREATED_GRANTS: &[(&str, &str, &str)] = &[
    (
        "codex",
        "config.toml",
        "Codex reads it at its next start: a provider's base_url there becomes that run's \
         allowed destination, its env_key a variable passed in, and its MCP servers programs \
         Codex starts",
    ),
    (
        "codex",
        "rules",
        "the host's Codex reads its .rules files at its next start: a prefix_rule there lets \
         a command run outside Codex's sandbox without asking",
    ),
    (
        "claude",
        "settings.json",
        "Claude Code reads it at its next start, on the host too: its hooks, statusLine and \
         apiKeyHelper are commands it runs, outside any sandbox when you run it yourself",
    ),
    (
        "claude",
        "hooks",
        "hook scripts there are what Claude Code's hooks usually run, on the host too",
    ),
    (
        "claude",
        "commands",
        "Claude Code's custom slash commands, on the host too: a command's `!` lines are \
         shell it runs when you invoke it",
    ),
    (
        "claude",
        "skills",
        "Claude Code's skills, on the host too: their scripts are what it runs for them",
    ),
    (
        "gemini",
        "commands",
        "Gemini CLI's custom commands, on the host too: their `!{...}` is shell it runs \
         when you invoke them",
    ),
    (
        "claude",
        "cache",
        "Claude Code loads installed plugins' code from it, on the host too: their hooks \
         and MCP servers are programs it starts",
    ),
    (
        "claude",
        "marketplaces",
        "Claude Code installs and loads plugins from the marketplaces there, on the host too",
    ),
    (
        "claude",
        "installed_plugins.json",
        "Claude Code reads where each installed plugin's code is from it, on the host too",
    ),
    (
        "claude",
        "known_marketplaces.json",
        "Claude Code reads where its plugin marketplaces are from it, on the host too",
    ),
    (
        "gemini",
        "settings.json",
        "Gemini CLI reads it at its next start, on the host too: its mcpServers, tool \
         discovery and call commands and hooks are programs it starts",
    ),
    (
        "gemini",
        "extensions",
        "Gemini CLI loads extensions from it, on the host too: their MCP servers are \
         programs it starts",
    ),
];

/// What creating `path` (a read-only path of `profile`) would grant the next run.
pub fn created_grants(profile: &str, path: &Path) -> &'static str {
    CREATED_GRANTS
        .iter()
        .find(|(p, f, _)| *p == profile && path.file_name().is_some_and(|n| n == *f))
        .map_or(
            "the next run under this profile reads it as the agent's own",
            |(_, _, g)| g,
        )
}

/// The skipped mounts of `policy` a run can create: a profile's read-only path, absent, that
/// lies inside a writable path the policy lends. The run's end sets aside what was created
/// there (it would grant the run after it more, outside review).
pub fn creatable(policy: &Policy) -> Vec<&Mount> {
    policy
        .skipped_mounts
        .iter()
        .filter(|m| m.origin.starts_with("profile:") && m.mode == MountMode::Read)
        .filter(|m| {
            policy
                .mounts
                .iter()
                .any(|w| w.mode == MountMode::Write && m.target.starts_with(&w.target))
        })
        .collect()
}

fn owned(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The built-in profiles.
pub fn builtins() -> Vec<Profile> {
    BUILTINS
        .iter()
        .map(|b| Profile {
            name: b.name.to_owned(),
            programs: owned(b.programs),
            install_paths: owned(b.install_paths),
            env_pass: owned(b.env_pass),
            env_set: b
                .env_set
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            hosts: owned(b.hosts),
            base_url_vars: owned(b.base_url_vars),
            state_dirs: owned(b.state_dirs),
            read_paths: GIT_CONFIG
                .iter()
                .chain(b.read_only)
                .map(|s| (*s).to_owned())
                .collect(),
            provider_config: b.provider_config.map(str::to_owned),
            home_var: b.home_var.map(|(v, d)| (v.to_owned(), d.to_owned())),
            arg_patch: b.arg_patch.map(|(insert, unless, why)| ArgPatch {
                insert: owned(insert),
                unless: owned(unless),
                why: why.to_owned(),
            }),
            lend_path_toolchains: None,
            seeds: b
                .seeds
                .iter()
                .map(|(f, t, w)| ((*f).to_owned(), (*t).to_owned(), (*w).to_owned()))
                .collect(),
        })
        .collect()
}

/// The built-ins with the user config's `[profiles.NAME]` over them: a user profile
/// replaces a built-in of the same name, others are added after the built-ins.
pub fn with_user(user: Option<&crate::manifest::Manifest>) -> Vec<Profile> {
    let mut table = builtins();
    for (name, s) in user.map(|m| &m.profiles).into_iter().flatten() {
        let p = Profile {
            name: name.clone(),
            programs: s.programs.clone(),
            install_paths: s.install_paths.clone(),
            env_pass: s.env_pass.clone(),
            env_set: s
                .env_set
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            hosts: s.hosts.clone(),
            base_url_vars: s.base_url_vars.clone(),
            state_dirs: s.state_dirs.clone(),
            read_paths: s.read_paths.clone(),
            provider_config: None,
            home_var: None,
            arg_patch: None,
            lend_path_toolchains: s.lend_path_toolchains,
            seeds: Vec::new(),
        };
        match table.iter_mut().find(|b| &b.name == name) {
            Some(b) => *b = p,
            None => table.push(p),
        }
    }
    table
}

/// How the user chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// By the program (no flag).
    Auto,
    /// `--agent NAME`.
    Named(String),
    /// `--no-agent-defaults`.
    Off,
}

/// A profile that cannot be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--agent {name}: no such profile; known: {known} (see `cofferdam agents`)")]
pub struct UnknownProfile {
    /// The name given.
    pub name: String,
    /// The names there are, comma-separated.
    pub known: String,
}

/// The profile for a program: `invoked` as the command names it, `resolved` where it leads
/// after symlinks (and the script a wrapper runs, when the caller knows it).
pub fn select<'a>(
    profiles: &'a [Profile],
    choice: &Choice,
    invoked: Option<&Path>,
    resolved: Option<&Path>,
) -> Result<Option<&'a Profile>, UnknownProfile> {
    match choice {
        Choice::Off => Ok(None),
        Choice::Named(n) => match profiles.iter().find(|p| &p.name == n) {
            Some(p) => Ok(Some(p)),
            None => Err(UnknownProfile {
                name: n.clone(),
                known: profiles
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        },
        Choice::Auto => {
            let base = |p: Option<&Path>| {
                p.and_then(Path::file_name)
                    .map(|n| n.to_string_lossy().into_owned())
            };
            let names = [base(invoked), base(resolved)];
            let real = resolved.map(|r| r.to_string_lossy().into_owned());
            Ok(profiles.iter().find(|p| {
                names
                    .iter()
                    .flatten()
                    .any(|n| p.programs.iter().any(|x| x == n))
                    || real
                        .as_ref()
                        .is_some_and(|r| p.install_paths.iter().any(|i| r.contains(i.as_str())))
            }))
        }
    }
}

/// One path a profile names, as it is on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilePath {
    /// As written (`~/.claude`).
    pub written: String,
    /// Resolved against HOME.
    pub path: PathBuf,
    /// `write` (state, persists) or `read`.
    pub mode: MountMode,
    /// Whether it exists (absent ones are skipped).
    pub present: bool,
}

/// What a profile grants on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// The profile's name.
    pub name: String,
    /// Names passed in.
    pub env_pass: Vec<String>,
    /// Variables set inside, with their values.
    pub env_set: Vec<(String, String)>,
    /// Allowed destinations.
    pub allow: Vec<String>,
    /// Where the destinations came from: `profile` or the base-URL variable's name.
    pub allow_from: String,
    /// Lent paths, present or not.
    pub paths: Vec<ProfilePath>,
    /// Arguments the profile adds to the command.
    pub arg_patch: Option<ArgPatch>,
    /// Host files to copy into the state dir before the run ([`Profile::seeds`]): only
    /// those whose source is present, whose copy is absent, inside a present state dir.
    pub seeds: Vec<crate::policy::StateSeed>,
}

fn home_path(written: &str, home: &Path) -> PathBuf {
    match written.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None => PathBuf::from(written),
    }
}

fn home_value(written: &str, home: &Path) -> String {
    match written.strip_prefix("~/") {
        Some(rest) => home.join(rest).to_string_lossy().into_owned(),
        None => written.to_owned(),
    }
}

impl Profile {
    /// A path the profile names, as written for the records and as it is on this host: under
    /// the directory its `home_var` names when the caller set that variable to an absolute
    /// path (`CODEX_HOME=/x` makes `~/.codex/config.toml` `$CODEX_HOME/config.toml`, i.e.
    /// `/x/config.toml`), else against HOME.
    pub fn place(&self, written: &str, home: &Path, env: &[(String, String)]) -> (String, PathBuf) {
        if let Some((var, dir)) = &self.home_var
            && let Some((_, value)) = env.iter().find(|(n, v)| n == var && v.starts_with('/'))
            && let Some(rest) = written.strip_prefix(dir.as_str())
            && (rest.is_empty() || rest.starts_with('/'))
        {
            let path = Path::new(value).join(rest.trim_start_matches('/'));
            return (format!("${var}{rest}"), path);
        }
        (written.to_owned(), home_path(written, home))
    }

    /// Where its `provider_config` is on this host, when it has one.
    pub fn provider_config_path(&self, home: &Path, env: &[(String, String)]) -> Option<PathBuf> {
        let w = self.provider_config.as_deref()?;
        Some(self.place(w, home, env).1)
    }
}

/// `HOST:PORT` of an `http(s)://` URL, the port defaulted from the scheme; `None` when it
/// is not such a URL.
pub fn url_host_port(url: &str) -> Option<String> {
    let (rest, port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit('@').next()?;
    if hostport.is_empty() {
        return None;
    }
    let has_port = match hostport.rfind(']') {
        Some(end) => hostport[end..].contains(':'),
        None => hostport.contains(':'),
    };
    Some(if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:{port}")
    })
}

/// What a Codex-style `config.toml` says about the endpoint it talks to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderConfig {
    /// The selected provider's `base_url` (or the top-level `openai_base_url`).
    pub base_url: Option<String>,
    /// Where that came from, e.g. `model_providers.local.base_url`.
    pub key: String,
    /// The provider's `env_key`: the variable holding its API key.
    pub env_key: Option<String>,
}

/// Read the provider a Codex `config.toml` selects (`model_provider = "X"` and
/// `[model_providers.X]`), else its `openai_base_url`; `None` when it names neither or is
/// not TOML (the agent will say why itself).
pub fn provider_config(text: &str) -> Option<ProviderConfig> {
    let doc: toml::Table = text.parse().ok()?;
    let s = |v: Option<&toml::Value>| v.and_then(toml::Value::as_str).map(str::to_owned);
    if let Some(name) = s(doc.get("model_provider"))
        && let Some(p) = doc
            .get("model_providers")
            .and_then(|t| t.get(&name))
            .and_then(toml::Value::as_table)
    {
        return Some(ProviderConfig {
            base_url: s(p.get("base_url")),
            key: format!("model_providers.{name}.base_url"),
            env_key: s(p.get("env_key")),
        });
    }
    let base_url = s(doc.get("openai_base_url"))?;
    Some(ProviderConfig {
        base_url: Some(base_url),
        key: "openai_base_url".to_owned(),
        env_key: None,
    })
}

/// `profile` on this host: `env` is the caller's environment, `exists` says whether a path
/// is there, `config` is the text of the profile's `provider_config` when it has one and
/// it could be read.
pub fn expand(
    profile: &Profile,
    home: &Path,
    env: &[(String, String)],
    exists: &dyn Fn(&Path) -> bool,
    config: Option<&str>,
) -> Expansion {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let from_url = profile
        .base_url_vars
        .iter()
        .find_map(|v| get(v).and_then(url_host_port).map(|hp| (v.clone(), hp)));
    let provider = config.and_then(provider_config);
    let from_config = provider.as_ref().and_then(|p| {
        let hp = url_host_port(p.base_url.as_deref()?)?;
        let file = profile
            .provider_config
            .as_deref()
            .map_or_else(|| "config".to_owned(), |w| profile.place(w, home, env).0);
        Some((format!("{file} {}", p.key), hp))
    });
    let (allow, allow_from) = match from_url.or(from_config) {
        Some((var, hp)) => (vec![hp], var),
        None => (profile.hosts.clone(), "profile".to_owned()),
    };
    let mut env_pass = profile.env_pass.clone();
    // A variable the caller set itself is passed rather than set.
    for (k, _) in &profile.env_set {
        if get(k).is_some() && !env_pass.contains(k) {
            env_pass.push(k.clone());
        }
    }
    if let Some(k) = provider.and_then(|p| p.env_key)
        && !env_pass.contains(&k)
    {
        env_pass.push(k);
    }
    let mut paths = Vec::new();
    for (list, mode) in [
        (&profile.state_dirs, MountMode::Write),
        (&profile.read_paths, MountMode::Read),
    ] {
        for w in list {
            let (written, path) = profile.place(w, home, env);
            paths.push(ProfilePath {
                written,
                present: exists(&path),
                path,
                mode,
            });
        }
    }
    // The profile points the config dir (the caller did not): seed its copy of the host
    // file, once, where the state dir is there to hold it.
    let points_config = profile
        .home_var
        .as_ref()
        .is_none_or(|(var, _)| get(var).is_none());
    let seeds = profile
        .seeds
        .iter()
        .filter(|_| points_config)
        .filter_map(|(from, to, why)| {
            let (to_written, to_path) = profile.place(to, home, env);
            let from_path = home_path(from, home);
            let in_state = paths
                .iter()
                .any(|w| w.present && w.mode == MountMode::Write && to_path.starts_with(&w.path));
            (in_state && exists(&from_path) && !exists(&to_path)).then(|| {
                crate::policy::StateSeed {
                    from: from_path,
                    to: to_path,
                    written: format!("{from} -> {to_written}"),
                    profile: profile.name.clone(),
                    why: why.clone(),
                }
            })
        })
        .collect();
    Expansion {
        name: profile.name.clone(),
        seeds,
        env_pass,
        env_set: profile
            .env_set
            .iter()
            .filter(|(k, _)| get(k).is_none())
            .map(|(k, v)| (k.clone(), home_value(v, home)))
            .collect(),
        allow,
        allow_from,
        paths,
        arg_patch: profile.arg_patch.clone(),
    }
}

/// Add `x` to `policy`, crediting each grant to `profile:<name>`. The network becomes
/// `allow` only when nobody chose a mode (its source is the default); a profile never gives
/// `host`, and adds no destinations to `none`. Grants the policy already has are left to
/// the layer that gave them. `argv` is the command (empty when there is none, as for
/// `scope`): the profile's argument patch is added unless the command chose itself.
pub fn apply(policy: &mut Policy, x: &Expansion, argv: &[String]) {
    let origin = format!("profile:{}", x.name);
    let mut added: Vec<(&str, String)> = Vec::new();
    if let Some(p) = &x.arg_patch
        && (argv.is_empty() || p.patched(argv).is_some())
    {
        let patch = crate::policy::CommandPatch {
            profile: x.name.clone(),
            insert: p.insert.clone(),
            shown: p.shown(),
            why: p.why.clone(),
        };
        added.push(("command.args", format!("{} ({})", patch.shown, patch.why)));
        policy.command_patch = Some(patch);
    }
    for n in &x.env_pass {
        if !policy.env_allow.contains(n) {
            policy.env_allow.push(n.clone());
            added.push(("env.allow", n.clone()));
        }
    }
    for (k, v) in &x.env_set {
        if !policy.env_set.iter().any(|(n, _)| n == k) {
            policy.env_set.push((k.clone(), v.clone()));
            // The name only: values never appear in records.
            added.push(("env.set", k.clone()));
        }
    }
    let net_default = policy
        .grant_sources
        .iter()
        .any(|g| g.grant == "network.mode" && g.source == GrantSource::Default);
    if net_default && policy.network.mode == NetworkMode::None {
        policy.network.mode = NetworkMode::Allow;
        for g in &mut policy.grant_sources {
            if g.grant == "network.mode" {
                g.value = NetworkMode::Allow.wire_name().to_owned();
                g.source = GrantSource::Profile;
                g.profile = Some(x.name.clone());
            }
        }
    }
    if policy.network.mode == NetworkMode::Allow {
        for a in &x.allow {
            if let Ok(entry) = a.parse::<AllowEntry>()
                && !policy.network.allow.contains(&entry)
            {
                added.push(("network.allow", entry.to_string()));
                policy.network.allow.push(entry);
            }
        }
    }
    for seed in &x.seeds {
        added.push((
            "filesystem.seed",
            format!(
                "{}: copied once before the run, as the copy is absent ({})",
                seed.written, seed.why
            ),
        ));
        policy.state_seeds.push(seed.clone());
    }
    // An absent read-only path inside a present state dir is kept (optional, so skipped and
    // recorded) with what creating it would grant: the run can create it there.
    let inside_state = |p: &ProfilePath| {
        x.paths.iter().any(|w| {
            w.present
                && w.mode == MountMode::Write
                && p.path.starts_with(&w.path)
                && p.path != w.path
        })
    };
    for p in x
        .paths
        .iter()
        .filter(|p| p.present || (p.mode == MountMode::Read && inside_state(p)))
    {
        if policy.mounts.iter().any(|m| m.target == p.path) {
            continue;
        }
        if !p.present {
            added.push((
                "filesystem.creatable",
                format!(
                    "{}: absent, and the run can create it in the writable state dir; {}; \
                     what a run creates there is set aside when it ends",
                    p.written,
                    created_grants(&x.name, &p.path)
                ),
            ));
        }
        let m = Mount {
            source: p.path.clone(),
            target: p.path.clone(),
            mode: p.mode,
            origin: origin.clone(),
            written: p.written.clone(),
            // Present when looked at above; should it vanish before the run, it is skipped
            // rather than refusing the agent.
            optional: true,
        };
        added.push((
            "filesystem.mounts",
            crate::policy::provenance::mount_value(&m),
        ));
        policy.mounts.push(m);
    }
    for (grant, value) in added {
        policy.grant_sources.push(GrantSourceReport {
            grant: grant.to_owned(),
            value,
            source: GrantSource::Profile,
            profile: Some(x.name.clone()),
            absent: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Places, RunFlags, resolve_policy};

    fn table() -> Vec<Profile> {
        builtins()
    }

    fn pick(choice: Choice, invoked: Option<&str>, resolved: Option<&str>) -> Option<String> {
        let t = table();
        select(&t, &choice, invoked.map(Path::new), resolved.map(Path::new))
            .unwrap()
            .map(|p| p.name.clone())
    }

    #[test]
    fn chosen_by_basename_resolved_install_path_or_flag() {
        assert_eq!(
            pick(Choice::Auto, Some("/usr/bin/claude"), None).as_deref(),
            Some("claude")
        );
        assert_eq!(
            pick(
                Choice::Auto,
                Some("/home/u/.local/bin/cc"),
                Some("/home/u/.nvm/lib/node_modules/@anthropic-ai/claude-code/cli.js")
            )
            .as_deref(),
            Some("claude")
        );
        assert_eq!(
            pick(Choice::Auto, Some("g"), Some("/opt/bin/gemini")).as_deref(),
            Some("gemini")
        );
        assert_eq!(pick(Choice::Auto, Some("/bin/sh"), Some("/bin/dash")), None);
        assert_eq!(
            pick(Choice::Named("codex".into()), Some("/bin/sh"), None).as_deref(),
            Some("codex")
        );
        assert_eq!(pick(Choice::Off, Some("claude"), None), None);
        let t = table();
        let e = select(&t, &Choice::Named("nope".into()), None, None).unwrap_err();
        assert!(e.to_string().contains("claude, codex, gemini, aider"));
    }

    #[test]
    fn base_url_replaces_the_vendor_host() {
        assert_eq!(
            url_host_port("http://127.0.0.1:8080/v1").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert_eq!(
            url_host_port("https://user@proxy.corp/anthropic").as_deref(),
            Some("proxy.corp:443")
        );
        assert_eq!(url_host_port("http://[::1]/x").as_deref(), Some("[::1]:80"));
        assert_eq!(url_host_port("ftp://x"), None);
        let claude = &table()[0];
        let home = Path::new("/home/u");
        let none = expand(claude, home, &[], &|_| false, None);
        assert_eq!(
            none.allow,
            vec!["api.anthropic.com:443", "platform.claude.com:443"]
        );
        let env = vec![(
            "ANTHROPIC_BASE_URL".to_owned(),
            "http://127.0.0.1:9000".to_owned(),
        )];
        let x = expand(
            claude,
            home,
            &env,
            &|p| p == Path::new("/home/u/.claude"),
            None,
        );
        assert_eq!(x.allow, vec!["127.0.0.1:9000"]);
        assert_eq!(x.allow_from, "ANTHROPIC_BASE_URL");
        assert!(
            x.env_set
                .contains(&("CLAUDE_CONFIG_DIR".into(), "/home/u/.claude".into()))
        );
        let present: Vec<_> = x.paths.iter().filter(|p| p.present).collect();
        assert_eq!(present.len(), 1);
        assert_eq!(present[0].mode, MountMode::Write);
        // The caller's own CLAUDE_CONFIG_DIR wins (it is passed, not set).
        let own = vec![("CLAUDE_CONFIG_DIR".to_owned(), "/x".to_owned())];
        let x = expand(claude, home, &own, &|_| false, None);
        assert!(!x.env_set.iter().any(|(k, _)| k == "CLAUDE_CONFIG_DIR"));
        // So does any value it sets: passed, never silently dropped.
        let own = vec![("IS_SANDBOX".to_owned(), "0".to_owned())];
        let x = expand(claude, home, &own, &|_| false, None);
        assert!(!x.env_set.iter().any(|(k, _)| k == "IS_SANDBOX"));
        assert!(x.env_pass.contains(&"IS_SANDBOX".to_owned()));
    }

    #[test]
    fn a_codex_provider_in_its_config_gives_the_destination_and_the_key_variable() {
        let codex = &table()[1];
        let home = Path::new("/home/u");
        let cfg = "model_provider = \"local\"\n[model_providers.local]\n\
                   base_url = \"http://127.0.0.1:7000/v1\"\nenv_key = \"LOCAL_KEY\"\n";
        let x = expand(codex, home, &[], &|_| false, Some(cfg));
        assert_eq!(x.allow, vec!["127.0.0.1:7000"]);
        assert_eq!(
            x.allow_from,
            "~/.codex/config.toml model_providers.local.base_url"
        );
        assert!(x.env_pass.contains(&"LOCAL_KEY".to_owned()));
        let x = expand(
            codex,
            home,
            &[],
            &|_| false,
            Some("openai_base_url = \"https://llm.corp/v1\"\n"),
        );
        assert_eq!(x.allow, vec!["llm.corp:443"]);
        // No provider, not TOML, or a provider without a URL: the vendor's host.
        for text in ["model = \"o4\"\n", "[[", "model_provider = \"x\"\n"] {
            let x = expand(codex, home, &[], &|_| false, Some(text));
            assert_eq!(x.allow, vec!["api.openai.com:443"], "{text}");
        }
    }

    #[test]
    fn codex_home_moves_its_config_dir_and_the_config_it_reads() {
        let codex = &table()[1];
        let home = Path::new("/home/u");
        let env = vec![("CODEX_HOME".to_owned(), "/srv/codex".to_owned())];
        assert_eq!(
            codex.provider_config_path(home, &env),
            Some(PathBuf::from("/srv/codex/config.toml"))
        );
        let cfg = "openai_base_url = \"http://127.0.0.1:7001/v1\"\n";
        let x = expand(codex, home, &env, &|_| true, Some(cfg));
        assert_eq!(x.allow_from, "$CODEX_HOME/config.toml openai_base_url");
        let lent: Vec<_> = x
            .paths
            .iter()
            .map(|p| (p.written.as_str(), p.path.as_path(), p.mode))
            .collect();
        assert!(lent.contains(&("$CODEX_HOME", Path::new("/srv/codex"), MountMode::Write)));
        assert!(lent.contains(&(
            "$CODEX_HOME/config.toml",
            Path::new("/srv/codex/config.toml"),
            MountMode::Read
        )));
        assert!(!lent.iter().any(|(_, p, _)| p.starts_with("/home/u/.codex")));
        assert!(x.env_pass.contains(&"CODEX_HOME".to_owned()));
        // Unset or relative: HOME's.
        for env in [vec![], vec![("CODEX_HOME".to_owned(), "rel".to_owned())]] {
            assert_eq!(
                codex.provider_config_path(home, &env),
                Some(PathBuf::from("/home/u/.codex/config.toml"))
            );
        }
    }

    #[test]
    fn codex_gets_its_own_sandbox_off_unless_the_command_chooses_one() {
        let codex = &table()[1];
        let patch = codex.arg_patch.as_ref().unwrap();
        let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            patch.patched(&argv(&["codex", "exec", "hi"])).unwrap(),
            argv(&[
                "codex",
                "-c",
                "sandbox_mode=\"danger-full-access\"",
                "-c",
                "allow_login_shell=false",
                "exec",
                "hi"
            ])
        );
        for own in [
            &["codex", "exec", "-s", "read-only", "hi"][..],
            &["codex", "--sandbox=workspace-write"],
            &[
                "codex",
                "exec",
                "--dangerously-bypass-approvals-and-sandbox",
                "x",
            ],
            &["codex", "-c", "sandbox_mode=read-only"],
        ] {
            assert_eq!(patch.patched(&argv(own)), None, "{own:?}");
        }
        assert_eq!(patch.patched(&[]), None);
        assert_eq!(
            patch.shown(),
            "-c 'sandbox_mode=\"danger-full-access\"' -c allow_login_shell=false"
        );
        // Applied: recorded as a grant of the profile and on the policy; not when the
        // command chose, and never for another profile.
        let home = Path::new("/home/u");
        let x = expand(codex, home, &[], &|_| false, None);
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &x, &argv(&["codex", "exec", "hi"]));
        let cp = p.command_patch.clone().unwrap();
        assert_eq!(cp.apply(&argv(&["codex", "x"]))[1], "-c");
        assert!(cp.line().contains("profile:codex added `-c 'sandbox_mode="));
        assert!(
            p.grant_sources
                .iter()
                .any(|g| g.grant == "command.args" && g.profile.as_deref() == Some("codex"))
        );
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &x, &argv(&["codex", "-s", "read-only"]));
        assert!(p.command_patch.is_none());
        let claude = expand(&table()[0], home, &[], &|_| false, None);
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &claude, &argv(&["claude"]));
        assert!(p.command_patch.is_none());
    }

    #[test]
    fn an_absent_config_inside_the_writable_state_is_reported_creatable() {
        let codex = &table()[1];
        let home = Path::new("/home/u");
        // ~/.codex there, config.toml not: kept as an optional mount, with what it grants.
        let x = expand(
            codex,
            home,
            &[],
            &|p| p == Path::new("/home/u/.codex"),
            None,
        );
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &x, &[]);
        let row = p
            .grant_sources
            .iter()
            .find(|g| g.grant == "filesystem.creatable")
            .unwrap();
        assert!(
            row.value.starts_with("~/.codex/config.toml: absent"),
            "{}",
            row.value
        );
        assert!(row.value.contains("allowed destination"), "{}", row.value);
        p.skip_absent_optional(|s| s == Path::new("/home/u/.codex/config.toml"));
        let c = creatable(&p);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].source, Path::new("/home/u/.codex/config.toml"));
        // No state dir: nothing creatable, nothing kept; nor the absent git config.
        let x = expand(codex, home, &[], &|_| false, None);
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &x, &[]);
        assert!(p.mounts.is_empty() || p.mounts.iter().all(|m| m.origin != "profile:codex"));
        assert!(
            !p.grant_sources
                .iter()
                .any(|g| g.grant == "filesystem.creatable")
        );
        assert_eq!(
            created_grants("other", Path::new("/x/config.toml")),
            "the next run under this profile reads it as the agent's own"
        );
    }

    #[test]
    fn claude_and_gemini_keep_what_runs_code_on_the_host_read_only() {
        let home = Path::new("/home/u");
        let t = table();
        for (name, state, files) in [
            (
                "claude",
                "/home/u/.claude",
                &[
                    "settings.json",
                    "hooks",
                    "plugins/cache",
                    "plugins/installed_plugins.json",
                ][..],
            ),
            (
                "gemini",
                "/home/u/.gemini",
                &["settings.json", "extensions"][..],
            ),
            ("codex", "/home/u/.codex", &["config.toml", "rules"][..]),
        ] {
            let p = t.iter().find(|p| p.name == name).unwrap();
            // Present: lent read-only over the writable state dir.
            let x = expand(p, home, &[], &|_| true, None);
            let mut pol = resolved(RunFlags::default());
            apply(&mut pol, &x, &[]);
            for f in files {
                let path = Path::new(state).join(f);
                let m = pol.mounts.iter().find(|m| m.target == path);
                assert_eq!(m.map(|m| m.mode), Some(MountMode::Read), "{name} {f}");
            }
            assert!(
                pol.mounts
                    .iter()
                    .any(|m| m.target == Path::new(state) && m.mode == MountMode::Write)
            );
            // Absent inside the present state dir: creatable, with what it grants, so the
            // run's end sets it aside.
            let x = expand(p, home, &[], &|q| q == Path::new(state), None);
            let mut pol = resolved(RunFlags::default());
            apply(&mut pol, &x, &[]);
            pol.skip_absent_optional(|q| q != Path::new(state));
            let c: Vec<_> = creatable(&pol).iter().map(|m| m.source.clone()).collect();
            for f in files {
                assert!(c.contains(&Path::new(state).join(f)), "{name} {f}: {c:?}");
                let g = created_grants(name, &Path::new(state).join(f));
                assert!(
                    g.contains("on the host") || name == "codex",
                    "{name} {f}: {g}"
                );
            }
        }
        // claude: a CLAUDE_CONFIG_DIR of the caller's moves all of it.
        let claude = t.iter().find(|p| p.name == "claude").unwrap();
        let env = vec![("CLAUDE_CONFIG_DIR".to_owned(), "/cfg".to_owned())];
        let x = expand(claude, home, &env, &|_| true, None);
        let written: Vec<_> = x.paths.iter().map(|p| p.path.clone()).collect();
        assert!(written.contains(&PathBuf::from("/cfg")), "{written:?}");
        assert!(written.contains(&PathBuf::from("/cfg/settings.json")));
        assert!(!written.contains(&PathBuf::from("/home/u/.claude")));
    }

    #[test]
    fn claude_seeds_its_config_dir_with_the_hosts_claude_json_once() {
        let home = Path::new("/home/u");
        let t = table();
        let claude = t.iter().find(|p| p.name == "claude").unwrap();
        let state = Path::new("/home/u/.claude");
        let from = Path::new("/home/u/.claude.json");
        let to = Path::new("/home/u/.claude/.claude.json");
        let seeds = |env: &[(String, String)], present: &[&Path]| {
            expand(claude, home, env, &|q| present.contains(&q), None).seeds
        };
        let s = seeds(&[], &[state, from]);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].from.as_path(), s[0].to.as_path()), (from, to));
        assert_eq!(s[0].written, "~/.claude.json -> ~/.claude/.claude.json");
        let x = expand(claude, home, &[], &|q| [state, from].contains(&q), None);
        let mut pol = resolved(RunFlags::default());
        apply(&mut pol, &x, &[]);
        assert_eq!(pol.state_seeds, s);
        let row = pol
            .grant_sources
            .iter()
            .find(|g| g.grant == "filesystem.seed")
            .unwrap();
        assert_eq!(row.source, GrantSource::Profile);
        assert!(
            row.value
                .starts_with("~/.claude.json -> ~/.claude/.claude.json: copied once")
        );
        // Not when the copy is there, the host file is not, the state dir is not, or the
        // caller points the config dir itself.
        assert!(seeds(&[], &[state, from, to]).is_empty());
        assert!(seeds(&[], &[state]).is_empty());
        assert!(seeds(&[], &[from]).is_empty());
        let own = vec![("CLAUDE_CONFIG_DIR".to_owned(), "/home/u/.claude".to_owned())];
        assert!(seeds(&own, &[state, from]).is_empty());
        // No other built-in seeds anything.
        for p in t.iter().filter(|p| p.name != "claude") {
            assert!(p.seeds.is_empty(), "{}", p.name);
        }
    }

    #[test]
    fn user_profiles_replace_builtins_of_their_name_and_add_new_ones() {
        let m = crate::manifest::parse_manifest(
            "config.toml",
            "[profiles.claude]\nprograms = [\"claude\"]\nhosts = [\"llm.corp:8443\"]\n\
             [profiles.mine]\nprograms = [\"my-agent\"]\nstate_dirs = [\"~/.mine\"]\n\
             env_set = { MINE_QUIET = \"1\" }\n",
        )
        .unwrap();
        let t = with_user(Some(&m));
        assert_eq!(t.len(), 5);
        let claude = t.iter().find(|p| p.name == "claude").unwrap();
        assert_eq!(claude.hosts, vec!["llm.corp:8443"]);
        assert!(claude.env_set.is_empty() && claude.state_dirs.is_empty());
        let mine = select(&t, &Choice::Auto, Some(Path::new("/x/my-agent")), None)
            .unwrap()
            .unwrap();
        assert_eq!(mine.env_set, vec![("MINE_QUIET".into(), "1".into())]);
        let e = crate::manifest::parse_manifest("c", "[profiles.x]\nprogram = [\"a\"]\n");
        assert!(e.unwrap_err().to_string().contains("program"));
    }

    fn resolved(flags: RunFlags) -> Policy {
        let places = Places {
            cwd: "/w".into(),
            home: "/home/u".into(),
        };
        resolve_policy(None, &flags, &places).unwrap()
    }

    #[test]
    fn applied_grants_are_credited_to_the_profile_and_network_defaults_to_allow() {
        let claude = &table()[0];
        let x = expand(claude, Path::new("/home/u"), &[], &|_| true, None);
        let mut p = resolved(RunFlags::default());
        apply(&mut p, &x, &[]);
        assert_eq!(p.network.mode, NetworkMode::Allow);
        assert!(p.env_allow.contains(&"ANTHROPIC_API_KEY".to_owned()));
        assert!(p.mounts.iter().any(|m| m.mode == MountMode::Write
            && m.source == Path::new("/home/u/.claude")
            && m.origin == "profile:claude"));
        let from_profile: Vec<_> = p
            .grant_sources
            .iter()
            .filter(|g| g.source == GrantSource::Profile)
            .collect();
        assert!(
            from_profile
                .iter()
                .all(|g| g.profile.as_deref() == Some("claude"))
        );
        for grant in [
            "network.mode",
            "network.allow",
            "env.allow",
            "env.set",
            "filesystem.mounts",
        ] {
            assert!(from_profile.iter().any(|g| g.grant == grant), "{grant}");
        }
        // Values set are never recorded, only names.
        assert!(!p.grant_sources.iter().any(|g| g.value == "1"));

        // An explicit `none` stays none, with no destinations.
        let mut p = resolved(RunFlags {
            network: Some("none".into()),
            ..RunFlags::default()
        });
        apply(&mut p, &x, &[]);
        assert_eq!(p.network.mode, NetworkMode::None);
        assert!(p.network.allow.is_empty());
        // `host` is never given, and kept when asked.
        let mut p = resolved(RunFlags {
            network: Some("host".into()),
            ..RunFlags::default()
        });
        apply(&mut p, &x, &[]);
        assert_eq!(p.network.mode, NetworkMode::Host);
    }
}
