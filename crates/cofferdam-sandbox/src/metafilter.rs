//! The metadata filter of the scoped tier: a seccomp filter on the syscalls that change a
//! file's mode, owner, times, flags or extended attributes, reporting one
//! `filesystem_write` observation.
//!
//! Landlock (every ABI so far) has no access right for `chmod`, `chown`, `utimensat`,
//! `setxattr` or `FS_IOC_SETFLAGS`: they need only path resolution (or any open descriptor)
//! and ownership of the file. Without a mount namespace the command would change the
//! metadata of every host file its uid owns — for a root caller every system file
//! (`chmod 0666 /etc/shadow`, `security.capability` on a binary). A seccomp filter cannot
//! read a path, so it cannot tell the copy from the host; it refuses (`EPERM`):
//!
//! - **root** (the command's effective uid is 0, owner of the system): every metadata write,
//!   inside the copy too — `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `chown`, `fchown`,
//!   `lchown`, `fchownat`, `setxattr`, `lsetxattr`, `fsetxattr`, `removexattr`,
//!   `lremovexattr`, `fremovexattr`, `setxattrat`, `removexattrat`, `utime`, `utimes`,
//!   `futimesat`, `utimensat` with a pathname or with chosen times, and `ioctl`
//!   `FS_IOC_SETFLAGS` / `FS_IOC_FSSETXATTR` / `FS_IOC_SETVERSION`. Left: `utimensat` on a
//!   descriptor with no times (`futimens(fd, NULL)`, what `touch` uses), so a file the
//!   command can open can still be stamped with the current time; the observation is
//!   `partial` and says so.
//! - **any other uid**: the path-based extended-attribute writes (`setxattr`, `lsetxattr`,
//!   `removexattr`, `lremovexattr`, `setxattrat`, `removexattrat`), which reach files
//!   Landlock would not let it open. `chmod +x` in the copy must keep working, so modes and
//!   times of the user's own files outside the copy stay changeable (and extended
//!   attributes, ACLs included, of own files it can open): the observation is `partial`
//!   with that reason, and `safety.filesystem_write_non_bypassable` is false.
//!
//! Owns the rule set and its installation; the scoped init decides when it runs.

use std::collections::BTreeMap;

use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use serde_json::json;

use crate::seccomp::{SeccompError, dword, target};

/// `fchmodat2` (Linux 6.6), the same number on every architecture.
pub const SYS_FCHMODAT2: i64 = 452;
/// `setxattrat` (Linux 6.13), the same number on every architecture.
pub const SYS_SETXATTRAT: i64 = 463;
/// `removexattrat` (Linux 6.13), the same number on every architecture.
pub const SYS_REMOVEXATTRAT: i64 = 466;

/// Path-based extended-attribute writes: refused for every uid.
pub const PATH_XATTR_WRITES: &[(&str, i64)] = &[
    ("setxattr", libc::SYS_setxattr),
    ("lsetxattr", libc::SYS_lsetxattr),
    ("removexattr", libc::SYS_removexattr),
    ("lremovexattr", libc::SYS_lremovexattr),
    ("setxattrat", SYS_SETXATTRAT),
    ("removexattrat", SYS_REMOVEXATTRAT),
];

/// Metadata writes refused, whatever their arguments, when the command runs as root.
pub fn root_writes() -> Vec<(&'static str, i64)> {
    let mut v = vec![
        ("fchmod", libc::SYS_fchmod),
        ("fchmodat", libc::SYS_fchmodat),
        ("fchmodat2", SYS_FCHMODAT2),
        ("fchown", libc::SYS_fchown),
        ("fchownat", libc::SYS_fchownat),
        ("fsetxattr", libc::SYS_fsetxattr),
        ("fremovexattr", libc::SYS_fremovexattr),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("chmod", libc::SYS_chmod),
        ("chown", libc::SYS_chown),
        ("lchown", libc::SYS_lchown),
        ("utime", libc::SYS_utime),
        ("utimes", libc::SYS_utimes),
        ("futimesat", libc::SYS_futimesat),
    ]);
    v.extend_from_slice(PATH_XATTR_WRITES);
    v
}

/// `ioctl` requests that change inode flags or attributes (chattr), refused for root:
/// `FS_IOC_SETFLAGS`, `FS_IOC32_SETFLAGS`, `FS_IOC_FSSETXATTR`, `FS_IOC_SETVERSION`,
/// `FS_IOC32_SETVERSION` (linux/fs.h, 64-bit values).
pub const ROOT_IOCTLS: &[(&str, u64)] = &[
    ("FS_IOC_SETFLAGS", 0x4008_6602),
    ("FS_IOC32_SETFLAGS", 0x4004_6602),
    ("FS_IOC_FSSETXATTR", 0x401c_6620),
    ("FS_IOC_SETVERSION", 0x4008_7602),
    ("FS_IOC32_SETVERSION", 0x4004_7602),
];

