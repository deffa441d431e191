//! What the query log's readers ask for, pure: the filters of `kresctl querylog` (client
//! network, name suffix, type, rcode) and the top lists of `kresctl top`, over entries of the
//! ring. A top list is counted exactly over the entries of its window in one pass (the ring
//! bounds both the memory and the time it takes).

use std::collections::HashMap;
use std::net::IpAddr;

use domain::base::iana::{Rcode, Rtype};

use super::Entry;
use kres_wire::query_log::{TopEntry, TopList};

/// A bad filter or list, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectError {
    #[error("client: '{0}' is not an address or network (192.0.2.0/24, 2001:db8::/56)")]
    Client(String),
    #[error("name: '{0}' is not a domain name")]
    Name(String),
    #[error("qtype: '{0}' is not a record type (A, AAAA, TYPE65280)")]
    Qtype(String),
    #[error("rcode: '{0}' is not an rcode (NOERROR, SERVFAIL, NXDOMAIN, REFUSED, …)")]
    Rcode(String),
    #[error("top list '{0}' does not exist (clients, names, servfail, nxdomain, bogus, qtypes)")]
    Kind(String),
}

/// An address network: the address and how many leading bits count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// An address of the network.
    pub addr: IpAddr,
    /// How many of its leading bits count.
    pub prefix: u8,
}

impl Network {
    /// `192.0.2.0/24`, `2001:db8::/56` or a single address.
    pub fn parse(text: &str) -> Result<Network, SelectError> {
        let bad = || SelectError::Client(text.to_owned());
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
        };
        Ok(Network { addr, prefix })
    }

    /// Whether `ip` is inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == mask(self.addr, self.prefix)
    }
}

/// `ip` with all but its leading `prefix` bits cleared: the configuration's reading of it.
pub use kres_config::types::masked as mask;

/// Which answers `kresctl querylog` shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Only clients in this network.
    pub client: Option<Network>,
    /// A name suffix, lowercase and absolute: whole labels match (`example.com.` matches
    /// `www.example.com.` and itself, not `badexample.com.`).
    pub name: Option<String>,
    /// Only this type.
    pub qtype: Option<u16>,
    /// Only this rcode.
    pub rcode: Option<u16>,
}

impl Filter {
    /// The filter of the texts given (each optional).
    pub fn parse(
        client: Option<&str>,
        name: Option<&str>,
        qtype: Option<&str>,
        rcode: Option<&str>,
    ) -> Result<Filter, SelectError> {
        Ok(Filter {
            client: client.map(Network::parse).transpose()?,
            name: name.map(parse_suffix).transpose()?,
            qtype: qtype.map(parse_qtype).transpose()?,
            rcode: rcode.map(parse_rcode).transpose()?,
        })
    }

    /// Whether `entry` passes.
    pub fn matches(&self, entry: &Entry) -> bool {
        self.client.is_none_or(|n| n.contains(entry.client))
            && self
                .name
                .as_deref()
                .is_none_or(|s| has_suffix(&entry.name, s))
            && self.qtype.is_none_or(|t| t == entry.qtype)
            && self.rcode.is_none_or(|r| r == entry.rcode)
    }
}

/// A name as the filter takes it: `.`, or labels of visible ASCII (no `.`) joined by single
/// dots, with or without the final dot, at most 254 characters ([`NAME_PATTERN`]).
fn parse_suffix(text: &str) -> Result<String, SelectError> {
    let label = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_graphic() && b != b'.');
    let labels = text.strip_suffix('.').unwrap_or(text);
    if text != "." && (text.len() > 254 || !labels.split('.').all(label)) {
        return Err(SelectError::Name(text.to_owned()));
    }
    let lower = text.to_ascii_lowercase();
    Ok(if lower.ends_with('.') {
        lower
    } else {
        format!("{lower}.")
    })
}

/// The names [`Filter::parse`] takes (with `maxLength` 254), for the API's document.
pub const NAME_PATTERN: &str = r"^(\.|[!-\-/-~]+(\.[!-\-/-~]+)*\.?)$";

/// A decimal number up to `max` as Rust's integer parsers take it (an optional `+`, leading
/// zeros), as a regular expression; `max` is 32, 128 or 65535.
fn decimal_up_to(max: u16) -> &'static str {
    match max {
        32 => r"\+?0*(3[0-2]|[12]?[0-9])",
        128 => r"\+?0*(12[0-8]|1[01][0-9]|[1-9]?[0-9])",
        _ => {
            r"\+?0*(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0)"
        }
    }
}

/// `text` matched whatever the case of its letters.
fn any_case(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
            } else if c.is_ascii_alphanumeric() || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// The clients [`Network::parse`] takes, for the API's document: an IPv4 or IPv6 address
/// (RFC 3986's forms, which are Rust's), optionally with a prefix length.
pub fn client_pattern() -> String {
    let (v4, v6) = address_patterns();
    format!(
        "^({v4}(/{})?|({v6})(/{})?)$",
        decimal_up_to(32),
        decimal_up_to(128)
    )
}

