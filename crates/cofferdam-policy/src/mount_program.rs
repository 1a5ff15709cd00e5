//! The sealed tier's composed root as a program of mount operations (DESIGN.md §3 step 2),
//! after bubblewrap's list of setup operations: [`mount_program`] turns an [`FsPlan`] into
//! the ordered [`MountOp`]s the sandbox's pid 1 executes one by one, and says where each
//! control row of the composition is reported ([`MountOp::Report`]).
//!
//! Owns the order of the mounts and what each mounts (the /proc masks, the minimal /dev's
//! devices, the private tmpfs's options). Pure: it may not look at the host; what only the
//! host can say (whether a system directory is a symlink there, whether a lent source is a
//! file, where a hidden path really is) is read by the executor, `cofferdam-sandbox::mounts`.

use crate::plan::{FsPlan, PlanMountMode, SandboxPlan};
use cofferdam_record::EnforcementTier;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `/proc` files replaced by an empty read-only file.
pub const PROC_MASKED_FILES: &[&str] = &[
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "sysrq-trigger",
    "latency_stats",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "config.gz",
];
/// `/proc` directories replaced by an empty read-only tmpfs.
pub const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];
/// `/proc` directories made read-only.
pub const PROC_READ_ONLY_DIRS: &[&str] = &["sys", "irq", "bus", "fs", "sysvipc"];
/// Device nodes bound from the host into the minimal /dev.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// A control row of the composition, reported by [`MountOp::Report`] with what the
/// operations before it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MountRow {
    /// `mountns`: the propagation made private.
    Mountns,
    /// `tmpfs`: the private /tmp and HOME.
    Tmpfs,
    /// `overlay`: the workdir's overlay.
    Overlay,
    /// `pivot_root`: the system view, the read-only paths and the lent mounts.
    PivotRoot,
    /// `minimal_dev`: the devices, devpts and /dev/shm.
    MinimalDev,
    /// `proc_mask`: the new /proc's masks and read-only directories.
    ProcMask,
    /// `secrets_hidden`: the hidden paths masked, and any a lent mount shows.
    SecretsHidden,
}

/// One operation of the composed root. Paths are the host's (absolute); a target is where
/// it shows inside the new root (the same path, resolved under it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum MountOp {
    /// Make every mount of the namespace private, recursively (`MS_REC | MS_PRIVATE`).
    PrivatePropagation,
    /// The new root: a tmpfs (mode 0755, nosuid, nodev) at `at`; the cwd moves into it.
    RootTmpfs {
        /// The job's empty directory.
        at: PathBuf,
    },
    /// The host's system directory `path` at the same path: bound read-only (nosuid,
    /// nodev), or a symlink of the same text when the host's is one; left out when absent
    /// or of another kind.
    SystemDir {
        /// The directory.
        path: PathBuf,
    },
    /// A private tmpfs at `at` (nosuid, nodev; noexec unless `exec`), of `size` bytes.
    PrivateTmpfs {
        /// Where inside.
        at: PathBuf,
        /// Its root's permission bits.
        mode: u32,
        /// `size=`, bytes.
        size: u64,
        /// Whether it allows exec (the plan's `workdir_exec`).
        exec: bool,
        /// Whether it is HOME (a refusal names it so), else a system path.
        home: bool,
    },
    /// The workdir: an overlay of `lower` (mounted at its own path) with the job's
    /// `upper` and `work`, `volatile` when the kernel takes it.
    Overlay {
        /// The workdir.
        lower: PathBuf,
        /// The stage.
        upper: PathBuf,
        /// The overlay's work directory.
        work: PathBuf,
        /// A fork's inherited layer, between `upper` and `lower`.
        inherited: Option<PathBuf>,
        /// Whether it allows exec.
        exec: bool,
    },
    /// Make the tree at `path` read-only in place; left out when absent or a symlink.
    ReadOnly {
        /// A path inside the workdir.
        path: PathBuf,
    },
    /// Lend the host's `source` at `target`, read-only (nosuid, nodev) or `writable`.
    Bind {
        /// The host path, bound as the host resolves it.
        source: PathBuf,
        /// Where inside.
        target: PathBuf,
        /// Writable (`write`), else read-only (`read`).
        writable: bool,
    },
    /// The minimal /dev: a tmpfs (nosuid, noexec), each of `devices` the host has bound
    /// from its /dev, a new devpts instance, a private /dev/shm of `shm_size` bytes
    /// (noexec unless `exec`), the `ptmx` and `fd` links; then /dev made read-only.
    Dev {
        /// The device names.
        devices: Vec<String>,
        /// `/dev/shm`'s `size=`, bytes.
        shm_size: u64,
        /// Whether /dev/shm allows exec.
        exec: bool,
    },
    /// A new /proc (nosuid, nodev, noexec), from inside the pid namespace.
    Proc,
    /// Mask `/proc/<name>` (an empty file, or an empty tmpfs for a directory).
    ProcMask {
        /// The entry.
        name: String,
    },
    /// Make `/proc/<name>` read-only in place, when it exists.
    ProcReadOnly {
        /// The directory.
        name: String,
    },
    /// Mask `path`, and where it really is on the host when that differs (a symlinked
    /// dotfile), wherever it is visible inside.
    Hide {
        /// The host path.
        path: PathBuf,
    },
    /// Show `text` as `/etc/resolv.conf` (where the host's link points), bound read-only.
    ResolvConf {
        /// The file's text.
        text: String,
    },
    /// `pivot_root` into the new root and detach the old one.
    Pivot,
    /// Make the new root's own tmpfs (mount points only) read-only.
    RootReadOnly,
    /// `chdir` into the workdir.
    EnterWorkdir {
        /// The workdir.
        path: PathBuf,
    },
    /// Report a control row, with what the operations before it did.
    Report {
        /// The row.
        row: MountRow,
    },
    /// Read the composed root back from `/proc/self/mountinfo` into the rows reported.
    ReadBack,
}

