//! The task file of `cofferdam batch`: TOML (`[[task]]` tables) or JSON Lines (one task
//! object a line), told apart by the extension (`.toml`; `.jsonl`, `.ndjson`, `.json`) or
//! else by the first byte that is not blank (`{` is JSON Lines). Parsing is strict: an
//! unknown key or a value of the wrong type is refused with the file, the line and the
//! key's path. Owns that syntax and nothing else: the policy keys are the run flags' names
//! (`PolicyArgs`, `--tier`) and their values are parsed by the policy crate when the batch
//! resolves each task (`cmd::batch`), never here. Pure: the caller reads the file.

use crate::cli::PolicyArgs;
use cofferdam_record::ContainmentClass;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a task file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The TOML does not parse, or has an unknown key or a wrong type.
    #[error("{file}: {message}")]
    Toml {
        /// The task file.
        file: String,
        /// The parser's message, with the line and column.
        message: String,
    },
    /// A JSON line does not parse, or has an unknown key or a wrong type.
    #[error("{file}:{line}: {path}: {message}")]
    Json {
        /// The task file.
        file: String,
        /// The 1-based line.
        line: usize,
        /// The key's path (`.` for the whole object).
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A task is wrong in itself (both `workdir` and `copy_of`, no command, ...).
    #[error("{file}: task {index} ({at}): {message}")]
    Task {
        /// The task file.
        file: String,
        /// The task's 1-based position.
        index: usize,
        /// Where it is (`line N` in JSON Lines, `[[task]] #N` in TOML).
        at: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The file holds no task.
    #[error("{file}: no task; give `[[task]]` tables (TOML) or one JSON object a line")]
    Empty {
        /// The task file.
        file: String,
    },
}

/// One task as written: where it works, what it runs, its policy keys (the run flags'
/// names, `-` as `_`), its labels and task id.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The folder the command works in (relative to the task file's folder).
    pub workdir: Option<PathBuf>,
    /// Work in a fresh copy of this folder instead (relative to the task file's folder).
    pub copy_of: Option<PathBuf>,
    /// The command and its arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// Labels, `KEY = VALUE` (the bundle's `orchestration`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The orchestrator's task id (`run.task_id`).
    pub task_id: Option<String>,
    /// `--tier`.
    pub tier: Option<ContainmentClass>,
    /// `--manifest`.
    pub manifest: Option<PathBuf>,
    /// `--containment`.
    pub containment: Option<ContainmentClass>,
    /// `--mount`, repeatable.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// `--read-only`.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// `--env`.
    #[serde(default)]
    pub env: Vec<String>,
    /// `--agent`.
    pub agent: Option<String>,
    /// `--no-agent-defaults`.
    #[serde(default)]
    pub no_agent_defaults: bool,
    /// `--lend-path-toolchains`.
    #[serde(default)]
    pub lend_path_toolchains: bool,
    /// `--no-lend-path-toolchains`.
    #[serde(default)]
    pub no_lend_path_toolchains: bool,
    /// `--network`.
    pub network: Option<String>,
    /// `--allow-net`.
    #[serde(default)]
    pub allow_net: Vec<String>,
    /// `--memory`.
    pub memory: Option<String>,
    /// `--pids`.
    pub pids: Option<String>,
    /// `--cpus`.
    pub cpus: Option<f64>,
    /// `--timeout`.
    pub timeout: Option<String>,
    /// `--cpu-time`.
    pub cpu_time: Option<String>,
    /// `--max-file-size`.
    pub max_file_size: Option<String>,
    /// `--open-files`.
    pub open_files: Option<u64>,
    /// `--io-bps`.
    pub io_bps: Option<String>,
    /// `--tmp-size`.
    pub tmp_size: Option<String>,
    /// `--stage-size`.
    pub stage_size: Option<String>,
}

/// Where a task works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In this folder (absolute).
    Workdir(PathBuf),
    /// In a fresh copy of this folder (absolute).
    CopyOf(PathBuf),
}

/// A task checked in itself, its paths absolute.
#[derive(Debug, Clone)]
pub struct Task {
    /// Its 1-based position in the file.
    pub index: usize,
    /// Where it works.
    pub place: Place,
    /// What it runs (never empty).
    pub command: Vec<String>,
    /// Its labels as `KEY=VALUE` (checked by the policy crate with the task id).
    pub labels: Vec<String>,
    /// Its task id.
    pub task_id: Option<String>,
    /// `--tier`.
    pub tier: Option<ContainmentClass>,
    /// Its policy flags; `workdir` is left `None` (the place says it).
    pub policy: PolicyArgs,
}

/// The label keys `cofferdam batch` sets on every task's job; a task may not set them.
pub const BATCH_LABEL: &str = "batch";
/// The label holding the task's position in the batch.
pub const TASK_LABEL: &str = "batch.task";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    task: Vec<TaskSpec>,
}

