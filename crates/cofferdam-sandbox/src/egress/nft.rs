//! The catch-all for TCP in `allow` mode, an nf_tables table installed over raw netlink
//! (`NETLINK_NETFILTER`) by pid 1 in the sandbox's own network namespace:
//!
//! ```text
//! table inet cofferdam {
//!   chain catch_all { type filter hook prerouting priority -150;
//!     socket transparent exists accept                     # something is there: leave it
//!     meta l4proto tcp meta nfproto ipv4 tproxy ip to :P4  # nothing listens: the catch-all
//!     meta l4proto tcp meta nfproto ipv6 tproxy ip6 to :P6 # (when there is an IPv6 one)
//!   }
//! }
//! ```
//!
//! Every IPv4 destination is already routed to `lo` (the sandbox's local route; IPv6 reaches
//! only `::1`), so a packet
//! of a connection the sandbox makes comes back in through prerouting. One for which a socket
//! exists in the namespace (the supervisor's listeners, a server the command runs itself, an
//! established connection) passes untouched; a TCP connection attempt to a port nothing
//! listens on is diverted (TPROXY, no address rewrite, no conntrack needed) to the catch-all
//! listener, whose accepted socket keeps the original destination as its local address: the
//! supervisor names, counts and resets it instead of the kernel refusing it unseen.
//!
//! Owns only the message encoding and the one exchange with the kernel; it creates no
//! listener and decides nothing about destinations.

use rustix::fd::{AsRawFd, BorrowedFd};
use rustix::io::Errno;

/// The table's name (family `ip`).
pub const TABLE: &str = "cofferdam";
/// The chain's name.
pub const CHAIN: &str = "catch_all";

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NF_INET_PRE_ROUTING: u32 = 0;
/// The mangle priority, where TPROXY rules conventionally sit.
const PRIORITY: i32 = -150;

const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;

const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NF_ACCEPT: u32 = 1;

const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const IPPROTO_TCP: u8 = 6;
const NFTA_SOCKET_KEY: u16 = 1;
const NFTA_SOCKET_DREG: u16 = 2;
const NFT_SOCKET_TRANSPARENT: u32 = 0;
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
const NFTA_TPROXY_FAMILY: u16 = 1;
const NFTA_TPROXY_REG_PORT: u16 = 3;

/// A growing netlink buffer: messages, attributes (4-byte aligned), nests.
#[derive(Default)]
struct Buf(Vec<u8>);

impl Buf {
    fn align(&mut self) {
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
    }

    /// Start a message; returns its offset for [`Buf::end`].
    fn begin(&mut self, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set by `end`
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(&flags.to_ne_bytes());
        self.0.extend_from_slice(&seq.to_ne_bytes());
        self.0.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
        // struct nfgenmsg
        self.0.push(family);
        self.0.push(0); // NFNETLINK_V0
        self.0.extend_from_slice(&res_id.to_be_bytes());
        at
    }

    /// Close the message begun at `at`: write its length.
    fn end(&mut self, at: usize) {
        self.align();
        let len = self.0.len() - at;
        self.0[at..at + 4].copy_from_slice(&(len as u32).to_ne_bytes());
    }

