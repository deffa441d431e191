//! A small DNS client for tests: builds a query, sends it over UDP or TCP, and parses the
//! answer section (with name compression) into typed records. Enough to prove what a
//! resolver answers; not a general-purpose library.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::{bail, Context, Result};

pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_PTR: u16 = 12;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_REFUSED: u8 = 5;

/// One resource record of the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub rtype: u16,
    pub ttl: u32,
    pub data: RData,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Name(String),
    Txt(Vec<String>),
    Other(Vec<u8>),
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub id: u16,
    pub rcode: u8,
    pub flags: u16,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    /// The NSID option of the OPT record, if any.
    pub nsid: Option<Vec<u8>>,
}

impl Response {
    pub fn a(&self) -> Vec<Ipv4Addr> {
        self.answers
            .iter()
            .filter_map(|r| {
                if let RData::A(a) = r.data {
                    Some(a)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn aaaa(&self) -> Vec<Ipv6Addr> {
        self.answers
            .iter()
            .filter_map(|r| {
                if let RData::Aaaa(a) = r.data {
                    Some(a)
                } else {
                    None
                }
            })
            .collect()
    }
}

/// Encode a query. `nsid` asks for the server's NSID through EDNS.
pub fn encode_query(id: u16, name: &str, qtype: u16, nsid: bool) -> Result<Vec<u8>> {
    let mut wire = Vec::with_capacity(name.len() + 2);
    encode_name(&mut wire, name)?;
    Ok(encode_query_wire(id, &wire, qtype, nsid))
}

/// A name in wire form from its labels, each any bytes (dots, spaces, NUL and all), most
/// significant last: `wire_name(&[b"a.b", b"example"])` is the two labels `a.b` and `example`.
pub fn wire_name(labels: &[&[u8]]) -> Result<Vec<u8>> {
    let mut wire = Vec::with_capacity(labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1);
    for label in labels {
        if label.is_empty() || label.len() > 63 {
            bail!("a label of {} bytes", label.len());
        }
        wire.push(label.len() as u8);
        wire.extend_from_slice(label);
    }
    wire.push(0);
    if wire.len() > 255 {
        bail!("a name of {} bytes", wire.len());
    }
    Ok(wire)
}

/// Encode a query for `name` in wire form ([`wire_name`]).
pub fn encode_query_wire(id: u16, name: &[u8], qtype: u16, nsid: bool) -> Vec<u8> {
    let mut m = Vec::with_capacity(64 + name.len());
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    m.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&u16::from(nsid).to_be_bytes()); // ARCOUNT
    m.extend_from_slice(name);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if nsid {
        m.push(0); // root
        m.extend_from_slice(&41u16.to_be_bytes()); // OPT
        m.extend_from_slice(&1232u16.to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&4u16.to_be_bytes());
        m.extend_from_slice(&3u16.to_be_bytes()); // NSID
        m.extend_from_slice(&0u16.to_be_bytes());
    }
    m
}

fn encode_name(m: &mut Vec<u8>, name: &str) -> Result<()> {
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        if label.len() > 63 {
            bail!("label too long: {label}");
        }
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    Ok(())
}

/// Ask over UDP.
pub fn query_udp(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Response> {
    let mut wire = Vec::with_capacity(name.len() + 2);
    encode_name(&mut wire, name)?;
    query_udp_wire(server, &wire, qtype, timeout).with_context(|| format!("asking for {name}"))
}

/// Ask over UDP for `name` in wire form ([`wire_name`]): any bytes in its labels.
pub fn query_udp_wire(
    server: SocketAddr,
    name: &[u8],
    qtype: u16,
    timeout: Duration,
) -> Result<Response> {
    let id = fastrand_id();
    let sock = UdpSocket::bind(if server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    })?;
    exchange_udp(
        &sock,
        server,
        id,
        &encode_query_wire(id, name, qtype, false),
        timeout,
    )
}

/// Ask over UDP from `source` (any loopback address: 127.0.0.2 … stand for other clients).
pub fn query_udp_from(
    source: std::net::IpAddr,
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Response> {
    let id = fastrand_id();
    let sock =
        UdpSocket::bind(SocketAddr::new(source, 0)).with_context(|| format!("binding {source}"))?;
    let query = encode_query(id, name, qtype, false)?;
    exchange_udp(&sock, server, id, &query, timeout).with_context(|| format!("asking for {name}"))
}

/// Send `query` (of `id`) from `sock` to `server`; the answer of that id, within `timeout`
/// (answers of other ids, late ones of earlier queries, are passed over).
fn exchange_udp(
    sock: &UdpSocket,
    server: SocketAddr,
    id: u16,
    query: &[u8],
    timeout: Duration,
) -> Result<Response> {
    sock.set_read_timeout(Some(timeout))?;
    sock.connect(server)?;
    sock.send(query)?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = sock
            .recv(&mut buf)
            .with_context(|| format!("no answer from {server} within {timeout:?}"))?;
        let r = parse_response(&buf[..n])?;
        if r.id == id {
            return Ok(r);
        }
    }
}

/// Ask over UDP with an NSID request.
pub fn query_udp_nsid(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Response> {
    let id = fastrand_id();
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.set_read_timeout(Some(timeout))?;
    sock.connect(server)?;
    sock.send(&encode_query(id, name, qtype, true)?)?;
    let mut buf = vec![0u8; 65535];
    let n = sock.recv(&mut buf)?;
    parse_response(&buf[..n])
}

/// Ask over TCP.
pub fn query_tcp(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> Result<Response> {
    let id = fastrand_id();
    let mut s = TcpStream::connect_timeout(&server, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let q = encode_query(id, name, qtype, false)?;
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed)?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    parse_response(&buf)
}

fn fastrand_id() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0x1234);
    let n = N.fetch_add(0x9e37, Ordering::Relaxed) ^ std::process::id();
    (n & 0xffff) as u16
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Result<u8> {
        let b = *self.msg.get(self.pos).context("truncated message")?;
        self.pos += 1;
        Ok(b)
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).context("overflow")?;
        let b = self.msg.get(self.pos..end).context("truncated message")?;
        self.pos = end;
        Ok(b)
    }
    /// A possibly compressed name starting at the cursor.
    fn name(&mut self) -> Result<String> {
        let (name, next) = read_name(self.msg, self.pos)?;
        self.pos = next;
        Ok(name)
    }
}

fn read_name(msg: &[u8], mut pos: usize) -> Result<(String, usize)> {
    let mut labels = Vec::new();
    let mut next = None;
    for _ in 0..128 {
        let len = *msg.get(pos).context("truncated name")? as usize;
        if len == 0 {
            pos += 1;
            break;
        }
        if len & 0xc0 == 0xc0 {
            let lo = *msg.get(pos + 1).context("truncated pointer")? as usize;
            if next.is_none() {
                next = Some(pos + 2);
            }
            pos = ((len & 0x3f) << 8) | lo;
            continue;
        }
        let label = msg.get(pos + 1..pos + 1 + len).context("truncated label")?;
        labels.push(String::from_utf8_lossy(label).into_owned());
        pos += 1 + len;
    }
    let name = if labels.is_empty() {
        ".".to_owned()
    } else {
        format!("{}.", labels.join("."))
    };
    Ok((name, next.unwrap_or(pos)))
}

/// Parse a DNS response.
pub fn parse_response(msg: &[u8]) -> Result<Response> {
    let mut r = Reader { msg, pos: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    let qd = r.u16()?;
    let an = r.u16()?;
    let ns = r.u16()?;
    let ar = r.u16()?;
    for _ in 0..qd {
        r.name()?;
        r.u16()?;
        r.u16()?;
    }
    let mut sections = [Vec::new(), Vec::new()];
    let mut nsid = None;
    for (i, count) in [an, ns, ar].into_iter().enumerate() {
        for _ in 0..count {
            let name = r.name()?;
            let rtype = r.u16()?;
            let _class = r.u16()?;
            let ttl = r.u32()?;
            let len = r.u16()? as usize;
            let start = r.pos;
            let raw = r.bytes(len)?;
            let data = match rtype {
                TYPE_A if len == 4 => RData::A(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
                TYPE_AAAA if len == 16 => {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(raw);
                    RData::Aaaa(Ipv6Addr::from(b))
                }
                TYPE_CNAME | TYPE_NS | TYPE_PTR => RData::Name(read_name(msg, start)?.0),
                TYPE_TXT => {
                    let mut strings = Vec::new();
                    let mut p = 0;
                    while p < raw.len() {
                        let l = raw[p] as usize;
                        strings.push(
                            String::from_utf8_lossy(raw.get(p + 1..p + 1 + l).unwrap_or(&[]))
                                .into_owned(),
                        );
                        p += 1 + l;
                    }
                    RData::Txt(strings)
                }
                41 => {
                    let mut p = 0;
                    while p + 4 <= raw.len() {
                        let code = u16::from_be_bytes([raw[p], raw[p + 1]]);
                        let olen = u16::from_be_bytes([raw[p + 2], raw[p + 3]]) as usize;
                        if code == 3 {
                            nsid = raw.get(p + 4..p + 4 + olen).map(<[u8]>::to_vec);
                        }
                        p += 4 + olen;
                    }
                    RData::Other(raw.to_vec())
                }
                _ => RData::Other(raw.to_vec()),
            };
            if i < 2 {
                sections[i].push(Record {
                    name,
                    rtype,
                    ttl,
                    data,
                });
            }
        }
    }
    let [answers, authority] = sections;
    Ok(Response {
        id,
        rcode: (flags & 0x000f) as u8,
        flags,
        answers,
        authority,
        nsid,
    })
}

/// A dead upstream: a UDP port on `bind`'s address (`127.0.0.2:0`) that refuses every query at
/// once (the kernel's port unreachable), held for as long as the value lives. The socket is
/// bound, so no other socket of the machine is given the port (a port merely found free can be
/// handed to the next test's client socket, which swallows queries: the resolver then waits
/// out its timeouts instead of seeing the refusal), and connected to the discard port, so it
/// receives nothing the resolver sends.
pub struct DeadUpstream {
    /// Where queries are refused.
    pub address: SocketAddr,
    /// Holds the port.
    _socket: UdpSocket,
}

impl DeadUpstream {
    /// Hold a port on `bind`'s address (port 0: any free one).
    pub fn bind(bind: &str) -> Result<DeadUpstream> {
        let socket = UdpSocket::bind(bind).with_context(|| format!("bind {bind}"))?;
        let address = socket.local_addr()?;
        let discard = SocketAddr::new(address.ip(), 9);
        socket
            .connect(discard)
            .with_context(|| format!("connect {discard}"))?;
        Ok(DeadUpstream {
            address,
            _socket: socket,
        })
    }
}

/// An upstream that answers REFUSED to every query (each query sent back with QR and RCODE
/// 5), on `bind` (`127.0.0.3:0`), in a thread of its own: until it is sent a name with a
/// `stop` label (in any letters' case: resolvers randomise it) or waits a minute for a
/// query. The thread's result is how many it refused.
pub fn refusing_upstream(bind: &str) -> Result<(SocketAddr, std::thread::JoinHandle<u64>)> {
    let socket = UdpSocket::bind(bind).with_context(|| format!("bind {bind}"))?;
    let address = socket.local_addr()?;
    socket.set_read_timeout(Some(Duration::from_secs(60)))?;
    let thread = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut refused = 0u64;
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            buf[2] |= 0x80;
            buf[3] = (buf[3] & 0xf0) | RCODE_REFUSED;
            if socket.send_to(&buf[..n], from).is_ok() {
                refused += 1;
            }
            if buf[12..n]
                .windows(6)
                .any(|w| w[0] == 4 && w[1..5].eq_ignore_ascii_case(b"stop"))
            {
                break;
            }
        }
        refused
    });
    Ok((address, thread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_upstream_refuses_at_once_and_keeps_its_port() {
        let dead = DeadUpstream::bind("127.0.0.1:0").unwrap();
        let address = dead.address;
        let err = query_udp(address, "example.test.", TYPE_A, Duration::from_secs(5)).unwrap_err();
        let refused = err.chain().any(|e| {
            e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        });
        assert!(refused, "{err:#}");
        assert!(UdpSocket::bind(address).is_err(), "the port is held");
    }

    #[test]
    fn parses_a_compressed_answer() {
        // Response to example.test. A with one answer using a pointer to the question name.
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        encode_name(&mut m, "example.test.").unwrap();
        m.extend_from_slice(&[0, 1, 0, 1]);
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 192, 0, 2, 1]);
        let r = parse_response(&m).unwrap();
        assert_eq!(r.id, 0x1234);
        assert_eq!(r.rcode, RCODE_NOERROR);
        assert_eq!(r.answers[0].name, "example.test.");
        assert_eq!(r.answers[0].ttl, 300);
        assert_eq!(r.a(), vec![Ipv4Addr::new(192, 0, 2, 1)]);
    }
}
