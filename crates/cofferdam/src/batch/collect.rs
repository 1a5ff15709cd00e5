//! What `cofferdam gc` may remove of a batch: its fresh copies (`copy_of`) and its record
//! folder (`batches/<id>/`), given the jobs that remain in the store once gc's own
//! removals are done. A copy is the workdir its task's job applies into, so it goes only
//! when no job of that task remains (whatever the job's state: a staged, interrupted or
//! live job keeps it); the record folder goes with the last job and the last copy, so a
//! kept copy is always still found through it. A running batch (its lock held) is left
//! whole: it may be about to make a copy or a job.
//!
//! Owns the decision only; pure. The effects (listing, locking, removing) are `cmd::gc`'s.

use std::collections::BTreeSet;

/// A batch as found on disk.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its id (the `batch` label of its jobs).
    pub id: String,
    /// Its process still holds its lock.
    pub running: bool,
    /// The task numbers (`batch.task`) that have a fresh copy.
    pub copies: BTreeSet<String>,
}

/// A job that stays in the store: its `batch` and `batch.task` labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Remaining {
    /// Its `batch` label.
    pub batch: String,
    /// Its `batch.task` label, when it has one.
    pub task: Option<String>,
}

/// What gc does with one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it, for this reason.
    Keep(String),
    /// Remove these copies (task numbers), and the record folder too when `record`.
    Collect {
        /// The task numbers whose copies go.
        copies: Vec<String>,
        /// The record folder goes too (no job and no copy of the batch is left).
        record: bool,
    },
}

/// The started time (ms since the epoch) an id of `cofferdam batch` carries: its hex
/// digits but the last four (those are of the pid).
pub fn started_ms(id: &str) -> Option<u64> {
    let ms = id.get(..id.len().checked_sub(4)?)?;
    if ms.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(ms, 16).ok()
}

/// Decide for `batch`, with `remaining` the jobs left in the store, `unreadable` whether
/// some job entry could not be read (its labels unknown), and the age rule: `age_ms` the
/// batch's age when known, `min_age_ms` gc's `--older-than`.
pub fn decide(
    batch: &Found,
    remaining: &[Remaining],
    unreadable: bool,
    age_ms: Option<u64>,
    min_age_ms: Option<u64>,
) -> Verdict {
    if batch.running {
        return Verdict::Keep("the batch is still running".into());
    }
    if unreadable {
        return Verdict::Keep(
            "a job entry of the store is unreadable, so which tasks still have jobs is \
             unknown; `cofferdam jobs` names it"
                .into(),
        );
    }
    if let Some(min) = min_age_ms {
        match age_ms {
            Some(age) if age >= min => {}
            Some(_) => return Verdict::Keep("younger than --older-than".into()),
            None => return Verdict::Keep("its age is unknown (not a batch id)".into()),
        }
    }
    let own: Vec<&Remaining> = remaining.iter().filter(|r| r.batch == batch.id).collect();
    let copies: Vec<String> = batch
        .copies
        .iter()
        .filter(|n| !own.iter().any(|r| r.task.as_deref() == Some(n.as_str())))
        .cloned()
        .collect();
    let record = own.is_empty();
    if copies.is_empty() && !record {
        return Verdict::Keep(format!("{} of its jobs remain", own.len()));
    }
    Verdict::Collect { copies, record }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(running: bool, copies: &[&str]) -> Found {
        Found {
            id: "18f0000000001234".into(),
            running,
            copies: copies.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn job(batch: &str, task: &str) -> Remaining {
        Remaining {
            batch: batch.into(),
            task: Some(task.into()),
        }
    }

    #[test]
    fn a_copy_goes_only_with_its_tasks_job_and_the_record_with_the_last_job() {
        let b = found(false, &["2", "4"]);
        let other = job("other", "2");
        // Task 2's job remains: its copy stays, task 4's goes, the record stays.
        assert_eq!(
            decide(&b, &[job(&b.id, "2"), other.clone()], false, None, None),
            Verdict::Collect {
                copies: vec!["4".into()],
                record: false
            }
        );
        // No job of the batch remains: everything goes.
        assert_eq!(
            decide(&b, &[other], false, None, None),
            Verdict::Collect {
                copies: vec!["2".into(), "4".into()],
                record: true
            }
        );
        // A job of a task without a copy keeps the record only.
        assert_eq!(
            decide(&found(false, &[]), &[job(&b.id, "1")], false, None, None),
            Verdict::Keep("1 of its jobs remain".into())
        );
    }

    #[test]
    fn a_running_batch_an_unknown_store_or_a_young_batch_is_kept() {
        for (b, unreadable, age, min) in [
            (found(true, &["1"]), false, None, None),
            (found(false, &["1"]), true, None, None),
            (found(false, &["1"]), false, Some(5), Some(10)),
            (found(false, &["1"]), false, None, Some(10)),
        ] {
            assert!(
                matches!(decide(&b, &[], unreadable, age, min), Verdict::Keep(_)),
                "{b:?} {unreadable} {age:?} {min:?}"
            );
        }
        assert!(matches!(
            decide(&found(false, &["1"]), &[], false, Some(10), Some(10)),
            Verdict::Collect { record: true, .. }
        ));
    }

    #[test]
    fn a_batch_id_carries_its_start() {
        assert_eq!(started_ms("18f0000000001234"), Some(0x18f000000000));
        for bad in ["", "1234", "zz001234", "../x1234"] {
            assert_eq!(started_ms(bad), None, "{bad}");
        }
    }
}
