//! The one wire between a parent and its child, after youki's typed channel: every pair of
//! cofferdam processes that talk (the supervisor and the sandbox init, the init and pid 1)
//! sends typed messages, each optionally carrying descriptors, in one framing.
//!
//! A frame is a 5-byte header — the payload's length (`u32`, little-endian, at most
//! [`MAX_PAYLOAD`]) and the number of descriptors it carries (`u8`, at most [`MAX_FDS`]) —
//! then the payload, the message as JSON. The descriptors travel by `SCM_RIGHTS` with the
//! frame's first bytes, so only a unix socket carries them; a pipe carries frames without.
//! One frame is written by one `write`/`sendmsg` when the kernel takes it whole, so frames
//! under `PIPE_BUF` from several writers on one pipe never interleave.
//!
//! The receiver reads a frame exactly (header, then payload): nothing past it is consumed,
//! so a caller may poll the descriptor between frames. A stream already read into memory
//! (the status pipe, which the supervisor collects unread) is decoded with [`decode`].
//!
//! Every error names the channel, the step (encode, send, receive, decode) and the cause.
//!
//! Owns the framing and the descriptor passing. It may not define any channel's messages
//! (their owners do: `cofferdam-sandbox`'s `status` and `wire`, `cofferdam-net`'s
//! `handover` and `forward`) nor decide what a message means, and it never opens or
//! numbers descriptors (`cofferdam-sandbox::fds` declares the table).

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;

/// The header's length: payload length (`u32` LE) and descriptor count (`u8`).
pub const HEADER: usize = 5;
/// The largest payload a frame may carry (the biggest message is the sandbox plan).
pub const MAX_PAYLOAD: usize = 16 << 20;
/// The most descriptors one frame carries (the kernel's `SCM_MAX_FD` is 253).
pub const MAX_FDS: usize = 64;

/// What the channel was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Turning the message into a frame.
    Encode,
    /// Writing the frame.
    Send,
    /// Reading a frame.
    Receive,
    /// Turning a frame back into a message.
    Decode,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Encode => "encode",
            Step::Send => "send",
            Step::Receive => "receive",
            Step::Decode => "decode",
        })
    }
}

/// Why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    /// A system call failed.
    #[error("{0}")]
    Io(Errno),
    /// The message is not JSON of the expected type (or could not be made JSON).
    #[error("{0}")]
    Json(String),
    /// A frame over the payload bound.
    #[error("a payload of {len} bytes is over the limit of {MAX_PAYLOAD}")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// More descriptors than a frame carries.
    #[error("{n} descriptors are over the limit of {MAX_FDS}")]
    TooManyFds {
        /// How many.
        n: usize,
    },
    /// Descriptors on a channel that is not a unix socket.
    #[error("descriptors need a unix socket")]
    NotASocket,
    /// The stream ended inside a frame.
    #[error("the stream ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes of the frame read.
        got: usize,
        /// Bytes the frame has.
        want: usize,
    },
    /// The descriptors that came are not the number the header declares.
    #[error("the frame declares {declared} descriptor(s), {got} came")]
    Descriptors {
        /// Declared.
        declared: usize,
        /// Received.
        got: usize,
    },
}

/// A channel's failure: which channel, at which step, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {channel} channel: {step}: {cause}")]
pub struct ChannelError {
    /// The channel's name (`plan`, `status`, `terminal`, `network`, `publish`).
    pub channel: &'static str,
    /// The step.
    pub step: Step,
    /// The cause.
    pub cause: Cause,
}

impl ChannelError {
    /// The failure of `channel` at `step` for `cause`.
    pub fn new(channel: &'static str, step: Step, cause: Cause) -> Self {
        Self {
            channel,
            step,
            cause,
        }
    }