/// Whether `file` is JSON Lines: by its extension, else by its first non-blank byte.
pub fn is_json_lines(file: &Path, text: &str) -> bool {
    match file.extension().and_then(|e| e.to_str()) {
        Some("toml") => false,
        Some("jsonl" | "ndjson" | "json") => true,
        _ => text.trim_start().starts_with('{'),
    }
}

/// Parse the task file `file` (its text `text`); relative paths are taken from `base`.
pub fn parse(file: &Path, text: &str, base: &Path) -> Result<Vec<Task>, SpecError> {
    let name = crate::shown_path(file);
    let specs: Vec<(String, TaskSpec)> = if is_json_lines(file, text) {
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let de = &mut serde_json::Deserializer::from_str(line);
            let spec: TaskSpec = serde_path_to_error::deserialize(de).map_err(|e| {
                let path = e.path().to_string();
                SpecError::Json {
                    file: name.clone(),
                    line: n + 1,
                    path,
                    message: e.into_inner().to_string(),
                }
            })?;
            out.push((format!("line {}", n + 1), spec));
        }
        out
    } else {
        let parsed: TomlFile = toml::from_str(text).map_err(|e| SpecError::Toml {
            file: name.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        parsed
            .task
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("[[task]] #{}", i + 1), s))
            .collect()
    };
    if specs.is_empty() {
        return Err(SpecError::Empty { file: name });
    }
    specs
        .into_iter()
        .enumerate()
        .map(|(i, (at, spec))| {
            check(spec, i + 1, base).map_err(|message| SpecError::Task {
                file: name.clone(),
                index: i + 1,
                at,
                message,
            })
        })
        .collect()
}

/// One task checked: exactly one place, a command, no label of the batch's own.
fn check(spec: TaskSpec, index: usize, base: &Path) -> Result<Task, String> {
    let place = match (spec.workdir, spec.copy_of) {
        (Some(w), None) => Place::Workdir(base.join(w)),
        (None, Some(c)) => Place::CopyOf(base.join(c)),
        (Some(_), Some(_)) => {
            return Err("give `workdir` or `copy_of`, not both".into());
        }
        (None, None) => {
            return Err("give `workdir` (a folder) or `copy_of` (a folder to copy)".into());
        }
    };
    if spec.command.is_empty() {
        return Err("give `command`, the argv to run, e.g. [\"make\", \"test\"]".into());
    }
    if let Some(k) = spec
        .labels
        .keys()
        .find(|k| *k == BATCH_LABEL || *k == TASK_LABEL)
    {
        return Err(format!(
            "label `{k}` is set by `cofferdam batch` itself; use another key"
        ));
    }
    let policy = PolicyArgs {
        manifest: spec.manifest.map(|m| base.join(m)),
        workdir: None,
        containment: spec.containment,
        mounts: spec.mounts,
        // No file lends a secret: `--lend-secret` is a flag of `run` only.
        lend_secrets: Vec::new(),
        read_only: spec.read_only,
        env: spec.env,
        agent: spec.agent,
        no_agent_defaults: spec.no_agent_defaults,
        lend_path_toolchains: spec.lend_path_toolchains,
        no_lend_path_toolchains: spec.no_lend_path_toolchains,
        network: spec.network,
        allow_net: spec.allow_net,
        publish: Vec::new(),
        memory: spec.memory,
        pids: spec.pids,
        cpus: spec.cpus,
        timeout: spec.timeout,
        cpu_time: spec.cpu_time,
        max_file_size: spec.max_file_size,
        open_files: spec.open_files,
        io_bps: spec.io_bps,
        tmp_size: spec.tmp_size,
        stage_size: spec.stage_size,
    };
    Ok(Task {
        index,
        place,
        command: spec.command,
        labels: spec
            .labels
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        task_id: spec.task_id,
        tier: spec.tier,
        policy,
    })
}

