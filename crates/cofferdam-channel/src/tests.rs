use super::*;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Msg {
    Hello { n: u32 },
    Bye,
}

fn pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// A pipe's write end, readable through its read end: the descriptor really crossed.
fn crossed(r: &OwnedFd, w: OwnedFd) {
    rustix::io::write(&w, b"x").unwrap();
    let mut b = [0u8; 1];
    assert_eq!(rustix::io::read(r, &mut b).unwrap(), 1);
}

#[test]
fn messages_and_descriptors_cross_a_socket_in_order() {
    let (a, b) = pair();
    let (r1, w1) = rustix::pipe::pipe().unwrap();
    let (r2, w2) = rustix::pipe::pipe().unwrap();
    send(a.as_fd(), "test", &Msg::Hello { n: 1 }, &[w1.as_fd()]).unwrap();
    send(a.as_fd(), "test", &Msg::Bye, &[]).unwrap();
    send(
        a.as_fd(),
        "test",
        &Msg::Hello { n: 2 },
        &[w2.as_fd(), w1.as_fd()],
    )
    .unwrap();
    drop((w1, w2));
    let (m, fds) = recv::<Msg>(b.as_fd(), "test").unwrap().unwrap();
    assert_eq!((m, fds.len()), (Msg::Hello { n: 1 }, 1));
    crossed(&r1, fds.into_iter().next().unwrap());
    let (m, fds) = recv::<Msg>(b.as_fd(), "test").unwrap().unwrap();
    assert_eq!((m, fds.len()), (Msg::Bye, 0));
    let (m, fds) = recv::<Msg>(b.as_fd(), "test").unwrap().unwrap();
    assert_eq!((m, fds.len()), (Msg::Hello { n: 2 }, 2));
    let mut it = fds.into_iter();
    crossed(&r2, it.next().unwrap());
    crossed(&r1, it.next().unwrap());
    drop(a);
    assert!(recv::<Msg>(b.as_fd(), "test").unwrap().is_none());
}

#[test]
fn a_pipe_carries_frames_but_not_descriptors() {
    let (r, w) = rustix::pipe::pipe().unwrap();
    let ch: Channel<Msg, Msg> = Channel::new("status", w);
    ch.send(&Msg::Hello { n: 7 }, &[]).unwrap();
    let e = ch.send(&Msg::Bye, &[r.as_fd()]).unwrap_err();
    assert_eq!((e.step, e.cause.clone()), (Step::Send, Cause::NotASocket));
    assert_eq!(
        e.to_string(),
        "the status channel: send: descriptors need a unix socket"
    );
    drop(ch);
    let got = recv::<Msg>(r.as_fd(), "status").unwrap().unwrap();
    assert_eq!(got.0, Msg::Hello { n: 7 });
    assert!(recv::<Msg>(r.as_fd(), "status").unwrap().is_none());
}

#[test]
fn the_pipe_functions_write_and_read_frames_and_refuse_declared_descriptors() {
    let (r, w) = rustix::pipe::pipe().unwrap();
    send_pipe(w.as_fd(), "plan", &Msg::Hello { n: 1 }).unwrap();
    send_pipe(w.as_fd(), "plan", &Msg::Bye).unwrap();
    // A frame that says it carries a descriptor, written by hand: a pipe cannot have it.
    rustix::io::write(&w, &encode("plan", &Msg::Bye, 1).unwrap()).unwrap();
    drop(w);
    assert_eq!(
        recv_pipe::<Msg>(r.as_fd(), "plan").unwrap(),
        Some(Msg::Hello { n: 1 })
    );
    assert_eq!(recv_pipe::<Msg>(r.as_fd(), "plan").unwrap(), Some(Msg::Bye));
    let e = recv_pipe::<Msg>(r.as_fd(), "plan").unwrap_err();
    assert_eq!(
        (e.step, e.cause),
        (
            Step::Receive,
            Cause::Descriptors {
                declared: 1,
                got: 0
            }
        )
    );
    assert_eq!(recv_pipe::<Msg>(r.as_fd(), "plan").unwrap(), None);
    // A reader that is gone is an error, not a hang (the Rust runtime ignores SIGPIPE in the
    // test process).
    let (r, w) = rustix::pipe::pipe().unwrap();
    drop(r);
    let e = send_pipe(w.as_fd(), "status", &Msg::Bye).unwrap_err();
    assert_eq!((e.step, e.cause), (Step::Send, Cause::Io(Errno::PIPE)));
}

#[test]
fn the_receiver_reads_one_frame_and_no_more() {
    let (a, b) = pair();
    send(a.as_fd(), "t", &Msg::Bye, &[]).unwrap();
    send(a.as_fd(), "t", &Msg::Hello { n: 3 }, &[]).unwrap();
    assert_eq!(recv::<Msg>(b.as_fd(), "t").unwrap().unwrap().0, Msg::Bye);
    // The second frame is still in the socket, whole.
    let mut buf = [0u8; 256];
    let n = rustix::io::read(&b, &mut buf).unwrap();
    let decoded = decode::<Msg>("t", &buf[..n]);
    assert_eq!(decoded, vec![Ok(Msg::Hello { n: 3 })]);
}

