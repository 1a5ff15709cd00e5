//! `cofferdam man`: prints one page of the manual or writes them all; the pages
//! themselves are `manual`'s.

use crate::exit::{Failure, OK};
use std::path::Path;

/// The whole command line's definition, whose pages the manual renders.
fn top() -> clap::Command {
    <crate::cli::Cli as clap::CommandFactory>::command()
}

/// Print `command`'s page (the top one when `None`), or with `out` write every page there.
pub fn man(command: Option<&str>, out: Option<&Path>) -> Result<u8, Failure> {
    let render = |e: std::io::Error| Failure::setup(format!("cannot render the man page: {e}"));
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).map_err(|e| {
            Failure::setup(format!(
                "cannot create {}: {e}; pick a folder you can write",
                dir.display()
            ))
        })?;
        let mut listed = String::new();
        for (file, page) in crate::manual::pages(top()).map_err(render)? {
            let path = dir.join(&file);
            std::fs::write(&path, page)
                .map_err(|e| Failure::setup(format!("cannot write {}: {e}", path.display())))?;
            listed.push_str(&format!("{}\n", path.display()));
        }
        crate::write_stdout(listed.as_bytes())?;
        return Ok(OK);
    }
    let name = command.unwrap_or("cofferdam").replace(' ', "-");
    match crate::manual::page(top(), &name).map_err(render)? {
        Some(page) => {
            crate::write_stdout(&page)?;
            Ok(OK)
        }
        None => Err(Failure::usage(format!(
            "no man page for `{name}`: name a command such as `run`, `apply` or `bundle-verify` \
             (`cofferdam --help` lists them)"
        ))),
    }
}
