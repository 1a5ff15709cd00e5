//! The DNS wire format, as far as the sandbox's resolver needs it: parse one question, build
//! an answer (an `A` record), an empty answer (the name exists, no record of that type) or a
//! name error. Pure: the caller decides what a name gets.

use std::net::Ipv4Addr;

/// Record type `A`.
pub const TYPE_A: u16 = 1;
/// Class `IN`.
const CLASS_IN: u16 = 1;
/// The TTL of the answers: short, the mapping lives only as long as the run.
const TTL: u32 = 30;

/// One parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The transaction id.
    pub id: u16,
    /// The flags word of the query (opcode and RD are echoed).
    pub flags: u16,
    /// The question's name, lowercased, without the trailing dot.
    pub name: String,
    /// The question's type.
    pub qtype: u16,
    /// The question's class.
    pub qclass: u16,
    /// The question section's bytes, echoed in the response.
    question: Vec<u8>,
}

/// What the resolver says about a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// One `A` record.
    A(Ipv4Addr),
    /// The name exists but has no record of the asked type (`NOERROR`, no answer).
    Empty,
    /// Not answered (`REFUSED`): a name the run does not allow, or a query this resolver
    /// does not answer. A resolver gives up on it at once, and it does not claim the name
    /// is absent.
    Refused,
}

/// Parse a query with exactly one question. `None` for anything else (it is dropped).
pub fn parse_query(msg: &[u8]) -> Option<Query> {
    if msg.len() < 12 {
        return None;
    }
    let be = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
    let (id, flags, qdcount) = (be(0), be(2), be(4));
    if flags & 0x8000 != 0 || qdcount != 1 {
        return None;
    }
    let mut pos = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        // Compression pointers have no place in a question; longer labels are invalid.
        if len > 63 {
            return None;
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
        if pos > 12 + 255 {
            return None;
        }
    }
    let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(pos + 2)?, *msg.get(pos + 3)?]);
    pos += 4;
    Some(Query {
        id,
        flags,
        name: labels.join("."),
        qtype,
        qclass,
        question: msg[12..pos].to_vec(),
    })
}

/// Whether the query asks for an internet-class record.
pub fn is_internet(q: &Query) -> bool {
    q.qclass == CLASS_IN
}

/// The response to `q`.
pub fn response(q: &Query, reply: Reply) -> Vec<u8> {
    let rcode: u16 = match reply {
        Reply::A(_) | Reply::Empty => 0,
        Reply::Refused => 5,
    };
    // QR, the query's opcode and RD, RA, the rcode.
    let flags = 0x8000 | (q.flags & 0x7900) | 0x0080 | rcode;
    let answers: u16 = u16::from(matches!(reply, Reply::A(_)));
    let mut out = Vec::with_capacity(12 + q.question.len() + 16);
    for word in [q.id, flags, 1, answers, 0, 0] {
        out.extend_from_slice(&word.to_be_bytes());
    }
    out.extend_from_slice(&q.question);
    if let Reply::A(addr) = reply {
        // The name as a pointer to the question's (offset 12).
        out.extend_from_slice(&0xC00Cu16.to_be_bytes());
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&addr.octets());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            m.push(u8::try_from(label.len()).unwrap());
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m
    }

    #[test]
    fn a_query_parses_and_gets_one_answer() {
        let q = parse_query(&query("Svc.Test", TYPE_A)).unwrap();
        assert_eq!((q.id, q.name.as_str(), q.qtype), (0x1234, "svc.test", 1));
        let r = response(&q, Reply::A(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(&r[..2], &[0x12, 0x34]);
        assert_eq!(r[3] & 0x0f, 0, "NOERROR");
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        assert_eq!(&r[r.len() - 4..], &[198, 18, 0, 1]);
        assert_eq!(r[2] & 0x01, 1, "RD echoed");
    }

    #[test]
    fn refused_names_get_refused_and_empty_has_no_answer() {
        let q = parse_query(&query("other.test", TYPE_A)).unwrap();
        let r = response(&q, Reply::Refused);
        assert_eq!(r[3] & 0x0f, 5);
        assert_eq!(&r[6..8], &[0, 0]);
        let r = response(&q, Reply::Empty);
        assert_eq!(r[3] & 0x0f, 0);
        assert_eq!(&r[6..8], &[0, 0]);
    }

    #[test]
    fn malformed_queries_are_dropped_not_panicked_on() {
        assert!(parse_query(&[]).is_none());
        assert!(parse_query(&[0; 11]).is_none());
        let mut m = query("a.b", TYPE_A);
        m.truncate(m.len() - 3);
        assert!(parse_query(&m).is_none());
        let mut resp = query("a.b", TYPE_A);
        resp[2] |= 0x80;
        assert!(parse_query(&resp).is_none());
        let mut bad = query("a.b", TYPE_A);
        bad[12] = 0xC0;
        assert!(parse_query(&bad).is_none());
    }
}
