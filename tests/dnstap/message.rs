//! The dnstap messages kresd sends, decoded: what the operator's own collector gets of
//! `logging.dnstap`, read by the tests that check it (the query log itself reads our own
//! records). The protobuf structs are written here with
//! `prost`'s derive for the few fields of `dnstap.proto` kresd fills (tags as in the schema;
//! unknown fields are skipped by prost), which spares a protoc at build time. A message is
//! then read as DNS with the `domain` crate: the question, the rcode, the answer count and an
//! Extended DNS Error, all that the query log keeps.

use std::net::IpAddr;

use domain::base::opt::ExtendedError;
use domain::base::Message;
use prost::Message as _;

/// `dnstap.Dnstap`: the envelope.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dnstap {
    /// The sender's identity: kresd's worker instance, as the query log configures it.
    #[prost(bytes = "vec", optional, tag = "1")]
    pub identity: Option<Vec<u8>>,
    /// The message.
    #[prost(message, optional, tag = "14")]
    pub message: Option<DnstapMessage>,
    /// The envelope's type (1: a message).
    #[prost(int32, required, tag = "15")]
    pub r#type: i32,
}

/// `dnstap.Message`, the fields kresd fills.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DnstapMessage {
    /// 5: CLIENT_QUERY, 6: CLIENT_RESPONSE.
    #[prost(int32, required, tag = "1")]
    pub r#type: i32,
    /// 1: UDP, 2: TCP, 3: DoT, 4: DoH, 7: DoQ (`dnstap.SocketProtocol`).
    #[prost(int32, optional, tag = "3")]
    pub socket_protocol: Option<i32>,
    /// The client's address: 4 or 16 bytes.
    #[prost(bytes = "vec", optional, tag = "4")]
    pub query_address: Option<Vec<u8>>,
    /// The client's port.
    #[prost(uint32, optional, tag = "6")]
    pub query_port: Option<u32>,
    /// When the query arrived (seconds, nanoseconds).
    #[prost(uint64, optional, tag = "8")]
    pub query_time_sec: Option<u64>,
    /// See `query_time_sec`.
    #[prost(fixed32, optional, tag = "9")]
    pub query_time_nsec: Option<u32>,
    /// The query as received.
    #[prost(bytes = "vec", optional, tag = "10")]
    pub query_message: Option<Vec<u8>>,
    /// When the answer was sent (seconds, nanoseconds).
    #[prost(uint64, optional, tag = "12")]
    pub response_time_sec: Option<u64>,
    /// See `response_time_sec`.
    #[prost(fixed32, optional, tag = "13")]
    pub response_time_nsec: Option<u32>,
    /// The answer as sent.
    #[prost(bytes = "vec", optional, tag = "14")]
    pub response_message: Option<Vec<u8>>,
}

const TYPE_CLIENT_QUERY: i32 = 5;
const TYPE_CLIENT_RESPONSE: i32 = 6;

/// Where a query came from, as the pairing of a query with its answer keys it: the client's
/// address, port and the message's ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryKey {
    /// The client's address.
    pub client: IpAddr,
    /// The client's port.
    pub port: u16,
    /// The DNS message's ID.
    pub id: u16,
}

/// One dnstap frame, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A client's query arrived at `time_us` (microseconds since the epoch), if kresd said when.
    Query { key: QueryKey, time_us: Option<u64> },
    /// An answer sent.
    Response(Response),
}

/// An answer, read from its dnstap frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The worker that sent it (the frame's identity), if it said.
    pub worker: Option<String>,
    /// Its query's client, port and ID.
    pub key: QueryKey,
    /// How the client asked: dnstap's `SocketProtocol` number (1 UDP, 2 TCP, 3 DoT, 4 DoH,
    /// 7 DoQ), when the frame said.
    pub transport: Option<i32>,
    /// When it was sent, microseconds since the epoch.
    pub time_us: u64,
    /// When its query arrived, if the frame said.
    pub query_time_us: Option<u64>,
    /// The question's name, lowercase, absolute (`example.com.`).
    pub name: String,
    /// The question's type.
    pub qtype: u16,
    /// The full (extended) rcode.
    pub rcode: u16,
    /// Records in the answer section.
    pub answers: u16,
    /// The Extended DNS Error's info code, when the answer has one.
    pub ede: Option<u16>,
}

