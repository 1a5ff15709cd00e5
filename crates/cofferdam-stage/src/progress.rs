//! How long work of this crate tells its progress: the [`Progress`] trait its walks call
//! (the copy of the copy tiers, the seal) and [`Silent`], which ignores it. The crate never
//! prints; the binary renders the calls (on a terminal only).

/// Told as long work goes on. Units are entries (files, directories, links).
pub trait Progress {
    /// Work `what` (a short phrase: "copying the workdir") begins; `total` units when known.
    fn begin(&mut self, what: &str, total: Option<u64>);
    /// `n` more units are done.
    fn advance(&mut self, n: u64);
    /// The work is over (done or failed).
    fn end(&mut self);
}

/// Progress nobody is shown.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&mut self, _what: &str, _total: Option<u64>) {}
    fn advance(&mut self, _n: u64) {}
    fn end(&mut self) {}
}
