//! Hunks: the text changes of one staged file as separately appliable pieces, with ids
//! that stay the same while the stage does (issue 22).
//!
//! Owns [`hunks`] (the edits that turn the host text into the staged text), their ids
//! ([`Hunk::id`]), the review groups with context ([`groups`], what `apply --interactive`
//! shows and splits) and [`apply_hunks`] (the host text with a chosen set of hunks applied).
//! Pure: it takes bytes and returns bytes; reading the files and writing the result are
//! the CLI's and [`crate::apply`]'s.
//!
//! A hunk is one maximal run of changed lines (no context): the lines it removes from the
//! host text and the lines it puts in their place. Hunks are always computed between the
//! same two texts: the host file as the seal found it (its *base*, kept in the job:
//! [`crate::base`]) and the staged file. Neither changes after the seal, so a file's hunks
//! and their ids are the same at every later look, whichever of them were applied in
//! between; a partly applied file is the base with the applied set of hunks
//! ([`apply_hunks`]), so the order in which hunks are applied does not matter. A hunk's id
//! is the first 12 hex digits of a BLAKE3 hash of the path, the hunk's line number in the
//! staged text and its old and new lines. The diff is Myers' without a deadline, so the
//! same two texts always give the same hunks (a diff cut short by a timer could split them
//! differently on another run).

use std::collections::BTreeSet;
use std::ops::Range;

use similar::{Algorithm, DiffOp, capture_diff_deadline};

/// Lines of context around a review group (as `git diff` shows).
pub const CONTEXT: usize = 3;

/// One hunk: host lines `old` replaced by staged lines `new` (line indices, 0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// Its id (see the module docs).
    pub id: String,
    /// The host lines it replaces.
    pub old: Range<usize>,
    /// The staged lines it puts in.
    pub new: Range<usize>,
}

/// Split text into lines, each with its `\n` (the last may have none).
pub fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|&b| b == b'\n').collect()
}

fn id_of(path: &[u8], new_start: usize, old: &[&[u8]], new: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new_derive_key("cofferdam 2026 hunk id v1");
    let mut part = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(path);
    part(&(new_start as u64).to_le_bytes());
    for l in old {
        part(b"-");
        part(l);
    }
    for l in new {
        part(b"+");
        part(l);
    }
    let hex = h.finalize().to_hex();
    hex.as_str().get(..12).unwrap_or_default().to_owned()
}

/// The edits between two line lists, as (old range, new range), in order.
pub fn edits(old: &[&[u8]], new: &[&[u8]]) -> Vec<(Range<usize>, Range<usize>)> {
    let ops = capture_diff_deadline(Algorithm::Myers, old, 0..old.len(), new, 0..new.len(), None);
    let mut out: Vec<(Range<usize>, Range<usize>)> = Vec::new();
    let mut cur: Option<(Range<usize>, Range<usize>)> = None;
    for op in ops {
        if let DiffOp::Equal { .. } = op {
            if let Some(c) = cur.take() {
                out.push(c);
            }
            continue;
        }
        let (o, n) = (op.old_range(), op.new_range());
        cur = Some(match cur.take() {
            Some((co, cn)) => (co.start..o.end, cn.start..n.end),
            None => (o, n),
        });
    }
    out.extend(cur);
    out
}

/// The hunks that turn `old` (the host text) into `new` (the staged text) of `path`.
pub fn hunks(path: &[u8], old: &[u8], new: &[u8]) -> Vec<Hunk> {
    let (a, b) = (lines(old), lines(new));
    edits(&a, &b)
        .into_iter()
        .map(|(o, n)| Hunk {
            id: id_of(
                path,
                n.start,
                a.get(o.clone()).unwrap_or_default(),
                b.get(n.clone()).unwrap_or_default(),
            ),
            old: o,
            new: n,
        })
        .collect()
}