    /// The errno behind it, when a system call failed; `PROTO` for a malformed frame.
    pub fn errno(&self) -> Errno {
        match self.cause {
            Cause::Io(e) => e,
            Cause::NotASocket => Errno::NOTSOCK,
            Cause::TooLarge { .. } | Cause::TooManyFds { .. } => Errno::MSGSIZE,
            Cause::Json(_) | Cause::Truncated { .. } | Cause::Descriptors { .. } => Errno::PROTO,
        }
    }
}

/// `msg` as one frame declaring `fds` descriptors.
pub fn encode<M: Serialize>(
    channel: &'static str,
    msg: &M,
    fds: usize,
) -> Result<Vec<u8>, ChannelError> {
    let err = |cause| ChannelError::new(channel, Step::Encode, cause);
    if fds > MAX_FDS {
        return Err(err(Cause::TooManyFds { n: fds }));
    }
    let mut frame = vec![0u8; HEADER];
    serde_json::to_writer(&mut frame, msg).map_err(|e| err(Cause::Json(e.to_string())))?;
    let len = frame.len() - HEADER;
    let len32 = u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_PAYLOAD)
        .ok_or(err(Cause::TooLarge { len }))?;
    frame[..4].copy_from_slice(&len32.to_le_bytes());
    // MAX_FDS fits a byte.
    frame[4] = u8::try_from(fds).map_err(|_| err(Cause::TooManyFds { n: fds }))?;
    Ok(frame)
}

/// A frame's header: payload length and descriptor count, checked against the bounds.
fn header(channel: &'static str, step: Step, h: &[u8]) -> Result<(usize, usize), ChannelError> {
    let err = |cause| ChannelError::new(channel, step, cause);
    let (Some(len), Some(&fds)) = (h.get(..4), h.get(4)) else {
        return Err(err(Cause::Truncated {
            got: h.len(),
            want: HEADER,
        }));
    };
    let mut l = [0u8; 4];
    l.copy_from_slice(len);
    let len = usize::try_from(u32::from_le_bytes(l)).unwrap_or(usize::MAX);
    if len > MAX_PAYLOAD {
        return Err(err(Cause::TooLarge { len }));
    }
    let fds = usize::from(fds);
    if fds > MAX_FDS {
        return Err(err(Cause::TooManyFds { n: fds }));
    }
    Ok((len, fds))
}

/// The length of the frame at the start of `buf` (header and payload), once its header is
/// there and within the bounds.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let (len, _) = header("", Step::Decode, buf.get(..HEADER)?).ok()?;
    Some(HEADER + len)
}

/// One frame decoded from the start of `buf`: the message, the descriptors its header
/// declares, and the bytes it took. `Ok(None)` when `buf` holds no whole frame yet.
pub fn decode_one<M: DeserializeOwned>(
    channel: &'static str,
    buf: &[u8],
) -> Result<Option<(M, usize, usize)>, ChannelError> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let (len, fds) = header(channel, Step::Decode, buf)?;
    let Some(payload) = buf.get(HEADER..HEADER + len) else {
        return Ok(None);
    };
    let msg = serde_json::from_slice(payload)
        .map_err(|e| ChannelError::new(channel, Step::Decode, Cause::Json(e.to_string())))?;
    Ok(Some((msg, fds, HEADER + len)))
}

/// Every frame of a whole stream (read to its end, no descriptors), in order. A frame that
/// is not a message is an error in its place and decoding goes on; a header past the bounds
/// or a stream that ends inside a frame is a last error, since nothing after it can be
/// framed.
pub fn decode<M: DeserializeOwned>(
    channel: &'static str,
    stream: &[u8],
) -> Vec<Result<M, ChannelError>> {
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let (len, _) = match header(channel, Step::Decode, rest) {
            Ok(h) => h,
            Err(e) => {
                out.push(Err(e));
                break;
            }
        };
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            out.push(Err(ChannelError::new(
                channel,
                Step::Decode,
                Cause::Truncated {
                    got: rest.len(),
                    want: HEADER + len,
                },
            )));
            break;
        };
        out.push(
            serde_json::from_slice(payload)
                .map_err(|e| ChannelError::new(channel, Step::Decode, Cause::Json(e.to_string()))),
        );
        rest = &rest[HEADER + len..];
    }
    out
}

