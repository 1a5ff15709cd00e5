//! The sandbox network namespace's own protocol counters (`/proc/PID/net/snmp` of a process
//! inside it), for the attempts no listener sees: TCP connections refused for lack of a
//! listener (`Tcp: AttemptFails`) and UDP datagrams to ports without one (`Udp: NoPorts`).
//! The file is opened while the namespace exists (the seq file keeps its namespace) and read
//! at the end; the difference is the run's.

use std::io::{Read, Seek};

/// The two counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unlistened {
    /// `Tcp: AttemptFails`.
    pub tcp_attempt_fails: u64,
    /// `Udp: NoPorts`.
    pub udp_no_ports: u64,
}

/// The value of `field` in the `proto:` table of an snmp file (a header line of names, then
/// a line of values).
fn field(text: &str, proto: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(proto));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// Parse the counters from an snmp file's text.
pub fn parse(text: &str) -> Option<Unlistened> {
    Some(Unlistened {
        tcp_attempt_fails: field(text, "Tcp:", "AttemptFails")?,
        udp_no_ports: field(text, "Udp:", "NoPorts")?,
    })
}

/// An open snmp file of the sandbox's namespace and its first reading.
#[derive(Debug)]
pub struct Watch {
    file: std::fs::File,
    start: Unlistened,
}

impl Watch {
    /// Open `/proc/PID/net/snmp` of a process inside the namespace.
    pub fn open(pid: u32) -> Option<Watch> {
        let mut file = std::fs::File::open(format!("/proc/{pid}/net/snmp")).ok()?;
        let start = read(&mut file)?;
        Some(Watch { file, start })
    }

    /// The counts since [`Watch::open`].
    pub fn since_open(&mut self) -> Option<Unlistened> {
        let now = read(&mut self.file)?;
        Some(Unlistened {
            tcp_attempt_fails: now
                .tcp_attempt_fails
                .saturating_sub(self.start.tcp_attempt_fails),
            udp_no_ports: now.udp_no_ports.saturating_sub(self.start.udp_no_ports),
        })
    }
}

fn read(file: &mut std::fs::File) -> Option<Unlistened> {
    file.rewind().ok()?;
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin ActiveOpens AttemptFails EstabResets\n\
                    Tcp: 1 200 5 3 0\n\
                    Udp: InDatagrams NoPorts InErrors\nUdp: 4 2 0\n\
                    UdpLite: InDatagrams NoPorts\nUdpLite: 0 9\n";
        assert_eq!(
            parse(text),
            Some(Unlistened {
                tcp_attempt_fails: 3,
                udp_no_ports: 2
            })
        );
        assert_eq!(parse("Tcp: A\nTcp: 1\n"), None);
    }

    #[test]
    fn this_process_namespace_is_readable() {
        let mut w = Watch::open(std::process::id()).unwrap();
        assert!(w.since_open().is_some());
    }
}
