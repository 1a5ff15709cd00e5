//! The composed root of the sealed tier (DESIGN.md §3 step 2): a fresh tmpfs holding
//! read-only binds of the system, the workdir as an overlay whose upper is the job's stage,
//! a private HOME and /tmp, a minimal /dev, a new /proc with sensitive entries masked, and
//! every secret masked; then `pivot_root` into it and detach the old root.
//!
//! Owns every mount of the sandbox. It runs in the sandbox's pid 1 (a new /proc must be
//! mounted from inside the pid namespace), after the namespaces exist, and decides nothing:
//! the paths come from the plan. Host paths are read through the old root before the pivot.

use crate::setup_error::{SetupError, StepContext};
use cofferdam_policy::plan::{FsPlan, PlanMountMode};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::fs::{CWD, FileType, Mode};
use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MountPropagationFlags, MoveMountFlags,
    OpenTreeFlags, UnmountFlags,
};
use serde_json::json;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `/proc` files replaced by an empty read-only file.
const PROC_MASKED_FILES: &[&str] = &[
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
/// `/proc` directories made read-only.
const PROC_READ_ONLY_DIRS: &[&str] = &["sys", "irq", "bus", "fs", "sysvipc"];
/// `/proc` directories replaced by an empty read-only tmpfs.
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];
/// Device nodes bound from the host into the minimal /dev.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const MOUNT_ATTR_SIZE_VER0: usize = 32;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(2)` (not in rustix): set `attrs` on the mount at `fd` (and, with
/// `recursive`, every mount below it).
fn mount_setattr(fd: &OwnedFd, attrs: MountAttrFlags, recursive: bool) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set: u64::from(attrs.bits()),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = libc::AT_EMPTY_PATH;
    if recursive {
        flags |= libc::AT_RECURSIVE;
    }
    // SAFETY: `attr` is a valid, initialized `struct mount_attr` of the size passed, living
    // across the call; the path is an empty C string; the fd is open. The kernel only reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            MOUNT_ATTR_SIZE_VER0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    }
}

/// Where a host path lands under the new root.
fn under(root: &Path, host: &Path) -> PathBuf {
    root.join(host.strip_prefix("/").unwrap_or(host))
}

/// `mkdir -p`: the directory itself first, its parents only when it has none (most mount
/// points' parents exist, so one system call instead of one per component).
fn mkdir_p(path: &Path) -> Result<(), SetupError> {
    let err = |e| SetupError {
        step: format!("mkdir {}", path.display()),
        errno: e,
    };
    match rustix::fs::mkdir(path, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(Errno::NOENT) => {
            match path.parent() {
                Some(parent) if parent != path && !parent.as_os_str().is_empty() => {
                    mkdir_p(parent)?;
                }
                _ => return Err(err(Errno::NOENT)),
            }
            match rustix::fs::mkdir(path, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => Ok(()),
                Err(e) => Err(err(e)),
            }
        }
        Err(e) => Err(err(e)),
    }
}

/// Create an empty file to bind a file over.
fn touch(path: &Path) -> Result<(), SetupError> {
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    match rustix::fs::open(
        path,
        rustix::fs::OFlags::CREATE | rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    ) {
        Ok(_) => Ok(()),
        Err(e) => Err(SetupError {
            step: format!("create mount point {}", path.display()),
            errno: e,
        }),
    }
}

