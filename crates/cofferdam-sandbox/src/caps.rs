//! Privilege controls of the sandbox init: inherited descriptors ([`close_fds`]), every
//! capability ([`drop_all`]) and `no_new_privs` ([`no_new_privs`]), each verified by reading
//! the state back and reported as one observation.
//!
//! Owns `close_range(2)` / `PR_CAPBSET_DROP` / `PR_CAP_AMBIENT_CLEAR_ALL` / `capset(2)` /
//! `PR_SET_NO_NEW_PRIVS` and the pure parsing of `/proc/self/status` capability lines. It may
//! not decide whether a weaker result is acceptable: the caller does, from the status.
//!
//! Call from the single-threaded init (capabilities and `no_new_privs` are per thread), in
//! the order `close_fds`, `drop_all`, `no_new_privs`, before Landlock and seccomp.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};

use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::fs::{Mode, OFlags, RawDir};
use rustix::io::Errno;
use rustix::thread::{CapabilitySet, CapabilitySets};
use serde_json::{Value, json};

/// Why a capability step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapsError {
    /// `PR_CAPBSET_DROP` failed for a capability.
    #[error("drop capability {cap} from the bounding set: {errno}")]
    BoundingDrop {
        /// Capability number.
        cap: u32,
        /// The error.
        errno: Errno,
    },
    /// `PR_CAP_AMBIENT_CLEAR_ALL` failed.
    #[error("clear the ambient set: {0}")]
    AmbientClear(Errno),
    /// `capset` failed.
    #[error("capset to empty sets: {0}")]
    Capset(Errno),
    /// Reading the sets back failed.
    #[error("read the capability sets back: {0}")]
    ReadBack(Errno),
}

/// The five capability sets of a thread, as 64-bit masks (the `/proc/self/status` view).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapState {
    /// `CapInh`.
    pub inheritable: u64,
    /// `CapPrm`.
    pub permitted: u64,
    /// `CapEff`.
    pub effective: u64,
    /// `CapBnd`.
    pub bounding: u64,
    /// `CapAmb`.
    pub ambient: u64,
}

impl CapState {
    /// Whether every set is empty.
    pub fn all_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the thread holds nothing usable now or passes anything on through exec
    /// other than via the bounding set (which only limits what an exec can gain).
    pub fn holds_none(&self) -> bool {
        self.inheritable == 0 && self.permitted == 0 && self.effective == 0 && self.ambient == 0
    }

    /// `details` entries in `/proc/self/status` spelling (16 hex digits).
    pub fn details(&self) -> BTreeMap<String, Value> {
        [
            ("cap_inh", self.inheritable),
            ("cap_prm", self.permitted),
            ("cap_eff", self.effective),
            ("cap_bnd", self.bounding),
            ("cap_amb", self.ambient),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), json!(format!("{v:016x}"))))
        .collect()
    }
}

/// Parse the `Cap*` lines of `/proc/<pid>/status`. Pure; `None` when a line is missing or
/// malformed (`CapAmb` is optional: kernels before 4.3 have no ambient set, read as 0).
pub fn parse_status_caps(status: &str) -> Option<CapState> {
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    Some(CapState {
        inheritable: field("CapInh")?,
        permitted: field("CapPrm")?,
        effective: field("CapEff")?,
        bounding: field("CapBnd")?,
        ambient: field("CapAmb").unwrap_or(0),
    })
}

/// Parse `NoNewPrivs:` of `/proc/<pid>/status`. Pure.
pub fn parse_status_no_new_privs(status: &str) -> Option<bool> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NoNewPrivs:"))
        .and_then(|v| match v.trim() {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })
}

fn cap(n: u32) -> CapabilitySet {
    CapabilitySet::from_bits_retain(1u64 << n)
}

/// The newest capability this build knows (`CAP_CHECKPOINT_RESTORE`, Linux 5.9): the first
/// guess of [`last_cap`].
const KNOWN_LAST_CAP: u32 = 40;

/// The highest capability number the kernel knows, asked of the kernel: `PR_CAPBSET_READ`
/// fails with `EINVAL` past it (`search_last_cap`). `/proc/sys/kernel/cap_last_cap` only
/// when the kernel answers no question (reading that file took ~13 µs in the sandbox's
/// pid 1, the two questions of the usual case ~1 µs).
pub fn last_cap() -> u32 {
    search_last_cap(|n| rustix::thread::capability_is_in_bounding_set(cap(n)).is_ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .filter(|&n| n < 64)
        })
        .unwrap_or(0)
}