/// What the non-root residual is, said in the observation and the scope report.
pub const USER_RESIDUAL: &str = "file modes, timestamps and extended attributes of files \
    this user owns outside the copy can still be changed (Landlock has no right for them); \
    a seccomp filter refuses only the path-based extended-attribute writes";

/// What the root residual is.
pub const ROOT_RESIDUAL: &str = "the times of a file the command can open (as root: every \
    readable system file) can still be set to the current time through its descriptor \
    (utimensat without a pathname or times, kept so that touch works); every other metadata \
    write (chmod, chown, extended attributes, chosen times, inode flags) is refused, inside \
    the copy too";

/// Build the filter for the native architecture; `root` when the command's effective uid
/// is 0. Pure: no syscall.
pub fn build(root: bool) -> Result<BpfProgram, SeccompError> {
    let (arch, _) = target()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always: Vec<(&str, i64)> = if root {
        root_writes()
    } else {
        PATH_XATTR_WRITES.to_vec()
    };
    for (_, nr) in always {
        rules.insert(nr, Vec::new());
    }
    if root {
        // utimensat(dirfd, pathname, times, flags): refused whenever a pathname or chosen
        // times are given (pointers, full 64-bit arguments); left: set to now on a
        // descriptor, what touch does.
        let nonzero = |arg: u8| -> Result<SeccompRule, SeccompError> {
            Ok(SeccompRule::new(vec![SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Ne,
                0,
            )?])?)
        };
        rules.insert(libc::SYS_utimensat, vec![nonzero(1)?, nonzero(2)?]);
        rules.insert(
            libc::SYS_ioctl,
            ROOT_IOCTLS
                .iter()
                .map(|&(_, req)| SeccompRule::new(vec![dword(1, SeccompCmpOp::Eq, req)?]))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(u32::try_from(libc::EPERM).unwrap_or(1)),
        arch,
    )?;
    Ok(filter.try_into()?)
}

/// Build and install the filter on the calling thread (after `no_new_privs`). The
/// observation is `partial` (each mode leaves a residual, named in its reason) when the
/// kernel accepted it, `failed` otherwise.
pub fn install(root: bool) -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Seccomp,
        ControlDimension::FilesystemWrite,
        ControlStatus::Partial,
    );
    o.details.insert("filter".into(), json!("metadata_writes"));
    o.details.insert("root".into(), json!(root));
    let names: Vec<&str> = if root {
        root_writes().into_iter().map(|(n, _)| n).collect()
    } else {
        PATH_XATTR_WRITES.iter().map(|(n, _)| *n).collect()
    };
    o.details.insert("syscalls".into(), json!(names));
    if root {
        o.details.insert(
            "conditional".into(),
            json!({
                "utimensat": "with a pathname or times",
                "ioctl": ROOT_IOCTLS.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            }),
        );
    }
    o.details.insert("errno".into(), json!("EPERM"));
    let before = crate::seccomp::filters_in_force();
    let failure = match build(root) {
        Err(e) => Some(e.to_string()),
        Ok(_) if crate::mutant::active(crate::mutant::METADATA_FILTER) => None,
        Ok(p) => seccompiler::apply_filter(&p).err().map(|e| e.to_string()),
    };
    if let Some(e) = failure {
        o.status = ControlStatus::Failed;
        o.reason = Some(format!("install the metadata filter: {e}"));
        return o;
    }
    // Read back: one more filter in /proc's Seccomp_filters, and the probe call refused.
    let probe = "lremovexattr(\"\", \"user.x\") = EPERM";
    let read = crate::seccomp::read_back_install(&mut o, before, 1, probe, probe_xattr);
    o.reason = Some(match read {
        Err(why) => {
            o.status = ControlStatus::Failed;
            why
        }
        Ok(()) if root => ROOT_RESIDUAL.to_owned(),
        Ok(()) => USER_RESIDUAL.to_owned(),
    });
    o
}