impl MountOp {
    /// Whether it attaches a mount (or a symlink) anywhere: what a test checks the order of.
    pub fn mounts(&self) -> bool {
        !matches!(
            self,
            MountOp::PrivatePropagation
                | MountOp::Pivot
                | MountOp::RootReadOnly
                | MountOp::EnterWorkdir { .. }
                | MountOp::Report { .. }
                | MountOp::ReadBack
        )
    }
}

/// What the plan asks for that no mount operation carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountProgramError {
    /// A lent mount of mode `stage` (refused before any effect by `refusal::check_run`; a
    /// plan that holds one anyway is refused here).
    #[error("mount {} with mode stage (not supported by this build)", path.display())]
    StageMount {
        /// The lent host path.
        path: PathBuf,
    },
}

impl SandboxPlan {
    /// The composed root's operations ([`mount_program`]): the sealed tier's; the tiers
    /// without a mount namespace mount nothing.
    pub fn mount_program(&self) -> Result<Vec<MountOp>, MountProgramError> {
        match self.tier {
            EnforcementTier::MountnsPivotRootLandlockSeccomp => mount_program(&self.fs),
            EnforcementTier::LandlockSeccomp | EnforcementTier::None => Ok(Vec::new()),
        }
    }
}

/// The sealed tier's composed root, in order: private propagation, the root's tmpfs, the
/// system view, /tmp then HOME (which may lie under /tmp), the workdir overlay, the
/// read-only paths inside it, the lent mounts, /dev, /proc and its masks, then every hidden
/// path (after everything it could be reached through), the resolver file, the pivot; after
/// it only the root made read-only, the cwd and the read-back.
pub fn mount_program(fs: &FsPlan) -> Result<Vec<MountOp>, MountProgramError> {
    use MountOp as O;
    let report = |row| O::Report { row };
    let exec = fs.workdir_exec;
    let mut ops = vec![
        O::PrivatePropagation,
        report(MountRow::Mountns),
        O::RootTmpfs {
            at: fs.new_root.clone(),
        },
    ];
    ops.extend(
        fs.system_ro
            .iter()
            .map(|p| O::SystemDir { path: p.clone() }),
    );
    ops.push(O::PrivateTmpfs {
        at: PathBuf::from("/tmp"),
        mode: 0o1777,
        size: fs.private_tmpfs_size,
        exec,
        home: false,
    });
    ops.push(O::PrivateTmpfs {
        at: fs.home.clone(),
        mode: 0o700,
        size: fs.private_tmpfs_size,
        exec,
        home: true,
    });
    ops.push(report(MountRow::Tmpfs));
    ops.push(O::Overlay {
        lower: fs.workdir.clone(),
        upper: fs.upper.clone(),
        work: fs.overlay_work.clone(),
        inherited: fs.inherited.clone(),
        exec,
    });
    ops.push(report(MountRow::Overlay));
    ops.extend(fs.read_only.iter().map(|p| O::ReadOnly { path: p.clone() }));
    for m in &fs.mounts {
        match m.mode {
            // Hidden with the rest of `hidden`, where the plan lists it.
            PlanMountMode::Hide => {}
            PlanMountMode::Stage => {
                return Err(MountProgramError::StageMount {
                    path: m.source.clone(),
                });
            }
            PlanMountMode::Read | PlanMountMode::Write => ops.push(O::Bind {
                source: m.source.clone(),
                target: m.target.clone(),
                writable: m.mode == PlanMountMode::Write,
            }),
        }
    }
    ops.push(report(MountRow::PivotRoot));
    ops.push(O::Dev {
        devices: DEVICES.iter().map(|d| (*d).to_owned()).collect(),
        shm_size: fs.private_tmpfs_size,
        exec,
    });
    ops.push(report(MountRow::MinimalDev));
    ops.push(O::Proc);
    ops.extend(
        PROC_MASKED_FILES
            .iter()
            .chain(PROC_MASKED_DIRS)
            .map(|n| O::ProcMask {
                name: (*n).to_owned(),
            }),
    );
    ops.extend(PROC_READ_ONLY_DIRS.iter().map(|n| O::ProcReadOnly {
        name: (*n).to_owned(),
    }));
    ops.push(report(MountRow::ProcMask));
    ops.extend(fs.hidden.iter().map(|p| O::Hide { path: p.clone() }));
    ops.push(report(MountRow::SecretsHidden));
    if let Some(text) = &fs.resolv_conf {
        ops.push(O::ResolvConf { text: text.clone() });
    }
    ops.extend([
        O::Pivot,
        O::RootReadOnly,
        O::EnterWorkdir {
            path: fs.workdir.clone(),
        },
        O::ReadBack,
    ]);
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::MountPlan;
    use crate::plan::tests::{inv, job, policy};
    use crate::plan::{JobPaths, build_plan};
    use crate::policy::RunFlags;
    use cofferdam_record::HostFacts;

    fn fs() -> FsPlan {
        FsPlan {
            new_root: "/s/jobs/run-1/root".into(),
            system_ro: vec!["/usr".into(), "/etc".into()],
            workdir: "/home/u/proj".into(),
            upper: "/s/jobs/run-1/upper".into(),
            overlay_work: "/s/jobs/run-1/work".into(),
            inherited: None,
            read_only: vec!["/home/u/proj/.git".into()],
            home: "/home/u".into(),
            mounts: vec![
                MountPlan {
                    source: "/data".into(),
                    target: "/mnt/data".into(),
                    mode: PlanMountMode::Read,
                },
                MountPlan {
                    source: "/home/u/.aws".into(),
                    target: "/creds".into(),
                    mode: PlanMountMode::Write,
                },
                MountPlan {
                    source: "/home/u/proj/secret".into(),
                    target: "/home/u/proj/secret".into(),
                    mode: PlanMountMode::Hide,
                },
            ],
            hidden: vec![
                "/home/u/.ssh".into(),
                "/s".into(),
                "/home/u/proj/secret".into(),
            ],
            tmp_size: None,
            private_tmpfs_size: 1 << 30,
            workdir_exec: true,
            resolv_conf: None,
        }
    }

    fn position(ops: &[MountOp], f: impl Fn(&MountOp) -> bool) -> Vec<usize> {
        ops.iter()
            .enumerate()
            .filter(|(_, o)| f(o))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn the_composed_root_is_a_list_of_operations_in_order() {
        use MountOp as O;
        let mut plan = fs();
        plan.workdir_exec = false;
        plan.resolv_conf = Some("nameserver 127.0.0.1\n".into());
        let ops = mount_program(&plan).unwrap();
        let report = |row| O::Report { row };
        assert_eq!(
            ops[..10],
            [
                O::PrivatePropagation,
                report(MountRow::Mountns),
                O::RootTmpfs {
                    at: "/s/jobs/run-1/root".into()
                },
                O::SystemDir {
                    path: "/usr".into()
                },
                O::SystemDir {
                    path: "/etc".into()
                },
                O::PrivateTmpfs {
                    at: "/tmp".into(),
                    mode: 0o1777,
                    size: 1 << 30,
                    exec: false,
                    home: false,
                },
                O::PrivateTmpfs {
                    at: "/home/u".into(),
                    mode: 0o700,
                    size: 1 << 30,
                    exec: false,
                    home: true,
                },
                report(MountRow::Tmpfs),
                O::Overlay {
                    lower: "/home/u/proj".into(),
                    upper: "/s/jobs/run-1/upper".into(),
                    work: "/s/jobs/run-1/work".into(),
                    inherited: None,
                    exec: false,
                },
                report(MountRow::Overlay),
            ]
        );
        assert_eq!(
            ops[10..14],
            [
                O::ReadOnly {
                    path: "/home/u/proj/.git".into()
                },
                // A hidden mount is no bind: it is masked with the hidden paths.
                O::Bind {
                    source: "/data".into(),
                    target: "/mnt/data".into(),
                    writable: false,
                },
                O::Bind {
                    source: "/home/u/.aws".into(),
                    target: "/creds".into(),
                    writable: true,
                },
                report(MountRow::PivotRoot),
            ]
        );
        assert_eq!(
            ops[14],
            O::Dev {
                devices: DEVICES.iter().map(|d| d.to_string()).collect(),
                shm_size: 1 << 30,
                exec: false,
            }
        );
        let tail = &ops[ops.len() - 9..];
        assert_eq!(
            tail,
            [
                O::Hide {
                    path: "/home/u/.ssh".into()
                },
                O::Hide { path: "/s".into() },
                O::Hide {
                    path: "/home/u/proj/secret".into()
                },
                report(MountRow::SecretsHidden),
                O::ResolvConf {
                    text: "nameserver 127.0.0.1\n".into()
                },
                O::Pivot,
                O::RootReadOnly,
                O::EnterWorkdir {
                    path: "/home/u/proj".into()
                },
                O::ReadBack,
            ]
        );
        // Every /proc mask and read-only directory, after the new /proc.
        let proc = position(&ops, |o| *o == O::Proc);
        let masks = position(&ops, |o| matches!(o, O::ProcMask { .. }));
        let ro = position(&ops, |o| matches!(o, O::ProcReadOnly { .. }));
        assert_eq!(proc.len(), 1);
        assert_eq!(
            masks.len(),
            PROC_MASKED_FILES.len() + PROC_MASKED_DIRS.len()
        );
        assert_eq!(ro.len(), PROC_READ_ONLY_DIRS.len());
        assert!(masks.iter().chain(&ro).all(|i| *i > proc[0]));
        // Each row is reported once, in the bundle's order.
        let rows: Vec<MountRow> = ops
            .iter()
            .filter_map(|o| match o {
                O::Report { row } => Some(*row),
                _ => None,
            })
            .collect();
        assert_eq!(
            rows,
            [
                MountRow::Mountns,
                MountRow::Tmpfs,
                MountRow::Overlay,
                MountRow::PivotRoot,
                MountRow::MinimalDev,
                MountRow::ProcMask,
                MountRow::SecretsHidden,
            ]
        );
    }

    #[test]
    fn hidden_paths_are_masked_after_every_mount_they_could_be_reached_through() {
        let ops = mount_program(&fs()).unwrap();
        let hides = position(&ops, |o| matches!(o, MountOp::Hide { .. }));
        let reached = position(&ops, |o| {
            o.mounts() && !matches!(o, MountOp::Hide { .. } | MountOp::ResolvConf { .. })
        });
        assert_eq!(hides.len(), 3);
        let first_hide = hides[0];
        assert!(reached.iter().all(|i| *i < first_hide), "{ops:#?}");
    }

    #[test]
    fn nothing_is_mounted_after_the_pivot_and_proc_comes_before_the_root_is_read_only() {
        for resolv in [None, Some("x".to_owned())] {
            let mut plan = fs();
            plan.resolv_conf = resolv;
            let ops = mount_program(&plan).unwrap();
            let pivot = position(&ops, |o| *o == MountOp::Pivot);
            assert_eq!(pivot.len(), 1);
            assert!(ops[pivot[0] + 1..].iter().all(|o| !o.mounts()), "{ops:#?}");
            let proc = position(&ops, |o| *o == MountOp::Proc)[0];
            let ro = position(&ops, |o| *o == MountOp::RootReadOnly)[0];
            assert!(proc < pivot[0] && pivot[0] < ro);
            assert_eq!(ops.first(), Some(&MountOp::PrivatePropagation));
            assert_eq!(ops.last(), Some(&MountOp::ReadBack));
        }
    }

    #[test]
    fn a_staged_mount_is_refused_naming_it() {
        let mut plan = fs();
        plan.mounts[0].mode = PlanMountMode::Stage;
        let e = mount_program(&plan).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mount /data with mode stage (not supported by this build)"
        );
    }

    #[test]
    fn no_lends_no_binds_and_the_program_round_trips() {
        let mut plan = fs();
        plan.mounts.clear();
        plan.read_only.clear();
        let ops = mount_program(&plan).unwrap();
        assert!(
            !ops.iter()
                .any(|o| matches!(o, MountOp::Bind { .. } | MountOp::ReadOnly { .. }))
        );
        let json = serde_json::to_string(&ops).unwrap();
        let back: Vec<MountOp> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ops);
    }

    #[test]
    fn each_tier_mounts_what_its_plan_says_with_lends_and_hidden_paths() {
        let p = policy(RunFlags {
            mounts: vec![
                "/data:/mnt/data:read".into(),
                "/home/u/proj/private:/home/u/proj/private:hide".into(),
            ],
            ..RunFlags::default()
        });
        let facts = HostFacts::capable_example();
        let mut plan = build_plan(&p, &facts, &inv(), &job(), vec!["true".into()]);
        assert_eq!(plan.tier, EnforcementTier::MountnsPivotRootLandlockSeccomp);
        let ops = plan.mount_program().unwrap();
        let binds = position(&ops, |o| matches!(o, MountOp::Bind { .. }));
        assert_eq!(binds.len(), 1);
        assert_eq!(
            ops[binds[0]],
            MountOp::Bind {
                source: "/data".into(),
                target: "/mnt/data".into(),
                writable: false
            }
        );
        // The store, the secrets and the hidden lend are masked after the bind.
        for hidden in ["/s", "/home/u/.ssh", "/home/u/proj/private"] {
            let at = position(&ops, |o| {
                *o == MountOp::Hide {
                    path: hidden.into(),
                }
            });
            assert!(at.len() == 1 && at[0] > binds[0], "{hidden}");
        }
        // A fork's plan overlays the workdir with its own stage over its inherited layer.
        let fork = JobPaths {
            upper: "/s/jobs/run-2/upper".into(),
            overlay_work: "/s/jobs/run-2/work".into(),
            inherited: Some("/s/jobs/run-2/inherited".into()),
            ..job()
        };
        let forked = build_plan(&p, &facts, &inv(), &fork, vec!["true".into()]);
        assert!(forked.mount_program().unwrap().contains(&MountOp::Overlay {
            lower: "/home/u/proj".into(),
            upper: "/s/jobs/run-2/upper".into(),
            work: "/s/jobs/run-2/work".into(),
            inherited: Some("/s/jobs/run-2/inherited".into()),
            exec: true,
        }));
        // The tiers without a mount namespace mount nothing, and have no ComposeRoot step.
        for tier in [EnforcementTier::LandlockSeccomp, EnforcementTier::None] {
            plan.tier = tier;
            assert_eq!(plan.mount_program(), Ok(Vec::new()), "{tier}");
            assert!(
                !plan
                    .setup_program()
                    .contains(&crate::controls::SetupStep::ComposeRoot)
            );
        }
    }
}