/// The last `n` in `0..64` for which `valid(n)` holds, `valid` holding for every number up
/// to it and none after. Two questions settle the usual case (the newest number this build
/// knows is valid and the next is not), else a search by halves (six more). `None` when 0
/// is not valid. Pure.
fn search_last_cap(valid: impl Fn(u32) -> bool) -> Option<u32> {
    if valid(KNOWN_LAST_CAP) && !valid(KNOWN_LAST_CAP + 1) {
        return Some(KNOWN_LAST_CAP);
    }
    if !valid(0) {
        return None;
    }
    // `lo` is valid, `hi` is not (64 cannot be: the sets are 64 bits).
    let (mut lo, mut hi) = (0u32, 64u32);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if valid(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The calling thread's sets, by syscalls (no `/proc` needed).
pub fn read_caps(last: u32) -> Result<CapState, CapsError> {
    let sets = rustix::thread::capabilities(None).map_err(CapsError::ReadBack)?;
    let mut bounding = 0u64;
    let mut ambient = 0u64;
    for n in 0..=last {
        if rustix::thread::capability_is_in_bounding_set(cap(n)).map_err(CapsError::ReadBack)? {
            bounding |= 1 << n;
        }
        // Kernels before 4.3 have no ambient set (EINVAL): nothing can be in it.
        if rustix::thread::capability_is_in_ambient_set(cap(n)).unwrap_or(false) {
            ambient |= 1 << n;
        }
    }
    Ok(CapState {
        inheritable: sets.inheritable.bits(),
        permitted: sets.permitted.bits(),
        effective: sets.effective.bits(),
        bounding,
        ambient,
    })
}

fn observation(
    mechanism: ControlMechanism,
    dimension: ControlDimension,
    status: ControlStatus,
    reason: Option<String>,
    details: BTreeMap<String, Value>,
) -> ControlObservation {
    ControlObservation {
        mechanism,
        dimension,
        status,
        reason,
        details,
    }
}

/// Drop every capability: the bounding set (`PR_CAPBSET_DROP` for `0..=cap_last_cap`), the
/// ambient set, then effective, permitted and inheritable (`capset` to empty), and read all
/// five back.
///
/// Observation (mechanism `capabilities`, dimension `kernel_surface`, details `cap_inh`,
/// `cap_prm`, `cap_eff`, `cap_bnd`, `cap_amb` as 16 hex digits, `cap_last_cap`):
/// - `enforced` when all five read back empty;
/// - `partial` when the thread holds nothing (inheritable, permitted, effective, ambient
///   empty) but the bounding set could not be emptied because the caller lacks
///   `CAP_SETPCAP` (a non-root caller outside a user namespace): exec of a setuid-root or
///   file-capability binary could then still gain capabilities, unless `no_new_privs` is set;
/// - `failed` otherwise (reason: the first error, or the set that is not empty).
pub fn drop_all() -> ControlObservation {
    let last = last_cap();
    let mut first_error: Option<CapsError> = None;
    let mut bounding_eperm = false;
    let skip = crate::mutant::active(crate::mutant::CAP_DROP);
    for n in (0..=last).filter(|_| !skip) {
        match rustix::thread::remove_capability_from_bounding_set(cap(n)) {
            Ok(()) => {}
            Err(Errno::INVAL) => break,
            Err(errno) => {
                bounding_eperm |= errno == Errno::PERM;
                first_error.get_or_insert(CapsError::BoundingDrop { cap: n, errno });
            }
        }
    }
    if let Err(e) = if skip {
        Ok(())
    } else {
        rustix::thread::clear_ambient_capability_set()
    } {
        // EINVAL: no ambient set before Linux 4.3; the read-back decides.
        if e != Errno::INVAL {
            first_error.get_or_insert(CapsError::AmbientClear(e));
        }
    }
    let empty = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    if let Err(e) = if skip {
        Ok(())
    } else {
        rustix::thread::set_capabilities(None, empty)
    } {
        first_error.get_or_insert(CapsError::Capset(e));
    }
    let state = match read_caps(last) {
        Ok(s) => s,
        Err(e) => {
            let mut d = BTreeMap::new();
            d.insert("cap_last_cap".to_owned(), json!(last));
            return observation(
                ControlMechanism::Capabilities,
                ControlDimension::KernelSurface,
                ControlStatus::Failed,
                Some(e.to_string()),
                d,
            );
        }
    };
    let mut details = state.details();
    details.insert("cap_last_cap".to_owned(), json!(last));
    let (status, reason) = if state.all_empty() {
        (ControlStatus::Enforced, None)
    } else if state.holds_none() && bounding_eperm {
        (
            ControlStatus::Partial,
            Some(
                "the bounding set could not be emptied without CAP_SETPCAP: the process \
                 holds no capability, but an exec of a setuid-root or file-capability \
                 binary could gain some unless no_new_privs is set"
                    .to_owned(),
            ),
        )
    } else {
        let not_empty: Vec<&str> = [
            ("inheritable", state.inheritable),
            ("permitted", state.permitted),
            ("effective", state.effective),
            ("bounding", state.bounding),
            ("ambient", state.ambient),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, _)| n)
        .collect();
        let why = first_error.map_or_else(String::new, |e| format!(" ({e})"));
        (
            ControlStatus::Failed,
            Some(format!(
                "capability sets not empty after dropping: {}{why}",
                not_empty.join(", ")
            )),
        )
    };
    observation(
        ControlMechanism::Capabilities,
        ControlDimension::KernelSurface,
        status,
        reason,
        details,
    )
}

/// Set `no_new_privs` (`PR_SET_NO_NEW_PRIVS`) and read it back (`PR_GET_NO_NEW_PRIVS`).
///
/// Observation (mechanism `no_new_privs`, dimension `process`, details `{"no_new_privs":
/// 1}`): `enforced` when it reads back set, else `failed` with the reason.
pub fn no_new_privs() -> ControlObservation {
    let set = if crate::mutant::active(crate::mutant::NO_NEW_PRIVS) {
        Ok(())
    } else {
        rustix::thread::set_no_new_privs(true)
    };
    let read = rustix::thread::no_new_privs();
    let mut details = BTreeMap::new();
    let (status, reason) = match (set, read) {
        (_, Ok(true)) => {
            details.insert("no_new_privs".to_owned(), json!(1));
            (ControlStatus::Enforced, None)
        }
        (Err(e), _) => (
            ControlStatus::Failed,
            Some(format!("prctl(PR_SET_NO_NEW_PRIVS): {e}")),
        ),
        (Ok(()), Ok(false)) => {
            details.insert("no_new_privs".to_owned(), json!(0));
            (
                ControlStatus::Failed,
                Some("no_new_privs reads back unset".to_owned()),
            )
        }
        (Ok(()), Err(e)) => (
            ControlStatus::Failed,
            Some(format!("prctl(PR_GET_NO_NEW_PRIVS): {e}")),
        ),
    };
    observation(
        ControlMechanism::NoNewPrivs,
        ControlDimension::Process,
        status,
        reason,
        details,
    )
}

/// The inclusive descriptor ranges `>= 3` not in `keep`, in order; the last ends at
/// `u32::MAX`. Pure.
pub fn ranges_to_close(keep: &[RawFd]) -> Vec<(u32, u32)> {
    let mut kept: Vec<u32> = keep
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .filter(|&fd| fd >= 3)
        .collect();
    kept.sort_unstable();
    kept.dedup();
    let mut out = Vec::new();
    let mut start = 3u32;
    for k in kept {
        if k > start {
            out.push((start, k - 1));
        }
        start = k.saturating_add(1);
    }
    if start != u32::MAX || out.is_empty() {
        out.push((start, u32::MAX));
    }
    out
}

/// `close_range(first, last, 0)`.
pub(crate) fn close_range(first: u32, last: u32) -> Result<(), Errno> {
    // SAFETY: close_range only closes descriptors; the caller's contract (see `close_fds`) is
    // that nothing in this process still owns a descriptor in the range. No memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            libc::c_uint::from(first),
            libc::c_uint::from(last),
            0 as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

/// Descriptors open in this process, from `/proc/self/fd` (without the listing's own).
///
/// Read with `getdents64` into a buffer on the stack, knowing the listing's own descriptor:
/// `std::fs::read_dir` (libc's `opendir`) allocates a 32 KiB buffer and left an `fcntl` per
/// descriptor to tell the listing's own apart. `None` when the directory cannot be read.
pub(crate) fn open_fds() -> Option<Vec<RawFd>> {
    let dir = rustix::fs::open(
        "/proc/self/fd",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let own = dir.as_raw_fd();
    let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
    let mut entries = RawDir::new(&dir, &mut buf);
    let mut fds = Vec::new();
    while let Some(entry) = entries.next() {
        let entry = entry.ok()?;
        if let Some(fd) = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|n| n.parse::<RawFd>().ok())
            .filter(|&fd| fd != own)
        {
            fds.push(fd);
        }
    }
    fds.sort_unstable();
    Some(fds)
}

/// Close every descriptor `>= 3` that is not in `keep` (0, 1 and 2 are always kept), with
/// `close_range(2)` around the kept ones, falling back to closing each descriptor listed in
/// `/proc/self/fd` when `close_range` is missing (before Linux 5.9).
///
/// Descriptors are closed, not only marked close-on-exec: a same-uid workload could
/// otherwise reopen them through `/proc/1/fd`. **Contract:** the caller owns no descriptor
/// outside `keep` that it will use or drop afterwards (an `OwnedFd` or `File` dropped later
/// would be a double close).
///
/// Descriptors 0 to 2 stay, and must be the sandbox's own: `stdio` lists what each is (by
/// `fstat`): `pipe` (the supervisor's relay), `null` (`/dev/null`, while the command gets a
/// terminal made inside), `closed`, or `host` (a file, terminal, socket or device of the
/// caller's, whose metadata and modes the command could change through it).
///
/// Observation (mechanism `close_fds`, dimension `kernel_surface`, details `kept`, `method`,
/// `stdio`, `verified`, and `open_after` when `/proc` is mounted): `enforced` when the
/// closing call succeeded, none of 0 to 2 is `host` and, where `/proc/self/fd` is readable,
/// nothing outside `keep` is left open; `failed` otherwise.
pub fn close_fds(keep: &[RawFd]) -> ControlObservation {
    let mut kept: Vec<RawFd> = (0..3)
        .chain(keep.iter().copied().filter(|&fd| fd >= 3))
        .collect();
    kept.sort_unstable();
    kept.dedup();
    let mut details = BTreeMap::new();
    details.insert("kept".to_owned(), json!(kept));
    let mut result = Ok(());
    let mut method = "close_range";
    for (first, last) in ranges_to_close(keep) {
        if let Err(e) = close_range(first, last) {
            result = Err(e);
            break;
        }
    }
    if matches!(result, Err(Errno::NOSYS)) {
        method = "proc_self_fd";
        result = match open_fds() {
            Some(fds) => {
                for fd in fds.into_iter().filter(|fd| !kept.contains(fd)) {
                    // SAFETY: as for close_range: nothing in this process owns `fd` any more
                    // (the caller's contract); closing an already closed fd is EBADF only.
                    unsafe {
                        libc::close(fd);
                    }
                }
                Ok(())
            }
            None => Err(Errno::NOSYS),
        };
    }
    details.insert("method".to_owned(), json!(method));
    let stdio: Vec<&str> = (0..3).map(stdio_kind).collect();
    details.insert("stdio".to_owned(), json!(stdio));
    if let Err(e) = result {
        return observation(
            ControlMechanism::CloseFds,
            ControlDimension::KernelSurface,
            ControlStatus::Failed,
            Some(format!("close descriptors ({method}): {e}")),
            details,
        );
    }
    let (status, reason) = match open_fds() {
        Some(open) => {
            let leaked: Vec<RawFd> = open
                .iter()
                .copied()
                .filter(|fd| !kept.contains(fd))
                .collect();
            details.insert("open_after".to_owned(), json!(open));
            details.insert("verified".to_owned(), json!(true));
            if let Some(reason) = host_stdio(&stdio) {
                (ControlStatus::Failed, Some(reason))
            } else if leaked.is_empty() {
                (ControlStatus::Enforced, None)
            } else {
                (
                    ControlStatus::Failed,
                    Some(format!("descriptors still open: {leaked:?}")),
                )
            }
        }
        None => {
            details.insert("verified".to_owned(), json!(false));
            match host_stdio(&stdio) {
                Some(reason) => (ControlStatus::Failed, Some(reason)),
                None => (ControlStatus::Enforced, None),
            }
        }
    };
    observation(
        ControlMechanism::CloseFds,
        ControlDimension::KernelSurface,
        status,
        reason,
        details,
    )
}

/// What standard descriptor `fd` is (see [`close_fds`]).
fn stdio_kind(fd: RawFd) -> &'static str {
    // SAFETY: F_GETFD on a raw number only reads its flags; -1 (EBADF) means closed.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return "closed";
    }
    // SAFETY: `fd` was just seen open, and the single-threaded sandbox process closes
    // nothing in between; it is only fstat'd.
    let fd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    match rustix::fs::fstat(fd) {
        Err(_) => "closed",
        Ok(st) => {
            let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
            let rdev = st.st_rdev;
            match kind {
                rustix::fs::FileType::Fifo => "pipe",
                rustix::fs::FileType::CharacterDevice
                    if rustix::fs::major(rdev) == 1 && rustix::fs::minor(rdev) == 3 =>
                {
                    "null"
                }
                _ => "host",
            }
        }
    }
}

