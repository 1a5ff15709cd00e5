//! Progress of long work on stderr (indicatif): the copy of the copy tiers, the seal, apply
//! and drop. Drawn only when stderr is a terminal and the output is for a person (not
//! `--json`, not `run -q`), and only once the work has lasted [`SHOW_AFTER`], so a small
//! job shows nothing; the line is cleared when the work ends. Owns the rendering of
//! `cofferdam_stage::progress::Progress` and nothing else: it may not decide or do the work.

use cofferdam_stage::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// Work shorter than this shows no progress.
pub const SHOW_AFTER: Duration = Duration::from_millis(250);

/// [`SHOW_AFTER`], or zero in a debug build with `COFFERDAM_TEST_PROGRESS_AT_ONCE` set (so
/// a test sees the line on a small job without depending on timing).
fn show_after() -> Duration {
    if cfg!(debug_assertions) && std::env::var_os("COFFERDAM_TEST_PROGRESS_AT_ONCE").is_some() {
        Duration::ZERO
    } else {
        SHOW_AFTER
    }
}

/// Whether progress may be drawn: stderr is a terminal, no `--json`, no quiet flag.
pub fn wanted(json: bool, quiet: bool) -> bool {
    !json && !quiet && rustix::termios::isatty(rustix::stdio::stderr())
}

/// A progress line on stderr (or nothing, when not [`wanted`]).
#[derive(Debug)]
pub struct Line {
    on: bool,
    what: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Line {
    /// A line that is drawn only when `on`, and once [`SHOW_AFTER`] has passed since now
    /// (a later phase of the same work is drawn at once).
    pub fn new(on: bool) -> Line {
        Line {
            on,
            what: String::new(),
            total: None,
            done: 0,
            started: Instant::now(),
            bar: None,
        }
    }

    /// Move to `done` units (for callers that count themselves).
    pub fn set(&mut self, done: u64) {
        self.done = done;
        self.draw();
    }

    fn draw(&mut self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
            return;
        }
        if !self.on || self.started.elapsed() < show_after() {
            return;
        }
        let bar = ProgressBar::with_draw_target(self.total, ProgressDrawTarget::stderr());
        let template = if self.total.is_some() {
            "{msg} [{bar:30}] {pos}/{len}"
        } else {
            "{spinner} {msg}: {pos} entries"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(self.what.clone());
        bar.set_position(self.done);
        self.bar = Some(bar);
    }
}

impl Progress for Line {
    fn begin(&mut self, what: &str, total: Option<u64>) {
        self.end();
        what.clone_into(&mut self.what);
        self.total = total;
        self.done = 0;
    }

    fn advance(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        self.draw();
    }

    fn end(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.end();
    }
}

/// Show an apply's `step` of `ops` operations on `line`: the temporary objects written,
/// then the renames into place.
pub fn applying(line: &mut Line, ops: u64, step: cofferdam_stage::apply::Step) {
    use cofferdam_stage::apply::Step;
    match step {
        Step::Prepared(n) => {
            if line.what != "writing the changes" {
                line.begin("writing the changes", Some(ops));
            }
            line.set(n as u64);
        }
        Step::Committing => line.begin("moving them into place", Some(ops)),
        Step::Committed(n) => line.set(n as u64),
        Step::Synced | Step::Cleaned => line.end(),
    }
}

/// A spinner for work that tells no progress of its own (removing a stage): drawn from a
/// thread once the work has lasted [`SHOW_AFTER`], cleared when the guard is dropped.
#[derive(Debug)]
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// Start `what` (shown only when `on`).
    pub fn start(on: bool, what: &str) -> Spinner {
        if !on {
            return Spinner(None);
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(what.to_owned());
        let shown = bar.clone();
        std::thread::spawn(move || {
            std::thread::sleep(show_after());
            if !shown.is_finished() {
                shown.set_draw_target(ProgressDrawTarget::stderr());
                shown.enable_steady_tick(Duration::from_millis(100));
            }
        });
        Spinner(Some(bar))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }
}
