#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Host probe tests: the pure parsers and the grant mapping on sample inputs, and live tests
//! that check `probe_host()` against this machine. A live check needing a kernel feature
//! first establishes that feature independently (its own syscall, or util-linux `unshare`)
//! and prints `SKIP-HOST <why>` when it is absent — unless `COFFERDAM_TEST_REQUIRE=sealed`,
//! in which case absence fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cofferdam_record::{CgroupFacts, HostFacts, UsernsGrant};
use cofferdam_sandbox::probe::cgroup::{
    CgroupHost, CgroupMount, cgroup_facts, own_cgroup_dir, parse_controllers, parse_mountinfo,
    parse_own_v2_cgroup, unescape_mount_field,
};
use cofferdam_sandbox::probe::userns::userns_grant;
use cofferdam_sandbox::probe_host;

// ---------------------------------------------------------------- samples

/// This host: a v1 hybrid (cgroup2 at /sys/fs/cgroup/unified with only hugetlb).
const HYBRID_MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
23 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
4:memory:/process_api/96a17e985915e873e440642a711cc7a5
1:cpu:/
0::/
";

/// A pure-v2 systemd desktop: the terminal's scope under the user manager's delegated tree.
const SYSTEMD_MOUNTINFO: &str = "\
26 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
27 26 0:25 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 27 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
const SYSTEMD_OWN: &str = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-5b1d.scope";

/// A Docker/Podman container on a v2 host with a cgroup namespace: cgroup2 read-only.
const CONTAINER_MOUNTINFO: &str = "\
612 540 0:52 / / rw,relatime master:300 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/x/diff,workdir=/x/work
620 612 0:56 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
621 620 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
";

/// A container without a cgroup namespace that bind-mounts its own subtree.
const CONTAINER_NO_CGNS_MOUNTINFO: &str = "\
700 650 0:30 /system.slice/docker-abc.scope /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
";

/// Fake cgroup filesystem: file contents and a set of writable paths.
struct FakeHost {
    files: BTreeMap<PathBuf, String>,
    writable: BTreeSet<PathBuf>,
}

impl FakeHost {
    fn new() -> Self {
        FakeHost {
            files: BTreeMap::new(),
            writable: BTreeSet::new(),
        }
    }
    fn file(mut self, p: &str, c: &str) -> Self {
        self.files.insert(PathBuf::from(p), c.to_owned());
        self
    }
    /// Make a cgroup directory delegated: the dir, cgroup.procs and cgroup.subtree_control.
    fn delegate(mut self, dir: &str) -> Self {
        let d = PathBuf::from(dir);
        self.writable.insert(d.join("cgroup.procs"));
        self.writable.insert(d.join("cgroup.subtree_control"));
        self.writable.insert(d);
        self
    }
}

