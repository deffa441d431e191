//! The ring's answers packed: one fixed record of 48 bytes per answer ([`Packed`]) and every
//! name in wire form, lowercase, one after the other in one arena of bytes (the ring's
//! `names`, a batch's `names`): no heap object per answer or per field. A full default ring
//! (10,000 answers) then takes about 0.65 MiB instead of about 1.9 (an `Arc` per answer, a
//! `Box<str>` per name, and the slots pointing to them).
//!
//! Names keep the order of their records, so a record holds its name's length only: a walk
//! over the records in order (or in reverse from the arena's end) finds each name. An
//! [`Entry`] is made from a record and its name only when a reader asks for it.

use std::net::{IpAddr, Ipv6Addr};

use domain::base::Name;

use super::Entry;

/// One answer in the ring (or in a batch), its name apart. What [`Entry`] holds, packed:
/// absent values are flags or reserved numbers rather than `Option`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// When it was answered, microseconds since the epoch (kresd's clock).
    pub time_us: u64,
    /// When it was kept, nanoseconds from the ring's epoch (our clock); 0 in a batch.
    pub kept_ns: i64,
    /// The client, cut to the configured prefix: IPv6, or IPv4 in the first 4 ([`V6`]).
    client: [u8; 16],
    /// From the query's arrival to the answer; [`NO_LATENCY`] when unknown.
    latency_us: u32,
    /// The question's type.
    pub qtype: u16,
    /// The answer's (extended) rcode.
    pub rcode: u16,
    /// Records in the answer section.
    answers: u16,
    /// The Extended DNS Error's info code ([`HAS_EDE`]).
    ede: u16,
    /// The worker's number ([`HAS_WORKER`]; a number past 65,535, which no worker has, is
    /// kept as unknown).
    worker: u16,
    /// The name's length in wire form.
    name_len: u8,
    /// [`V6`], [`HAS_EDE`], [`HAS_WORKER`], [`CACHED_KNOWN`], [`CACHED`] in the low bits,
    /// how the client asked (a [`Transport`]) in the top three ([`TRANSPORT_SHIFT`]).
    flags: u8,
}

/// Where the transport starts in a record's flags.
const TRANSPORT_SHIFT: u32 = 5;

/// The latency of an answer whose query's arrival is unknown.
const NO_LATENCY: u32 = u32::MAX;

/// The client is an IPv6 address.
const V6: u8 = 1;
/// The answer has an Extended DNS Error.
const HAS_EDE: u8 = 2;
/// The worker said its number.
const HAS_WORKER: u8 = 4;
/// The worker said whether the answer came from the cache …
const CACHED_KNOWN: u8 = 8;
/// … and it did.
const CACHED: u8 = 16;

/// What a record says, as [`Packed::new`] takes it.
pub struct Fields {
    pub time_us: u64,
    pub client: IpAddr,
    pub transport: Transport,
    pub qtype: u16,
    pub rcode: u16,
    pub latency_us: Option<u64>,
    pub answers: u16,
    pub ede: Option<u16>,
    pub worker: Option<u32>,
    pub cached: Option<bool>,
}

impl Packed {
    /// A record of `fields` whose name takes `name_len` bytes in wire form.
    pub fn new(fields: &Fields, name_len: u8) -> Packed {
        let mut flags = 0;
        let mut set = |on: bool, flag: u8| {
            if on {
                flags |= flag;
            }
        };
        set(fields.ede.is_some(), HAS_EDE);
        let worker = fields.worker.and_then(|w| u16::try_from(w).ok());
        set(worker.is_some(), HAS_WORKER);
        set(fields.cached.is_some(), CACHED_KNOWN);
        set(fields.cached == Some(true), CACHED);
        let mut packed = Packed {
            time_us: fields.time_us,
            kept_ns: 0,
            client: [0; 16],
            latency_us: fields
                .latency_us
                .map_or(NO_LATENCY, |us| u32::try_from(us).unwrap_or(NO_LATENCY - 1)),
            qtype: fields.qtype,
            rcode: fields.rcode,
            answers: fields.answers,
            ede: fields.ede.unwrap_or(0),
            worker: worker.unwrap_or(0),
            name_len,
            flags: flags | (fields.transport as u8) << TRANSPORT_SHIFT,
        };
        packed.set_client(fields.client);
        packed
    }