    /// Close the nest begun at `at`: write its length.
    fn end_nest(&mut self, at: usize) {
        self.align();
        let len = self.0.len() - at;
        self.0[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
    }

    fn attr(&mut self, ty: u16, payload: &[u8]) {
        self.0
            .extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(payload);
        self.align();
    }

    fn str(&mut self, ty: u16, s: &str) {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(ty, &v);
    }

    fn be32(&mut self, ty: u16, v: u32) {
        self.attr(ty, &v.to_be_bytes());
    }

    fn nest(&mut self, ty: u16) -> usize {
        let at = self.0.len();
        self.0.extend_from_slice(&0u16.to_ne_bytes());
        self.0.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        at
    }

    /// One expression: `NFTA_LIST_ELEM { NAME, DATA { body } }`.
    fn expr(&mut self, name: &str, body: impl FnOnce(&mut Buf)) {
        let elem = self.nest(NFTA_LIST_ELEM);
        self.str(NFTA_EXPR_NAME, name);
        let data = self.nest(NFTA_EXPR_DATA);
        body(self);
        self.end_nest(data);
        self.end_nest(elem);
    }

    /// `NFTA_xxx_DATA { NFTA_DATA_VALUE value }`.
    fn value(&mut self, ty: u16, value: &[u8]) {
        let d = self.nest(ty);
        self.attr(NFTA_DATA_VALUE, value);
        self.end_nest(d);
    }

    /// `meta l4proto tcp meta nfproto FAMILY tproxy to :PORT`.
    fn catch_all_rule(&mut self, seq: u32, family: u8, port: u16) {
        self.rule(seq, |b| {
            for (key, value) in [(NFT_META_L4PROTO, IPPROTO_TCP), (NFT_META_NFPROTO, family)] {
                b.expr("meta", |b| {
                    b.be32(NFTA_META_DREG, NFT_REG_1);
                    b.be32(NFTA_META_KEY, key);
                });
                b.expr("cmp", |b| {
                    b.be32(NFTA_CMP_SREG, NFT_REG_1);
                    b.be32(NFTA_CMP_OP, NFT_CMP_EQ);
                    b.value(NFTA_CMP_DATA, &[value]);
                });
            }
            b.expr("immediate", |b| {
                b.be32(NFTA_IMMEDIATE_DREG, NFT_REG_1);
                b.value(NFTA_IMMEDIATE_DATA, &port.to_be_bytes());
            });
            b.expr("tproxy", |b| {
                b.be32(NFTA_TPROXY_FAMILY, u32::from(family));
                b.be32(NFTA_TPROXY_REG_PORT, NFT_REG_1);
            });
        });
    }

    fn rule(&mut self, seq: u32, exprs: impl FnOnce(&mut Buf)) {
        let m = self.begin(
            NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
            seq,
            NFPROTO_INET,
            0,
        );
        self.str(NFTA_RULE_TABLE, TABLE);
        self.str(NFTA_RULE_CHAIN, CHAIN);
        let list = self.nest(NFTA_RULE_EXPRESSIONS);
        exprs(self);
        self.end_nest(list);
        self.end(m);
    }
}

/// The whole batch: begin, the table, the chain, the rules, end. `port4` is the IPv4
/// catch-all listener's port (on 127.0.0.1), `port6` the IPv6 one's (on `::1`) if any.
/// Returns the batch and how many of its messages the kernel acknowledges.
pub fn batch(port4: u16, port6: Option<u16>) -> (Vec<u8>, usize) {
    let mut b = Buf::default();
    let m = b.begin(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        1,
        0,
        NFNL_SUBSYS_NFTABLES,
    );
    b.end(m);

    let create = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK;
    let m = b.begin(
        NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE,
        create,
        2,
        NFPROTO_INET,
        0,
    );
    b.str(NFTA_TABLE_NAME, TABLE);
    b.end(m);

    let m = b.begin(
        NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWCHAIN,
        create,
        3,
        NFPROTO_INET,
        0,
    );
    b.str(NFTA_CHAIN_TABLE, TABLE);
    b.str(NFTA_CHAIN_NAME, CHAIN);
    let hook = b.nest(NFTA_CHAIN_HOOK);
    b.be32(NFTA_HOOK_HOOKNUM, NF_INET_PRE_ROUTING);
    b.be32(NFTA_HOOK_PRIORITY, PRIORITY as u32);
    b.end_nest(hook);
    b.str(NFTA_CHAIN_TYPE, "filter");
    b.end(m);

    // A socket exists for the packet (listening, connecting or connected): accept. The
    // lookup fails (the rule stops) when there is none.
    b.rule(4, |b| {
        b.expr("socket", |b| {
            b.be32(NFTA_SOCKET_KEY, NFT_SOCKET_TRANSPARENT);
            b.be32(NFTA_SOCKET_DREG, NFT_REG_1);
        });
        b.expr("immediate", |b| {
            b.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
            let data = b.nest(NFTA_IMMEDIATE_DATA);
            let verdict = b.nest(NFTA_DATA_VERDICT);
            b.be32(NFTA_VERDICT_CODE, NF_ACCEPT);
            b.end_nest(verdict);
            b.end_nest(data);
        });
    });
    // Otherwise TCP goes to the catch-all listener of its family.
    b.catch_all_rule(5, NFPROTO_IPV4, port4);
    if let Some(port6) = port6 {
        b.catch_all_rule(6, NFPROTO_IPV6, port6);
    }

    let m = b.begin(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        7,
        0,
        NFNL_SUBSYS_NFTABLES,
    );
    b.end(m);
    (b.0, 4 + usize::from(port6.is_some()))
}

/// Install the catch-all for the listeners on `port4` (and `port6`) in the current network
/// namespace; the kernel's error (first one reported) when it refuses.
pub fn install(port4: u16, port6: Option<u16>) -> Result<(), Errno> {
    let sock = super::netlink_socket(Some(rustix::net::netlink::NETFILTER))?;
    rustix::net::sockopt::set_socket_timeout(
        &sock,
        rustix::net::sockopt::Timeout::Recv,
        Some(std::time::Duration::from_secs(5)),
    )?;
    let (batch, expected) = batch(port4, port6);
    rustix::io::write(&sock, &batch)?;
    let mut acked = 0;
    let mut buf = vec![0u8; 8192];
    while acked < expected {
        let n = rustix::io::read(&sock, &mut buf)?;
        for error in errors(&buf[..n]) {
            if error != 0 {
                return Err(Errno::from_raw_os_error(-error));
            }
            acked += 1;
        }
        if n == 0 {
            return Err(Errno::PROTO);
        }
    }
    Ok(())
}

/// Mark a listener transparent (`IP_TRANSPARENT`, `IPV6_TRANSPARENT` when `v6`): TPROXY hands
/// only such a socket the connections it diverts. Needs CAP_NET_ADMIN or CAP_NET_RAW over the
/// namespace.
pub fn set_transparent(fd: BorrowedFd<'_>, v6: bool) -> Result<(), Errno> {
    let (level, name) = if v6 {
        (libc::SOL_IPV6, libc::IPV6_TRANSPARENT)
    } else {
        (libc::SOL_IP, libc::IP_TRANSPARENT)
    };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `one` (an int that outlives the call) on a descriptor the
    // caller keeps open for the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const one).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    Ok(())
}

/// The error codes of the `NLMSG_ERROR` messages in `buf` (0 is an acknowledgement).
fn errors(buf: &[u8]) -> Vec<i32> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
        let ty = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        if len < 16 || at + len > buf.len() {
            break;
        }
        if ty == NLMSG_ERROR && len >= 20 {
            let e = &buf[at + 16..at + 20];
            out.push(i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
        }
        at += (len + 3) & !3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{SocketAddr, TcpListener, TcpStream};

    /// The messages of a batch: (type, flags, attributes after the nfgenmsg header).
    fn messages(b: &[u8]) -> Vec<(u16, u16, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let len = u32::from_ne_bytes(b[at..at + 4].try_into().unwrap()) as usize;
            assert!(len.is_multiple_of(4), "message lengths are aligned");
            let ty = u16::from_ne_bytes([b[at + 4], b[at + 5]]);
            let flags = u16::from_ne_bytes([b[at + 6], b[at + 7]]);
            out.push((ty, flags, b[at + 16], b[at + 20..at + len].to_vec()));
            at += len;
        }
        assert_eq!(at, b.len(), "the lengths add up to the batch");
        out
    }

