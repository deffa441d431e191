//! RPZ zones kept up to date by zone transfer: the protocol side of a secondary.
//!
//! Operators subscribe to policy feeds published as DNS zones. This module fetches such a
//! zone from its primaries (SOA query, IXFR per RFC 1995, AXFR), signs and verifies every
//! message with TSIG (RFC 8945), answers NOTIFY (RFC 1996), and keeps the zone as an
//! ordinary zone file that kresd's RPZ loader reads. Of the manager, this protocol side uses
//! only the way a fresh file is created exclusively (`manager::rundir`, for a transfer's
//! temporary file); the secondary's task (`secondary`: timers, dispatch, renew through the
//! manager's handle) drives it through this interface, which uses std types, its own and the
//! configuration's reading of zone names and key files (`config::xfr`) only; the DNS library
//! stays behind it.
//!
//! Invariants: memory is bounded by an IXFR's diff, never by the zone's size (an AXFR goes
//! record by record to a temporary file; an IXFR is applied while copying the stored file
//! line by line), and the diff by [`Limits::max_ixfr_memory`] (past it, an AXFR instead);
//! what a transfer writes is bounded by what it received ([`Limits::max_text_ratio`]),
//! however the primary compresses; every bound of [`Limits`] is enforced; a stored file is
//! only ever replaced whole (a fresh temporary file in its directory, created exclusively,
//! fsync, rename), and never on an error; every line stored is in the form kresd's zone
//! reader takes (`presentation`), and one with an escape is read back as the record it was
//! written from before it is stored, else the transfer fails.

mod key;
pub mod lists;
mod notify;
pub mod pacing;
mod presentation;
pub mod secondary;
pub mod status;
mod transfer;
mod wire;
mod xfr;
mod zonefile;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use key::{KeyFileError, TsigKey};
pub use kres_config::xfr::{zone_name, ZoneNameError};
pub use notify::{Notified, NotifyListener, NotifyZone};
pub use xfr::{refresh, refresh_whole};

/// How a stored zone file differs from what an IXFR expects of it.
#[derive(Debug, thiserror::Error)]
pub enum Divergence {
    /// A line the IXFR may touch does not read as a record.
    #[error(transparent)]
    Line(#[from] presentation::LineError),
    /// Records the IXFR deletes are not in the file.
    #[error("{missing} of the {deleted} records the transfer deletes are not in the file")]
    NotInFile { missing: usize, deleted: usize },
}

/// The port of a primary or a listener when the text names none.
const DNS_PORT: u16 = 53;

/// A primary server of a zone: where its transfers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Primary {
    /// The primary's address and port.
    pub addr: SocketAddr,
}

/// Why an `address[@port]` is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddressError {
    /// The part before `@` is no IPv4 or IPv6 address.
    #[error("'{0}' is not an IPv4 or IPv6 address")]
    Address(String),
    /// The part after `@` is no port number (1-65535).
    #[error("'{0}' is not a port number (1-65535)")]
    Port(String),
}

impl Primary {
    /// Parse `address[@port]` ("192.0.2.53", "2001:db8::53@5353"); port 53 by default.
    pub fn parse(text: &str) -> Result<Primary, AddressError> {
        let text = text.trim();
        let (address, port) = match text.rsplit_once('@') {
            Some((address, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| AddressError::Port(port.to_owned()))?;
                (address, port)
            }
            None => (text, DNS_PORT),
        };
        let ip: IpAddr = address
            .parse()
            .map_err(|_| AddressError::Address(address.to_owned()))?;
        Ok(Primary {
            addr: SocketAddr::new(ip, port),
        })
    }
}

/// The bounds of one refresh: hostile or broken primaries exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes of DNS messages one transfer may bring.
    pub max_bytes: u64,
    /// The most records one transfer may bring (an IXFR's deletions and additions count).
    pub max_records: u64,
    /// The longest one refresh (SOA query and transfer) may take.
    pub max_duration: Duration,
    /// The longest wait for the next message (or connection) of a transfer.
    pub idle: Duration,
    /// The most heap an IXFR's changes may hold (with the transfer's buffers); an IXFR
    /// that needs more is left for an AXFR, which streams to disk.
    pub max_ixfr_memory: u64,
    /// How many times the bytes received a transfer's text (the lines it writes or adds)
    /// may grow to, plus [`Limits::text_margin`]: a zone's text is a few times its
    /// compressed wire form, so a transfer that outgrows this is hostile and refused.
    pub max_text_ratio: u64,
    /// The text a transfer may write beyond [`Limits::max_text_ratio`] times what it
    /// received (the header and the SOA of a zone whose first message is small).
    pub text_margin: u64,
}

impl Default for Limits {
    /// Sized for zones of a few million entries: an RPZ entry is 40-80 bytes on the wire.
    fn default() -> Limits {
        Limits {
            max_bytes: 2 << 30,
            max_records: 20_000_000,
            max_duration: Duration::from_secs(30 * 60),
            idle: Duration::from_secs(30),
            max_ixfr_memory: 64 << 20,
            max_text_ratio: 16,
            text_margin: 1 << 20,
        }
    }
}