/// Why the standard descriptors `kinds` fail the sweep, if one is the caller's.
fn host_stdio(kinds: &[&str]) -> Option<String> {
    let host: Vec<usize> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == "host")
        .map(|(fd, _)| fd)
        .collect();
    (!host.is_empty()).then(|| {
        format!(
            "standard descriptors {host:?} are not the sandbox's pipes but a file or terminal \
             of the caller's, whose modes and metadata the command could change through them"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standard_descriptor_of_the_callers_fails_the_sweep() {
        assert_eq!(host_stdio(&["pipe", "pipe", "null"]), None);
        assert!(host_stdio(&["pipe", "host", "pipe"]).is_some_and(|r| r.contains("[1]")));
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(stdio_kind(r.as_raw_fd()), "pipe");
        let f = tempfile::tempfile().unwrap();
        assert_eq!(stdio_kind(f.as_raw_fd()), "host");
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(stdio_kind(null.as_raw_fd()), "null");
    }

    const STATUS: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\n\
CapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\n\
CapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n";

    #[test]
    fn parses_cap_lines() {
        let s = parse_status_caps(STATUS).unwrap();
        assert_eq!(s.effective, 0x1ff_feff_ffff);
        assert_eq!(s.bounding, 0x1ff_feff_ffff);
        assert_eq!(s.inheritable, 0);
        assert!(!s.all_empty());
        assert_eq!(s.details()["cap_eff"], "000001fffeffffff");
        assert_eq!(parse_status_no_new_privs(STATUS), Some(true));
        assert_eq!(parse_status_caps("Name:\tx\n"), None);
        assert_eq!(parse_status_no_new_privs("NoNewPrivs:\t0\n"), Some(false));
        let no_amb = STATUS.replace("CapAmb:\t0000000000000000\n", "");
        assert_eq!(parse_status_caps(&no_amb).unwrap().ambient, 0);
    }

    #[test]
    fn holds_none_ignores_only_the_bounding_set() {
        let s = CapState {
            bounding: 0xff,
            ..CapState::default()
        };
        assert!(s.holds_none());
        assert!(!s.all_empty());
        let s = CapState {
            ambient: 1,
            ..CapState::default()
        };
        assert!(!s.holds_none());
    }

    #[test]
    fn the_last_capability_is_found_by_halves() {
        for last in [0, 1, 30, 39, 40, 41, 62, 63] {
            let asked = std::cell::Cell::new(0);
            let found = search_last_cap(|n| {
                asked.set(asked.get() + 1);
                n <= last
            });
            assert_eq!(found, Some(last));
            assert!(asked.get() <= 9, "{last}: {} questions", asked.get());
        }
        assert_eq!(search_last_cap(|_| false), None);
    }

    #[test]
    fn last_cap_matches_the_kernel() {
        let file = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").unwrap();
        assert_eq!(last_cap(), file.trim().parse::<u32>().unwrap());
    }

    #[test]
    fn open_fds_lists_open_descriptors_in_order() {
        let f = tempfile::tempfile().unwrap();
        let open = open_fds().unwrap();
        assert!(open.contains(&f.as_raw_fd()), "{open:?}");
        assert!(open.windows(2).all(|w| w[0] < w[1]), "{open:?}");
    }

    #[test]
    fn ranges_skip_kept_descriptors() {
        assert_eq!(ranges_to_close(&[]), [(3, u32::MAX)]);
        assert_eq!(ranges_to_close(&[4]), [(3, 3), (5, u32::MAX)]);
        assert_eq!(ranges_to_close(&[3]), [(4, u32::MAX)]);
        assert_eq!(
            ranges_to_close(&[9, 4, 4, 5, 1, -1]),
            [(3, 3), (6, 8), (10, u32::MAX)]
        );
    }
}
