//! Custom value types of the configuration (upstream's `datamodel/types/`): sizes, durations, domain
//! names, addresses, networks, `address@port` forms, patterns and Lua-escaped strings.
//!
//! Each type is parsed once from its textual form by a `parse` function that returns upstream's
//! error message on failure; the validated model holds the parsed values.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// Why a text is not a value of its type. Each message is upstream's (its `datamodel/types/`),
/// made when the error is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    /// Not digits followed by one of the type's units.
    #[error(
        "Unexpected value for '<class 'knot_resolver.datamodel.types.types.{class}'>'. Expected string that matches pattern \
         '{pattern}'. Positive integer and one of the units [{}], got '{got}'.",
        quoted_list(units)
    )]
    Unit {
        /// The type's name upstream (`SizeUnit`, `TimeUnit`).
        class: &'static str,
        /// Its pattern.
        pattern: &'static str,
        /// Its units.
        units: &'static [&'static str],
        /// The text given.
        got: String,
    },
    /// A domain name IDNA cannot encode.
    #[error("conversion of '{0}' to IDN punycode representation failed")]
    Idna(String),
    /// A domain name whose ASCII form breaks the label rules.
    #[error(
        "'{name}' represented in punycode '{punycode}' does not match '{}' pattern",
        DOMAIN_NAME_PATTERN
    )]
    DomainName {
        /// The name given.
        name: String,
        /// Its ASCII form.
        punycode: String,
    },
    /// A text that does not match its type's pattern.
    #[error("'{got}' does not match '{pattern}' pattern")]
    Pattern {
        /// The text given.
        got: String,
        /// The pattern.
        pattern: &'static str,
    },
    /// Not a port number (1 to 65535).
    #[error("invalid port number {0}")]
    Port(String),
    /// Neither an address nor an interface name before the `@`.
    #[error("expected IP address or interface name, got '{0}'.")]
    InterfaceHost(String),
    /// Not `<ip-address|interface-name>@<port>`.
    #[error("expected '<ip-address|interface-name>@<port>', got '{0}'.")]
    InterfacePort(String),
    /// More than one `@` (the parts, as Python prints a list).
    #[error("expected '<ip-address|interface-name>[@<port>]', got '{0}'.")]
    InterfaceOptionalPort(String),
    /// Not `<ip-address>@<port>`.
    #[error("expected '<ip-address>@<port>', got '{0}'.")]
    AddressPort(String),
    /// More than one `@` (the parts, as Python prints a list).
    #[error("expected '<ip-address>[@<port>]', got '{0}'.")]
    AddressOptionalPort(String),
    /// Not an IP address (before the `@`).
    #[error("failed to parse IP address '{0}'.")]
    Address(String),
    /// An `IPAddressEM` without its final `!`.
    #[error("string does not end with '!'.")]
    NoExclamationMark,
    /// Text after the `!` of an `IPAddressEM`.
    #[error("suffix '{0}' found after '!'.")]
    AfterExclamationMark(String),
    /// An `IPAddressEM` whose address is none.
    #[error("failed to parse IP address.")]
    AddressBeforeExclamationMark,
    /// Not an IPv4 or IPv6 network.
    #[error("failed to parse IP network.")]
    Network,
    /// Not an IPv6 network.
    #[error("failed to parse IPv6 network.")]
    Ipv6Network,
    /// An IPv6 network without a prefix length, where /96 is required.
    #[error(
        "Expected IPv6 network address with /96 prefix length. Submitted address has been interpreted as /128. \
         Maybe, you forgot to add /96 after the base address?"
    )]
    Ipv6HostNot96,
    /// An IPv6 network of another prefix length than /96 (upstream's spelling kept).
    #[error("expected IPv6 network address with /96 prefix length. Got prefix lenght of {0}")]
    Ipv6PrefixNot96(u8),
    /// Not `http://host:port` or `https://host:port` (an etcd endpoint; ours, not upstream's).
    #[error("'{got}' is not an etcd endpoint 'http://host:port' or 'https://host:port': {why}")]
    EtcdEndpoint {
        /// The text given.
        got: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl From<TypeError> for String {
    /// The message, for the checks that pass messages on.
    fn from(e: TypeError) -> String {
        e.to_string()
    }
}

/// `'a', 'b'` as Python prints the items of a list of strings.
fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Implements `as_str` and `Display` (the text as written) and `Deserialize` (from the
/// normalized string).
macro_rules! string_backed {
    ($t:ty) => {
        impl $t {
            /// The text as written in the configuration.
            pub fn as_str(&self) -> &str {
                &self.raw
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                <$t>::parse(&s).map_err(serde::de::Error::custom)
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.raw)
            }
        }
    };
}

/// Python's `re.match(r"...$")` also matches before one trailing newline; the patterns below
/// reproduce that by looking at the text without it.
fn without_final_newline(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or(s)
}

/// The first code points of the 76 runs of ten Unicode decimal digits (category `Nd`, Unicode
/// 16.0 like upstream's Python 3.14): what Python's `\d` and `int()` accept as digits.
const DECIMAL_ZEROS: [u32; 76] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x10D40, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
    0x11650, 0x116C0, 0x116D0, 0x116DA, 0x11730, 0x118E0, 0x11950, 0x11BF0, 0x11C50, 0x11D50,
    0x11DA0, 0x11F50, 0x16130, 0x16A60, 0x16AC0, 0x16B50, 0x16D70, 0x1CCF0, 0x1D7CE, 0x1D7D8,
    0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E4F0, 0x1E5F1, 0x1E950, 0x1FBF0,
];

