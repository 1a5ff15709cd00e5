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

fn step(s: Style, text: &str) {
    println!("\n{}", s.heading(&format!("== {text}")));
}

fn exe() -> Result<std::path::PathBuf, Failure> {
    std::env::current_exe()
        .map_err(|e| Failure::setup(format!("cannot find the cofferdam binary: {e}")))
}

/// Create the scratch project and run the demo.
pub fn demo(style: Style) -> Result<u8, Failure> {
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

    step(
        style,
        &format!("a scratch project in {}", project.display()),
    );
    list(&project);

    step(style, "cofferdam run -- sh -c '<scripted agent>'");
    let status = Command::new(&me)
        .current_dir(&project)
        .env("DEMO_OUTSIDE", &outside)
        .args(["run", "--env", "DEMO_OUTSIDE", "--", "sh", "-c", AGENT])
        .status()
        .map_err(|e| Failure::setup(format!("cannot start cofferdam run: {e}")))?;
    if !status.success() {
        return Err(Failure::setup(format!(
            "the demo run failed ({status}); `cofferdam doctor` shows what this host lacks"
        )));
    }
    let escaped = outside.join("escaped.txt").exists();
    println!(
        "\nyour project on disk is untouched:   {}",
        if escaped {
            "NO: a write escaped"
        } else {
            "yes"
        }
    );
    list(&project);

    step(style, "cofferdam status --review last");
    let _ = Command::new(&me)
        .current_dir(&project)
        .args(["status", "--review", "last"])
        .status();
    if Command::new(&me)
        .arg("diff")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        step(style, "cofferdam diff last");
        let _ = Command::new(&me)
            .current_dir(&project)
            .args(["diff", "last"])
            .status();
    }
    step(style, "what next");
    println!("  cd {}", project.display());
    println!("  cofferdam diff last          # the staged changes as a diff");
    println!("  cofferdam apply last         # let them in (or --path src to pick)");
    println!("  cofferdam drop last          # or throw them away");
    let _ = std::fs::remove_dir(&outside);
    Ok(if escaped { 1 } else { OK })
}

fn list(dir: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    println!("  {}", names.join("  "));
}
