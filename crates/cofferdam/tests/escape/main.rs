//! The escape conformance suite: a table of attacks against the real `cofferdam` binary,
//! grouped by boundary, each run from inside a fresh sandbox. An attack asserts the denial on
//! the host (a file untouched, a process alive, a listener that saw nothing) *and* what the
//! Run Bundle says about the run. Also the crash tests of `apply` (SIGKILL at seeded random
//! instants) and full-disk tests of `run` and `apply`.
//!
//! Adding an attack: write a probe in the boundary's module and add one [`harness::Attack`]
//! row to its `ATTACKS` table (id, boundary, description, and per tier its verdict: `must`
//! or `documented`; a tier not listed does not run it). A `documented` verdict names the start of the scope report's "not protected here" line that admits the
//! limitation; when such an attack gets through, the suite fails unless that line is in
//! `cofferdam scope --json` (a refused one needs no line: a newer kernel may close it).
//! Adding a tier: a [`harness::Tier`] variant, one row in [`harness::TIERS`] (how to ask
//! `run` for it and the scope report's name for it), the claims every run on it makes
//! (`Ctx::assert_boundary`), then a `(tier, verdict)` pair in each attack that applies —
//! e.g. `(Scoped, Documented("no pid, ipc or uts namespace"))` for a host-pid attack.
//!
//! Tiers today: `sealed`; `scoped` asked with `run --tier scoped` (every attack that applies:
//! not the `--mount`/`--read-only` ones, which the tier refuses); `scoped/no-userns`, a
//! sample run on a simulated host without user namespaces, where the scoped tier is what the
//! host offers; `sealed/fork`, every `fw.*` attack and a sample of the rest run as forks
//! (`run --on`) of a job staged first, so
//! the stage attacked starts as a checkpoint of another job's; `advisory`, a harmless sample
//! whose bundle must claim no boundary. The scope report checked for a `documented` row is
//! asked with the same tier flags (`scope --tier`) and the run's resource flags; its
//! resource rows' limitations count as lines
//! (`<name>: <limitation>`).
//!
//! Attacks target canaries. The suite runs as root on developers' machines and in CI, and
//! an attack that gets through (a regression, or a build with a control removed) must show
//! up as a failed row and nothing else. So no probe touches a real system file, setting,
//! process or terminal: a file in `/etc` or `/usr` is [`harness::Canaries`] (`ctx.canaries()`,
//! `$ETC_CANARY`/`$USR_CANARY` inside: root-owned files the harness makes in `/etc` and
//! `/usr/lib` as root, the caller's own in a temp dir otherwise), a process to signal or
//! trace is the sentinel of `ctx.host_process()` (its pid and process group, never
//! `kill(-1)` or pid 1), a kernel knob or `/proc` trigger is opened for writing and closed
//! with nothing written (the open is what the boundary refuses), a setting is set to the
//! value it has (the call's success is the evidence), a raw syscall gets arguments the
//! kernel rejects right after its permission check (an unknown flag, a wrong magic, a
//! missing path; `EINVAL` or `ENOENT` when allowed, never an effect), a mount attack runs
//! in a private mount namespace (`ctx.private_mounts()`), and every run starts in a session
//! of its own (no controlling terminal but a pty the harness made). A new attack on
//! something the harness has no canary for gets one first: made in the attack's context,
//! removed on drop (also on panic), and checked after the run as the denial's evidence.
//! `.ci/run` checks the claim from outside: its own canaries and a snapshot of host files
//! and settings are unchanged after the tests, its sentinel alive, no canary left behind.
//!
//! `ESCAPE_ONLY=<id prefix>` runs a subset, `ESCAPE_TIER=<label>[,<label>]` some tiers. The
//! result table, with per-tier counts, is printed to stderr even when the test passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../cli/common.rs"]
#[allow(dead_code)]
mod common;

mod agent_state;
mod agentctl;
mod apply_records;
mod crash;
mod fs_read;
mod fs_write;
mod full_disk;
mod harness;
mod kernel;
mod listeners;
mod manifest_trust;
mod metadata;
mod network;
mod process;
mod records;
mod resources;
mod resources_tmpfs;
mod review_output;
mod secrets;
mod sensitive;
mod sockets;
mod stdio;
mod store;
mod terminal;

/// Every attack, in table order.
fn all_attacks() -> Vec<&'static harness::Attack> {
    [
        fs_write::ATTACKS,
        fs_read::ATTACKS,
        process::ATTACKS,
        kernel::SYSCALL_ATTACKS,
        kernel::ATTACKS,
        network::ATTACKS,
        listeners::ATTACKS,
        metadata::ATTACKS,
        terminal::ATTACKS,
        stdio::ATTACKS,
        records::ATTACKS,
        apply_records::ATTACKS,
        resources::ATTACKS,
        secrets::ATTACKS,
        resources_tmpfs::ATTACKS,
        store::ATTACKS,
        review_output::ATTACKS,
        sensitive::ATTACKS,
        sockets::ATTACKS,
        sockets::DEVICE_ATTACKS,
        sockets::EXEC_ATTACKS,
        sockets::WATCH_ATTACKS,
        manifest_trust::ATTACKS,
        agent_state::ATTACKS,
        agentctl::ATTACKS,
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn escape_conformance() {
    harness::run_suite(&all_attacks(), resources::TO_BE_ADDED);
}

#[test]
fn attack_ids_are_unique_and_the_table_is_big_enough() {
    let all = all_attacks();
    let mut ids: Vec<&str> = all.iter().map(|a| a.id).collect();
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate attack ids");
    assert!(n >= 40, "only {n} attacks");
    for a in &all {
        assert!(
            a.id.starts_with(a.boundary.prefix()),
            "{} is not named after its boundary",
            a.id
        );
        assert!(!a.on.is_empty(), "{} runs on no tier", a.id);
    }
    for spec in harness::TIERS {
        for id in spec.only {
            let a = all.iter().find(|a| a.id == *id);
            assert!(
                a.is_some_and(|a| a.on.iter().any(|(t, _)| *t == spec.tier)),
                "{id} in {}'s sample does not run on its tier",
                spec.label
            );
        }
    }
}