fn tmpfs(target: &Path, options: &str, attrs: MountAttrFlags) -> Result<(), SetupError> {
    let what = || format!("mount tmpfs on {}", target.display());
    let fs = rustix::mount::fsopen(c"tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).step(what)?;
    for opt in options.split(',').filter(|o| !o.is_empty()) {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        rustix::mount::fsconfig_set_string(&fs, k, v).step(what)?;
    }
    rustix::mount::fsconfig_create(&fs).step(what)?;
    let mnt = rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs).step(what)?;
    rustix::mount::move_mount(
        &mnt,
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .step(what)
}

/// Bind `source` (a whole tree) onto `target` with `attrs` set on every mount in it.
fn bind(source: &Path, target: &Path, attrs: MountAttrFlags) -> Result<(), SetupError> {
    let what = || format!("bind {} on {}", source.display(), target.display());
    let tree = rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )
    .step(what)?;
    if !attrs.is_empty() {
        mount_setattr(&tree, attrs, true).step(what)?;
    }
    rustix::mount::move_mount(
        &tree,
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .step(what)
}

/// Make the mount at `path` read-only in place, with every mount below it.
fn make_read_only(path: &Path) -> Result<(), SetupError> {
    bind(
        path,
        path,
        MountAttrFlags::MOUNT_ATTR_RDONLY
            | MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV,
    )
}

const RO: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_RDONLY
    .union(MountAttrFlags::MOUNT_ATTR_NOSUID)
    .union(MountAttrFlags::MOUNT_ATTR_NODEV);

/// Hide `target` (which exists under the new root): an empty file for files, an empty
/// read-only tmpfs for directories. Returns false when there was nothing to hide.
fn mask(target: &Path) -> Result<bool, SetupError> {
    let st = match rustix::fs::lstat(target) {
        Ok(st) => st,
        Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::ACCESS) => return Ok(false),
        Err(e) => {
            return Err(SetupError {
                step: format!("stat {}", target.display()),
                errno: e,
            });
        }
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            tmpfs(
                target,
                "mode=000,size=4k",
                RO | MountAttrFlags::MOUNT_ATTR_NOEXEC,
            )?;
            Ok(true)
        }
        FileType::Symlink => Ok(false),
        _ => {
            bind(
                Path::new("/dev/null"),
                target,
                RO | MountAttrFlags::MOUNT_ATTR_NOEXEC,
            )?;
            Ok(true)
        }
    }
}

fn observation(mechanism: ControlMechanism, dimension: ControlDimension) -> ControlObservation {
    ControlObservation::new(mechanism, dimension, ControlStatus::Enforced)
}

