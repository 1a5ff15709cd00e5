//! The sandbox init on the tiers without namespaces (DESIGN.md §3, last paragraph): the
//! scoped tier (`landlock+seccomp`) runs steps 4–8 of the sealed order on the host, and the
//! advisory tier (`none`) only the environment and the rlimits. The command runs as a plain
//! host process in the copy of the workdir (`plan.fs.workdir`), the init's child.
//!
//! Scoped order (`SandboxPlan::setup_program`, run by the one setup loop of
//! `crate::setup`, each step reporting its rows and checking them against the plan's
//! requirements like the sealed tier): `chdir` into the copy; rlimits; close inherited
//! descriptors; non-dumpable; drop capabilities (a caller without `CAP_SETPCAP` cannot
//! empty the bounding set: `partial`, `no_new_privs` covers it); `no_new_privs`; Landlock
//! (its `filesystem_write` must be `enforced`, or the command does not run: that is the
//! tier's write boundary); the metadata filter (`metafilter`:
//! Landlock has no right for chmod, chown, utimes or xattrs); the socket filter when the
//! plan confines TCP; a check that each hidden path really cannot be opened; the seccomp
//! filter; then the ready marker and the command. With a terminal in the plan, the
//! command's pseudo-terminal is allocated from the host's `/dev/ptmx` just before Landlock,
//! and its slave is the one `/dev/pts` entry the ruleset grants. Evidence of absence is
//! reported too: no pid namespace (`process` is not isolated), and at Landlock ABI below 9,
//! pathname unix sockets stay reachable (`network` partial).
//!
//! The init is a child subreaper: when the command's main process ends, every descendant
//! left (daemons, background jobs) is killed before the init exits, so nothing keeps
//! writing to the copy after the stage is sealed; and so it is when the supervisor dies
//! or stops the run (`crate::reaper`).
//!
//! Owns this tier's process shape only (subreaper, the descendants' end); the order and the
//! requirements are the plan's, each mechanism its own module. Single-threaded.

use crate::init::run_command_on;
use crate::{reaper, setup};
use cofferdam_policy::plan::SandboxPlan;

/// Run the plan on the scoped or advisory tier; returns the init's exit code.
pub fn run_scoped(plan: &SandboxPlan) -> i32 {
    // Not SIGKILL as on the sealed tier: without a pid namespace the init must live to end
    // the command's tree when the supervisor dies (`crate::reaper`).
    reaper::end_tree_with_parent();
    // Any pid sets the flag (the kernel reads it as a boolean).
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    // The tier's program (`SandboxPlan::setup_program`) in the one setup loop; the
    // command's terminal when the scoped tier allocated it (before Landlock).
    let slave = match setup::run(plan, None) {
        Ok(slave) => slave,
        Err(code) => return code,
    };
    let code = run_command_on(plan, slave);
    reaper::kill_descendants();
    code
}