/// Why a frame was not read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("not a dnstap protobuf message: {0}")]
    Protobuf(String),
    #[error("a dnstap frame without a message")]
    NoMessage,
    #[error("a dnstap message without the client's address")]
    NoClient,
    #[error("a dnstap message without its DNS message")]
    NoDns,
    #[error("a DNS message that does not parse")]
    Dns,
    #[error("a dnstap message of type {0}, neither a client query nor a response")]
    OtherType(i32),
}

/// One data frame read.
pub fn decode(frame: &[u8]) -> Result<Decoded, DecodeError> {
    let envelope = Dnstap::decode(frame).map_err(|e| DecodeError::Protobuf(e.to_string()))?;
    let msg = envelope.message.ok_or(DecodeError::NoMessage)?;
    let client = address(msg.query_address.as_deref()).ok_or(DecodeError::NoClient)?;
    let port = msg
        .query_port
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0);
    let query_time_us = time_us(msg.query_time_sec, msg.query_time_nsec);
    match msg.r#type {
        TYPE_CLIENT_QUERY => {
            let wire = msg.query_message.as_deref().ok_or(DecodeError::NoDns)?;
            let id = Message::from_octets(wire)
                .map_err(|_| DecodeError::Dns)?
                .header()
                .id();
            Ok(Decoded::Query {
                key: QueryKey { client, port, id },
                time_us: query_time_us,
            })
        }
        TYPE_CLIENT_RESPONSE => {
            let wire = msg.response_message.as_deref().ok_or(DecodeError::NoDns)?;
            let dns = Message::from_octets(wire).map_err(|_| DecodeError::Dns)?;
            let question = dns.first_question().ok_or(DecodeError::Dns)?;
            let mut name = question.qname().to_string().to_ascii_lowercase();
            if !name.ends_with('.') {
                name.push('.');
            }
            let ede = dns.opt().and_then(|opt| {
                opt.opt()
                    .iter::<ExtendedError<_>>()
                    .flatten()
                    .next()
                    .map(|e| e.code().to_int())
            });
            let worker = envelope
                .identity
                .filter(|i| !i.is_empty())
                .map(|i| String::from_utf8_lossy(&i).into_owned());
            Ok(Decoded::Response(Response {
                worker,
                key: QueryKey {
                    client,
                    port,
                    id: dns.header().id(),
                },
                transport: msg.socket_protocol,
                time_us: time_us(msg.response_time_sec, msg.response_time_nsec).unwrap_or(0),
                query_time_us,
                name,
                qtype: question.qtype().to_int(),
                rcode: dns.opt_rcode().to_int(),
                answers: dns.header_counts().ancount(),
                ede,
            }))
        }
        other => Err(DecodeError::OtherType(other)),
    }
}

/// A `dnstap.Dnstap` envelope as it came, without its identity (field 1): the bytes of every
/// other field kept as they are. `None` when the envelope does not parse.
pub fn without_identity(frame: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(frame.len());
    let mut rest = frame;
    while !rest.is_empty() {
        let start = rest;
        let key = take_varint(&mut rest)?;
        match key & 7 {
            0 => {
                take_varint(&mut rest)?;
            }
            1 => rest = rest.get(8..)?,
            2 => {
                let len = usize::try_from(take_varint(&mut rest)?).ok()?;
                rest = rest.get(len..)?;
            }
            5 => rest = rest.get(4..)?,
            _ => return None,
        }
        if key >> 3 != 1 {
            out.extend_from_slice(&start[..start.len() - rest.len()]);
        }
    }
    Some(out)
}

/// A protobuf varint, taken from the front of `bytes`.
fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

