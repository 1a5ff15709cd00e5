//! The plan channel (fd [`fds::PLAN`], supervisor → init): the plan, then the go, each one
//! `cofferdam_channel` frame, and when the plan watches files a third, once the
//! supervisor's watch is on the workdir's mount (pid 1 waits for it before the command).
//!
//! The supervisor starts the init before its job exists, so the init's start and its
//! namespaces overlap the supervisor's own setup: it sends the plan as soon as it has one,
//! then the go once the job directory, the run's cgroups and the provisional records are in
//! place. Nothing that touches the job or starts a process of the run happens before the
//! go; when the pipe ends without it, the supervisor has given up and the init leaves
//! quietly.
//!
//! Owns the channel's messages and both ends. It decides nothing about the plan (the init
//! checks it) and may not take any other descriptor.

use crate::fds;
use cofferdam_policy::plan::SandboxPlan;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The channel's name in its errors.
pub const CHANNEL: &str = "plan";

/// One message on the plan channel; `P` is the plan (borrowed to send, owned once read).
/// Externally tagged, like the status messages: an internally tagged one is read through a
/// buffered copy of the whole plan first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanMessage<P> {
    /// The plan, first.
    Plan {
        /// The plan.
        plan: P,
    },
    /// The go, second: the job is in place, the init is in the run's cgroups.
    Go,
    /// Third, only when the plan watches files: the supervisor has placed its watch on the
    /// workdir (or given up on it, which its records say), and pid 1 may go on.
    FileWatched,
}

/// What ended the wait for the supervisor's go without one.
pub(crate) const NO_GO: &str = "the supervisor stopped before starting the command";

/// The supervisor's end: send the plan. It may exceed a pipe's buffer: this waits for the
/// init to read it.
pub fn send_plan(
    fd: BorrowedFd<'_>,
    plan: &SandboxPlan,
) -> Result<(), cofferdam_channel::ChannelError> {
    cofferdam_channel::send_pipe(fd, CHANNEL, &PlanMessage::Plan { plan })
}

/// The supervisor's end: send the go.
pub fn send_go(fd: BorrowedFd<'_>) -> Result<(), cofferdam_channel::ChannelError> {
    cofferdam_channel::send_pipe(fd, CHANNEL, &PlanMessage::<()>::Go)
}

/// The supervisor's end: the watch is placed (or given up on); pid 1 may go on.
pub fn send_file_watched(fd: BorrowedFd<'_>) -> Result<(), cofferdam_channel::ChannelError> {
    cofferdam_channel::send_pipe(fd, CHANNEL, &PlanMessage::<()>::FileWatched)
}

/// The init's end, read in steps: the plan, the go, and for a plan that watches files, the
/// word that the watch is placed.
pub(crate) struct PlanChannel {
    fd: OwnedFd,
}

impl PlanChannel {
    /// Take fd [`fds::PLAN`]; only the init calls this, once.
    pub(crate) fn open() -> Self {
        Self::from_fd(fds::take_plan())
    }

    pub(crate) fn from_fd(fd: OwnedFd) -> Self {
        Self { fd }
    }

    fn recv(&self) -> Result<Option<PlanMessage<Box<SandboxPlan>>>, String> {
        cofferdam_channel::recv_pipe(self.fd.as_fd(), CHANNEL).map_err(|e| e.to_string())
    }

    /// The plan, which must come first.
    pub(crate) fn plan(&mut self) -> Result<SandboxPlan, String> {
        match self.recv()? {
            Some(PlanMessage::Plan { plan }) => Ok(*plan),
            Some(PlanMessage::Go) => Err("the plan channel: the go came before the plan".into()),
            Some(PlanMessage::FileWatched) => {
                Err("the plan channel: the file watch's word came before the plan".into())
            }
            None => Err("the plan channel: the pipe ended before the plan".into()),
        }
    }

    /// Wait for the go; `Err` when the pipe ends (or says anything else) first. The channel
    /// stays open (for [`PlanChannel::file_watched`]) until it is dropped.
    pub(crate) fn go(&mut self) -> Result<(), String> {
        match self.recv()? {
            Some(PlanMessage::Go) => Ok(()),
            Some(PlanMessage::Plan { .. }) => {
                Err("the plan channel: a second plan came instead of the go".into())
            }
            Some(PlanMessage::FileWatched) => {
                Err("the plan channel: the file watch's word came before the go".into())
            }
            None => Err(NO_GO.into()),
        }
    }