/// The value of a Unicode decimal digit (Python's `unicodedata.decimal`), `None` for others.
pub(crate) fn py_decimal(c: char) -> Option<u32> {
    let c = u32::from(c);
    let i = DECIMAL_ZEROS.partition_point(|z| *z <= c).checked_sub(1)?;
    let d = c - DECIMAL_ZEROS[i];
    (d < 10).then_some(d)
}

/// Python's `int()` of a run of decimal digits, saturating (Python's ints are unbounded).
fn py_digits_value(digits: &str) -> u128 {
    digits.chars().fold(0u128, |acc, c| {
        acc.saturating_mul(10)
            .saturating_add(u128::from(py_decimal(c).unwrap_or(0)))
    })
}

/// Split `<digits><unit>` with one of `units` (longest listed first where prefixes overlap).
/// Digits are Python's `\d` (any Unicode decimal digit); huge numbers saturate.
fn split_unit<'u>(s: &str, units: &[&'u str]) -> Option<(u128, &'u str)> {
    let s = without_final_newline(s);
    let digits_end = s.find(|c: char| py_decimal(c).is_none()).unwrap_or(s.len());
    if digits_end == 0 {
        return None;
    }
    let unit = &s[digits_end..];
    let unit = units.iter().find(|u| **u == unit)?;
    Some((py_digits_value(&s[..digits_end]), unit))
}

/// `SizeUnit`: digits immediately followed by `B`, `K`, `M` or `G` (powers of 1024).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeUnit {
    raw: String,
    bytes: u64,
}

impl SizeUnit {
    pub(crate) const UNITS: [&'static str; 4] = ["B", "K", "M", "G"];
    pub(crate) const PATTERN: &'static str = r"^(\d+)(B|K|M|G)$";

    /// Parse a size such as `100M`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let (n, unit) = split_unit(s, &Self::UNITS).ok_or_else(|| TypeError::Unit {
            class: "SizeUnit",
            pattern: Self::PATTERN,
            units: &Self::UNITS,
            got: s.to_owned(),
        })?;
        let mult: u128 = match unit {
            "B" => 1,
            "K" => 1024,
            "M" => 1024 * 1024,
            _ => 1024 * 1024 * 1024,
        };
        // upstream's sizes are unbounded; beyond 16 EiB is as good as infinite here
        let bytes = u64::try_from(n.saturating_mul(mult)).unwrap_or(u64::MAX);
        Ok(SizeUnit {
            raw: s.to_owned(),
            bytes,
        })
    }
    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The size in whole mebibytes (rounded down).
    pub fn mbytes(&self) -> u64 {
        self.bytes / (1024 * 1024)
    }
}
string_backed!(SizeUnit);

/// `TimeUnit`: digits followed by `us`, `ms`, `s`, `m`, `h` or `d`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeUnit {
    raw: String,
    micros: u64,
}

impl TimeUnit {
    pub(crate) const UNITS: [&'static str; 6] = ["us", "ms", "s", "m", "h", "d"];
    pub(crate) const PATTERN: &'static str = r"^(\d+)(us|ms|s|m|h|d)$";

    /// Parse a duration such as `1500ms`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let (n, unit) = split_unit(s, &Self::UNITS).ok_or_else(|| TypeError::Unit {
            class: "TimeUnit",
            pattern: Self::PATTERN,
            units: &Self::UNITS,
            got: s.to_owned(),
        })?;
        let mult: u128 = match unit {
            "us" => 1,
            "ms" => 1_000,
            "s" => 1_000_000,
            "m" => 60_000_000,
            "h" => 3_600_000_000,
            _ => 86_400_000_000,
        };
        // upstream's durations are unbounded; beyond 584 000 years is as good as infinite here
        let micros = u64::try_from(n.saturating_mul(mult)).unwrap_or(u64::MAX);
        Ok(TimeUnit {
            raw: s.to_owned(),
            micros,
        })
    }
    /// Whole microseconds.
    pub fn micros(&self) -> u64 {
        self.micros
    }
    /// Whole milliseconds (rounded down).
    pub fn millis(&self) -> u64 {
        self.micros / 1_000
    }
    /// Whole seconds (rounded down).
    pub fn seconds(&self) -> u64 {
        self.micros / 1_000_000
    }
    /// Whole minutes (rounded down).
    pub fn minutes(&self) -> u64 {
        self.micros / 60_000_000
    }
    /// As a `Duration`.
    pub fn duration(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.micros)
    }
}
string_backed!(TimeUnit);

/// A string that is rendered into single-quoted Lua literals (`EscapedStr`); keeps the original text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EscapedStr {
    raw: String,
}

impl EscapedStr {
    /// Any string is valid.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        Ok(EscapedStr { raw: s.to_owned() })
    }
    /// The text escaped like upstream's `EscapedStr` (see [`escape_lua`]).
    pub fn escaped(&self) -> String {
        escape_lua(&self.raw)
    }
    /// The original text with `[[`/`]]` escaped, for Lua long strings.
    pub fn multiline(&self) -> String {
        self.raw.replace("[[", "\\[\\[").replace("]]", "\\]\\]")
    }
}
string_backed!(EscapedStr);

/// Escape text for a single-quoted Lua literal like upstream's `EscapedStr`: quotes and control
/// characters escaped, other non-alphanumerics as in Python's `repr`.
pub fn escape_lua(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\u{7}' => out.push_str("\\a"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            '\0' => out.push_str("\\0"),
            '\\' => out.push_str("\\\\"),
            c if c.is_alphanumeric() => out.push(c),
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// A domain name checked like upstream's `DomainName` (IDNA, then label rules).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DomainName {
    raw: String,
    /// The ASCII form when it differs from the text as written (`None` for nearly every name:
    /// 100,000 names of a large `local-data` are not kept twice).
    punycode: Option<String>,
}

