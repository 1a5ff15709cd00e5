//! Lays out the release binary's hot code together. Every sealed run starts this 12 MB
//! binary (the supervisor, then the forked init and pid 1, which map its text again), and
//! each page-cache page its code touches is a page fault at start and a mapping to tear
//! down at exit. `symbol-order.txt` lists the functions a `run -- /bin/true` executes
//! (`bench/symbol-order.sh` measures and rewrites it); lld places them first, so a run
//! touches about 1.5 MB of text instead of pages spread over all of it.
//!
//! Only where the linker is known to be lld: release builds for x86-64 Linux glibc with
//! rustc 1.90 or later (its default linker there), no linker chosen by the caller. Anywhere
//! else, or with `COFFERDAM_SYMBOL_ORDER=off`, nothing changes. A stale list costs only the
//! layout: names no longer in the binary are ignored.

use std::env;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=symbol-order.txt");
    println!("cargo::rerun-if-env-changed=COFFERDAM_SYMBOL_ORDER");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    if ordering_applies() && !dir.is_empty() {
        println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/symbol-order.txt");
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

fn ordering_applies() -> bool {
    let var = |k: &str| env::var(k).unwrap_or_default();
    var("COFFERDAM_SYMBOL_ORDER") != "off"
        && var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && var("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty()
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("link")
        && rustc_minor().is_some_and(|m| m >= 90)
}

/// The minor version of the rustc building this crate (`rustc 1.95.0 (…)` → 95).
fn rustc_minor() -> Option<u32> {
    let rustc = env::var_os("RUSTC")?;
    let out = Command::new(rustc).arg("-V").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    let mut parts = version.split('.');
    if parts.next()? != "1" {
        return None;
    }
    parts.next()?.parse().ok()
}
