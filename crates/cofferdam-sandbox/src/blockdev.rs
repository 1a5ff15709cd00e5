//! The block device behind a path, for disk bandwidth limits (`io.max` in cgroup v2,
//! `blkio.throttle.*` in v1), which take a whole disk's `MAJOR:MINOR`.
//!
//! Owns the `stat(2)` of the paths and the reads under `/sys/dev/block`; it may not write
//! anything nor decide whether a limit applies (`cofferdam_policy::cgroup_plan` does). The
//! device is the path's `st_dev`; a partition is replaced by its disk (the kernel refuses
//! throttling rules on partitions): `/sys/dev/block/MAJ:MIN/partition` exists, and the
//! parent directory of the resolved link (`…/block/vda/vda1` → `…/block/vda`) holds the
//! disk's `dev`. A filesystem without a block device of its own (overlay, tmpfs, proc, NFS,
//! FUSE, and btrfs, whose `st_dev` is an anonymous device) has no such entry: that path is
//! left unresolved with the reason.

use cofferdam_policy::cgroup_plan::IoDevices;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Parse a sysfs `dev` file (`MAJ:MIN\n`). Pure.
pub fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (maj, min) = text.trim().split_once(':')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// The whole disk behind device `dev` according to the sysfs tree at `sys_dev_block`
/// (normally `/sys/dev/block`).
pub fn whole_disk(sys_dev_block: &Path, dev: (u32, u32)) -> Result<(u32, u32), String> {
    let entry = sys_dev_block.join(format!("{}:{}", dev.0, dev.1));
    let real = std::fs::canonicalize(&entry).map_err(|_| {
        format!(
            "device {}:{} is not a block device (a virtual filesystem such as overlay, \
             tmpfs, a network or FUSE filesystem, or btrfs)",
            dev.0, dev.1
        )
    })?;
    if !real.join("partition").exists() {
        return Ok(dev);
    }
    let disk = real
        .parent()
        .map(|p| p.join("dev"))
        .ok_or_else(|| format!("partition {}:{} has no parent disk in sysfs", dev.0, dev.1))?;
    let text = std::fs::read_to_string(&disk)
        .map_err(|e| format!("cannot read {}: {e}", disk.display()))?;
    parse_dev(&text).ok_or_else(|| format!("{} reads {:?}", disk.display(), text.trim()))
}

/// The whole disk behind the filesystem holding `path`.
pub fn resolve(path: &Path) -> Result<(u32, u32), String> {
    let md = std::fs::metadata(path).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    let dev = md.dev();
    let dev = (libc::major(dev), libc::minor(dev));
    whole_disk(Path::new("/sys/dev/block"), dev)
}

/// Resolve each `(what, path)` (e.g. `("workdir", …)`, `("stage", …)`) into the disks to
/// throttle, deduplicated, and the reasons of those without one.
pub fn resolve_all(paths: &[(&str, &Path)]) -> IoDevices {
    let mut out = IoDevices::default();
    for (what, path) in paths {
        match resolve(path) {
            Ok(dev) => {
                if !out.devices.contains(&dev) {
                    out.devices.push(dev);
                }
            }
            Err(e) => out
                .unresolved
                .push(format!("the {what} ({}): {e}", path.display())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn dev_files_parse() {
        assert_eq!(parse_dev("254:0\n"), Some((254, 0)));
        assert_eq!(parse_dev("8:17"), Some((8, 17)));
        assert_eq!(parse_dev("8"), None);
        assert_eq!(parse_dev("a:b"), None);
    }

    /// A fake `/sys`: `devices/…/block/sda` (8:0) with partition `sda1` (8:1), a
    /// stand-alone disk `vdb` (252:16), and `dev/block` links to them.
    fn fake_sys() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let disk = t.path().join("devices/pci/block/sda");
        fs::create_dir_all(disk.join("sda1")).unwrap();
        fs::write(disk.join("dev"), "8:0\n").unwrap();
        fs::write(disk.join("sda1/dev"), "8:1\n").unwrap();
        fs::write(disk.join("sda1/partition"), "1\n").unwrap();
        let vdb = t.path().join("devices/virtio/block/vdb");
        fs::create_dir_all(&vdb).unwrap();
        fs::write(vdb.join("dev"), "252:16\n").unwrap();
        let links = t.path().join("dev/block");
        fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("8:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("sda1"), links.join("8:1")).unwrap();
        std::os::unix::fs::symlink(&vdb, links.join("252:16")).unwrap();
        t
    }

    #[test]
    fn a_partition_resolves_to_its_disk_and_a_virtual_device_to_a_reason() {
        let t = fake_sys();
        let sys = t.path().join("dev/block");
        assert_eq!(whole_disk(&sys, (8, 1)), Ok((8, 0)));
        assert_eq!(whole_disk(&sys, (8, 0)), Ok((8, 0)));
        assert_eq!(whole_disk(&sys, (252, 16)), Ok((252, 16)));
        let e = whole_disk(&sys, (0, 45)).unwrap_err();
        assert!(e.contains("0:45") && e.contains("overlay"), "{e}");
    }

    #[test]
    fn resolve_all_deduplicates_and_names_what_has_no_device() {
        let d = tempfile::tempdir().unwrap();
        let io = resolve_all(&[
            ("workdir", d.path()),
            ("stage", d.path()),
            ("proc", Path::new("/proc/self")),
        ]);
        // The temporary directory may itself be on a virtual filesystem (tmpfs, overlay).
        match io.devices.len() {
            1 => assert_eq!(io.unresolved.len(), 1, "{io:?}"),
            n => assert_eq!((n, io.unresolved.len()), (0, 3), "{io:?}"),
        }
        assert!(
            io.unresolved
                .iter()
                .any(|u| u.starts_with("the proc (/proc/self)")),
            "{io:?}"
        );
    }
}