/// Compose the new root under `plan.new_root`, pivot into it, and detach the host's root.
/// On return the process's root is the composed tree and its cwd is the workdir.
pub fn compose_and_pivot(plan: &FsPlan) -> Result<Vec<ControlObservation>, SetupError> {
    let mut obs = Vec::new();
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .step(|| "make / private (MS_REC|MS_PRIVATE)".into())?;
    let mut o = observation(ControlMechanism::Mountns, ControlDimension::FilesystemRead);
    o.details.insert("propagation".into(), json!("private"));
    obs.push(o);

    let root = plan.new_root.as_path();
    tmpfs(
        root,
        "mode=0755",
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )?;

    // The read-only system view.
    let mut system = Vec::new();
    for dir in &plan.system_ro {
        let st = match rustix::fs::lstat(dir) {
            Ok(st) => st,
            Err(_) => continue,
        };
        let target = under(root, dir);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let link = rustix::fs::readlink(dir, Vec::new())
                    .step(|| format!("readlink {}", dir.display()))?;
                rustix::fs::symlink(link.as_c_str(), &target)
                    .step(|| format!("symlink {}", target.display()))?;
            }
            FileType::Directory => {
                mkdir_p(&target)?;
                bind(dir, &target, RO)?;
            }
            _ => continue,
        }
        system.push(dir.display().to_string());
    }

    // Private /tmp, then HOME (which may lie under /tmp).
    let exec = if plan.workdir_exec {
        MountAttrFlags::empty()
    } else {
        MountAttrFlags::MOUNT_ATTR_NOEXEC
    };
    let tmp = under(root, Path::new("/tmp"));
    mkdir_p(&tmp)?;
    let tmp_opts = match plan.tmp_size {
        Some(bytes) => format!("mode=1777,size={bytes}"),
        None => "mode=1777".to_owned(),
    };
    tmpfs(
        &tmp,
        &tmp_opts,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV | exec,
    )?;
    let home = under(root, &plan.home);
    mkdir_p(&home)?;
    tmpfs(
        &home,
        "mode=0700",
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV | exec,
    )?;
    let mut o = observation(ControlMechanism::Tmpfs, ControlDimension::FilesystemWrite);
    o.details
        .insert("tmp_size_bytes".into(), json!(plan.tmp_size));
    o.details.insert("home".into(), json!("private tmpfs"));
    obs.push(o);

    // The workdir overlay.
    let wd = under(root, &plan.workdir);
    mkdir_p(&wd)?;
    let volatile = overlay(&plan.workdir, &plan.upper, &plan.overlay_work, &wd, exec)?;
    let mut o = observation(ControlMechanism::Overlay, ControlDimension::FilesystemWrite);
    o.details.insert("lower".into(), json!(plan.workdir));
    o.details.insert("upper".into(), json!(plan.upper));
    o.details.insert("volatile".into(), json!(volatile));
    obs.push(o);
    let mut read_only = Vec::new();
    for p in &plan.read_only {
        let target = under(root, p);
        match rustix::fs::lstat(&target) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Symlink => {
                make_read_only(&target)?;
                read_only.push(p.display().to_string());
            }
            _ => {}
        }
    }

    // Lent host paths.
    let mut lent = Vec::new();
    for m in &plan.mounts {
        let target = under(root, &m.target);
        match m.mode {
            PlanMountMode::Hide => continue,
            PlanMountMode::Stage => {
                return Err(SetupError {
                    step: format!(
                        "mount {} with mode stage (not supported by this build)",
                        m.source.display()
                    ),
                    errno: Errno::NOTSUP,
                });
            }
            PlanMountMode::Read | PlanMountMode::Write => {
                let st = rustix::fs::stat(&m.source)
                    .step(|| format!("stat mount source {}", m.source.display()))?;
                if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    mkdir_p(&target)?;
                } else {
                    touch(&target)?;
                }
                let attrs = if m.mode == PlanMountMode::Read {
                    RO
                } else {
                    MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV
                };
                bind(&m.source, &target, attrs)?;
            }
        }
        lent.push(m.target.display().to_string());
    }
    let mut o = observation(
        ControlMechanism::PivotRoot,
        ControlDimension::FilesystemWrite,
    );
    o.details.insert("system_read_only".into(), json!(system));
    o.details.insert("read_only".into(), json!(read_only));
    o.details.insert("mounts".into(), json!(lent));
    obs.push(o);

    obs.push(minimal_dev(root)?);
    obs.push(new_proc(root)?);

    // Secrets, the job store and hidden mounts: masked wherever they are visible.
    // A secret that is a symlink (a dotfile manager's `~/.ssh -> dotfiles/ssh`) is hidden at
    // its host target too, which may lie inside a visible tree such as the workdir.
    let mut masked = Vec::new();
    let mut real_dirs = std::collections::HashMap::new();
    for h in &plan.hidden {
        let mut targets = vec![h.clone()];
        if let Some(real) = real_path(h, &mut real_dirs)
            && real != *h
        {
            targets.push(real);
        }
        for t in targets {
            if mask(&under(root, &t))? {
                masked.push(t.display().to_string());
            }
        }
    }
    let mut o = observation(
        ControlMechanism::SecretsHidden,
        ControlDimension::FilesystemRead,
    );
    o.details.insert("masked".into(), json!(masked));
    o.details.insert("hidden".into(), json!(plan.hidden.len()));
    // A secret lent on purpose (`--mount ~/.aws:/creds:read`) is visible at its target: the
    // control then holds only partly, and says which.
    let lent: Vec<String> = plan
        .mounts
        .iter()
        .filter(|m| matches!(m.mode, PlanMountMode::Read | PlanMountMode::Write))
        // At its own path the masks above cover it; only a remapped target shows it.
        .filter(|m| m.source != m.target)
        .filter(|m| {
            plan.hidden
                .iter()
                .any(|h| m.source.starts_with(h) || h.starts_with(&m.source))
        })
        .map(|m| format!("{} -> {}", m.source.display(), m.target.display()))
        .collect();
    if !lent.is_empty() {
        o.status = ControlStatus::Partial;
        o.reason = Some(format!(
            "secret paths lent by a mount are visible: {}",
            lent.join(", ")
        ));
        o.details.insert("lent".into(), json!(lent));
    }
    obs.push(o);

    if let Some(text) = &plan.resolv_conf {
        resolv_conf(root, text)?;
    }

    // Enter it.
    rustix::process::chdir(root).step(|| format!("chdir {}", root.display()))?;
    rustix::process::pivot_root(".", ".").step(|| "pivot_root(., .)".into())?;
    rustix::mount::unmount(".", UnmountFlags::DETACH).step(|| "detach the old root".into())?;
    rustix::process::chdir("/").step(|| "chdir /".into())?;
    // The root tmpfs itself holds only mount points: make it read-only.
    let top = rustix::mount::open_tree(CWD, "/", OpenTreeFlags::OPEN_TREE_CLOEXEC)
        .step(|| "open /".into())?;
    mount_setattr(&top, RO, false).step(|| "make / read-only".into())?;
    rustix::process::chdir(&plan.workdir).step(|| format!("chdir {}", plan.workdir.display()))?;
    Ok(obs)
}