/// The pattern upstream publishes in the JSON schema for domain names.
pub(crate) const DOMAIN_NAME_PATTERN: &str =
    r"(?=^.{,253}\.?$)(^(?!-)[^.]{,62}[^.-](\.(?!-)[^.]{,62}[^.-])*\.?$)|^\.$";

impl DomainName {
    /// Parse and IDNA-encode a name.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        Self::parse_owned(s.to_owned())
    }

    /// [`DomainName::parse`], keeping the text it is given (no copy of it is made).
    pub fn parse_owned(s: String) -> Result<Self, TypeError> {
        if is_plain_ascii_name(&s) {
            return Ok(DomainName {
                raw: s,
                punycode: None,
            });
        }
        Self::parse_long(&s)
    }

    /// [`DomainName::parse`] without the shortcut for plain ASCII names.
    fn parse_long(s: &str) -> Result<Self, TypeError> {
        let punycode = if s == "." {
            ".".to_owned()
        } else {
            idna_encode(s).map_err(|()| TypeError::Idna(s.to_owned()))?
        };
        if domain_pattern_matches(&punycode) {
            Ok(DomainName {
                raw: s.to_owned(),
                punycode: (punycode != s).then_some(punycode),
            })
        } else {
            Err(TypeError::DomainName {
                name: s.to_owned(),
                punycode,
            })
        }
    }
    /// The ASCII (punycode) form.
    pub fn punycode(&self) -> &str {
        self.punycode.as_deref().unwrap_or(&self.raw)
    }
}
string_backed!(DomainName);

/// Whether `s` is a name both [`idna_encode`] and [`domain_pattern_matches`] take as it is:
/// ASCII without a line feed, at most 253 characters (254 with the final dot), labels of 1 to 63
/// characters that neither start nor end with `-`. One pass over the bytes; a name it refuses
/// goes the long way (and gets that way's error). Validating 100,000 addresses and 100,000
/// records (7.6 MB) takes 30 ms with it, 47 ms with every name the long way (release build,
/// medians of 15 runs on a shared 2-core machine).
pub(crate) fn is_plain_ascii_name(s: &str) -> bool {
    let b = s.as_bytes();
    let body = b.strip_suffix(b".").unwrap_or(b);
    !body.is_empty()
        && (b.len() <= 253 || (b.len() == 254 && b.ends_with(b".")))
        && body.split(|&c| c == b'.').all(|label| {
            matches!((label.first(), label.last()), (Some(&first), Some(&last)) if first != b'-' && last != b'-')
                && label.len() <= 63
                && label.iter().all(|&c| c.is_ascii() && c != b'\n')
        })
}

/// Python's `str.encode("idna")` (IDNA 2003): ASCII input is only checked for empty/long labels;
/// other input goes through IDNA processing label by label.
fn idna_encode(s: &str) -> Result<String, ()> {
    if s.is_empty() {
        return Ok(String::new());
    }
    if s.is_ascii() {
        let mut labels = s.split('.').peekable();
        while let Some(l) = labels.next() {
            let last = labels.peek().is_none();
            if (l.is_empty() && !last) || l.len() >= 64 {
                return Err(());
            }
        }
        return Ok(s.to_owned());
    }
    let mut labels: Vec<&str> = s.split(['.', '\u{3002}', '\u{ff0e}', '\u{ff61}']).collect();
    let trailing = labels.last().is_some_and(|l| l.is_empty());
    if trailing {
        labels.pop();
    }
    let mut out = Vec::with_capacity(labels.len());
    for label in labels {
        if label.is_empty() {
            return Err(());
        }
        if label.is_ascii() {
            if label.len() >= 64 {
                return Err(());
            }
            out.push(label.to_owned());
            continue;
        }
        let encoded = idna::domain_to_ascii(&idna2003_premap(label)).map_err(|_| ())?;
        if encoded.is_empty() || encoded.len() >= 64 || encoded.contains('.') {
            return Err(());
        }
        out.push(encoded);
    }
    let mut joined = out.join(".");
    if trailing {
        joined.push('.');
    }
    Ok(joined)
}

/// The parts of IDNA 2003's nameprep that UTS #46 (used by the `idna` crate) does differently:
/// characters mapped to nothing (RFC 3454 table B.1) and the sharp s and final sigma mappings.
fn idna2003_premap(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for c in label.chars() {
        match c {
            '\u{ad}'
            | '\u{34f}'
            | '\u{1806}'
            | '\u{180b}'..='\u{180d}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2060}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}' => {}
            'ß' | 'ẞ' => out.push_str("ss"),
            'ς' => out.push('σ'),
            c => out.push(c),
        }
    }
    out
}

/// Emulates upstream's domain-name regular expression, including Python's `$` matching before a
/// final newline.
fn domain_pattern_matches(s: &str) -> bool {
    if s == "." || s == ".\n" {
        return true;
    }
    let t = without_final_newline(s);
    let length_ok = !t.contains('\n') && {
        let n = t.chars().count();
        n <= 253 || (n == 254 && t.ends_with('.'))
    };
    if !length_ok {
        return false;
    }
    let labels_ok = |cand: &str| {
        let body = cand.strip_suffix('.').unwrap_or(cand);
        !body.is_empty()
            && body.split('.').all(|l| {
                let n = l.chars().count();
                (1..=63).contains(&n) && !l.starts_with('-') && !l.ends_with('-')
            })
    };
    labels_ok(s) || labels_ok(t)
}