/// The timers of a zone's SOA record (RFC 1035 §3.3.13), which a secondary follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoaTimers {
    /// How long after a refresh the zone is checked again.
    pub refresh: Duration,
    /// How long after a failed refresh it is tried again.
    pub retry: Duration,
    /// How long without a successful refresh the zone stays authoritative.
    pub expire: Duration,
}

/// What a refresh did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferKind {
    /// The whole zone was transferred.
    Axfr,
    /// The differences since the stored serial were transferred and applied.
    Ixfr,
    /// The primary has nothing newer than the stored file.
    UpToDate,
}

impl TransferKind {
    /// A short stable label ("axfr", "ixfr", "up-to-date") for status and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            TransferKind::Axfr => "axfr",
            TransferKind::Ixfr => "ixfr",
            TransferKind::UpToDate => "up-to-date",
        }
    }
}

/// The outcome of a successful refresh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferReport {
    /// What was done.
    pub kind: TransferKind,
    /// The serial of the zone now stored.
    pub serial: u32,
    /// Bytes of DNS messages received (SOA query included).
    pub bytes: u64,
    /// Records received in the transfer (0 when up to date).
    pub records: u64,
    /// How long the refresh took.
    pub duration: Duration,
    /// The timers of the zone now stored.
    pub timers: SoaTimers,
}

/// Why a refresh failed; the stored file is untouched in every case.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// No connection to the primary (or no datagram could be sent).
    #[error("cannot reach the primary {primary}")]
    Connect {
        /// The primary tried.
        primary: SocketAddr,
        /// What the socket said.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed in the middle of an exchange.
    #[error("the connection to the primary {primary} failed")]
    Network {
        /// The primary talked to.
        primary: SocketAddr,
        /// What the socket said.
        #[source]
        source: std::io::Error,
    },
    /// A bound of time was reached.
    #[error("the transfer took too long: {0}")]
    Timeout(String),
    /// A bound of size was reached.
    #[error("the transfer is too large: {0}")]
    TooLarge(String),
    /// The primary answered with an error code.
    #[error("the primary refused the {query} query: {rcode}")]
    Refused {
        /// The query refused ("SOA", "IXFR", "AXFR").
        query: &'static str,
        /// The response code as DNS names it (NOTAUTH, REFUSED, ...).
        rcode: String,
    },
    /// A message was not signed as the key demands (wrong key, unsigned answer, bad time).
    #[error("TSIG: {0}")]
    Tsig(String),
    /// Bytes that are no DNS message, or a message that is no transfer.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The primary's serial is older than the stored one (RFC 1982 arithmetic).
    #[error("the primary's serial {primary} is older than the stored serial {stored}")]
    SerialBackwards {
        /// The serial of the stored file.
        stored: u32,
        /// The serial the primary has.
        primary: u32,
    },
    /// The answer is about another zone.
    #[error("the answer is for the zone '{got}', not '{expected}'")]
    WrongZone {
        /// The zone asked for.
        expected: String,
        /// The zone answered.
        got: String,
    },
    /// A record cannot be stored in a form kresd's zone reader takes as that record.
    #[error("a record cannot be stored: {0}")]
    Unstorable(String),
    /// The stored file does not hold what an IXFR deletes (it must be transferred whole).
    #[error("the stored file does not match the transfer: {0}")]
    Diverged(Divergence),
    /// The zone file could not be read or written.
    #[error("cannot write the zone file {path}")]
    File {
        /// The file (or its temporary sibling).
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

impl TransferError {
    /// A short stable label for metrics ("timeout", "too-large", "tsig", ...).
    pub fn reason(&self) -> &'static str {
        match self {
            TransferError::Connect { .. } => "connect",
            TransferError::Network { .. } => "network",
            TransferError::Timeout(_) => "timeout",
            TransferError::TooLarge(_) => "too-large",
            TransferError::Refused { .. } => "refused",
            TransferError::Tsig(_) => "tsig",
            TransferError::Malformed(_) => "malformed",
            TransferError::SerialBackwards { .. } => "serial-backwards",
            TransferError::WrongZone { .. } => "wrong-zone",
            TransferError::Unstorable(_) => "unstorable",
            TransferError::Diverged(_) => "diverged",
            TransferError::File { .. } => "file",
        }
    }
}

/// How a primary's serial compares with the stored one (RFC 1982 serial arithmetic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SerialOrder {
    /// The primary has a newer version.
    Newer,
    /// The same version.
    Same,
    /// An older version — or one exactly half the serial space away, which RFC 1982 leaves
    /// undefined and a secondary must not take.
    Older,
}

/// How `primary` compares with `stored` (RFC 1982).
fn serial_order(primary: u32, stored: u32) -> SerialOrder {
    match primary.wrapping_sub(stored) {
        0 => SerialOrder::Same,
        d if d < (1 << 31) => SerialOrder::Newer,
        _ => SerialOrder::Older,
    }
}

