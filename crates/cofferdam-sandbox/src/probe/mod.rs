//! The host probe: establishes, once per command, the [`HostFacts`] every decision (tier,
//! class, scope report, doctor) is a pure function of.
//!
//! Owns the probing syscalls and file reads and nothing else: it decides no policy, and it
//! must not change the host or the prober. Queries that are harmless run in the calling
//! process (uname, ids, the Landlock ABI *version query*, sysctls, cgroup files, CA
//! locations); everything that would change the caller (namespaces, mounts, a seccomp
//! filter) runs in one forked child (`child`). It never creates or writes a cgroup, never
//! writes a sysctl and never touches the host's filesystems: the child's mounts are on its
//! own tmpfs in its own mount namespace.
//!
//! Infallible: a fact that cannot be established is `None` (or `false` plus an error, where
//! the type says so), never a guess.
//!
//! Submodules: `child` (the forked probes and their wire protocol), `cgroup` (mountinfo /
//! `/proc/self/cgroup` parsers and delegation), `userns` (sysctls, AppArmor label and the
//! [`userns::userns_grant`] mapping), `names` (errno and signal names), `ssh` (the SSH
//! server's host keys, for the secret list).

pub mod cache;
pub mod cgroup;
pub mod child;
pub mod mountinfo;
pub mod names;
pub mod ssh;
pub mod userns;

use cofferdam_policy::tier::{ContainmentDecision, decide_containment_capped};
use cofferdam_record::{CgroupFacts, ContainmentClass, HostFacts, UsernsFacts};
use std::path::Path;

/// Host CA trust-store locations checked (existence only), in this order.
pub const TRUST_STORE_CANDIDATES: &[&str] = &[
    "/etc/ssl/certs",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs",
    "/etc/ssl/cert.pem",
    "/etc/pki/ca-trust/extracted",
];

/// `LANDLOCK_CREATE_RULESET_VERSION` (uapi `linux/landlock.h`).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// Probe the host. Runs one forked child for the namespace, overlay and seccomp probes;
/// everything else is read in the calling process.
pub fn probe_host() -> HostFacts {
    probe(None, true)
}

/// [`probe_host`] for a run, in two steps. The forked child's namespace facts come from
/// `cache` when they were recorded on this boot, for this user, under the same
/// user-namespace settings and the same cofferdam version (see [`cache`]); otherwise they
/// are probed and recorded. Everything else (Landlock, trust store, sysctls) is read fresh,
/// and so is the cgroup layout, but only by [`FactsBeforeCgroups::with_cgroups`]: only a
/// run's limits need it, so the run reads it once its init is started, and reading
/// `/proc/self/mountinfo` and the cgroup files (about 0.1 ms here) overlaps the init's
/// start instead of delaying it.
pub fn probe_host_cached(cache: &Path) -> FactsBeforeCgroups {
    FactsBeforeCgroups(probe(Some(cache), false))
}

/// The host's facts without its cgroup layout, which has not been read yet: only the
/// containment decision and the ids can be asked of it.
#[derive(Debug)]
pub struct FactsBeforeCgroups(HostFacts);

impl FactsBeforeCgroups {
    /// The containment decision, which reads no cgroup fact (`cofferdam_policy::tier`'s
    /// tests hold it to that).
    pub fn decide(
        &self,
        declared: ContainmentClass,
        cap: Option<ContainmentClass>,
    ) -> ContainmentDecision {
        decide_containment_capped(&self.0, declared, cap)
    }

    /// The prober's effective uid.
    pub fn uid(&self) -> u32 {
        self.0.uid
    }

    /// The prober's effective gid.
    pub fn gid(&self) -> u32 {
        self.0.gid
    }

    /// Read the cgroup layout: the whole facts.
    pub fn with_cgroups(self) -> HostFacts {
        HostFacts {
            cgroup: cgroup::probe_cgroup(),
            ..self.0
        }
    }
}

/// Where the namespace facts come from.
enum Source {
    Cached(child::NamespaceFacts),
    Probing(Result<child::RunningChild, child::ChildError>),
}

/// The facts; the cgroup layout is left empty (unread) unless `cgroups`.
fn probe(cache_path: Option<&Path>, cgroups: bool) -> HostFacts {
    let uname = rustix::system::uname();
    let euid = rustix::process::geteuid();
    let egid = rustix::process::getegid();
    let is_root = euid.is_root();
    let kernel_release = uname.release().to_string_lossy().into_owned();

    let settings = userns::read_settings();
    let key = cache::CacheKey::current(&kernel_release, euid.as_raw(), egid.as_raw(), &settings);
    let cached = match (cache_path, &key) {
        (Some(p), Some(k)) => cache::load(p, k),
        _ => None,
    };
    // Fork first, so the child's work (≈1 ms, mostly creating the network namespace)
    // overlaps the reads done here.
    let source = match cached {
        Some(ns) => Source::Cached(ns),
        None => Source::Probing(child::RunningChild::spawn()),
    };
    let cgroup = if cgroups {
        cgroup::probe_cgroup()
    } else {
        CgroupFacts::default()
    };
    let trust_store = trust_store();
    let landlock_abi = landlock_abi();
    let ns = match source {
        Source::Cached(ns) => ns,
        Source::Probing(running) => {
            let report = match running {
                Ok(child) => child.finish(),
                Err(e) => child::ChildReport::failed(e),
            };
            let ns = child::NamespaceFacts::from_report(&report);
            // Only a fully capable answer is cached: a missing mechanism is probed again next
            // time, so a transient failure cannot pin a weaker tier until reboot.
            if let (Some(p), Some(k)) = (cache_path, &key)
                && cache::worth_caching(&ns)
            {
                cache::store(p, k, &ns);
            }
            ns
        }
    };
    let grant = userns::userns_grant(
        ns.userns_can_create,
        settings.apparmor_restrict,
        settings.apparmor_label.as_deref(),
    );

    HostFacts {
        kernel_release,
        arch: uname.machine().to_string_lossy().into_owned(),
        landlock_abi,
        seccomp_filter: ns.seccomp_filter,
        userns: UsernsFacts {
            can_create: ns.userns_can_create,
            error: ns.userns_error,
            grant,
            max_user_namespaces: settings.max_user_namespaces,
            unprivileged_userns_clone: settings.unprivileged_userns_clone,
            apparmor_restrict: settings.apparmor_restrict,
            apparmor_label: settings.apparmor_label,
        },
        overlay_in_userns: ns.overlay_in_userns,
        netns: ns.netns,
        pidns: ns.pidns,
        cgroup,
        is_root,
        uid: euid.as_raw(),
        gid: egid.as_raw(),
        trust_store,
    }
}

/// The Landlock ABI version: `landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`, a pure query that creates nothing and restricts
/// nothing. 0 when it fails: `ENOSYS` (not built in), `EOPNOTSUPP` (built in but not
/// enabled at boot), or any other error (e.g. a container's seccomp filter returning
/// `EPERM`), since in every case Landlock is not usable by us.
pub fn landlock_abi() -> u32 {
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the kernel reads
    // no memory and returns the ABI version (or an error); no fd is created.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).unwrap_or(0)
}

/// Which of [`TRUST_STORE_CANDIDATES`] exist (following symlinks: a dangling link does not
/// count).
pub fn trust_store() -> Vec<String> {
    TRUST_STORE_CANDIDATES
        .iter()
        .filter(|p| std::path::Path::new(p).exists())
        .map(|p| (*p).to_owned())
        .collect()
}