impl CgroupHost for FakeHost {
    fn read(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn writable(&self, path: &Path) -> bool {
        self.writable.contains(path)
    }
}

// ---------------------------------------------------------------- pure parsers

#[test]
fn hybrid_v1_host() {
    let m = parse_mountinfo(HYBRID_MOUNTINFO);
    assert_eq!(
        m.v1_controllers,
        [
            "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "memory", "pids"
        ]
    );
    assert_eq!(m.v2.len(), 1);
    assert_eq!(m.v2[0].mount_point, "/sys/fs/cgroup/unified");
    assert_eq!(parse_own_v2_cgroup(HYBRID_CGROUP).as_deref(), Some("/"));

    let host = FakeHost::new().file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
    let f = cgroup_facts(Some(HYBRID_MOUNTINFO), Some(HYBRID_CGROUP), &host);
    assert_eq!(
        f,
        CgroupFacts {
            v2_mount: Some("/sys/fs/cgroup/unified".into()),
            v2_own_cgroup: Some("/".into()),
            v2_controllers: vec!["hugetlb".into()],
            v2_delegated: false,
            v2_delegated_controllers: vec![],
            v1_controllers: m.v1_controllers.clone(),
        }
    );
    // As root the root cgroup is writable: delegated, with its controllers.
    let root = host.delegate("/sys/fs/cgroup/unified");
    let f = cgroup_facts(Some(HYBRID_MOUNTINFO), Some(HYBRID_CGROUP), &root);
    assert!(f.v2_delegated);
    assert_eq!(f.v2_delegated_controllers, ["hugetlb"]);
}

#[test]
fn systemd_user_session_pure_v2() {
    let cg = format!("0::{SYSTEMD_OWN}\n");
    let dir = format!("/sys/fs/cgroup{SYSTEMD_OWN}");
    let m = parse_mountinfo(SYSTEMD_MOUNTINFO);
    assert!(m.v1_controllers.is_empty());
    let host = FakeHost::new()
        .file(&format!("{dir}/cgroup.controllers"), "cpu memory pids\n")
        .delegate(&dir);
    let f = cgroup_facts(Some(SYSTEMD_MOUNTINFO), Some(&cg), &host);
    assert_eq!(f.v2_mount.as_deref(), Some("/sys/fs/cgroup"));
    assert_eq!(f.v2_own_cgroup.as_deref(), Some(SYSTEMD_OWN));
    assert_eq!(f.v2_controllers, ["cpu", "memory", "pids"]);
    assert!(f.v2_delegated);
    assert_eq!(f.v2_delegated_controllers, ["cpu", "memory", "pids"]);

    // Same session, but cgroup.subtree_control not writable: not delegated.
    let mut partial = FakeHost::new()
        .file(&format!("{dir}/cgroup.controllers"), "cpu memory pids\n")
        .delegate(&dir);
    partial
        .writable
        .remove(&PathBuf::from(format!("{dir}/cgroup.subtree_control")));
    let f = cgroup_facts(Some(SYSTEMD_MOUNTINFO), Some(&cg), &partial);
    assert!(!f.v2_delegated);
    assert!(f.v2_delegated_controllers.is_empty());
    assert_eq!(f.v2_controllers, ["cpu", "memory", "pids"]);
}

#[test]
fn container_read_only_cgroupns() {
    let host = FakeHost::new()
        .file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        // access() would report writable files on a ro mount only if the fake says so:
        // the ro mount option must still win.
        .delegate("/sys/fs/cgroup");
    let f = cgroup_facts(Some(CONTAINER_MOUNTINFO), Some("0::/\n"), &host);
    assert_eq!(f.v2_mount.as_deref(), Some("/sys/fs/cgroup"));
    assert_eq!(f.v2_controllers.len(), 8);
    assert!(!f.v2_delegated);
    assert!(f.v2_delegated_controllers.is_empty());
    assert!(f.v1_controllers.is_empty());
}

#[test]
fn container_without_cgroupns() {
    let mounts = parse_mountinfo(CONTAINER_NO_CGNS_MOUNTINFO);
    let m = &mounts.v2[0];
    assert_eq!(m.root, "/system.slice/docker-abc.scope");
    assert_eq!(
        own_cgroup_dir(m, "/system.slice/docker-abc.scope"),
        Some(PathBuf::from("/sys/fs/cgroup"))
    );
    assert_eq!(
        own_cgroup_dir(m, "/system.slice/docker-abc.scope/inner"),
        Some(PathBuf::from("/sys/fs/cgroup/inner"))
    );
    assert_eq!(own_cgroup_dir(m, "/system.slice/docker-abcdef.scope"), None);
    assert_eq!(own_cgroup_dir(m, "/"), None);
    let host = FakeHost::new().file("/sys/fs/cgroup/cgroup.controllers", "memory pids");
    let f = cgroup_facts(
        Some(CONTAINER_NO_CGNS_MOUNTINFO),
        Some("0::/system.slice/docker-abc.scope\n"),
        &host,
    );
    assert_eq!(f.v2_controllers, ["memory", "pids"]);
    assert!(!f.v2_delegated);
}

#[test]
fn odd_inputs() {
    // Cgroup outside the prober's cgroup namespace.
    let whole = CgroupMount {
        root: "/".into(),
        mount_point: "/sys/fs/cgroup".into(),
        read_only: false,
    };
    assert_eq!(own_cgroup_dir(&whole, "/../../user.slice"), None);
    assert_eq!(
        own_cgroup_dir(&whole, "/a/b"),
        Some(PathBuf::from("/sys/fs/cgroup/a/b"))
    );
    // Paths with ':' in /proc/self/cgroup, and no 0:: line (pure v1).
    assert_eq!(
        parse_own_v2_cgroup("0::/weird:name\n").as_deref(),
        Some("/weird:name")
    );
    assert_eq!(parse_own_v2_cgroup("3:memory:/\n1:cpu:/\n"), None);
    // Escaped mount points and combined v1 controllers.
    assert_eq!(unescape_mount_field(r"/mnt/a\040b\134c"), r"/mnt/a b\c");
    assert_eq!(unescape_mount_field(r"/x\09"), r"/x\09");
    let m = parse_mountinfo(
        "40 31 0:37 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
         41 31 0:38 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio\n\
         garbage line\n\
         42 31 0:39 / /mnt/my\\040cg rw shared:3 master:1 - cgroup2 none rw\n",
    );
    assert_eq!(m.v1_controllers, ["cpu", "cpuacct", "net_cls", "net_prio"]);
    assert_eq!(m.v2[0].mount_point, "/mnt/my cg");
    assert_eq!(parse_controllers(" cpu  memory\n"), ["cpu", "memory"]);
    // Nothing readable at all.
    assert_eq!(
        cgroup_facts(None, None, &FakeHost::new()),
        CgroupFacts::default()
    );
}

#[test]
fn grant_mapping_samples() {
    use UsernsGrant::*;
    // Debian/Fedora: no AppArmor restriction.
    assert_eq!(userns_grant(true, None, None), Some(AppArmorAbsent));
    // Ubuntu 24.04 with the sysctl switched off.
    assert_eq!(
        userns_grant(true, Some(false), Some("unconfined")),
        Some(RestrictionDisabled)
    );
    // Ubuntu 24.04, restriction on, a profile with `userns,`.
    assert_eq!(
        userns_grant(true, Some(true), Some("cofferdam (unconfined)")),
        Some(Profile)
    );
    // Ubuntu 24.04, restriction on, unconfined user: the map write fails.
    assert_eq!(
        userns_grant(false, Some(true), Some("unconfined")),
        Some(Withheld)
    );
    // max_user_namespaces = 0 without AppArmor.
    assert_eq!(userns_grant(false, None, None), Some(Withheld));
    // Root under the restriction: exempt, but no variant says so.
    assert_eq!(userns_grant(true, Some(true), Some("unconfined")), None);
}

// ---------------------------------------------------------------- live

fn facts() -> &'static HostFacts {
    static FACTS: OnceLock<HostFacts> = OnceLock::new();
    FACTS.get_or_init(probe_host)
}

