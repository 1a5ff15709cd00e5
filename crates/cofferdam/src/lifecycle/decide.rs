//! The run's first phase: open the store, read the host's facts and decide the tier, and
//! refuse what the tier cannot carry, before anything is started or created. Owns nothing
//! of the job; the decision itself is `cofferdam_policy`'s.

use super::RunRequest;
use crate::exit::Failure;
use cofferdam_policy::ContainmentDecision;
use cofferdam_record::EnforcementTier;
use cofferdam_sandbox::probe::FactsBeforeCgroups;
use cofferdam_stage::job::JobStore;

/// What the run is decided to be, with the store it goes in.
pub(super) struct Decided {
    /// The store, its ownership checked.
    pub store: JobStore,
    /// The host's facts, the cgroup layout not read yet.
    pub facts: FactsBeforeCgroups,
    /// The tier and how it meets the floor.
    pub decision: ContainmentDecision,
    /// Scoped and advisory: the workdir is staged by a copy (`super::copy`), not an
    /// overlay.
    pub copy_tier: bool,
}

/// Open the store, read the host's facts, decide, and refuse below the floor.
pub(super) fn decide(req: &RunRequest) -> Result<Decided, Failure> {
    let policy = &req.policy;
    cofferdam_stage::store::check_outside_workdir(&req.env.storage_root, &policy.workdir)
        .map_err(Failure::setup)?;
    // The store first: one another user owns or can write is refused before anything of
    // it (the host facts cache below included) is read, and before anything runs.
    let store = JobStore::open(&req.env.storage_root).map_err(Failure::setup)?;
    // The namespace facts are cached per boot and settings: the init re-attempts every
    // mechanism anyway, so a stale cache can only make the setup fail, never weaken it.
    // The cgroup layout is read by the run, right before its cgroup is made (`with_cgroups`).
    let facts = cofferdam_sandbox::probe::probe_host_cached(&store.root().join("host-facts.json"));
    let decision = facts.decide(policy.floor, req.tier_cap);
    // The one decision `scope` reports too: what this tier cannot carry is refused here.
    cofferdam_policy::refusal::check_run(policy, &decision)
        .map_err(|r| Failure::setup(format!("refusing to run: {r}")))?;
    if policy.network.mode == cofferdam_net::NetworkMode::Host {
        eprintln!(
            "cofferdam: warning: network mode host: the command shares the host's network; \
             egress is neither filtered nor recorded"
        );
    }
    let copy_tier = decision.tier != EnforcementTier::MountnsPivotRootLandlockSeccomp;
    // A fork's stage starts as its parent's staged tree under the overlay; the copy tiers
    // stage by a copy of the workdir alone, which would lose the parent's changes.
    if copy_tier && req.fork.is_some() {
        return Err(Failure::setup(format!(
            "refusing to fork: a fork runs on the parent's staged result, which needs the \
             sealed tier (an overlay over the workdir), and this run would be on the {} tier; \
             run it where `cofferdam doctor` shows the sealed tier, or apply the parent and \
             start a new run",
            decision.tier
        )));
    }
    Ok(Decided {
        store,
        facts,
        decision,
        copy_tier,
    })
}