/// `old` with the hunks whose ids are in `chosen` applied (the others left as in `old`).
/// `all` must be [`hunks`] of the same `old` and `new`.
pub fn apply_hunks(old: &[u8], new: &[u8], all: &[Hunk], chosen: &BTreeSet<&str>) -> Vec<u8> {
    let (a, b) = (lines(old), lines(new));
    let mut out = Vec::with_capacity(old.len().max(new.len()));
    let mut at = 0;
    for h in all {
        for l in a.get(at..h.old.start).unwrap_or_default() {
            out.extend_from_slice(l);
        }
        let take = if chosen.contains(h.id.as_str()) {
            b.get(h.new.clone())
        } else {
            a.get(h.old.clone())
        };
        for l in take.unwrap_or_default() {
            out.extend_from_slice(l);
        }
        at = h.old.end;
    }
    for l in a.get(at..).unwrap_or_default() {
        out.extend_from_slice(l);
    }
    out
}

/// Review groups: hunks whose unchanged gap is at most twice [`CONTEXT`] lines are shown
/// together (as `git diff` does); each group is a range of indices into `all`.
pub fn groups(all: &[Hunk]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, h) in all.iter().enumerate() {
        match out.last_mut() {
            Some(g)
                if all
                    .get(i - 1)
                    .is_some_and(|p| h.old.start - p.old.end <= 2 * CONTEXT) =>
            {
                g.end = i + 1;
            }
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// One shown line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line<'a> {
    /// Context (unchanged).
    Same(&'a [u8]),
    /// Removed from the host text.
    Removed(&'a [u8]),
    /// Put in from the staged text.
    Added(&'a [u8]),
}

/// The lines of hunks `all[range]` with [`CONTEXT`] lines around them, and the unified
/// header (`@@ -a,b +c,d @@`, 1-based).
pub fn shown<'a>(
    old: &'a [u8],
    new: &'a [u8],
    all: &[Hunk],
    range: Range<usize>,
) -> (String, Vec<Line<'a>>) {
    let (a, b) = (lines(old), lines(new));
    let (Some(first), Some(last)) = (all.get(range.start), all.get(range.end.wrapping_sub(1)))
    else {
        return (String::new(), Vec::new());
    };
    let start = first.old.start.saturating_sub(CONTEXT);
    let end = (last.old.end + CONTEXT).min(a.len());
    // The staged line matching `start`: hunks before shift it by their difference.
    let new_start = first.new.start - (first.old.start - start);
    let mut out = Vec::new();
    let mut at = start;
    let mut new_len = 0;
    for h in all.get(range).unwrap_or_default() {
        for l in a.get(at..h.old.start).unwrap_or_default() {
            out.push(Line::Same(l));
            new_len += 1;
        }
        for l in a.get(h.old.clone()).unwrap_or_default() {
            out.push(Line::Removed(l));
        }
        for l in b.get(h.new.clone()).unwrap_or_default() {
            out.push(Line::Added(l));
            new_len += 1;
        }
        at = h.old.end;
    }
    for l in a.get(at..end).unwrap_or_default() {
        out.push(Line::Same(l));
        new_len += 1;
    }
    let old_len = end - start;
    let pos = |s: usize, n: usize| if n == 0 { s } else { s + 1 };
    let header = format!(
        "@@ -{},{old_len} +{},{new_len} @@",
        pos(start, old_len),
        pos(new_start, new_len)
    );
    (header, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in v {
            out.push(b'a' + c % 4);
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn ids_name_hunks_and_survive_applying_others() {
        let old = b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = b"a\nB\nc\nd\ne\nf\ng\nh\nI\nj\nk\n";
        let all = hunks(b"f.txt", old, new);
        assert_eq!(all.len(), 3, "{all:?}");
        let one: BTreeSet<&str> = [all[0].id.as_str()].into();
        let mid = apply_hunks(old, new, &all, &one);
        assert_eq!(mid, b"a\nB\nc\nd\ne\nf\ng\nh\ni\nj\n");
        // Ids depend on the host text as sealed and the stage, which do not change.
        assert_eq!(hunks(b"f.txt", old, new), all);
        // Another path: other ids.
        assert_ne!(hunks(b"g.txt", old, new)[0].id, all[0].id);
        // Groups: gaps of up to 6 unchanged lines are shown together.
        assert_eq!(groups(&all), vec![0..3]);
        let far = b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";
        let far_new = b"A\nb\nc\nd\ne\nf\ng\nh\ni\nj\nK\n";
        assert_eq!(groups(&hunks(b"f", far, far_new)), vec![0..1, 1..2]);
        let (header, shown_lines) = shown(old, new, &all, 0..1);
        assert_eq!(header, "@@ -1,5 +1,5 @@");
        assert_eq!(shown_lines[1], Line::Removed(b"b\n"));
        assert_eq!(shown_lines[2], Line::Added(b"B\n"));
    }

    #[test]
    fn no_final_newline_is_kept() {
        let all = hunks(b"x", b"a\nb", b"a\nc");
        let every: BTreeSet<&str> = all.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(apply_hunks(b"a\nb", b"a\nc", &all, &every), b"a\nc");
        assert_eq!(
            apply_hunks(b"a\nb", b"a\nc", &all, &BTreeSet::new()),
            b"a\nb"
        );
    }

    proptest! {
        #[test]
        fn every_hunk_is_the_file(a in prop::collection::vec(0u8..6, 0..40),
                                  b in prop::collection::vec(0u8..6, 0..40)) {
            let (old, new) = (text(&a), text(&b));
            let all = hunks(b"p", &old, &new);
            let every: BTreeSet<&str> = all.iter().map(|h| h.id.as_str()).collect();
            prop_assert_eq!(apply_hunks(&old, &new, &all, &every), new.clone());
            prop_assert_eq!(apply_hunks(&old, &new, &all, &BTreeSet::new()), old);
        }

        /// Applying the hunks in any split (some now, more later, in any order) ends
        /// at the staged text, and every order of the same steps passes through the same
        /// host texts: a step's result depends on the set applied so far, not the order.
        #[test]
        fn any_split_order_converges(a in prop::collection::vec(0u8..6, 0..30),
                                     b in prop::collection::vec(0u8..6, 0..30),
                                     cut in prop::collection::vec(0usize..4, 0..12),
                                     seed in 0usize..1000) {
            let (old, new) = (text(&a), text(&b));
            let all = hunks(b"p", &old, &new);
            // A permutation of the ids, cut into steps.
            let mut ids: Vec<&str> = all.iter().map(|h| h.id.as_str()).collect();
            for i in 0..ids.len() {
                let j = (i * 7 + seed) % ids.len();
                ids.swap(i, j);
            }
            let mut steps: Vec<Vec<&str>> = Vec::new();
            let mut rest = ids.as_slice();
            for c in cut {
                let n = c.min(rest.len());
                steps.push(rest[..n].to_vec());
                rest = &rest[n..];
            }
            steps.push(rest.to_vec());
            let mut done: BTreeSet<&str> = BTreeSet::new();
            for s in &steps {
                done.extend(s.iter().copied());
                let forward = apply_hunks(&old, &new, &all, &done);
                // The same set reached the other way round.
                let mut back: BTreeSet<&str> = BTreeSet::new();
                for s2 in steps.iter().rev() {
                    back.extend(s2.iter().copied().filter(|i| done.contains(i)));
                }
                prop_assert_eq!(&forward, &apply_hunks(&old, &new, &all, &back));
                // What remains to review is exactly the hunks not applied.
                let left = hunks(b"p", &forward, &new);
                let every: BTreeSet<&str> = left.iter().map(|h| h.id.as_str()).collect();
                prop_assert_eq!(apply_hunks(&forward, &new, &left, &every), new.clone());
                prop_assert_eq!(left.is_empty(), done.len() == all.len());
            }
            prop_assert_eq!(apply_hunks(&old, &new, &all, &done), new);
        }
    }
}
