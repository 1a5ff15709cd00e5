//! What the file watch saw, folded into the record's `run_observation.filesystem` (pure).
//!
//! fanotify merges events of one file that are still queued, so the number of events says
//! little; what is kept is deterministic: each path once, with the kinds of access seen
//! on it (read, write, execute). `allowed` counts those (path, kind) pairs. Owns the
//! bounds: [`TRACKED_MAX`] distinct paths in memory, each by a 128-bit keyed hash (a name
//! may be 4 KiB), the names of the first [`PATHS_MAX`] only, and as many in the record.

use cofferdam_record::bundle::{AccessObservation, PATH_ACCESS_WORDS, PATHS_MAX, PathAccess};
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

/// At most this many distinct paths are remembered (under 64 bytes each); past them the
/// counts are not known (`allowed` is `null`), so a workload that touches millions of files
/// cannot grow the supervisor without limit.
pub const TRACKED_MAX: usize = 200_000;

/// The kinds of access, as bits in [`PATH_ACCESS_WORDS`]' order.
pub const READ: u8 = 1;
/// Written, or opened for writing and closed.
pub const WRITE: u8 = 2;
/// Opened to be executed.
pub const EXECUTE: u8 = 4;

/// The accesses seen so far.
#[derive(Debug, Default)]
pub struct Tally {
    /// Two keyed hashers, 128 bits between them (keys random per process, so a workload
    /// cannot aim two names at one key).
    keys: (RandomState, RandomState),
    kinds: HashMap<u128, u8>,
    /// The first [`PATHS_MAX`] paths, in the order first seen, with their keys.
    first: Vec<(Vec<u8>, u128)>,
    /// Past [`TRACKED_MAX`] paths: the counts are no longer known.
    untracked: bool,
    /// The kernel's queue overflowed and events were lost.
    lost: bool,
    /// Events whose path could not be read.
    unnamed: u64,
}

impl Tally {
    /// Note `kinds` (bits) on `rel`, a path relative to the workdir (`.` for itself).
    pub fn note(&mut self, rel: &[u8], kinds: u8) {
        if kinds == 0 {
            return;
        }
        let key =
            (u128::from(self.keys.0.hash_one(rel)) << 64) | u128::from(self.keys.1.hash_one(rel));
        if let Some(k) = self.kinds.get_mut(&key) {
            *k |= kinds;
            return;
        }
        if self.kinds.len() >= TRACKED_MAX {
            self.untracked = true;
            return;
        }
        if self.first.len() < PATHS_MAX {
            self.first.push((rel.to_vec(), key));
        }
        self.kinds.insert(key, kinds);
    }

    /// The kernel dropped events (`FAN_Q_OVERFLOW`).
    pub fn lost_events(&mut self) {
        self.lost = true;
    }

    /// An event came whose path could not be read.
    pub fn unnamed(&mut self) {
        self.unnamed += 1;
    }

    /// The record's dimension, and the warnings for the bundle. Denials are never seen by
    /// this mechanism: `denied` is `null`.
    pub fn observation(
        &self,
        display: impl Fn(&[u8]) -> String,
    ) -> (AccessObservation, Vec<String>) {
        let mut warnings = Vec::new();
        let known = !self.untracked && !self.lost && self.unnamed == 0;
        if self.lost {
            warnings.push(
                "the file watch fell behind and the kernel dropped events: the filesystem \
                 observation lists what was seen, and its counts are unknown"
                    .to_owned(),
            );
        }
        if self.untracked {
            warnings.push(format!(
                "the run accessed more than {TRACKED_MAX} paths in the workdir: the filesystem \
                 observation's counts are unknown"
            ));
        }
        if self.unnamed > 0 {
            warnings.push(format!(
                "the file watch could not name {} access(es): the filesystem observation's \
                 counts are unknown",
                self.unnamed
            ));
        }
        let allowed: u64 = self.kinds.values().map(|k| u64::from(k.count_ones())).sum();
        // Two names can share a display form (the display escapes a newline as `\n`, and
        // leaves a real backslash as it is): their kinds are listed once, together.
        let mut shown: Vec<(String, u8)> = Vec::with_capacity(self.first.len());
        for (rel, key) in &self.first {
            let target = display(rel);
            let k = self.kinds.get(key).copied().unwrap_or(0);
            match shown.iter_mut().find(|(t, _)| *t == target) {
                Some((_, had)) => *had |= k,
                None => shown.push((target, k)),
            }
        }
        let paths = shown
            .into_iter()
            .map(|(target, k)| PathAccess {
                target,
                access: words(k),
            })
            .collect();
        let omitted = self.kinds.len().saturating_sub(self.first.len()) as u64;
        let obs = AccessObservation {
            allowed: known.then_some(allowed),
            denied: None,
            paths,
            paths_omitted: (known && omitted > 0).then_some(omitted),
            ..Default::default()
        };
        (obs, warnings)
    }
}