    /// The record of `entry` and its name in wire form; `None` when the name does not read
    /// as one.
    pub fn of(entry: &Entry) -> Option<(Packed, Vec<u8>)> {
        let name: Name<Vec<u8>> = entry.name.parse().ok()?;
        let mut wire = name.into_octets();
        wire.make_ascii_lowercase();
        let fields = Fields {
            time_us: entry.time_us,
            client: entry.client,
            transport: entry.transport,
            qtype: entry.qtype,
            rcode: entry.rcode,
            latency_us: entry.latency_us,
            answers: entry.answers,
            ede: entry.ede,
            worker: entry.worker,
            cached: entry.cached,
        };
        let len = u8::try_from(wire.len()).ok()?;
        Some((Packed::new(&fields, len), wire))
    }

    /// The name's length in wire form.
    pub fn name_len(&self) -> usize {
        usize::from(self.name_len)
    }

    /// The client.
    pub fn client(&self) -> IpAddr {
        if self.flags & V6 != 0 {
            IpAddr::V6(Ipv6Addr::from(self.client))
        } else {
            IpAddr::from([
                self.client[0],
                self.client[1],
                self.client[2],
                self.client[3],
            ])
        }
    }

    /// Replace the client (cut to a prefix).
    pub fn set_client(&mut self, client: IpAddr) {
        match client {
            IpAddr::V4(v4) => {
                self.client = [0; 16];
                self.client[..4].copy_from_slice(&v4.octets());
                self.flags &= !V6;
            }
            IpAddr::V6(v6) => {
                self.client = v6.octets();
                self.flags |= V6;
            }
        }
    }

    /// The entry of this record whose name is `wire` (its [`Packed::name_len`] bytes).
    pub fn entry(&self, wire: &[u8]) -> Entry {
        let flag = |f: u8| self.flags & f != 0;
        Entry {
            time_us: self.time_us,
            client: self.client(),
            transport: Transport::of_bits(self.flags >> TRANSPORT_SHIFT),
            name: name_text(wire).unwrap_or_default().into_boxed_str(),
            qtype: self.qtype,
            rcode: self.rcode,
            latency_us: (self.latency_us != NO_LATENCY).then_some(u64::from(self.latency_us)),
            answers: self.answers,
            ede: flag(HAS_EDE).then_some(self.ede),
            worker: flag(HAS_WORKER).then_some(u32::from(self.worker)),
            cached: flag(CACHED_KNOWN).then_some(flag(CACHED)),
        }
    }
}

/// A name in wire form as the log shows it (as `domain` writes a name): lowercase, absolute,
/// a byte that is not printable written `\DDD`, a dot within a label `\.`; `None` when it is
/// no valid uncompressed name.
pub fn name_text(wire: &[u8]) -> Option<String> {
    let name = Name::from_slice(wire).ok()?;
    let mut text = name.to_string().to_ascii_lowercase();
    if !text.ends_with('.') {
        text.push('.');
    }
    Some(text)
}

/// The entries of `records` in order, whose names are `names` one after the other (a
/// snapshot's, a batch's).
pub fn entries(records: &[Packed], names: &[u8]) -> Vec<Entry> {
    let mut at = 0;
    records
        .iter()
        .map(|r| {
            let end = at + r.name_len();
            let entry = r.entry(names.get(at..end).unwrap_or_default());
            at = end;
            entry
        })
        .collect()
}

/// Records and their names, in order, copied out of the ring to be read without its lock.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The records, oldest first.
    pub records: Vec<Packed>,
    /// Their names in wire form, one after the other in the records' order.
    pub names: Vec<u8>,
}

impl Snapshot {
    /// Every entry, oldest first.
    pub fn entries(&self) -> Vec<Entry> {
        entries(&self.records, &self.names)
    }

    /// The entries, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = Entry> + '_ {
        let mut end = self.names.len();
        self.records.iter().rev().map(move |r| {
            let at = end.saturating_sub(r.name_len());
            let entry = r.entry(self.names.get(at..end).unwrap_or_default());
            end = at;
            entry
        })
    }
}