/// An IPv4 or IPv6 address as `std::net::IpAddr` parses it, for the API's document.
pub fn address_pattern() -> String {
    let (v4, v6) = address_patterns();
    format!("^({v4}|({v6}))$")
}

/// The IPv4 and the IPv6 forms of an address (RFC 3986's, which are Rust's), unanchored.
fn address_patterns() -> (String, String) {
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    let v4 = format!("({octet}\\.){{3}}{octet}");
    let h16 = "[0-9A-Fa-f]{1,4}";
    let ls32 = format!("({h16}:{h16}|{v4})");
    let before = |n: usize| match n {
        0 => String::new(),
        n => format!("(({h16}:){{0,{}}}{h16})?", n - 1),
    };
    let after = |n: usize| format!("({h16}:){{{n}}}");
    let mut v6 = vec![
        format!("{}{ls32}", after(6)),
        format!("::{}{ls32}", after(5)),
    ];
    for (left, right) in [(1, 4), (2, 3), (3, 2), (4, 1), (5, 0)] {
        v6.push(format!("{}::{}{ls32}", before(left), after(right)));
    }
    v6.push(format!("{}::{h16}", before(6)));
    v6.push(format!("{}::", before(7)));
    (v4, v6.join("|"))
}

/// The types [`parse_qtype`] takes, for the API's document: a number, `TYPEn`, or a
/// mnemonic the DNS library knows, whatever the case.
pub fn qtype_pattern() -> String {
    let number = decimal_up_to(u16::MAX);
    let mnemonics: Vec<String> = (0..=u16::MAX)
        .filter_map(|n| Rtype::from_int(n).to_mnemonic())
        .filter_map(|m| std::str::from_utf8(m).ok())
        .map(any_case)
        .collect();
    format!(
        "^({number}|{}{number}|{})$",
        any_case("TYPE"),
        mnemonics.join("|")
    )
}

/// The rcodes [`parse_rcode`] takes, for the API's document: a number or a mnemonic, whatever
/// the case.
pub fn rcode_pattern() -> String {
    let mnemonics: Vec<String> = (0..=15u8)
        .filter_map(Rcode::checked_from_int)
        .filter_map(Rcode::to_mnemonic_str)
        .filter(|m| m.parse::<Rcode>().is_ok())
        .map(any_case)
        .collect();
    format!("^({}|{})$", decimal_up_to(u16::MAX), mnemonics.join("|"))
}

fn has_suffix(name: &str, suffix: &str) -> bool {
    suffix == "."
        || name == suffix
        || name
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.'))
}

/// A record type by mnemonic (`aaaa` too), `TYPEnnn` or number.
pub fn parse_qtype(text: &str) -> Result<u16, SelectError> {
    if let Ok(n) = text.parse::<u16>() {
        return Ok(n);
    }
    text.to_ascii_uppercase()
        .parse::<Rtype>()
        .map(Rtype::to_int)
        .map_err(|_| SelectError::Qtype(text.to_owned()))
}

/// An rcode by mnemonic or number.
pub fn parse_rcode(text: &str) -> Result<u16, SelectError> {
    if let Ok(n) = text.parse::<u16>() {
        return Ok(n);
    }
    text.to_ascii_uppercase()
        .parse::<Rcode>()
        .map(|r| u16::from(r.to_int()))
        .map_err(|_| SelectError::Rcode(text.to_owned()))
}

/// An rcode's mnemonic (`SERVFAIL`), or its number.
pub fn rcode_name(rcode: u16) -> String {
    u8::try_from(rcode)
        .ok()
        .and_then(Rcode::checked_from_int)
        .and_then(Rcode::to_mnemonic_str)
        .map_or_else(|| rcode.to_string(), str::to_owned)
}

pub use kres_wire::query_log::TopKind;

/// Extended DNS Errors of a failed DNSSEC validation (RFC 8914: 6 DNSSEC Bogus … 12 NSEC
/// Missing).
const DNSSEC_EDE: std::ops::RangeInclusive<u16> = 6..=12;
const RCODE_SERVFAIL: u16 = 2;
const RCODE_NXDOMAIN: u16 = 3;

/// Whether `entry` counts in the list `kind`.
fn is_counted(kind: TopKind, entry: &Entry) -> bool {
    match kind {
        TopKind::Clients | TopKind::Names | TopKind::Qtypes => true,
        TopKind::Servfail => entry.rcode == RCODE_SERVFAIL,
        TopKind::Nxdomain => entry.rcode == RCODE_NXDOMAIN,
        TopKind::Bogus => entry.ede.is_some_and(|e| DNSSEC_EDE.contains(&e)),
    }
}

/// Key of one counted entry: borrowed where the entry has it as text.
#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Client(IpAddr),
    Name(&'a str),
    Qtype(u16),
}

impl Key<'_> {
    fn text(&self) -> String {
        match self {
            Key::Client(ip) => ip.to_string(),
            Key::Name(n) => (*n).to_owned(),
            Key::Qtype(t) => super::qtype_name(*t),
        }
    }
}