/// The `cofferdam run` flags that stand for `policy` and `tier` (the workdir excluded):
/// what a task's child run is given, so its values are parsed by the same code as a
/// run's.
pub fn run_flags(policy: &PolicyArgs, tier: Option<ContainmentClass>) -> Vec<String> {
    let mut out = Vec::new();
    let mut one = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            out.push(format!("--{flag}={v}"));
        }
    };
    one("tier", tier.map(|t| t.to_string()));
    one(
        "manifest",
        policy.manifest.as_ref().map(|m| m.display().to_string()),
    );
    one("containment", policy.containment.map(|c| c.to_string()));
    one("agent", policy.agent.clone());
    one("network", policy.network.clone());
    one("memory", policy.memory.clone());
    one("pids", policy.pids.clone());
    one("cpus", policy.cpus.map(|c| c.to_string()));
    one("timeout", policy.timeout.clone());
    one("cpu-time", policy.cpu_time.clone());
    one("max-file-size", policy.max_file_size.clone());
    one("open-files", policy.open_files.map(|n| n.to_string()));
    one("io-bps", policy.io_bps.clone());
    one("tmp-size", policy.tmp_size.clone());
    one("stage-size", policy.stage_size.clone());
    for (flag, values) in [
        ("mount", &policy.mounts),
        ("read-only", &policy.read_only),
        ("env", &policy.env),
        ("allow-net", &policy.allow_net),
    ] {
        for v in values {
            out.push(format!("--{flag}={v}"));
        }
    }
    if policy.no_agent_defaults {
        out.push("--no-agent-defaults".into());
    }
    if policy.lend_path_toolchains {
        out.push("--lend-path-toolchains".into());
    }
    if policy.no_lend_path_toolchains {
        out.push("--no-lend-path-toolchains".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml_tasks(text: &str) -> Result<Vec<Task>, SpecError> {
        parse(Path::new("b.toml"), text, Path::new("/base"))
    }

    #[test]
    fn toml_and_json_lines_give_the_same_task() {
        let t = toml_tasks(
            "[[task]]\nworkdir = \"w\"\ncommand = [\"make\", \"test\"]\ntimeout = \"5s\"\n\
             network = \"none\"\nallow_net = [\"a.example\"]\ntask_id = \"T1\"\n\
             labels = { model = \"m1\" }\ntier = \"scoped\"\n",
        )
        .unwrap();
        let j = parse(
            Path::new("b.jsonl"),
            "\n{\"workdir\":\"w\",\"command\":[\"make\",\"test\"],\"timeout\":\"5s\",\
             \"network\":\"none\",\"allow_net\":[\"a.example\"],\"task_id\":\"T1\",\
             \"labels\":{\"model\":\"m1\"},\"tier\":\"scoped\"}\n",
            Path::new("/base"),
        )
        .unwrap();
        assert_eq!(format!("{t:?}"), format!("{j:?}"));
        assert_eq!(t[0].place, Place::Workdir("/base/w".into()));
        assert_eq!(t[0].labels, ["model=m1"]);
        assert_eq!(
            run_flags(&t[0].policy, t[0].tier),
            [
                "--tier=scoped",
                "--network=none",
                "--timeout=5s",
                "--allow-net=a.example"
            ]
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_the_line_and_path() {
        let e = parse(
            Path::new("b.jsonl"),
            "{\"workdir\":\"w\",\"command\":[\"true\"]}\n{\"workdir\":\"w\",\"comand\":[]}\n",
            Path::new("/"),
        )
        .unwrap_err();
        let SpecError::Json { line, message, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*line, 2);
        assert!(message.contains("comand"), "{message}");
        let e = toml_tasks("[[task]]\nworkdir = \"w\"\ncommand = [\"true\"]\n\ntimeuot = \"1s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 5") && e.contains("timeuot"), "{e}");
        let e = parse(
            Path::new("b.jsonl"),
            "{\"workdir\":\"w\",\"command\":[\"x\"],\"labels\":{\"a\":1}}",
            Path::new("/"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("labels.a"), "{e}");
    }

    #[test]
    fn a_task_needs_one_place_a_command_and_no_batch_label() {
        for (text, want) in [
            ("[[task]]\ncommand = [\"true\"]\n", "give `workdir`"),
            (
                "[[task]]\nworkdir = \"a\"\ncopy_of = \"b\"\ncommand = [\"true\"]\n",
                "not both",
            ),
            ("[[task]]\nworkdir = \"a\"\n", "give `command`"),
            (
                "[[task]]\nworkdir = \"a\"\ncommand = [\"true\"]\nlabels = { batch = \"x\" }\n",
                "set by `cofferdam batch`",
            ),
        ] {
            let e = toml_tasks(text).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("task 1"), "{text}: {e}");
        }
        assert!(matches!(toml_tasks(""), Err(SpecError::Empty { .. })));
    }

    #[test]
    fn the_format_is_told_by_extension_then_first_byte() {
        assert!(is_json_lines(Path::new("t"), "  {\"a\":1}"));
        assert!(!is_json_lines(Path::new("t"), "[[task]]"));
        assert!(!is_json_lines(Path::new("t.toml"), "{"));
        assert!(is_json_lines(Path::new("t.jsonl"), "[[task]]"));
    }

    /// Every policy flag of `run` is a task key: the batch has no policy key of its own
    /// and misses none of run's (publish excepted: many tasks cannot bind one host port;
    /// lend_secrets too: no file lends a secret, only a flag that names it).
    #[test]
    fn every_policy_flag_is_a_task_key() {
        use clap::Args as _;
        let cmd = PolicyArgs::augment_args(clap::Command::new("x"));
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "publish" || id == "workdir" || id == "lend_secrets" {
                continue;
            }
            let value = if arg.get_action().takes_values() {
                if id == "cpus" || id == "open_files" {
                    "1"
                } else if id == "containment" {
                    "\"scoped\""
                } else if matches!(id, "mounts" | "read_only" | "env" | "allow_net") {
                    "[\"x\"]"
                } else {
                    "\"x\""
                }
            } else {
                "true"
            };
            let text = format!("[[task]]\nworkdir = \"w\"\ncommand = [\"true\"]\n{id} = {value}\n");
            assert!(toml_tasks(&text).is_ok(), "{id}: {:?}", toml_tasks(&text));
        }
    }
}