#[test]
fn a_broken_frame_is_an_error_naming_the_channel_step_and_cause() {
    // Ends inside the payload.
    let (a, b) = pair();
    let frame = encode("plan", &Msg::Hello { n: 1 }, 0).unwrap();
    rustix::io::write(&a, &frame[..frame.len() - 2]).unwrap();
    drop(a);
    let e = recv::<Msg>(b.as_fd(), "plan").unwrap_err();
    assert_eq!(e.step, Step::Receive);
    assert!(matches!(e.cause, Cause::Truncated { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("the plan channel: receive: the stream ended")
    );

    // A header over the bound is refused before anything is allocated for it.
    let (a, b) = pair();
    rustix::io::write(&a, &[0xff, 0xff, 0xff, 0x7f, 0]).unwrap();
    let e = recv::<Msg>(b.as_fd(), "plan").unwrap_err();
    assert!(matches!(e.cause, Cause::TooLarge { .. }), "{e}");
    assert_eq!(e.errno(), Errno::MSGSIZE);

    // Declares a descriptor that never came.
    let (a, b) = pair();
    rustix::io::write(&a, &encode("net", &Msg::Bye, 1).unwrap()).unwrap();
    let e = recv::<Msg>(b.as_fd(), "net").unwrap_err();
    assert_eq!(
        e.cause,
        Cause::Descriptors {
            declared: 1,
            got: 0
        }
    );

    // Not the expected message.
    let (a, b) = pair();
    send(a.as_fd(), "net", &serde_json::json!({"type": "other"}), &[]).unwrap();
    let e = recv::<Msg>(b.as_fd(), "net").unwrap_err();
    assert_eq!(e.step, Step::Decode);
    assert_eq!(e.errno(), Errno::PROTO);
}

#[test]
fn bounds_are_checked_when_sending() {
    let big = "x".repeat(MAX_PAYLOAD);
    let e = encode("plan", &big, 0).unwrap_err();
    assert_eq!(e.step, Step::Encode);
    assert!(matches!(e.cause, Cause::TooLarge { len } if len == MAX_PAYLOAD + 2));
    let e = encode("net", &Msg::Bye, MAX_FDS + 1).unwrap_err();
    assert_eq!(e.cause, Cause::TooManyFds { n: MAX_FDS + 1 });
}

#[test]
fn a_stream_decodes_in_order_past_a_bad_message_and_stops_at_a_broken_frame() {
    let mut stream = encode("status", &Msg::Hello { n: 1 }, 0).unwrap();
    stream.extend(encode("status", &serde_json::json!({"type": "nope"}), 0).unwrap());
    stream.extend(encode("status", &Msg::Bye, 0).unwrap());
    let whole = stream.len();
    stream.extend(encode("status", &Msg::Bye, 0).unwrap());
    stream.truncate(whole + 3);
    let d = decode::<Msg>("status", &stream);
    assert_eq!(d.len(), 4);
    assert_eq!(d[0], Ok(Msg::Hello { n: 1 }));
    assert!(d[1].as_ref().is_err_and(|e| e.step == Step::Decode));
    assert_eq!(d[2], Ok(Msg::Bye));
    assert!(
        d[3].as_ref()
            .is_err_and(|e| matches!(e.cause, Cause::Truncated { got: 3, .. }))
    );
    // decode_one: whole frames only.
    assert_eq!(decode_one::<Msg>("status", &stream[..4]).unwrap(), None);
    let (m, fds, used) = decode_one::<Msg>("status", &stream).unwrap().unwrap();
    assert_eq!((m, fds), (Msg::Hello { n: 1 }, 0));
    assert_eq!(
        decode_one::<Msg>("status", &stream[..used - 1]).unwrap(),
        None
    );
}

#[test]
fn frames_from_several_writers_on_a_pipe_do_not_interleave() {
    let (r, w) = rustix::pipe::pipe().unwrap();
    let w = std::sync::Arc::new(w);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            std::thread::spawn(move || {
                for n in 0..50 {
                    send(w.as_fd(), "status", &Msg::Hello { n: t * 100 + n }, &[]).unwrap();
                }
            })
        })
        .collect();
    let mut stream = Vec::new();
    let mut buf = [0u8; 4096];
    let mut seen = 0;
    while seen < 200 {
        let n = rustix::io::read(&r, &mut buf).unwrap();
        stream.extend_from_slice(&buf[..n]);
        seen = decode::<Msg>("status", &stream)
            .iter()
            .filter(|m| m.is_ok())
            .count();
    }
    for t in threads {
        t.join().unwrap();
    }
    let d = decode::<Msg>("status", &stream);
    assert_eq!(d.len(), 200);
    assert!(d.iter().all(Result::is_ok));
}