/// The probe call: `lremovexattr` of an empty path, which the filter refuses (`EPERM`) in
/// both modes and the kernel, unfiltered, answers `ENOENT` (nothing is named, nothing changes).
fn probe_xattr() -> Result<(), String> {
    match rustix::fs::lremovexattr("", "user.x") {
        Err(rustix::io::Errno::PERM) => Ok(()),
        other => Err(format!(
            "the probe lremovexattr(\"\", \"user.x\") returned {other:?} after the \
             metadata filter, not its EPERM"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn in_child(root: bool, f: impl FnOnce() -> i32) -> i32 {
        crate::seccomp::in_filtered_child(&[&build(root).unwrap()], f)
    }

    /// A file in a fresh temp dir, and its path as a C string.
    fn scratch() -> (tempfile::TempDir, std::path::PathBuf, CString) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let path = CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        (dir, file, path)
    }

    fn eperm(r: i32) -> bool {
        // SAFETY: reading errno right after the call.
        r == -1 && unsafe { *libc::__errno_location() } == libc::EPERM
    }

    #[test]
    fn both_filters_build_and_are_small() {
        for root in [false, true] {
            let p = build(root).unwrap();
            assert!(!p.is_empty() && p.len() < 400, "{}", p.len());
        }
    }

    #[test]
    fn the_probe_tells_the_filter_from_no_filter() {
        assert!(probe_xattr().is_err(), "unfiltered, the probe is ENOENT");
        for root in [true, false] {
            assert_eq!(in_child(root, || i32::from(probe_xattr().is_ok())), 1);
        }
    }

    #[test]
    fn root_mode_refuses_every_metadata_write_but_the_descriptor_touch() {
        let (_dir, file, path) = scratch();
        let code = in_child(true, || {
            // SAFETY: plain syscalls on a file this test created; pointers are valid.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return 1;
                }
                if !eperm(libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), 0o777, 0)) {
                    return 2;
                }
                if !eperm(libc::fchmod(fd, 0o777)) {
                    return 3;
                }
                if !eperm(libc::fchownat(libc::AT_FDCWD, path.as_ptr(), 0, 0, 0)) {
                    return 4;
                }
                let name = c"user.cofferdam-test";
                if !eperm(libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    c"1".as_ptr().cast(),
                    1,
                    0,
                )) {
                    return 5;
                }
                if !eperm(libc::fsetxattr(
                    fd,
                    name.as_ptr(),
                    c"1".as_ptr().cast(),
                    1,
                    0,
                )) {
                    return 6;
                }
                if !eperm(libc::utimensat(
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    std::ptr::null(),
                    0,
                )) {
                    return 7;
                }
                if !eperm(
                    libc::syscall(SYS_FCHMODAT2, libc::AT_FDCWD, path.as_ptr(), 0o777, 0) as i32,
                ) {
                    return 8;
                }
                let mut flags: libc::c_long = 0;
                if !eperm(libc::ioctl(fd, 0x4008_6602, &mut flags)) {
                    return 9;
                }
                let times = [libc::timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                }; 2];
                if !eperm(libc::futimens(fd, times.as_ptr())) {
                    return 10;
                }
                // The descriptor form with no times (set to now) stays: touch works.
                if libc::futimens(fd, std::ptr::null()) != 0 {
                    return 11;
                }
            }
            0
        });
        assert_eq!(code, 0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_ne!(mode, 0o777, "the mode changed");
    }

    #[test]
    fn user_mode_refuses_path_xattrs_and_keeps_chmod() {
        let (_dir, _file, path) = scratch();
        let code = in_child(false, || {
            // SAFETY: plain syscalls on a file this test created; pointers are valid.
            unsafe {
                let name = c"user.cofferdam-test";
                if !eperm(libc::setxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    c"1".as_ptr().cast(),
                    1,
                    0,
                )) {
                    return 1;
                }
                if !eperm(libc::lremovexattr(path.as_ptr(), name.as_ptr())) {
                    return 2;
                }
                if libc::fchmodat(libc::AT_FDCWD, path.as_ptr(), 0o755, 0) != 0 {
                    return 3;
                }
                if libc::utimensat(libc::AT_FDCWD, path.as_ptr(), std::ptr::null(), 0) != 0 {
                    return 4;
                }
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn the_observation_names_its_residual() {
        // Building is pure; the observation text is fixed per mode.
        assert!(USER_RESIDUAL.starts_with("file modes, timestamps and extended attributes"));
        assert!(ROOT_RESIDUAL.contains("touch"));
        let names: Vec<&str> = root_writes().into_iter().map(|(n, _)| n).collect();
        for n in ["fchmodat", "fchmodat2", "fchownat", "fsetxattr", "setxattr"] {
            assert!(names.contains(&n), "{n}");
        }
    }
}