/// `InterfaceName`: alphanumeric groups joined by single `-` or `_`.
pub(crate) const INTERFACE_NAME_PATTERN: &str = r"^[a-zA-Z0-9]+(?:[-_][a-zA-Z0-9]+)*$";
/// `IDPattern`: lowercase alphanumerics and `-`, not starting with `-`.
pub(crate) const ID_PATTERN: &str = r"^(?!-)[a-z0-9-]*[a-z0-9]+$";
/// `PinSha256`: 43 base64 characters and `=`.
pub(crate) const PIN_SHA256_PATTERN: &str = r"^[A-Za-z\d+/]{43}=$";

fn pattern_error(s: &str, pattern: &'static str) -> TypeError {
    TypeError::Pattern {
        got: s.to_owned(),
        pattern,
    }
}

fn is_interface_name(s: &str) -> bool {
    let t = without_final_newline(s);
    !t.is_empty()
        && !t.starts_with(['-', '_'])
        && !t.ends_with(['-', '_'])
        && !t.contains("--")
        && !t.contains("__")
        && !t.contains("-_")
        && !t.contains("_-")
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A network interface name such as `eth0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InterfaceName {
    raw: String,
}

impl InterfaceName {
    /// Check the pattern.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        if is_interface_name(s) {
            Ok(InterfaceName { raw: s.to_owned() })
        } else {
            Err(pattern_error(s, INTERFACE_NAME_PATTERN))
        }
    }
}
string_backed!(InterfaceName);

/// A tag linking views with local-data rules (`IDPattern`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdPattern {
    raw: String,
}

impl IdPattern {
    /// Check the pattern.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let t = without_final_newline(s);
        let ok = !t.is_empty()
            && !t.starts_with('-')
            && !t.ends_with('-')
            && t.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if ok {
            Ok(IdPattern { raw: s.to_owned() })
        } else {
            Err(pattern_error(s, ID_PATTERN))
        }
    }
}
string_backed!(IdPattern);

/// A base64-encoded SHA-256 pin.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PinSha256 {
    raw: String,
}

impl PinSha256 {
    /// Check the pattern.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let t = without_final_newline(s);
        let ok = t.len() == 44
            && t.ends_with('=')
            && t[..43]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/');
        if ok {
            Ok(PinSha256 { raw: s.to_owned() })
        } else {
            Err(pattern_error(s, PIN_SHA256_PATTERN))
        }
    }
}
string_backed!(PinSha256);

/// Python's `ipaddress.ip_address` on a string: IPv4, or IPv6 with an optional `%scope`.
/// `a` in dotted decimal appended to `out`: what its `Display` writes, without the formatting
/// machinery (100,000 addresses are checked and rendered at a configuration's load: their
/// validation with 100,000 records takes 30 ms so, 35 ms through `Display`).
pub fn push_ipv4(out: &mut String, a: Ipv4Addr) {
    for (i, octet) in a.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Ok(v4) = Ipv4Addr::from_str(s) {
        return Some(IpAddr::V4(v4));
    }
    parse_ipv6(s).map(IpAddr::V6)
}

pub(crate) fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    let (addr, scope) = match s.split_once('%') {
        Some((a, sc)) => (a, Some(sc)),
        None => (s, None),
    };
    if let Some(sc) = scope {
        if sc.is_empty() || sc.contains('%') {
            return None;
        }
    }
    Ipv6Addr::from_str(addr).ok()
}

/// Python's `int(str)` for port numbers: surrounding whitespace, a sign and single `_` between
/// digits are accepted.
fn py_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    // any Unicode decimal digit counts, like Python's `int()`
    if !body.chars().all(|c| py_decimal(c).is_some() || c == '_') {
        return None;
    }
    let digits: String = body.chars().filter(|c| *c != '_').collect();
    let n = i64::try_from(py_digits_value(&digits)).unwrap_or(i64::MAX);
    Some(if neg { -n } else { n })
}

fn port_from_str(s: &str) -> Result<u16, TypeError> {
    py_int(s)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|p| *p >= 1)
        .ok_or_else(|| TypeError::Port(s.to_owned()))
}

/// The host part of an interface specification.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InterfaceHost {
    /// An IP address.
    Addr(IpAddr),
    /// A network interface name.
    Name(InterfaceName),
}

fn parse_interface_host(part: &str) -> Result<InterfaceHost, TypeError> {
    if let Some(ip) = parse_ip(part) {
        return Ok(InterfaceHost::Addr(ip));
    }
    InterfaceName::parse(part)
        .map(InterfaceHost::Name)
        .map_err(|_| TypeError::InterfaceHost(part.to_owned()))
}

/// Python's `repr` of a list of strings, for messages that print `str.split` results.
fn py_list_repr(parts: &[&str]) -> String {
    let items: Vec<String> = parts.iter().map(|p| format!("'{p}'")).collect();
    format!("[{}]", items.join(", "))
}

/// `<ip-address|interface-name>@<port>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InterfacePort {
    raw: String,
    /// The address or interface name.
    pub host: InterfaceHost,
    /// The port.
    pub port: u16,
}

impl InterfacePort {
    /// Parse `host@port`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let parts: Vec<&str> = s.split('@').collect();
        if parts.len() != 2 {
            return Err(TypeError::InterfacePort(s.to_owned()));
        }
        let host = parse_interface_host(parts[0])?;
        let port = port_from_str(parts[1])?;
        Ok(InterfacePort {
            raw: s.to_owned(),
            host,
            port,
        })
    }
}
string_backed!(InterfacePort);

/// `<ip-address|interface-name>[@<port>]` (used by `network/listen/interface`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InterfaceOptionalPort {
    raw: String,
    host: InterfaceHost,
    port: Option<u16>,
}

