//! Three-way merge of a staged text file with the host's later edits (issue 22).
//!
//! Owns [`merge`]: given the base (the host file as the seal found it), ours (the host
//! file now) and theirs (the staged file), the merged text and the regions where both
//! sides changed the same lines differently. Pure: bytes in, bytes out; which files may be
//! merged (text, same mode, a kept base) is the CLI's decision and the write is
//! [`crate::apply`]'s.
//!
//! Each side's edits against the base come from [`crate::hunk::edits`]. Edits of the two
//! sides that overlap or touch (one ends on the line where the other starts, or both insert
//! at one place) form one region; a region changed by one side takes that side's lines, a
//! region both changed to the same lines takes them, and any other is a conflict. Touching
//! edits count as a conflict (as in `git merge`): two edits on adjacent lines are seldom
//! independent.

use std::ops::Range;

use crate::hunk::{edits, lines};

/// The marker lines of a conflict written into the file (`--merge=markers`).
pub const OURS_MARKER: &[u8] = b"<<<<<<< host\n";
/// Between the two sides.
pub const MID_MARKER: &[u8] = b"=======\n";
/// After the staged side.
pub const THEIRS_MARKER: &[u8] = b">>>>>>> staged\n";

/// A region both sides changed differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The base lines it covers (0-based).
    pub base: Range<usize>,
    /// The host's lines for them now.
    pub ours: Vec<u8>,
    /// The staged lines for them.
    pub theirs: Vec<u8>,
}

/// What [`merge`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The merged text; each conflict is written with markers, the host's lines first.
    pub text: Vec<u8>,
    /// The conflicts, in order; none means a clean merge.
    pub conflicts: Vec<Conflict>,
}

/// One side's edit: base lines replaced by that side's lines.
struct Edit {
    base: Range<usize>,
    side: Range<usize>,
    ours: bool,
}

/// `base` with the edits of one side that fall in `range` applied, for `range` of base.
fn side_text(
    base: &[&[u8]],
    side: &[&[u8]],
    edits: &[&Edit],
    range: Range<usize>,
    out: &mut Vec<u8>,
) {
    let mut at = range.start;
    for e in edits {
        for l in base.get(at..e.base.start).unwrap_or_default() {
            out.extend_from_slice(l);
        }
        for l in side.get(e.side.clone()).unwrap_or_default() {
            out.extend_from_slice(l);
        }
        at = e.base.end;
    }
    for l in base.get(at..range.end).unwrap_or_default() {
        out.extend_from_slice(l);
    }
}

fn push_line(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(text);
    if !text.is_empty() && !text.ends_with(b"\n") {
        out.push(b'\n');
    }
}

/// Merge `ours` (host now) and `theirs` (staged) from their common `base` (see the module
/// docs).
pub fn merge(base: &[u8], ours: &[u8], theirs: &[u8]) -> Merged {
    let (b, o, t) = (lines(base), lines(ours), lines(theirs));
    let mut all: Vec<Edit> = edits(&b, &o)
        .into_iter()
        .map(|(base, side)| Edit {
            base,
            side,
            ours: true,
        })
        .chain(edits(&b, &t).into_iter().map(|(base, side)| Edit {
            base,
            side,
            ours: false,
        }))
        .collect();
    all.sort_by_key(|e| (e.base.start, e.base.end, !e.ours));
    let mut out = Merged {
        text: Vec::with_capacity(ours.len().max(theirs.len())),
        conflicts: Vec::new(),
    };
    let mut at = 0;
    let mut i = 0;
    while i < all.len() {
        // One region: every edit that overlaps or touches the ones before it.
        let start = all[i].base.start;
        let mut end = all[i].base.end;
        let mut j = i + 1;
        while j < all.len() && all[j].base.start <= end {
            end = end.max(all[j].base.end);
            j += 1;
        }
        for l in b.get(at..start).unwrap_or_default() {
            out.text.extend_from_slice(l);
        }
        let region = &all[i..j];
        let mine: Vec<&Edit> = region.iter().filter(|e| e.ours).collect();
        let staged: Vec<&Edit> = region.iter().filter(|e| !e.ours).collect();
        let mut o_text = Vec::new();
        let mut t_text = Vec::new();
        side_text(&b, &o, &mine, start..end, &mut o_text);
        side_text(&b, &t, &staged, start..end, &mut t_text);
        if staged.is_empty() || o_text == t_text {
            out.text.extend_from_slice(&o_text);
        } else if mine.is_empty() {
            out.text.extend_from_slice(&t_text);
        } else {
            out.text.extend_from_slice(OURS_MARKER);
            push_line(&mut out.text, &o_text);
            out.text.extend_from_slice(MID_MARKER);
            push_line(&mut out.text, &t_text);
            out.text.extend_from_slice(THEIRS_MARKER);
            out.conflicts.push(Conflict {
                base: start..end,
                ours: o_text,
                theirs: t_text,
            });
        }
        at = end;
        i = j;
    }
    for l in b.get(at..).unwrap_or_default() {
        out.text.extend_from_slice(l);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(v: &[u8]) -> Vec<u8> {
        v.iter().flat_map(|c| [b'a' + c % 5, b'\n']).collect()
    }

    #[test]
    fn clean_and_conflicting() {
        let base = b"one\ntwo\nthree\nfour\nfive\nsix\nseven\n";
        let ours = b"ONE\ntwo\nthree\nfour\nfive\nsix\nseven\n";
        let theirs = b"one\ntwo\nthree\nfour\nfive\nsix\nSEVEN\n";
        let m = merge(base, ours, theirs);
        assert!(m.conflicts.is_empty());
        assert_eq!(m.text, b"ONE\ntwo\nthree\nfour\nfive\nsix\nSEVEN\n");
        let theirs = b"uno\ntwo\nthree\nfour\nfive\nsix\nseven\n";
        let m = merge(base, ours, theirs);
        assert_eq!(m.conflicts.len(), 1);
        assert_eq!(
            m.text,
            b"<<<<<<< host\nONE\n=======\nuno\n>>>>>>> staged\ntwo\nthree\nfour\nfive\nsix\nseven\n"
        );
        // Both made the same edit: no conflict.
        assert!(merge(base, ours, ours).conflicts.is_empty());
        // A last line without a newline still gets its marker on a line of its own.
        let m = merge(b"x", b"y", b"z");
        assert_eq!(m.text, b"<<<<<<< host\ny\n=======\nz\n>>>>>>> staged\n");
    }

    proptest! {
        #[test]
        fn unchanged_host_is_a_plain_apply(a in prop::collection::vec(0u8..7, 0..40),
                                           t in prop::collection::vec(0u8..7, 0..40)) {
            let (base, theirs) = (text(&a), text(&t));
            let m = merge(&base, &base, &theirs);
            prop_assert!(m.conflicts.is_empty());
            prop_assert_eq!(m.text, theirs);
        }

        #[test]
        fn unchanged_stage_keeps_the_host(a in prop::collection::vec(0u8..7, 0..40),
                                          o in prop::collection::vec(0u8..7, 0..40)) {
            let (base, ours) = (text(&a), text(&o));
            let m = merge(&base, &ours, &base);
            prop_assert!(m.conflicts.is_empty());
            prop_assert_eq!(m.text, ours);
        }
    }
}
