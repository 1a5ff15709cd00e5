//! The sandbox init's entry point: the re-executed binary chooses the sealed init
//! (`crate::init`, namespaces named on its command line) or the init of the tiers without
//! namespaces (`crate::scoped`). Owns that choice only; it sits above both so that neither
//! imports the other's entry.

use crate::{init, scoped};

/// The init's entry point (the binary's first argument is [`init::INIT_ARG`]): never
/// returns.
pub fn init_main() -> ! {
    let code = match std::env::args_os().nth(2) {
        _ if crate::mutant::active(crate::mutant::INIT_EARLY_FAILURE) => {
            init::fail_early_on_purpose()
        }
        Some(arg) => match init::early_namespaces(&arg) {
            Some(early) => init::sealed_main(early),
            None => init::SETUP_FAILED,
        },
        None => unsealed(),
    };
    std::process::exit(code)
}

/// The init's entry in a fork of the supervisor (`crate::fork`), which hands `early`
/// over as a value instead of on a command line: the init's exit code.
pub(crate) fn forked_main(early: Option<init::EarlyNamespaces>) -> i32 {
    if crate::mutant::active(crate::mutant::INIT_EARLY_FAILURE) {
        return init::fail_early_on_purpose();
    }
    match early {
        Some(early) => init::sealed_main(early),
        None => unsealed(),
    }
}

/// The init of the tiers without namespaces.
fn unsealed() -> i32 {
    match init::unsealed_plan() {
        Ok(plan) => scoped::run_scoped(&plan),
        Err(code) => code,
    }
}
