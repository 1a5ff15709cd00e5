//! Splicing a checked connection: bytes both ways until both sides are done, counted. Each
//! direction moves data with `splice(2)` through a pipe (the bytes never enter this
//! process's memory), falling back to read/write where splicing is refused, and half-closes
//! the other side when its source ends, so protocols that end a request with a half-close
//! keep working.

use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};

/// The most bytes moved per call, and the pipe's size.
const CHUNK: usize = 1 << 20;

/// Move everything from `from` to `to` through a pipe; `None` when splicing is refused
/// before any byte moved (the caller copies instead).
fn splice_all(from: &TcpStream, to: &TcpStream) -> Option<u64> {
    let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC).ok()?;
    let _ = rustix::pipe::fcntl_setpipe_size(&w, CHUNK);
    let mut total = 0u64;
    loop {
        let n = match rustix::pipe::splice(from, None, &w, None, CHUNK, SpliceFlags::MOVE) {
            Ok(0) => return Some(total),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(Errno::INVAL) if total == 0 => return None,
            Err(_) => return Some(total),
        };
        let mut left = n;
        while left > 0 {
            match rustix::pipe::splice(&r, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) => return Some(total),
                Ok(m) => {
                    left -= m;
                    total += m as u64;
                }
                Err(Errno::INTR) => {}
                Err(_) => return Some(total),
            }
        }
    }
}

fn copy_all(mut from: &TcpStream, mut to: &TcpStream) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    total
}

/// Move `from` → `to` until `from` ends, then half-close both; the bytes moved.
pub fn pump(from: TcpStream, to: TcpStream) -> u64 {
    pump_unless(from, to, &AtomicBool::new(false))
}

/// [`pump`], but when `quiet` is set by the time `from` ends, `to` is left as it is (no
/// end-of-stream), so the caller can reset it instead.
pub fn pump_unless(from: TcpStream, to: TcpStream, quiet: &AtomicBool) -> u64 {
    let total = splice_all(&from, &to).unwrap_or_else(|| copy_all(&from, &to));
    if !quiet.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
        let _ = from.shutdown(Shutdown::Read);
    }
    total
}

/// Copy `client` ⇄ `upstream` until both directions end; returns (bytes client→upstream,
/// bytes upstream→client).
pub fn splice(client: TcpStream, upstream: TcpStream) -> std::io::Result<(u64, u64)> {
    let (c2, u2) = (client.try_clone()?, upstream.try_clone()?);
    let back = super::worker("cofferdam-net-relay").spawn(move || pump(u2, c2))?;
    let sent = pump(client, upstream);
    let received = back.join().unwrap_or(0);
    Ok((sent, received))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn bytes_cross_both_ways_and_are_counted() {
        let up = TcpListener::bind("127.0.0.1:0").unwrap();
        let up_addr = up.local_addr().unwrap();
        let echo = std::thread::spawn(move || {
            let (mut c, _) = up.accept().unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).unwrap();
            c.write_all(&got).unwrap();
            c.write_all(b"!").unwrap();
        });
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let front_addr = front.local_addr().unwrap();
        let relay = std::thread::spawn(move || {
            let (c, _) = front.accept().unwrap();
            splice(c, TcpStream::connect(up_addr).unwrap()).unwrap()
        });
        let mut client = TcpStream::connect(front_addr).unwrap();
        let payload = vec![7u8; 3 * CHUNK + 5];
        client.write_all(&payload).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).unwrap();
        echo.join().unwrap();
        assert_eq!(back.len(), payload.len() + 1);
        assert_eq!(
            relay.join().unwrap(),
            (payload.len() as u64, payload.len() as u64 + 1)
        );
    }
}