    /// Wait for the supervisor's word that the file watch is placed; the channel is closed
    /// on return.
    pub(crate) fn file_watched(self) -> Result<(), String> {
        match self.recv()? {
            Some(PlanMessage::FileWatched) => Ok(()),
            Some(_) => Err(
                "the plan channel: another message came instead of the file \
                            watch's"
                    .into(),
            ),
            None => Err(NO_GO.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn frame(m: &PlanMessage<&SandboxPlan>) -> Vec<u8> {
        cofferdam_channel::encode(CHANNEL, m, 0).unwrap()
    }

    fn plan_frame() -> Vec<u8> {
        frame(&PlanMessage::Plan {
            plan: &crate::setup::tests::sealed_plan(),
        })
    }

    fn go_frame() -> Vec<u8> {
        frame(&PlanMessage::Go)
    }

    /// A channel whose writer wrote `chunks` (each its own write) and then closed.
    fn channel(chunks: &[&[u8]]) -> PlanChannel {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        for c in chunks {
            w.write_all(c).unwrap();
        }
        drop(w);
        PlanChannel::from_fd(r)
    }

    #[test]
    fn the_plan_and_the_go_in_one_write() {
        let mut bytes = plan_frame();
        bytes.extend(go_frame());
        let mut c = channel(&[&bytes]);
        assert_eq!(c.plan().unwrap().uid, 1000);
        assert_eq!(c.go(), Ok(()));
    }

    #[test]
    fn the_plan_in_pieces_then_the_go_sent_by_the_supervisors_end() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let plan = crate::setup::tests::sealed_plan();
        let writer = std::thread::spawn(move || {
            send_plan(w.as_fd(), &plan).unwrap();
            send_go(w.as_fd()).unwrap();
        });
        let mut c = PlanChannel::from_fd(r);
        assert!(c.plan().is_ok());
        assert_eq!(c.go(), Ok(()));
        writer.join().unwrap();
        let f = plan_frame();
        let (a, b) = f.split_at(f.len() / 2);
        let mut c = channel(&[&a[..3], &a[3..], b, &go_frame()]);
        assert!(c.plan().is_ok());
        assert_eq!(c.go(), Ok(()));
    }

    #[test]
    fn the_file_watchs_word_comes_third_and_only_then() {
        let watched = frame(&PlanMessage::FileWatched);
        let mut c = channel(&[&plan_frame(), &go_frame(), &watched]);
        assert!(c.plan().is_ok());
        assert_eq!(c.go(), Ok(()));
        assert_eq!(c.file_watched(), Ok(()));
        // The supervisor gone before it: pid 1 leaves as without a go.
        let mut c = channel(&[&plan_frame(), &go_frame()]);
        assert!(c.plan().is_ok() && c.go().is_ok());
        assert_eq!(c.file_watched(), Err(NO_GO.to_owned()));
        // Out of order.
        let mut c = channel(&[&plan_frame(), &watched]);
        assert!(c.plan().is_ok());
        assert!(c.go().unwrap_err().contains("before the go"));
        let mut c = channel(&[&plan_frame(), &go_frame(), &go_frame()]);
        assert!(c.plan().is_ok() && c.go().is_ok());
        assert!(
            c.file_watched()
                .unwrap_err()
                .contains("instead of the file watch's")
        );
        let mut c = channel(&[&watched]);
        assert!(c.plan().unwrap_err().contains("before the plan"));
    }

    #[test]
    fn no_go_when_the_supervisor_gives_up() {
        let mut c = channel(&[&plan_frame()]);
        assert!(c.plan().is_ok());
        assert_eq!(c.go(), Err(NO_GO.to_owned()));
    }

    #[test]
    fn a_plan_cut_short_out_of_order_or_not_a_plan_is_refused() {
        let f = plan_frame();
        let mut c = channel(&[&f[..10]]);
        assert!(
            c.plan()
                .unwrap_err()
                .starts_with("the plan channel: receive: the stream ended inside a frame")
        );
        let mut c = channel(&[&go_frame()]);
        assert!(
            c.plan()
                .unwrap_err()
                .contains("the go came before the plan")
        );
        let mut c = channel(&[&f, &f]);
        assert!(c.plan().is_ok());
        assert!(c.go().unwrap_err().contains("a second plan"));
        let mut c = channel(&[&cofferdam_channel::encode(CHANNEL, &"not a plan", 0).unwrap()]);
        assert!(
            c.plan()
                .unwrap_err()
                .starts_with("the plan channel: decode: ")
        );
        let mut c = channel(&[]);
        assert!(c.plan().unwrap_err().contains("ended before the plan"));
    }
}
