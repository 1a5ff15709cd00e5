//! Splicing a checked connection: bytes both ways until both sides are done, counted. Each
//! direction half-closes the other side when its source ends, so request/response protocols
//! that signal the end of a request with a half-close keep working.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

/// The copy buffer per direction.
const BUF: usize = 64 * 1024;

fn pump(mut from: TcpStream, mut to: TcpStream) -> u64 {
    let mut buf = vec![0u8; BUF];
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
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
    total
}

/// Copy `client` ⇄ `upstream` until both directions end; returns (bytes client→upstream,
/// bytes upstream→client).
pub fn splice(client: TcpStream, upstream: TcpStream) -> std::io::Result<(u64, u64)> {
    let (c2, u2) = (client.try_clone()?, upstream.try_clone()?);
    let back = std::thread::Builder::new()
        .name("cofferdam-net-relay".into())
        .spawn(move || pump(u2, c2))?;
    let sent = pump(client, upstream);
    let received = back.join().unwrap_or(0);
    Ok((sent, received))
}