use cofferdam_testkit::skip_host;

/// Run util-linux `unshare` with `args`; `None` when it cannot be run at all.
fn unshare_ok(args: &[&str]) -> Option<bool> {
    Command::new("unshare")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()
        .map(|s| s.success())
}

#[test]
fn live_identity() {
    let f = facts();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(f.kernel_release, release.trim());
    assert_eq!(f.arch, std::env::consts::ARCH);
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    let egid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Gid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!((f.uid, f.gid, f.is_root), (euid, egid, euid == 0));
    for p in &f.trust_store {
        assert!(Path::new(p).exists(), "{p}");
    }
    if Path::new("/etc/ssl/certs").is_dir() {
        assert!(f.trust_store.iter().any(|p| p == "/etc/ssl/certs"));
    }
}

#[test]
fn live_landlock() {
    // Independent: the securityfs entry, or our own raw version query.
    // SAFETY: a version query with NULL attr and size 0 reads no memory and creates no fd.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    let present = Path::new("/sys/kernel/security/landlock").exists() || raw > 0;
    if !present {
        skip_host("Landlock not available on this kernel");
        return;
    }
    assert!(facts().landlock_abi >= 1);
    if raw > 0 {
        assert_eq!(i64::from(facts().landlock_abi), raw as i64);
    }
}

#[test]
fn live_seccomp() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let actions =
        std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    if !status.contains("Seccomp:") || !actions.split_whitespace().any(|a| a == "allow") {
        skip_host("seccomp filters not supported by this kernel");
        return;
    }
    assert!(facts().seccomp_filter);
}

#[test]
fn live_userns_and_overlay() {
    let f = facts();
    match unshare_ok(&["--user", "--map-root-user", "true"]) {
        None => {
            skip_host("util-linux unshare not found: cannot check user namespaces");
            return;
        }
        Some(false) => {
            skip_host("unprivileged user namespaces not available here");
            assert!(!f.userns.can_create);
            assert!(f.userns.error.is_some());
            assert_eq!(f.userns.grant, Some(UsernsGrant::Withheld));
            assert_eq!((f.overlay_in_userns, f.netns, f.pidns), (None, None, None));
            return;
        }
        Some(true) => {}
    }
    assert!(f.userns.can_create, "{:?}", f.userns);
    assert_eq!(f.userns.error, None);
    assert!(f.userns.grant.is_some() || f.userns.apparmor_restrict == Some(true));
    assert_eq!(
        f.userns.max_user_namespaces,
        std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    );

    let overlay_script = "mount -t tmpfs cdt /tmp && mkdir /tmp/l /tmp/u /tmp/w /tmp/m && \
         mount -t overlay cdt -o lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w,userxattr /tmp/m";
    match unshare_ok(&[
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        overlay_script,
    ]) {
        Some(true) => assert_eq!(f.overlay_in_userns, Some(true)),
        _ => skip_host("overlayfs with userxattr does not mount in a user namespace here"),
    }
    match unshare_ok(&["--user", "--map-root-user", "--net", "true"]) {
        Some(true) => assert_eq!(f.netns, Some(true)),
        _ => skip_host("no network namespace inside a user namespace here"),
    }
    match unshare_ok(&["--user", "--map-root-user", "--pid", "--fork", "true"]) {
        Some(true) => assert_eq!(f.pidns, Some(true)),
        _ => skip_host("no pid namespace inside a user namespace here"),
    }
}