impl InterfaceOptionalPort {
    /// Parse `host[@port]`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let parts: Vec<&str> = s.split('@').collect();
        if parts.len() > 2 {
            return Err(TypeError::InterfaceOptionalPort(py_list_repr(&parts)));
        }
        let host = parse_interface_host(parts[0])?;
        let port = match parts.get(1) {
            Some(p) => Some(port_from_str(p)?),
            None => None,
        };
        Ok(InterfaceOptionalPort {
            raw: s.to_owned(),
            host,
            port,
        })
    }
    /// The IP address, when the host is an address.
    pub fn addr(&self) -> Option<IpAddr> {
        match &self.host {
            InterfaceHost::Addr(a) => Some(*a),
            InterfaceHost::Name(_) => None,
        }
    }
    /// The interface name, when the host is a name.
    pub fn if_name(&self) -> Option<&InterfaceName> {
        match &self.host {
            InterfaceHost::Name(n) => Some(n),
            InterfaceHost::Addr(_) => None,
        }
    }
    /// The host part.
    pub fn host(&self) -> &InterfaceHost {
        &self.host
    }
    /// The host part as written (an IPv6 scope is kept).
    pub fn host_str(&self) -> &str {
        self.raw.split('@').next().unwrap_or(&self.raw)
    }
    /// The `@port`, if given.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}
string_backed!(InterfaceOptionalPort);

/// `<ip-address>@<port>` (management interface).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpAddressPort {
    raw: String,
    addr: IpAddr,
    port: u16,
}

impl IpAddressPort {
    /// Parse `ip@port`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let parts: Vec<&str> = s.split('@').collect();
        if parts.len() != 2 {
            return Err(TypeError::AddressPort(s.to_owned()));
        }
        let port = port_from_str(parts[1])?;
        let addr = parse_ip(parts[0]).ok_or_else(|| TypeError::Address(parts[0].to_owned()))?;
        Ok(IpAddressPort {
            raw: s.to_owned(),
            addr,
            port,
        })
    }
    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
    /// As a socket address.
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.addr, self.port)
    }
}
string_backed!(IpAddressPort);

/// `<ip-address>[@<port>]` (forward servers).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpAddressOptionalPort {
    raw: String,
    addr: IpAddr,
    port: Option<u16>,
}

impl IpAddressOptionalPort {
    /// Parse `ip[@port]`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let parts: Vec<&str> = s.split('@').collect();
        if parts.len() > 2 {
            return Err(TypeError::AddressOptionalPort(py_list_repr(&parts)));
        }
        let addr = parse_ip(parts[0]).ok_or_else(|| TypeError::Address(parts[0].to_owned()))?;
        let port = match parts.get(1) {
            Some(p) => Some(port_from_str(p)?),
            None => None,
        };
        Ok(IpAddressOptionalPort {
            raw: s.to_owned(),
            addr,
            port,
        })
    }
    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    /// The `@port`, if given.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}
string_backed!(IpAddressOptionalPort);

/// An IP address with a `!` suffix (`IPAddressEM`, address renumbering).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IpAddressEm {
    raw: String,
    addr: IpAddr,
}

impl IpAddressEm {
    /// Parse `ip!`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        if !s.ends_with('!') {
            return Err(TypeError::NoExclamationMark);
        }
        let (addr, suffix) = s.split_once('!').unwrap_or((s, ""));
        if !suffix.is_empty() {
            return Err(TypeError::AfterExclamationMark(suffix.to_owned()));
        }
        let addr = parse_ip(addr).ok_or(TypeError::AddressBeforeExclamationMark)?;
        Ok(IpAddressEm {
            raw: s.to_owned(),
            addr,
        })
    }
    /// The address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
}
string_backed!(IpAddressEm);

/// An IP network with zero host bits (`IPNetwork`, `IPv6Network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNetwork {
    addr: IpAddr,
    prefix: u8,
}

/// `ip` with all but its leading `prefix` bits cleared (an address's network).
pub fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(v4) & keep).into())
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(v6) & keep).into())
        }
    }
}