/// How a client reached the resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Transport {
    Udp,
    Tcp,
    Dot,
    Doh,
    Doq,
    Other,
}

impl Transport {
    /// Its name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
            Transport::Dot => "dot",
            Transport::Doh => "doh",
            Transport::Doq => "doq",
            Transport::Other => "other",
        }
    }

    /// From its number in a record's flags (`self as u8`).
    fn of_bits(bits: u8) -> Transport {
        [
            Transport::Udp,
            Transport::Tcp,
            Transport::Dot,
            Transport::Doh,
            Transport::Doq,
        ]
        .get(usize::from(bits))
        .copied()
        .unwrap_or(Transport::Other)
    }

    /// From dnstap's `SocketProtocol` number, which the records use.
    pub fn of(protocol: u8) -> Transport {
        match protocol {
            1 => Transport::Udp,
            2 => Transport::Tcp,
            3 => Transport::Dot,
            4 => Transport::Doh,
            7 => Transport::Doq,
            _ => Transport::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Packed>(), 48);
    }

    #[test]
    fn an_entry_comes_back_from_its_record() {
        let base = Entry {
            time_us: 1_000_250,
            client: "192.0.2.7".parse().unwrap(),
            transport: Transport::Dot,
            name: "www.example.test.".into(),
            qtype: 28,
            rcode: 16,
            latency_us: Some(250),
            answers: 2,
            ede: Some(9),
            worker: Some(3),
            cached: Some(true),
        };
        let rows = [
            base.clone(),
            Entry {
                client: "2001:db8::1".parse().unwrap(),
                name: "a\\000\\.\\255.".into(),
                latency_us: None,
                ede: None,
                worker: None,
                cached: None,
                ..base.clone()
            },
            Entry {
                name: ".".into(),
                cached: Some(false),
                ..base.clone()
            },
        ];
        // Every transport beside every flag, and the largest worker number kept.
        let transports = [
            Transport::Udp,
            Transport::Tcp,
            Transport::Dot,
            Transport::Doh,
            Transport::Doq,
            Transport::Other,
        ];
        let more = transports.map(|transport| Entry {
            transport,
            client: "2001:db8::2".parse().unwrap(),
            worker: Some(u32::from(u16::MAX)),
            ..base.clone()
        });
        for entry in rows.into_iter().chain(more) {
            let (packed, wire) = Packed::of(&entry).expect("a name");
            assert_eq!(packed.name_len(), wire.len());
            assert_eq!(packed.entry(&wire), entry);
        }
        // A worker number no worker has is kept as unknown, the rest as it was.
        let past = Entry {
            worker: Some(u32::from(u16::MAX) + 1),
            ..base.clone()
        };
        let (packed, wire) = Packed::of(&past).expect("a name");
        assert_eq!(
            packed.entry(&wire),
            Entry {
                worker: None,
                ..past
            }
        );
        // Names are kept lowercase.
        let upper = Entry {
            name: "WWW.Example.TEST.".into(),
            ..base.clone()
        };
        let (packed, wire) = Packed::of(&upper).expect("a name");
        assert_eq!(packed.entry(&wire), base);
    }

    #[test]
    fn a_snapshot_reads_both_ways() {
        let entry = |name: &str| Entry {
            time_us: 1,
            client: "192.0.2.1".parse().unwrap(),
            transport: Transport::Udp,
            name: name.into(),
            qtype: 1,
            rcode: 0,
            latency_us: None,
            answers: 0,
            ede: None,
            worker: None,
            cached: None,
        };
        let mut snapshot = Snapshot::default();
        let names = ["a.test.", "bb.test.", "."];
        for name in names {
            let (packed, wire) = Packed::of(&entry(name)).expect("a name");
            snapshot.records.push(packed);
            snapshot.names.extend(wire);
        }
        let forward: Vec<Box<str>> = snapshot.entries().into_iter().map(|e| e.name).collect();
        assert_eq!(forward, names.map(Box::from));
        let mut backward: Vec<Box<str>> = snapshot.newest_first().map(|e| e.name).collect();
        backward.reverse();
        assert_eq!(backward, forward);
    }
}