/// Show `text` as `/etc/resolv.conf` inside (`allow` mode: the sandbox's own resolver).
/// When the host's `/etc/resolv.conf` is a symlink (systemd-resolved's stub), the file is
/// bound where the link points, created in the root's tmpfs when that lies outside the
/// system view. The source is written to the root tmpfs, bound read-only, and unlinked.
/// Where `path` really is (`canonicalize`), with the canonical parent directories
/// remembered in `dirs`: the hidden paths share a few parents (home, `~/.config`, `/etc`), and
/// only a path that is itself a symlink needs resolving whole. `None` when it does not
/// exist.
fn real_path(
    path: &Path,
    dirs: &mut std::collections::HashMap<PathBuf, Option<PathBuf>>,
) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return std::fs::canonicalize(path).ok();
    };
    if meta.file_type().is_symlink() {
        return std::fs::canonicalize(path).ok();
    }
    let real_parent = dirs
        .entry(parent.to_path_buf())
        .or_insert_with(|| std::fs::canonicalize(parent).ok())
        .clone()?;
    Some(real_parent.join(name))
}

fn resolv_conf(root: &Path, text: &str) -> Result<(), SetupError> {
    let etc = Path::new("/etc/resolv.conf");
    let inside = match rustix::fs::readlink(etc, Vec::new()) {
        Ok(link) => {
            let link = PathBuf::from(std::ffi::OsStr::from_bytes(link.as_bytes()));
            fold(&Path::new("/etc").join(link))
        }
        Err(_) => etc.to_path_buf(),
    };
    let target = under(root, &inside);
    if rustix::fs::stat(&target).is_err() {
        touch(&target)?;
    }
    let source = root.join(".cofferdam-resolv.conf");
    std::fs::write(&source, text).map_err(|e| SetupError {
        step: format!("write {}", source.display()),
        errno: Errno::from_io_error(&e).unwrap_or(Errno::IO),
    })?;
    bind(&source, &target, RO)?;
    rustix::fs::unlink(&source).step(|| format!("unlink {}", source.display()))
}