    /// One attribute: (type without the nested flag, nested?, payload).
    type Attr = (u16, bool, Vec<u8>);

    /// The attributes at one level.
    fn attrs(b: &[u8]) -> Vec<Attr> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let len = u16::from_ne_bytes([b[at], b[at + 1]]) as usize;
            let ty = u16::from_ne_bytes([b[at + 2], b[at + 3]]);
            assert!(len >= 4 && at + len <= b.len(), "attribute fits");
            out.push((
                ty & !NLA_F_NESTED,
                ty & NLA_F_NESTED != 0,
                b[at + 4..at + len].to_vec(),
            ));
            at += (len + 3) & !3;
        }
        assert_eq!(at, b.len());
        out
    }

    fn get(a: &[Attr], ty: u16) -> Vec<u8> {
        a.iter().find(|x| x.0 == ty).unwrap().2.clone()
    }

    /// The expressions of a rule message: (name, data attributes).
    fn exprs(rule: &[u8]) -> Vec<(String, Vec<Attr>)> {
        let list = get(&attrs(rule), NFTA_RULE_EXPRESSIONS);
        attrs(&list)
            .into_iter()
            .map(|(ty, nested, elem)| {
                assert!(ty == NFTA_LIST_ELEM && nested);
                let e = attrs(&elem);
                let name = get(&e, NFTA_EXPR_NAME);
                let name = String::from_utf8(name[..name.len() - 1].to_vec()).unwrap();
                (name, attrs(&get(&e, NFTA_EXPR_DATA)))
            })
            .collect()
    }

    /// The catch-all rule's expressions: names, then the family, port and tproxy family.
    fn check_catch_all_rule(rule: &[u8], family: u8, port: u16) {
        let e = exprs(rule);
        let names: Vec<&str> = e.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["meta", "cmp", "meta", "cmp", "immediate", "tproxy"]);
        assert_eq!(get(&e[0].1, NFTA_META_KEY), 16u32.to_be_bytes(), "l4proto");
        let tcp = attrs(&get(&e[1].1, NFTA_CMP_DATA));
        assert_eq!(get(&tcp, NFTA_DATA_VALUE), [6]);
        assert_eq!(get(&e[2].1, NFTA_META_KEY), 15u32.to_be_bytes(), "nfproto");
        let fam = attrs(&get(&e[3].1, NFTA_CMP_DATA));
        assert_eq!(get(&fam, NFTA_DATA_VALUE), [family]);
        let p = attrs(&get(&e[4].1, NFTA_IMMEDIATE_DATA));
        assert_eq!(get(&p, NFTA_DATA_VALUE), port.to_be_bytes());
        assert_eq!(get(&e[5].1, NFTA_TPROXY_REG_PORT), 1u32.to_be_bytes());
        assert_eq!(
            get(&e[5].1, NFTA_TPROXY_FAMILY),
            u32::from(family).to_be_bytes()
        );
    }

    #[test]
    fn the_batch_is_table_chain_and_rules_between_begin_and_end() {
        let (b, acked) = batch(40000, Some(40001));
        // The begin message, byte for byte: len 20, type 0x10, REQUEST, seq 1, pid 0,
        // AF_UNSPEC, version 0, res_id NFNL_SUBSYS_NFTABLES big-endian.
        let mut begin = Vec::new();
        begin.extend_from_slice(&20u32.to_ne_bytes());
        begin.extend_from_slice(&0x10u16.to_ne_bytes());
        begin.extend_from_slice(&1u16.to_ne_bytes());
        begin.extend_from_slice(&1u32.to_ne_bytes());
        begin.extend_from_slice(&0u32.to_ne_bytes());
        begin.extend_from_slice(&[0, 0, 0, 10]);
        assert_eq!(&b[..20], &begin[..]);

        let m = messages(&b);
        let types: Vec<u16> = m.iter().map(|x| x.0).collect();
        assert_eq!(types, [0x10, 0xa00, 0xa03, 0xa06, 0xa06, 0xa06, 0x11]);
        assert_eq!(
            m.iter().filter(|x| x.1 & NLM_F_ACK != 0).count(),
            acked,
            "every acknowledged message is waited for"
        );
        assert!(m[1..6].iter().all(|x| x.2 == NFPROTO_INET));
        assert!(m[3..6].iter().all(|x| x.1 & NLM_F_APPEND != 0));

        assert_eq!(get(&attrs(&m[1].3), NFTA_TABLE_NAME), b"cofferdam\0");
        let chain = attrs(&m[2].3);
        assert_eq!(get(&chain, NFTA_CHAIN_NAME), b"catch_all\0");
        assert_eq!(get(&chain, NFTA_CHAIN_TYPE), b"filter\0");
        let hook = attrs(&get(&chain, NFTA_CHAIN_HOOK));
        assert_eq!(get(&hook, NFTA_HOOK_HOOKNUM), 0u32.to_be_bytes());
        assert_eq!(get(&hook, NFTA_HOOK_PRIORITY), (-150i32).to_be_bytes());

        let first = exprs(&m[3].3);
        let names: Vec<&str> = first.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(names, ["socket", "immediate"]);
        assert_eq!(get(&first[0].1, NFTA_SOCKET_KEY), 0u32.to_be_bytes());
        let verdict = attrs(&get(&first[1].1, NFTA_IMMEDIATE_DATA));
        let code = attrs(&get(&verdict, NFTA_DATA_VERDICT));
        assert_eq!(get(&code, NFTA_VERDICT_CODE), 1u32.to_be_bytes(), "accept");

        check_catch_all_rule(&m[4].3, 2, 40000);
        check_catch_all_rule(&m[5].3, 10, 40001);

        let (b, acked) = batch(40000, None);
        assert_eq!(
            messages(&b).len(),
            6,
            "no IPv6 rule without an IPv6 listener"
        );
        assert_eq!(acked, 4);
    }

    #[test]
    fn acknowledgements_and_errors_are_read_from_the_reply() {
        let mut reply = Vec::new();
        for e in [0i32, -1] {
            reply.extend_from_slice(&36u32.to_ne_bytes());
            reply.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            reply.extend_from_slice(&[0; 10]);
            reply.extend_from_slice(&e.to_ne_bytes());
            reply.extend_from_slice(&[0; 16]);
        }
        assert_eq!(errors(&reply), [0, -1]);
        assert_eq!(errors(&reply[..50]), [0], "a cut message is not read");
    }

    /// The rule installs where pid 1 would install it (a fresh user and network namespace,
    /// unprivileged or not) and diverts what it should: this test binary, re-run under
    /// `unshare -Urn`, runs [`in_a_fresh_namespace`].
    #[test]
    fn the_catch_all_diverts_only_what_nothing_listens_for() {
        let can = std::process::Command::new("unshare")
            .args(["-Urn", "true"])
            .status()
            .is_ok_and(|s| s.success());
        if !can {
            cofferdam_testkit::skip_host("unshare -Urn is not available");
            return;
        }
        let out = std::process::Command::new("unshare")
            .arg("-Urn")
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "egress::nft::tests::in_a_fresh_namespace"])
            .args(["--ignored", "--nocapture"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Run by the test above, in a fresh namespace.
    #[test]
    #[ignore = "needs a fresh network namespace where it is root (unshare -Urn)"]
    fn in_a_fresh_namespace() {
        crate::netif::bring_lo_up().unwrap();
        super::super::add_local_default_route().unwrap();
        let inner = TcpListener::bind("127.0.0.1:8080").unwrap();
        let listener = |addr: &str| {
            let addr: SocketAddr = addr.parse().unwrap();
            let family = if addr.is_ipv6() {
                rustix::net::AddressFamily::INET6
            } else {
                rustix::net::AddressFamily::INET
            };
            let fd = rustix::net::socket(family, rustix::net::SocketType::STREAM, None).unwrap();
            set_transparent(rustix::fd::AsFd::as_fd(&fd), addr.is_ipv6()).unwrap();
            rustix::net::bind(&fd, &addr).unwrap();
            rustix::net::listen(&fd, 16).unwrap();
            TcpListener::from(fd)
        };
        let (catch4, catch6) = (listener("127.0.0.1:0"), listener("[::1]:0"));
        let port = |l: &TcpListener| l.local_addr().unwrap().port();
        let t = std::time::Instant::now();
        install(port(&catch4), Some(port(&catch6))).unwrap();
        eprintln!("installed in {:?}", t.elapsed());
        for (dest, catch) in [
            ("127.0.0.1:4999", &catch4),
            ("192.0.2.1:5000", &catch4),
            ("[::1]:5001", &catch6),
        ] {
            let c = TcpStream::connect(dest).unwrap();
            let (s, peer) = catch.accept().unwrap();
            eprintln!(
                "{dest}: accepted from {peer}, local {}",
                s.local_addr().unwrap()
            );
            assert_eq!(s.local_addr().unwrap().to_string(), dest);
            drop(c);
        }
        let mut c = TcpStream::connect("127.0.0.1:8080").unwrap();
        let (mut s, _) = inner.accept().unwrap();
        drop(s.local_addr());
        std::io::Write::write_all(&mut s, b"hi").unwrap();
        let mut got = [0u8; 2];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
    }
}
