//! `cofferdam demo`: a newcomer's first run. In a scratch project it creates, a short
//! scripted "agent" edits, adds and deletes files and tries three escapes (a write outside
//! the project, a read of `~/.ssh`, a network connection); then the review and the diff are
//! shown, and the commands to apply or drop the stage are printed. Every step is the real
//! CLI (this binary, re-run), so the demo shows exactly what a user gets.

use crate::exit::{Failure, OK};
use crate::style::Style;
use std::path::Path;
use std::process::Command;

/// The scripted agent. Each escape prints what happened to it.
const AGENT: &str = r#"
echo "agent: editing README.md, adding src/hello.py, deleting notes.txt"
printf '# demo project\n\nNow with a greeting.\n' > README.md
mkdir -p src && printf 'print("hello from the stage")\n' > src/hello.py
rm notes.txt
echo "agent: trying to escape..."
if (echo pwned > "$DEMO_OUTSIDE/escaped.txt") 2>/dev/null; then
  echo "  write outside the project: the write went to a sandbox-private copy, not your disk"
else
  echo "  write outside the project: refused"
fi
if ls "$HOME/.ssh" >/dev/null 2>&1 && [ -n "$(ls -A "$HOME/.ssh" 2>/dev/null)" ]; then
  echo "  read ~/.ssh: VISIBLE"
else
  echo "  read ~/.ssh: not visible"
fi
if command -v getent >/dev/null && getent hosts example.com >/dev/null 2>&1; then
  echo "  reach the network: REACHED"
else
  echo "  reach the network: no route (loopback only)"
fi
"#;

/// What the demo prints: text steps on a terminal's stdout, or (`--json`) nothing until
/// one JSON document at the end, made of the `--json` output of each real command.
struct Out {
    style: Style,
    json: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Out {
    fn step(&self, text: &str) {
        if self.json.is_none() {
            println!("\n{}", self.style.heading(&format!("== {text}")));
        }
    }

    fn line(&self, text: &str) {
        if self.json.is_none() {
            println!("{text}");
        }
    }

    /// Run this binary with `args` in `dir`: its output shown, or its JSON kept as `key`.
    fn run(
        &mut self,
        me: &Path,
        dir: &Path,
        key: &str,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Result<std::process::ExitStatus, Failure> {
        let mut c = Command::new(me);
        c.current_dir(dir);
        for (k, v) in env {
            c.env(k, v);
        }
        let start = |e: std::io::Error| {
            Failure::setup(format!("cannot start cofferdam {}: {e}", args.join(" ")))
        };
        let Some(doc) = &mut self.json else {
            return c.args(args).status().map_err(start);
        };
        let out = c
            .arg("--json")
            .args(args)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(start)?;
        let value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        doc.insert(key.to_owned(), value);
        Ok(out.status)
    }
}

fn exe() -> Result<std::path::PathBuf, Failure> {
    std::env::current_exe()
        .map_err(|e| Failure::setup(format!("cannot find the cofferdam binary: {e}")))
}

/// Create the scratch project and run the demo.
pub fn demo(style: Style, json: bool) -> Result<u8, Failure> {
    let mut o = Out {
        style,
        json: json.then(serde_json::Map::new),
    };
    let base = std::env::temp_dir();
    let project = tempfile::Builder::new()
        .prefix("cofferdam-demo-")
        .tempdir_in(&base)
        .map_err(|e| {
            Failure::setup(format!(
                "cannot create a scratch project in {}: {e}",
                base.display()
            ))
        })?
        .keep();
    let outside = project.with_extension("outside");
    std::fs::create_dir_all(&outside)
        .map_err(|e| Failure::setup(format!("cannot create {}: {e}", outside.display())))?;
    let write = |name: &str, text: &str| {
        std::fs::write(project.join(name), text)
            .map_err(|e| Failure::setup(format!("cannot write the demo project: {e}")))
    };
    write("README.md", "# demo project\n")?;
    write("notes.txt", "scratch notes\n")?;
    let me = exe()?;

    o.step(&format!("a scratch project in {}", project.display()));
    o.line(&list(&project));

    o.step("cofferdam run -- sh -c '<scripted agent>'");
    let status = o.run(
        &me,
        &project,
        "run",
        &["run", "--env", "DEMO_OUTSIDE", "--", "sh", "-c", AGENT],
        &[("DEMO_OUTSIDE", &outside)],
    )?;
    if !status.success() {
        return Err(Failure::setup(format!(
            "the demo run failed ({status}); `cofferdam doctor` shows what this host lacks"
        )));
    }
    let escaped = outside.join("escaped.txt").exists();
    o.line(&format!(
        "\nyour project on disk is untouched:   {}",
        if escaped {
            "NO: a write escaped"
        } else {
            "yes"
        }
    ));
    o.line(&list(&project));

    o.step("cofferdam status --review last");
    let _ = o.run(
        &me,
        &project,
        "review",
        &["status", "--review", "last"],
        &[],
    );
    o.step("cofferdam diff last");
    let _ = o.run(&me, &project, "diff", &["diff", "last"], &[]);
    o.step("what next");
    let next = [
        "cofferdam diff last          # the staged changes as a diff",
        "cofferdam apply last         # let them in (or --path src to pick)",
        "cofferdam drop last          # or throw them away",
    ];
    o.line(&format!("  cd {}", project.display()));
    for n in next {
        o.line(&format!("  {n}"));
    }
    let _ = std::fs::remove_dir(&outside);
    o.line(&format!(
        "\nthe scratch project stays in {} for these; when done: \
         `cofferdam drop last` (if not applied), then `rm -r {}`",
        project.display(),
        project.display()
    ));
    if !on_path("cofferdam") {
        o.line(&format!(
            "`cofferdam` is not on your PATH (this one is {}): \
             `cargo install --locked --path crates/cofferdam` puts it in ~/.cargo/bin",
            me.display()
        ));
    }
    if let Some(mut doc) = o.json {
        doc.insert("project".into(), serde_json::json!(project));
        doc.insert("project_untouched".into(), serde_json::json!(!escaped));
        let next: Vec<&str> = next
            .iter()
            .map(|n| n.split("  ").next().unwrap_or(n))
            .collect();
        doc.insert("next".into(), serde_json::json!(next));
        crate::print_json(&doc)?;
    }
    Ok(if escaped { 1 } else { OK })
}

/// Whether `name` is an executable file in a directory of `$PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

fn list(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    format!("  {}", names.join("  "))
}