#[test]
fn live_cgroup() {
    let f = &facts().cgroup;
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let has_v2 = mounts
        .lines()
        .any(|l| l.split(' ').nth(2) == Some("cgroup2"));
    assert_eq!(f.v2_mount.is_some(), has_v2);
    if let Some(m) = &f.v2_mount {
        assert!(Path::new(m).join("cgroup.procs").exists(), "{m}");
    }
    for c in &f.v1_controllers {
        assert!(
            mounts
                .lines()
                .filter(|l| l.split(' ').nth(2) == Some("cgroup"))
                .any(|l| l.split(' ').nth(3).unwrap_or("").split(',').any(|o| o == c)),
            "{c}"
        );
    }
    if !f.v2_delegated {
        assert!(f.v2_delegated_controllers.is_empty());
    } else {
        assert_eq!(f.v2_delegated_controllers, f.v2_controllers);
    }
}

/// Nothing leaks on the host: no new mounts in our namespace, no new files in the scratch
/// candidates, and the probe can run from several threads at once.
#[test]
fn live_no_leaks_and_thread_safe() {
    fn snapshot() -> (String, Vec<Vec<String>>) {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let dirs = ["/tmp", "/var/tmp", "/mnt", "/run", "/dev"]
            .iter()
            .map(|d| {
                let mut v: Vec<String> = std::fs::read_dir(d)
                    .map(|r| {
                        r.filter_map(|e| e.ok())
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .filter(|n| ["l", "u", "w", "m"].contains(&n.as_str()))
                            .collect()
                    })
                    .unwrap_or_default();
                v.sort();
                v
            })
            .collect();
        (mountinfo, dirs)
    }
    let before = snapshot();
    let first = probe_host();
    let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(probe_host)).collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), first);
    }
    let after = snapshot();
    assert_eq!(before, after);
}

#[test]
fn live_timing_and_json() {
    let _ = probe_host(); // warm up (page cache, lazy binding)
    let mut samples: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let _ = probe_host();
            t.elapsed()
        })
        .collect();
    samples.sort();
    let child: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let _ = cofferdam_sandbox::probe::child::run_child_probes();
            t.elapsed()
        })
        .collect();
    let mut child = child;
    child.sort();
    println!(
        "probe_host(): min {:?} median {:?} max {:?}; forked child alone: median {:?}",
        samples[0], samples[10], samples[19], child[10]
    );
    println!("{}", serde_json::to_string_pretty(facts()).unwrap());
}

/// The scoped-tier host, simulated as in NOTES.md: inside `unshare -U -r -m` with
/// `max_user_namespaces = 0`, a nested user namespace fails with ENOSPC. Re-runs this test
/// binary (this one test) there.
#[test]
fn live_restricted_host_simulation() {
    const MARK: &str = "COFFERDAM_PROBE_TEST_RESTRICTED";
    if std::env::var_os(MARK).is_some() {
        let f = probe_host();
        println!("{}", serde_json::to_string_pretty(&f).unwrap());
        assert!(!f.userns.can_create);
        assert_eq!(f.userns.error.as_deref(), Some("ENOSPC"));
        assert_eq!(f.userns.grant, Some(UsernsGrant::Withheld));
        assert_eq!(f.userns.max_user_namespaces, Some(0));
        assert_eq!((f.overlay_in_userns, f.netns, f.pidns), (None, None, None));
        assert!(f.seccomp_filter);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces || exit 77; exec '{}' --exact live_restricted_host_simulation --nocapture",
        exe.display()
    );
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .env(MARK, "1")
        .output();
    let Ok(out) = out else {
        skip_host("util-linux unshare not found: cannot simulate a restricted host");
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(77)
        || (!out.status.success() && !stdout.contains("running 1 test"))
    {
        skip_host("cannot enter a user namespace to simulate a restricted host");
        return;
    }
    assert!(
        out.status.success(),
        "restricted probe failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
    println!("{stdout}");
}