/// Send `msg` with `fds` (attached to the frame's first bytes) on `fd`: a unix socket, or a
/// pipe when `fds` is empty (a pipe costs a failed `send` per write: a caller that knows its
/// descriptor is a pipe uses [`send_pipe`]). Interrupted writes are retried; a peer that is
/// gone is `PIPE` (no `SIGPIPE` on a socket).
pub fn send<M: Serialize>(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    msg: &M,
    fds: &[BorrowedFd<'_>],
) -> Result<(), ChannelError> {
    let frame = encode(channel, msg, fds.len())?;
    send_frame(fd, channel, &frame, fds)
}

/// Send `msg` on `fd`, a pipe: plain `write`s, no descriptors (a pipe cannot carry them).
/// A reader that is gone is `PIPE`, and raises `SIGPIPE` as any pipe write does.
pub fn send_pipe<M: Serialize>(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    msg: &M,
) -> Result<(), ChannelError> {
    let frame = encode(channel, msg, 0)?;
    write_all(fd, channel, &frame, |fd, rest| rustix::io::write(fd, rest))
}

/// Write `frame` whole with `write_some`, retrying interrupted and short writes.
fn write_all(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    frame: &[u8],
    mut write_some: impl FnMut(BorrowedFd<'_>, &[u8]) -> Result<usize, Errno>,
) -> Result<(), ChannelError> {
    let mut rest = frame;
    while !rest.is_empty() {
        match write_some(fd, rest) {
            Ok(0) => {
                return Err(ChannelError::new(
                    channel,
                    Step::Send,
                    Cause::Io(Errno::PIPE),
                ));
            }
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(Errno::INTR) => {}
            Err(e) => return Err(ChannelError::new(channel, Step::Send, Cause::Io(e))),
        }
    }
    Ok(())
}

/// Write one encoded frame (see [`send`]): the descriptors go by `sendmsg` with the first
/// bytes, the rest by `send`, both without `SIGPIPE`.
pub fn send_frame(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    frame: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), ChannelError> {
    let mut rest = frame;
    if !fds.is_empty() && !rest.is_empty() {
        let err = |cause| ChannelError::new(channel, Step::Send, cause);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(err(Cause::TooManyFds { n: fds.len() }));
        }
        let wrote = loop {
            match rustix::net::sendmsg(fd, &[IoSlice::new(rest)], &mut control, SendFlags::NOSIGNAL)
            {
                Err(Errno::INTR) => {}
                Err(Errno::NOTSOCK) => return Err(err(Cause::NotASocket)),
                Err(e) => return Err(err(Cause::Io(e))),
                Ok(0) => return Err(err(Cause::Io(Errno::PIPE))),
                Ok(n) => break n,
            }
        };
        rest = rest.get(wrote..).unwrap_or_default();
    }
    write_all(fd, channel, rest, |fd, rest| {
        match rustix::net::send(fd, rest, SendFlags::NOSIGNAL) {
            Err(Errno::NOTSOCK) => rustix::io::write(fd, rest),
            other => other,
        }
    })
}

/// Read into `buf` until it is full, collecting descriptors; `Ok(false)` when the stream
/// ends before the first byte (with `at_start`), an error when it ends later.
fn read_exact(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    want: usize,
    done_before: usize,
    pipe: bool,
) -> Result<bool, ChannelError> {
    let err = |cause| ChannelError::new(channel, Step::Receive, cause);
    let mut got = 0;
    while got < buf.len() {
        let rest = buf.get_mut(got..).unwrap_or_default();
        let n = if pipe {
            rustix::io::read(fd, rest)
        } else {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            match rustix::net::recvmsg(
                fd,
                &mut [IoSliceMut::new(rest)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(msg) => {
                    for m in control.drain() {
                        if let RecvAncillaryMessage::ScmRights(got) = m {
                            fds.extend(got);
                        }
                    }
                    Ok(msg.bytes)
                }
                Err(Errno::NOTSOCK) => rustix::io::read(fd, rest),
                Err(e) => Err(e),
            }
        };
        match n {
            Ok(0) if got == 0 && done_before == 0 => return Ok(false),
            Ok(0) => {
                return Err(err(Cause::Truncated {
                    got: done_before + got,
                    want,
                }));
            }
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(err(Cause::Io(e))),
        }
    }
    Ok(true)
}

/// Receive one message and the descriptors it carries from `fd` (a unix socket or a pipe),
/// reading exactly one frame. `Ok(None)` at the end of the stream between frames.
/// Descriptors arrive close-on-exec; a frame whose descriptors do not match its header is an
/// error (the ones that came are closed).
pub fn recv<M: DeserializeOwned>(
    fd: BorrowedFd<'_>,
    channel: &'static str,
) -> Result<Option<(M, Vec<OwnedFd>)>, ChannelError> {
    recv_on(fd, channel, false)
}

/// Receive one message from `fd`, a pipe, with plain `read`s (see [`recv`]; a pipe carries
/// no descriptors, so a frame that declares some is an error).
pub fn recv_pipe<M: DeserializeOwned>(
    fd: BorrowedFd<'_>,
    channel: &'static str,
) -> Result<Option<M>, ChannelError> {
    Ok(recv_on(fd, channel, true)?.map(|(msg, _)| msg))
}

fn recv_on<M: DeserializeOwned>(
    fd: BorrowedFd<'_>,
    channel: &'static str,
    pipe: bool,
) -> Result<Option<(M, Vec<OwnedFd>)>, ChannelError> {
    let mut fds = Vec::new();
    let mut h = [0u8; HEADER];
    if !read_exact(fd, channel, &mut h, &mut fds, HEADER, 0, pipe)? {
        return Ok(None);
    }
    let (len, declared) = header(channel, Step::Receive, &h)?;
    let mut payload = vec![0u8; len];
    read_exact(
        fd,
        channel,
        &mut payload,
        &mut fds,
        HEADER + len,
        HEADER,
        pipe,
    )?;
    if fds.len() != declared {
        return Err(ChannelError::new(
            channel,
            Step::Receive,
            Cause::Descriptors {
                declared,
                got: fds.len(),
            },
        ));
    }
    let msg = serde_json::from_slice(&payload)
        .map_err(|e| ChannelError::new(channel, Step::Decode, Cause::Json(e.to_string())))?;
    Ok(Some((msg, fds)))
}

/// A typed channel over one descriptor: the messages it sends are `S`, the ones it receives
/// `R` (a one-way channel leaves the other side `()`).
#[derive(Debug)]
pub struct Channel<S, R> {
    fd: OwnedFd,
    name: &'static str,
    _types: std::marker::PhantomData<fn(S) -> R>,
}

impl<S: Serialize, R: DeserializeOwned> Channel<S, R> {
    /// The channel `name` over `fd`.
    pub fn new(name: &'static str, fd: OwnedFd) -> Self {
        Self {
            fd,
            name,
            _types: std::marker::PhantomData,
        }
    }

    /// Send `msg` with `fds`.
    pub fn send(&self, msg: &S, fds: &[BorrowedFd<'_>]) -> Result<(), ChannelError> {
        send(self.fd.as_fd(), self.name, msg, fds)
    }

    /// Receive one message and its descriptors; `Ok(None)` at the end of the stream.
    pub fn recv(&self) -> Result<Option<(R, Vec<OwnedFd>)>, ChannelError> {
        recv(self.fd.as_fd(), self.name)
    }

    /// The channel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Give the descriptor back.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl<S, R> AsFd for Channel<S, R> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests;