/// `path` with `.` and `..` folded lexically (absolute in, absolute out).
fn fold(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Mount the workdir overlay; returns whether it is `volatile`.
///
/// `volatile` (Linux 5.10+; without it the mount goes on as before) skips the overlay's
/// syncs: the unmount at the end of every run would otherwise flush the whole filesystem
/// holding the stage, every dirty page of every program on it (measured: a `/bin/true` run
/// took 160 ms with 400 MB of unrelated dirty data, 6 ms without), and an `fsync` inside
/// the sandbox becomes a no-op. The stage was never durable across a host crash (a crash
/// mid-run leaves the job interrupted), and its work directory, where the kernel marks a
/// volatile overlay, is removed when the run ends and never mounted again.
fn overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
    exec: MountAttrFlags,
) -> Result<bool, SetupError> {
    let what = || format!("mount workdir overlay on {}", lower.display());
    let fs = rustix::mount::fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC).step(what)?;
    rustix::mount::fsconfig_set_string(&fs, c"lowerdir+", lower).step(what)?;
    rustix::mount::fsconfig_set_string(&fs, c"upperdir", upper).step(what)?;
    rustix::mount::fsconfig_set_string(&fs, c"workdir", work).step(what)?;
    rustix::mount::fsconfig_set_flag(&fs, c"userxattr").step(what)?;
    // An unknown option is refused at once (EINVAL), before anything is mounted.
    let volatile = rustix::mount::fsconfig_set_flag(&fs, c"volatile").is_ok();
    rustix::mount::fsconfig_create(&fs).step(what)?;
    let mnt = rustix::mount::fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV | exec,
    )
    .step(what)?;
    rustix::mount::move_mount(
        mnt.as_fd(),
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .step(what)?;
    Ok(volatile)
}

fn minimal_dev(root: &Path) -> Result<ControlObservation, SetupError> {
    let dev = root.join("dev");
    mkdir_p(&dev)?;
    tmpfs(
        &dev,
        "mode=0755",
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )?;
    let mut bound = Vec::new();
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if rustix::fs::stat(&host).is_err() {
            continue;
        }
        let target = dev.join(name);
        touch(&target)?;
        bind(
            &host,
            &target,
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        )?;
        bound.push(*name);
    }
    let pts = dev.join("pts");
    mkdir_p(&pts)?;
    rustix::mount::mount(
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=0620",
    )
    .step(|| "mount devpts".into())?;
    rustix::fs::symlink("pts/ptmx", dev.join("ptmx")).step(|| "symlink /dev/ptmx".into())?;
    let shm = dev.join("shm");
    mkdir_p(&shm)?;
    tmpfs(
        &shm,
        "mode=1777",
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
    )?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        rustix::fs::symlink(target, dev.join(name)).step(|| format!("symlink /dev/{name}"))?;
    }
    let top = rustix::mount::open_tree(CWD, &dev, OpenTreeFlags::OPEN_TREE_CLOEXEC)
        .step(|| "open /dev".into())?;
    mount_setattr(&top, MountAttrFlags::MOUNT_ATTR_RDONLY, false)
        .step(|| "make /dev read-only".into())?;
    let mut o = observation(
        ControlMechanism::MinimalDev,
        ControlDimension::KernelSurface,
    );
    o.details.insert("devices".into(), json!(bound));
    o.details.insert("devpts".into(), json!("newinstance"));
    Ok(o)
}

fn new_proc(root: &Path) -> Result<ControlObservation, SetupError> {
    let proc = root.join("proc");
    mkdir_p(&proc)?;
    rustix::mount::mount(
        "proc",
        &proc,
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        c"",
    )
    .step(|| "mount a new /proc".into())?;
    let mut masked = Vec::new();
    for f in PROC_MASKED_FILES {
        if mask(&proc.join(f))? {
            masked.push(format!("/proc/{f}"));
        }
    }
    for d in PROC_MASKED_DIRS {
        if mask(&proc.join(d))? {
            masked.push(format!("/proc/{d}"));
        }
    }
    let mut read_only = Vec::new();
    for d in PROC_READ_ONLY_DIRS {
        let p = proc.join(d);
        if rustix::fs::stat(&p).is_ok() {
            make_read_only(&p)?;
            read_only.push(format!("/proc/{d}"));
        }
    }
    let mut o = observation(ControlMechanism::ProcMask, ControlDimension::KernelSurface);
    o.details.insert("masked".into(), json!(masked));
    o.details.insert("read_only".into(), json!(read_only));
    Ok(o)
}