/// What the stored file holds: its serial and SOA timers (None: no file, or not readable as
/// a zone).
pub fn stored(file: &Path) -> Option<(u32, SoaTimers)> {
    zonefile::stored_soa(file).map(|soa| (soa.serial, soa.timers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_are_address_and_optional_port() {
        let check = |text: &str, expected: &str| {
            assert_eq!(Primary::parse(text).unwrap().addr.to_string(), expected);
        };
        check("192.0.2.53", "192.0.2.53:53");
        check("192.0.2.53@5353", "192.0.2.53:5353");
        check("2001:db8::53", "[2001:db8::53]:53");
        check("2001:db8::53@5353", "[2001:db8::53]:5353");
        assert_eq!(
            Primary::parse("primary.example").unwrap_err().to_string(),
            "'primary.example' is not an IPv4 or IPv6 address"
        );
        assert_eq!(
            Primary::parse("192.0.2.53@0").unwrap_err().to_string(),
            "'0' is not a port number (1-65535)"
        );
        assert_eq!(
            Primary::parse("192.0.2.53@70000").unwrap_err(),
            AddressError::Port("70000".to_owned())
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            failure_persistence: None,
            rng_seed: proptest::test_runner::RngSeed::Fixed(38),
            ..Default::default()
        })]

        /// The zone-name check beside the DNS library's parser: over the characters a zone
        /// name may hold, it accepts exactly the names `domain::base::Name` reads, as the same
        /// name (the library has no error kinds to tell why, so the check names them itself).
        #[test]
        fn zone_names_are_what_the_dns_library_reads(
            labels in proptest::collection::vec("[a-zA-Z0-9_*-]{0,70}", 1..8),
            absolute in proptest::bool::ANY,
            stretch in 0usize..5,
        ) {
            use std::str::FromStr;
            // long names reach the 255-octet bound
            let mut text = labels.join(".");
            for _ in 0..stretch {
                text = format!("{text}.{}", "x".repeat(60));
            }
            if absolute {
                text.push('.');
            }
            let ours = zone_name(&text);
            let library = domain::base::Name::<Vec<u8>>::from_str(&text);
            match (&ours, &library) {
                (Ok(name), Ok(read)) => {
                    proptest::prop_assert_eq!(name, &format!("{read}.").to_ascii_lowercase());
                }
                (Err(_), Err(_)) => {}
                _ => proptest::prop_assert!(false, "{text:?}: {ours:?} but {library:?}"),
            }
        }
    }

    #[test]
    fn zone_names_are_lower_case_and_absolute() {
        assert_eq!(zone_name("Blocklist.RPZ").unwrap(), "blocklist.rpz.");
        assert_eq!(zone_name("blocklist.rpz.").unwrap(), "blocklist.rpz.");
        assert_eq!(zone_name(".").unwrap(), ".");
        let error = |text: &str| zone_name(text).unwrap_err().to_string();
        assert_eq!(error(""), "the zone name is empty");
        assert_eq!(error("a..b"), "the zone name 'a..b' has an empty label");
        assert_eq!(
            error("a b.rpz"),
            "the zone name 'a b.rpz' has the character ' ' (letters, digits, '-', '_' and '*' only)"
        );
        let long = "a".repeat(64);
        assert_eq!(
            error(&long),
            format!("the zone name '{long}' has a label of 64 octets (at most 63)")
        );
        let too_long = vec!["abcdefghi"; 26].join(".");
        assert_eq!(
            error(&too_long),
            format!("the zone name '{too_long}' is longer than 255 octets")
        );
    }

    #[test]
    fn serials_compare_as_rfc_1982_says() {
        assert_eq!(serial_order(2, 1), SerialOrder::Newer);
        assert_eq!(serial_order(1, 1), SerialOrder::Same);
        assert_eq!(serial_order(1, 2), SerialOrder::Older);
        assert_eq!(
            serial_order(0, u32::MAX),
            SerialOrder::Newer,
            "wraps around"
        );
        assert_eq!(serial_order(u32::MAX, 0), SerialOrder::Older);
        assert_eq!(
            serial_order(1 << 31, 0),
            SerialOrder::Older,
            "undefined: not taken"
        );
        assert_eq!(serial_order((1 << 31) - 1, 0), SerialOrder::Newer);
    }

    #[test]
    fn every_kind_and_reason_has_a_stable_label() {
        assert_eq!(TransferKind::Axfr.as_str(), "axfr");
        assert_eq!(TransferKind::Ixfr.as_str(), "ixfr");
        assert_eq!(TransferKind::UpToDate.as_str(), "up-to-date");
        let error = TransferError::SerialBackwards {
            stored: 5,
            primary: 4,
        };
        assert_eq!(error.reason(), "serial-backwards");
        assert_eq!(
            error.to_string(),
            "the primary's serial 4 is older than the stored serial 5"
        );
    }

    #[test]
    fn a_stored_file_that_is_not_regular_is_no_stored_zone_and_is_not_waited_on() {
        let dir = std::env::temp_dir().join(format!("kres-rpz-stored-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join("zone.rpz");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        // With no writer, a blocking open would never return.
        assert_eq!(stored(&fifo), None);
        assert_eq!(stored(Path::new("/dev/zero")), None);
        assert_eq!(stored(&dir), None);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