impl IpNetwork {
    /// Whether `ip` is inside (an address of the other family never is).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && masked(ip, self.prefix) == masked(self.addr, self.prefix)
    }

    /// Parse like Python's `ipaddress.ip_network(s)` (strict: host bits must be zero; IPv4 also
    /// accepts a netmask or hostmask after `/`).
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        Self::parse_v4(s)
            .or_else(|| Self::parse_v6(s))
            .ok_or(TypeError::Network)
    }

    /// Parse an IPv6 network only.
    pub fn parse_ipv6(s: &str) -> Result<Self, TypeError> {
        Self::parse_v6(s).ok_or(TypeError::Ipv6Network)
    }

    fn prefix_digits(p: &str, max: u8) -> Option<u8> {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        p.parse::<u32>()
            .ok()
            .and_then(|n| u8::try_from(n).ok())
            .filter(|n| *n <= max)
    }

    fn parse_v4(s: &str) -> Option<Self> {
        let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr = Ipv4Addr::from_str(a).ok()?;
        let prefix = match p {
            None => 32,
            Some(p) => match Self::prefix_digits(p, 32) {
                Some(n) => n,
                None => {
                    let mask = u32::from(Ipv4Addr::from_str(p).ok()?);
                    if mask.leading_ones() + mask.trailing_zeros() == 32 {
                        u8::try_from(mask.leading_ones()).ok()?
                    } else if mask.leading_zeros() + mask.trailing_ones() == 32 {
                        u8::try_from(mask.leading_zeros()).ok()?
                    } else {
                        return None;
                    }
                }
            },
        };
        let bits = u32::from(addr);
        let host_mask = if prefix == 32 { 0 } else { u32::MAX >> prefix };
        (bits & host_mask == 0).then_some(IpNetwork {
            addr: IpAddr::V4(addr),
            prefix,
        })
    }

    fn parse_v6(s: &str) -> Option<Self> {
        let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr = parse_ipv6(a)?;
        let prefix = match p {
            None => 128,
            Some(p) => Self::prefix_digits(p, 128)?,
        };
        let bits = u128::from(addr);
        let host_mask = if prefix == 128 {
            0
        } else {
            u128::MAX >> prefix
        };
        (bits & host_mask == 0).then_some(IpNetwork {
            addr: IpAddr::V6(addr),
            prefix,
        })
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }
    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for IpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl<'de> Deserialize<'de> for IpNetwork {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        IpNetwork::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Check an IPv6 network for `/96` (`IPv6Network96`).
pub(crate) fn check_ipv6_network96(s: &str) -> Result<IpNetwork, TypeError> {
    let net = IpNetwork::parse_ipv6(s)?;
    match net.prefix {
        96 => Ok(net),
        128 => Err(TypeError::Ipv6HostNot96),
        p => Err(TypeError::Ipv6PrefixNot96(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        for s in ["5368709120B", "5242880K", "5120M", "5G"] {
            assert_eq!(
                SizeUnit::parse(s).map(|u| u.bytes()),
                Ok(5 * 1024 * 1024 * 1024),
                "{s}"
            );
        }
        for s in ["1d", "24h", "1440m", "86400s", "86400000ms"] {
            assert_eq!(TimeUnit::parse(s).map(|u| u.seconds()), Ok(86400), "{s}");
        }
        for s in ["", "5", "5 M", "5m", "M", "-5M", "5MB", "1.5G"] {
            assert!(SizeUnit::parse(s).is_err(), "{s}");
        }
        for s in ["5", "5S", "1.5s", "s", "5 s", "5mss"] {
            assert!(TimeUnit::parse(s).is_err(), "{s}");
        }
        assert_eq!(TimeUnit::parse("1s\n").map(|u| u.millis()), Ok(1000));
    }

    #[test]
    fn ipv4_text_is_what_display_writes() {
        use proptest::prelude::*;
        proptest::test_runner::TestRunner::deterministic()
            .run(&any::<u32>(), |n| {
                let a = Ipv4Addr::from(n);
                let mut text = String::new();
                push_ipv4(&mut text, a);
                prop_assert_eq!(text, a.to_string());
                Ok(())
            })
            .expect("the same text");
        for a in [
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            Ipv4Addr::new(10, 0, 100, 9),
        ] {
            let mut text = String::new();
            push_ipv4(&mut text, a);
            assert_eq!(text, a.to_string());
        }
    }

    #[test]
    fn the_shortcut_for_plain_names_takes_only_what_the_long_way_takes_as_it_is() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let short = std::cell::Cell::new(0u32);
        runner
            .run(
                &prop_oneof![
                    "(([a-c*_é-]{1,4}|-[a-c]|[a-c]-)\\.){0,5}[a-c\n-]{0,4}\\.{0,2}",
                    "([ab]{1,64}\\.){3,5}[ab]{0,64}\\.?",
                    "[a-c.\\-\n*é]{0,70}",
                ],
                |s| {
                    if is_plain_ascii_name(&s) {
                        short.set(short.get() + 1);
                        let long = DomainName::parse_long(&s).map(|d| d.punycode().to_owned());
                        prop_assert_eq!(long, Ok(s.clone()));
                    }
                    Ok(())
                },
            )
            .expect("the shortcut agrees");
        assert!(
            short.get() > 10,
            "only {} names took the shortcut",
            short.get()
        );
    }

    #[test]
    fn domain_names() {
        let valid = [
            "example.com",
            "example.com.",
            ".",
            "_sip._tcp.example.com",
            "xn--nic-vra.cz",
            "a",
            "123",
            "příklad.cz",
            "a-b.c",
            "x\n",
        ];
        for s in valid {
            assert!(DomainName::parse(s).is_ok(), "{s}");
        }
        let long_label = "a".repeat(64);
        let long_name = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(63)
        );
        let invalid = [
            "",
            "-a.com",
            "a-.com",
            "a..com",
            "..",
            long_label.as_str(),
            long_name.as_str(),
        ];
        for s in invalid {
            assert!(DomainName::parse(s).is_err(), "{s}");
        }
        assert_eq!(
            DomainName::parse("příklad.cz").map(|d| d.punycode().to_owned()),
            Ok("xn--pklad-zsa96e.cz".into())
        );
    }

    /// The parametrized cases of upstream's `test_custom_types.py`.
    #[test]
    fn upstream_type_tables() {
        for s in ["-5B", "45745mB", "5"] {
            assert!(SizeUnit::parse(s).is_err(), "{s}");
        }
        for s in ["-1", "-24h", "1440mm", "6575"] {
            assert!(TimeUnit::parse(s).is_err(), "{s}");
        }
        for s in [
            "d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM=",
            "E9CZ9INDbd+2eRQozYqqbQ2yXLVKB9+xcprMF+44U1g=",
        ] {
            assert!(PinSha256::parse(s).is_ok(), "{s}");
        }
        for s in [
            "d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM==",
            "E9CZ9INDbd+2eRQozYqqbQ2yXLVKB9+xcprMF+44U1g",
            "!E9CZ9INDbd+2eRQozYqqbQ2yXLVKB9+xcprMF+44U1g=",
            "d6qzRu9zOE",
        ] {
            assert!(PinSha256::parse(s).is_err(), "{s}");
        }
        let escapes = [
            ("", ""),
            ("2000", "2000"),
            ("\t\n\u{b}", r"\t\n\v"),
            ("\u{7}\u{8}\u{c}\n\r\t\u{b}\\", r"\a\b\f\n\r\t\v\\"),
            ("''", r"\'\'"),
            ("\"\"", r#"\"\""#),
            ("\\\"\\\"", r#"\\\"\\\""#),
            ("\\'\\'", r"\\\'\\\'"),
        ];
        for (raw, escaped) in escapes {
            assert_eq!(escape_lua(raw), escaped, "{raw:?}");
        }
        let levels_127 = "a.".repeat(127);
        let levels_128 = "a.".repeat(128);
        let label_63 = format!("{}.", "x".repeat(63));
        let label_64 = format!("{}.", "x".repeat(64));
        let valid = [
            ".",
            "example.com",
            "_8443._https.example.com.",
            "this.is.example.com.",
            "test-example.com",
            "bücher.com.",
            "příklad.cz",
            label_63.as_str(),
            levels_127.as_str(),
        ];
        for s in valid {
            assert!(DomainName::parse(s).is_ok(), "{s}");
        }
        let invalid = [
            "test.example..com.",
            "-example.com",
            "-test.example.net",
            "test-.example.net",
            "test.-example.net",
            ".example.net",
            label_64.as_str(),
            levels_128.as_str(),
        ];
        for s in invalid {
            assert!(DomainName::parse(s).is_err(), "{s}");
        }
        for s in ["lo", "eth0", "wlo1", "web_ifgrp", "e8-2"] {
            assert!(InterfaceName::parse(s).is_ok(), "{s}");
        }
        for s in ["_lo", "-wlo1", "lo_", "wlo1-", "e8--2", "web__ifgrp"] {
            assert!(InterfaceName::parse(s).is_err(), "{s}");
        }
        for s in ["lo@5335", "2001:db8::1000@5001"] {
            assert!(InterfacePort::parse(s).is_ok(), "{s}");
        }
        for s in ["lo", "2001:db8::1000", "53"] {
            assert!(InterfacePort::parse(s).is_err(), "{s}");
        }
        for s in ["lo", "123.4.5.6", "lo@5335", "2001:db8::1000@5001"] {
            assert!(InterfaceOptionalPort::parse(s).is_ok(), "{s}");
        }
        for s in ["lo@", "@53"] {
            assert!(InterfaceOptionalPort::parse(s).is_err(), "{s}");
        }
        for s in ["123.4.5.6@5335", "2001:db8::1000@53"] {
            assert!(IpAddressPort::parse(s).is_ok(), "{s}");
        }
        for s in [
            "123.4.5.6",
            "2001:db8::1000",
            "123.4.5.6.7@5000",
            "2001:db8::10000@5001",
            "123.4.5.6@",
        ] {
            assert!(IpAddressPort::parse(s).is_err(), "{s}");
        }
        for s in [
            "123.4.5.6",
            "123.4.5.6@5335",
            "2001:db8::1000",
            "2001:db8::1000@53",
        ] {
            assert!(IpAddressOptionalPort::parse(s).is_ok(), "{s}");
        }
        for s in ["123.4.5.6.7", "2001:db8::10000", "123.4.5.6@", "@55"] {
            assert!(IpAddressOptionalPort::parse(s).is_err(), "{s}");
        }
        for s in ["10.11.12.0/24", "64:ff9b::/96"] {
            assert_eq!(IpNetwork::parse(s).map(|n| n.to_string()), Ok(s.to_owned()));
        }
        for s in ["10.11.12.13/8", "10.11.12.5/128"] {
            assert!(IpNetwork::parse(s).is_err(), "{s}");
        }
        for s in ["fe80::/96", "64:ff9b::/96"] {
            assert!(check_ipv6_network96(s).is_ok(), "{s}");
        }
        for s in ["fe80::/95", "10.11.12.3/96", "64:ff9b::1/96"] {
            assert!(check_ipv6_network96(s).is_err(), "{s}");
        }
        for s in ["10.10.10.5!", "::1!"] {
            assert!(IpAddressEm::parse(s).is_ok(), "{s}");
        }
        for s in ["10.10.10.5", "::1", "10.10.10.5!!", "::1!!"] {
            assert!(IpAddressEm::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn idna_matches_python() {
        // expectations from Python's `str.encode("idna")`
        let idna = [
            ("Bücher.de", "xn--bcher-kva.de"),
            ("ß.de", "ss.de"),
            ("a\u{200d}b.cz", "ab.cz"),
            ("ｅｘａｍｐｌｅ.com", "example.com"),
            ("bücher。de", "xn--bcher-kva.de"),
            ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
            ("😀.com", "xn--e28h.com"),
            ("Ωmega.gr", "xn--mega-fpd.gr"),
            ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ];
        for (name, puny) in idna {
            assert_eq!(
                DomainName::parse(name).map(|d| d.punycode().to_owned()),
                Ok(puny.to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn interface_ports() {
        let ok = InterfaceOptionalPort::parse("127.0.0.1@5353");
        assert_eq!(ok.as_ref().map(|i| i.port()), Ok(Some(5353)));
        assert_eq!(
            InterfaceOptionalPort::parse("eth0")
                .map(|i| i.if_name().map(|n| n.as_str().to_owned())),
            Ok(Some("eth0".into()))
        );
        assert!(InterfaceOptionalPort::parse("::1@0").is_err());
        assert!(InterfaceOptionalPort::parse("a@b@c").is_err());
        assert!(InterfaceOptionalPort::parse("eth-").is_err());
        assert!(InterfacePort::parse("eth0").is_err());
        assert!(IpAddressPort::parse("eth0@53").is_err());
        assert_eq!(IpAddressPort::parse("::1@5000").map(|a| a.port()), Ok(5000));
        assert!(IpAddressOptionalPort::parse("1.2.3.4@65536").is_err());
    }

    #[test]
    fn networks() {
        assert!(IpNetwork::parse("10.0.0.0/8").is_ok());
        assert!(IpNetwork::parse("10.0.0.1/8").is_err());
        assert_eq!(
            IpNetwork::parse("10.0.0.0/255.0.0.0").map(|n| n.prefix_len()),
            Ok(8)
        );
        assert_eq!(
            IpNetwork::parse("10.0.0.0/0.255.255.255").map(|n| n.prefix_len()),
            Ok(8)
        );
        assert_eq!(IpNetwork::parse("::1").map(|n| n.prefix_len()), Ok(128));
        assert!(IpNetwork::parse("fe80::/10").is_ok());
        assert!(IpNetwork::parse("fe80::1/10").is_err());
        assert!(check_ipv6_network96("64:ff9b::/96").is_ok());
        assert!(check_ipv6_network96("64:ff9b::").is_err());
        assert!(check_ipv6_network96("64:ff9b::/64").is_err());
    }

    #[test]
    fn a_network_holds_the_addresses_of_its_family_under_its_prefix() {
        let net = |s: &str| IpNetwork::parse(s).expect("a network");
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        assert!(net("10.1.2.0/24").contains(ip("10.1.2.255")));
        assert!(!net("10.1.2.0/24").contains(ip("10.1.3.0")));
        assert!(net("0.0.0.0/0").contains(ip("192.0.2.1")));
        assert!(!net("0.0.0.0/0").contains(ip("::1")), "another family");
        assert!(net("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!net("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(net("::1").contains(ip("::1")) && !net("::1").contains(ip("::2")));
        assert_eq!(masked(ip("192.0.2.77"), 28), ip("192.0.2.64"));
        assert_eq!(masked(ip("2001:db8::ff"), 0), ip("::"));
    }

    #[test]
    fn patterns() {
        assert!(PinSha256::parse("d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM=").is_ok());
        assert!(PinSha256::parse("d6qzRu9zOECb90Uez27xWltNsj0e1Md7GkYYkVoZWmM").is_err());
        assert!(IdPattern::parse("tag-1").is_ok());
        assert!(IdPattern::parse("-tag").is_err());
        assert!(IdPattern::parse("Tag").is_err());
        assert!(IpAddressEm::parse("127.0.0.1!").is_ok());
        assert!(IpAddressEm::parse("127.0.0.1").is_err());
    }

    #[test]
    fn escaping() {
        let e = EscapedStr::parse("a'b\"c\n.").map(|e| e.escaped());
        assert_eq!(e, Ok("a\\'b\\\"c\\n.".to_owned()));
    }
}

/// An etcd endpoint, `http://host:port` or `https://host:port` (`fleet.etcd.endpoints`, ours):
/// the host an IPv4 address, an IPv6 address in brackets or a host name, the port given, and
/// nothing after it (no path, query or user info: credentials have their own options).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EtcdEndpoint {
    raw: String,
    tls: bool,
    host: String,
    port: u16,
}

impl EtcdEndpoint {
    /// The longest endpoint accepted, in bytes.
    pub const MAX_LEN: usize = 300;

    /// Parse `http(s)://host:port`.
    pub fn parse(s: &str) -> Result<Self, TypeError> {
        let bad = |why| {
            Err(TypeError::EtcdEndpoint {
                got: s.to_owned(),
                why,
            })
        };
        if s.len() > Self::MAX_LEN {
            return bad("longer than 300 bytes");
        }
        let (tls, rest) = if let Some(rest) = s.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = s.strip_prefix("http://") {
            (false, rest)
        } else {
            return bad("it must start with 'http://' or 'https://'");
        };
        if rest.contains(['/', '?', '#', '@']) {
            return bad("nothing may follow 'host:port' (no path, query or user info)");
        }
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let Some((host, port)) = bracketed.split_once("]:") else {
                return bad("an IPv6 address in brackets is followed by ':port'");
            };
            if host.parse::<Ipv6Addr>().is_err() {
                return bad("no IPv6 address in the brackets");
            }
            (host, port)
        } else {
            let Some((host, port)) = rest.rsplit_once(':') else {
                return bad("the port is missing ('host:port')");
            };
            if host.contains(':') {
                return bad("an IPv6 address goes in brackets ('[2001:db8::1]:2379')");
            }
            if !is_endpoint_host(host) {
                return bad("the host is neither an IPv4 address nor a host name");
            }
            (host, port)
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return bad("the port is not a number from 1 to 65535"),
        };
        Ok(EtcdEndpoint {
            raw: s.to_owned(),
            tls,
            host: host.to_owned(),
            port,
        })
    }
    /// Whether it is `https://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }
    /// The host: an IPv4 address, an IPv6 address (without its brackets) or a host name.
    pub fn host(&self) -> &str {
        &self.host
    }
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
string_backed!(EtcdEndpoint);

/// A host name (labels of letters, digits and inner `-`, at most 253 bytes, no final dot), or
/// an IPv4 address when every label is numeric.
fn is_endpoint_host(host: &str) -> bool {
    if host.is_empty() || host.len() > 253 {
        return false;
    }
    let labels_ok = host.split('.').all(|label| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    let numeric = host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    labels_ok && (!numeric || host.parse::<Ipv4Addr>().is_ok())
}