fn address(bytes: Option<&[u8]>) -> Option<IpAddr> {
    match bytes? {
        b if b.len() == 4 => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
        b if b.len() == 16 => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
        _ => None,
    }
}

fn time_us(sec: Option<u64>, nsec: Option<u32>) -> Option<u64> {
    Some(sec?.saturating_mul(1_000_000) + u64::from(nsec.unwrap_or(0) / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DNS answer: ID 0x1234, `Example.COM. A`, the rcode given, one A record when NOERROR.
    fn answer(rcode: u8) -> Vec<u8> {
        let mut m = vec![
            0x12,
            0x34,
            0x81,
            0x80 | rcode,
            0,
            1,
            0,
            u8::from(rcode == 0),
            0,
            0,
            0,
            0,
        ];
        m.extend_from_slice(b"\x07Example\x03COM\x00\x00\x01\x00\x01");
        if rcode == 0 {
            m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
        }
        m
    }

    fn frame(kind: i32, query: Option<Vec<u8>>, response: Option<Vec<u8>>) -> Vec<u8> {
        Dnstap {
            identity: Some(b"3".to_vec()),
            r#type: 1,
            message: Some(DnstapMessage {
                r#type: kind,
                socket_protocol: Some(1),
                query_address: Some(vec![127, 0, 0, 2]),
                query_port: Some(5353),
                query_time_sec: Some(10),
                query_time_nsec: Some(500_000),
                query_message: query,
                response_time_sec: Some(11),
                response_time_nsec: Some(0),
                response_message: response,
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn responses_are_read() {
        let decoded = decode(&frame(TYPE_CLIENT_RESPONSE, None, Some(answer(0)))).unwrap();
        let Decoded::Response(r) = decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(r.worker.as_deref(), Some("3"));
        assert_eq!(r.key.client, IpAddr::from([127, 0, 0, 2]));
        assert_eq!((r.key.port, r.key.id), (5353, 0x1234));
        assert_eq!(r.name, "example.com.");
        assert_eq!((r.qtype, r.rcode, r.answers), (1, 0, 1));
        assert_eq!(r.transport, Some(1));
        assert_eq!(r.time_us, 11_000_000);
        let decoded = decode(&frame(TYPE_CLIENT_RESPONSE, None, Some(answer(2)))).unwrap();
        assert!(matches!(decoded, Decoded::Response(r) if r.rcode == 2 && r.answers == 0));
    }

    #[test]
    fn queries_are_read_for_their_key_and_time() {
        let decoded = decode(&frame(TYPE_CLIENT_QUERY, Some(answer(0)), None)).unwrap();
        assert_eq!(
            decoded,
            Decoded::Query {
                key: QueryKey {
                    client: IpAddr::from([127, 0, 0, 2]),
                    port: 5353,
                    id: 0x1234
                },
                time_us: Some(10_000_500),
            }
        );
    }

    #[test]
    fn the_identity_is_cut_and_the_rest_kept() {
        let full = frame(TYPE_CLIENT_RESPONSE, None, Some(answer(0)));
        let cut = without_identity(&full).unwrap();
        let mut expected = Dnstap::decode(&full[..]).unwrap();
        expected.identity = None;
        assert_eq!(Dnstap::decode(&cut[..]).unwrap(), expected);
        assert_eq!(cut.len() + 3, full.len());
        assert_eq!(without_identity(&full[..full.len() - 1]), None);
        assert_eq!(without_identity(&[0x0b]), None, "groups are not dnstap");
    }

    #[test]
    fn garbage_is_refused() {
        assert!(decode(b"\xff\xff\xff").is_err());
        assert_eq!(
            decode(&frame(TYPE_CLIENT_RESPONSE, None, None)),
            Err(DecodeError::NoDns)
        );
        assert_eq!(
            decode(&frame(TYPE_CLIENT_RESPONSE, None, Some(vec![1, 2, 3]))),
            Err(DecodeError::Dns)
        );
    }
}