/// The words of `kinds`, in [`PATH_ACCESS_WORDS`]' order.
fn words(kinds: u8) -> Vec<String> {
    PATH_ACCESS_WORDS
        .iter()
        .enumerate()
        .filter(|(i, _)| kinds & (1 << i) != 0)
        .map(|(_, w)| (*w).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[test]
    fn each_path_once_with_every_kind_seen_on_it() {
        let mut t = Tally::default();
        t.note(b"a", READ);
        t.note(b"b", WRITE);
        t.note(b"a", READ);
        t.note(b"a", EXECUTE);
        t.note(b"c", 0);
        let (o, w) = t.observation(shown);
        assert!(w.is_empty());
        assert_eq!(o.allowed, Some(3));
        assert_eq!(o.denied, None, "denials are not seen: unknown, never 0");
        assert_eq!(o.paths.len(), 2);
        assert_eq!(o.paths[0].target, "a");
        assert_eq!(o.paths[0].access, ["read", "execute"]);
        assert_eq!(o.paths[1].access, ["write"]);
        assert_eq!(o.paths_omitted, None);
    }

    #[test]
    fn names_shown_alike_are_listed_once_with_both_kinds() {
        let mut t = Tally::default();
        t.note(b"n\nx", READ);
        t.note(br"n\nx", WRITE);
        let escaped = |b: &[u8]| String::from_utf8_lossy(b).replace('\n', "\\n");
        let (o, _) = t.observation(escaped);
        assert_eq!(o.paths.len(), 1, "{o:?}");
        assert_eq!(o.paths[0].access, ["read", "write"]);
        assert_eq!(o.allowed, Some(2));
    }

    #[test]
    fn observed_nothing_is_zero() {
        let (o, _) = Tally::default().observation(shown);
        assert_eq!(o.allowed, Some(0));
        assert!(o.paths.is_empty());
    }

    #[test]
    fn the_record_lists_the_first_paths_and_counts_the_rest() {
        let mut t = Tally::default();
        for i in 0..PATHS_MAX + 10 {
            t.note(format!("f{i}").as_bytes(), READ | WRITE);
        }
        let (o, _) = t.observation(shown);
        assert_eq!(o.paths.len(), PATHS_MAX);
        assert_eq!(o.paths[0].target, "f0");
        assert_eq!(o.paths_omitted, Some(10));
        assert_eq!(o.allowed, Some(2 * (PATHS_MAX as u64 + 10)));
    }

    #[test]
    fn lost_events_or_too_many_paths_make_the_counts_unknown() {
        let mut t = Tally::default();
        t.note(b"a", READ);
        t.lost_events();
        let (o, w) = t.observation(shown);
        assert_eq!((o.allowed, o.paths.len()), (None, 1));
        assert_eq!(w.len(), 1);

        let mut t = Tally::default();
        for i in 0..=TRACKED_MAX {
            t.note(i.to_string().as_bytes(), READ);
        }
        t.note(b"0", WRITE); // a known path still gains kinds
        let (o, w) = t.observation(shown);
        assert_eq!(o.allowed, None);
        assert_eq!(o.paths_omitted, None);
        assert_eq!(o.paths[0].access, ["read", "write"]);
        assert!(w[0].contains("more than"), "{w:?}");

        let mut t = Tally::default();
        t.unnamed();
        assert_eq!(t.observation(shown).0.allowed, None);
    }
}