/// The `limit` most frequent keys of `kind` among `entries` sent at or after `since_us`
/// (microseconds since the epoch; `None`: all). `window` is only reported.
pub fn top<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    kind: TopKind,
    since_us: Option<u64>,
    window: Option<f64>,
    limit: usize,
) -> TopList {
    let mut counts: HashMap<Key<'a>, u64> = HashMap::new();
    let mut counted = 0;
    for entry in entries {
        if since_us.is_some_and(|s| entry.time_us < s) || !is_counted(kind, entry) {
            continue;
        }
        counted += 1;
        let key = match kind {
            TopKind::Clients => Key::Client(entry.client),
            TopKind::Qtypes => Key::Qtype(entry.qtype),
            _ => Key::Name(&entry.name),
        };
        *counts.entry(key).or_default() += 1;
    }
    let mut ranked: Vec<TopEntry> = counts
        .into_iter()
        .map(|(key, count)| TopEntry {
            key: key.text(),
            count,
        })
        .collect();
    ranked.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    ranked.truncate(limit);
    TopList {
        kind: kind.as_str().to_owned(),
        window,
        counted,
        entries: ranked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query_log::records::Transport;

    fn entry(client: [u8; 4], name: &str, qtype: u16, rcode: u16, time_us: u64) -> Entry {
        Entry {
            time_us,
            client: IpAddr::from(client),
            transport: Transport::Udp,
            name: name.into(),
            qtype,
            rcode,
            latency_us: None,
            answers: 0,
            ede: None,
            worker: None,
            cached: None,
        }
    }

    #[test]
    fn networks() {
        let n = Network::parse("192.0.2.0/24").unwrap();
        assert!(n.contains("192.0.2.77".parse().unwrap()));
        assert!(!n.contains("192.0.3.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        assert!(Network::parse("127.0.0.2")
            .unwrap()
            .contains("127.0.0.2".parse().unwrap()));
        assert!(Network::parse("::/0")
            .unwrap()
            .contains("2001:db8::1".parse().unwrap()));
        for bad in ["192.0.2.0/33", "x", "1.2.3.4/", "::/129", ""] {
            assert_eq!(Network::parse(bad), Err(SelectError::Client(bad.into())));
        }
        assert_eq!(
            mask("2001:db8:1:2:3::1".parse().unwrap(), 56),
            "2001:db8:1::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            mask("10.1.2.3".parse().unwrap(), 0),
            "0.0.0.0".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn filters() {
        let e = entry([127, 0, 0, 3], "www.example.com.", 28, 0, 1);
        let check = |client, name, qtype, rcode, expected: bool| {
            let f = Filter::parse(client, name, qtype, rcode).unwrap();
            assert_eq!(
                f.matches(&e),
                expected,
                "{client:?} {name:?} {qtype:?} {rcode:?}"
            );
        };
        check(None, None, None, None, true);
        check(
            Some("127.0.0.0/8"),
            Some("Example.com"),
            Some("aaaa"),
            Some("noerror"),
            true,
        );
        check(Some("127.0.0.2"), None, None, None, false);
        check(None, Some("ample.com"), None, None, false);
        check(None, Some("www.example.com."), None, None, true);
        check(None, Some("."), Some("28"), Some("0"), true);
        check(None, None, Some("A"), None, false);
        check(None, None, None, Some("SERVFAIL"), false);
        assert!(Filter::parse(None, None, Some("NOPE"), None).is_err());
        assert!(Filter::parse(None, None, None, Some("NOPE")).is_err());
        for name in [
            "a..b",
            "",
            ".a",
            "a b",
            " a",
            "\u{e9}.cz",
            "..",
            &"a".repeat(255),
        ] {
            assert!(
                Filter::parse(None, Some(name), None, None).is_err(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn top_lists_are_exact_and_ordered() {
        let mut entries = Vec::new();
        for (i, n) in [(2u8, 3), (3, 5), (4, 5), (5, 1)] {
            for t in 0..n {
                entries.push(entry(
                    [127, 0, 0, i],
                    "a.test.",
                    1,
                    if i == 5 { 2 } else { 0 },
                    100 + t,
                ));
            }
        }
        let list = top(entries.iter(), TopKind::Clients, None, None, 3);
        let got: Vec<(&str, u64)> = list
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.count))
            .collect();
        assert_eq!(got, [("127.0.0.3", 5), ("127.0.0.4", 5), ("127.0.0.2", 3)]);
        assert_eq!(list.counted, 14);
        let servfail = top(entries.iter(), TopKind::Servfail, None, None, 10);
        assert_eq!(
            servfail.entries,
            [TopEntry {
                key: "a.test.".into(),
                count: 1
            }]
        );
        let recent = top(entries.iter(), TopKind::Clients, Some(104), Some(1.0), 10);
        assert_eq!(recent.counted, 2);
        let qtypes = top(entries.iter(), TopKind::Qtypes, None, None, 10);
        assert_eq!(qtypes.entries[0].key, "A");
        assert_eq!(rcode_name(2), "SERVFAIL");
        assert_eq!(rcode_name(3), "NXDOMAIN");
    }
}
