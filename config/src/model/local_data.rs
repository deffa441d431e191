//! The `local-data` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn local_data() -> ObjectDef {
    let mut rule = section(
        "knot_resolver.datamodel.local_data_schema.RuleSchema",
        Some("Local data advanced rule configuration."),
        vec![
            f("name", opt(loi(v(&vt::DOMAIN_NAME))), Value::Null, "Hostname(s)."),
            f("subtree", opt(Ty::Literal(&["empty", "nxdomain", "redirect"])), Value::Null, "Type of subtree."),
            f("address", opt(loi(ip_address())), Value::Null, "Address(es) to pair with hostname(s)."),
            f("file", opt(loi(v(&vt::READABLE_FILE))), Value::Null, "Path to file(s) with hostname and IP address(es) pairs in '/etc/hosts' like format."),
            f("records", opt(v(&vt::ESCAPED_STR)), Value::Null, "Direct addition of records in DNS zone file format."),
            f("tags", opt(list(v(&vt::ID_PATTERN_TYPE))), Value::Null, "Tags to link with other policy rules."),
            f("ttl", opt(v(&vt::TIME_UNIT)), Value::Null, "Optional, TTL value used for these answers."),
            f("nodata", opt(Ty::Bool), Value::Null, "Optional, use NODATA synthesis. NODATA will be synthesized for matching name, but mismatching type(e.g. AAAA query when only A exists)."),
        ],
    );
    rule.validate = Some(|m, _, path| {
        let address = is_set(m, "address");
        let subtree = m.get("subtree").and_then(Value::as_str);
        let sum = [
            address,
            subtree.is_some(),
            is_set(m, "file"),
            is_set(m, "records"),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if sum == 2 && address && matches!(subtree, Some("empty" | "redirect")) {
            // these combinations still make sense
        } else if sum > 1 {
            return fail(
                path,
                "only one of 'address', 'subtree' or 'file' can be configured",
            );
        } else if sum < 1 {
            return fail(
                path,
                "one of 'address', 'subtree', 'file' or 'records' must be configured",
            );
        }
        let sum2 = [is_set(m, "name"), is_set(m, "file"), is_set(m, "records")]
            .iter()
            .filter(|b| **b)
            .count();
        if sum2 != 1 {
            return fail(path, "one of 'name', 'file or 'records' must be configured");
        }
        if is_true(m, "nodata") && subtree.is_some() && !address {
            return fail(path, "'nodata' defined but unused with 'subtree'");
        }
        Ok(())
    });
    let rpz = rpz_entry();
    let mut d = section(
        "knot_resolver.datamodel.local_data_schema.LocalDataSchema",
        Some("Local data for forward records (A/AAAA) and reverse records (PTR)."),
        vec![
            f("ttl", opt(v(&vt::TIME_UNIT)), Value::Null, "Default TTL value used for added local data/records."),
            f("nodata", Ty::Bool, json!(true), "Use NODATA synthesis. NODATA will be synthesized for matching name, but mismatching type(e.g. AAAA query when only A exists)."),
            f("addresses", opt(Ty::Dict(Box::new(v(&vt::DOMAIN_NAME)), Box::new(loi(ip_address())))), Value::Null, "Direct addition of hostname and IP addresses pairs."),
            f("addresses-files", opt(list(v(&vt::READABLE_FILE))), Value::Null, "Direct addition of hostname and IP addresses pairs from files in '/etc/hosts' like format."),
            f("records", opt(v(&vt::ESCAPED_STR)), Value::Null, "Direct addition of records in DNS zone file format."),
            f("rules", opt(list(obj(rule))), Value::Null, "Local data rules."),
            f("rpz", opt(list(obj(rpz))), Value::Null, "List of Response Policy Zones and its configuration."),
        ],
    );
    d.validate = Some(|m, ctx, path| {
        let entries = m.get("rpz").and_then(Value::as_array);
        let files: Vec<&str> = entries
            .into_iter()
            .flatten()
            .map(|e| e.get("file").and_then(Value::as_str).unwrap_or_default())
            .collect();
        let errs = shared_rpz_files(&files, ctx.checks != crate::PathChecks::Lenient, path);
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    });
    d
}

/// One `local-data.rpz` entry: a zone from a file, maybe kept by zone transfer.
fn rpz_entry() -> ObjectDef {
    let mut rpz = section(
        "knot_resolver.datamodel.local_data_schema.RPZSchema",
        Some("Configuration or Response Policy Zone (RPZ)."),
        vec![
            req("file", v(&vt::READABLE_FILE), "Path to the RPZ zone file."),
            f("transfer", opt(obj(rpz_transfer())), Value::Null, "Keep the zone up to date from its primaries by zone transfer (AXFR/IXFR, NOTIFY, TSIG); 'file' is where it is kept and need not exist yet. Not in upstream's schema."),
            f("url", opt(Ty::Str), Value::Null, "Subscribe to a list published over HTTP(S) instead of reading a file as it is (or transferring a zone): the list is fetched, checked and kept as an RPZ zone in 'file', which need not exist yet. Not in upstream's schema."),
            f("format", opt(Ty::Literal(LIST_FORMATS)), Value::Null, "With 'url': the list's format, 'rpz' (a zone file, the default), 'hosts' (an /etc/hosts file), 'domains' (a name per line) or 'adblock' (the '||name^' rules; others are skipped). Not in upstream's schema."),
            f("refresh", opt(v(&vt::TIME_UNIT)), Value::Null, "With 'url': how often the list is fetched again (with a jitter of up to a tenth). Default: 24h. Not in upstream's schema."),
            f("max-size", opt(v(&vt::SIZE_UNIT)), Value::Null, "With 'url': the most bytes the list may have; a larger one is refused and the previous one kept. Default: 256M. Not in upstream's schema."),
            f("sha256", opt(Ty::Str), Value::Null, "With 'url': the SHA-256 (64 hex digits) the list must have; another is refused and the previous one kept. Not in upstream's schema."),
            f("action-override", opt(Ty::Literal(ACTION_OVERRIDES)), Value::Null, "With 'url': the action of every name of the list (Unbound's names): 'nxdomain', 'nodata', or 'passthru' (an allowlist: its names are blocked by no other list). Default: an RPZ list's own actions, 'nxdomain' for the other formats. Not in upstream's schema."),
            f("watchdog", watchdog_ty(), json!("auto"), "Enables files watchdog for configured RPZ file. Requires the optional 'watchdog' dependency."),
            f("tags", opt(list(v(&vt::ID_PATTERN_TYPE))), Value::Null, "Tags to link with other policy rules."),
            f("log", opt(list(Ty::Literal(&["ip", "name"]))), Value::Null, "Enables logging information whenever this RPZ matches."),
        ],
    );
    rpz.transform = Some(|m, _, _| {
        resolve_watchdog(m);
        Ok(())
    });
    rpz.retype = Some(|field, given| {
        // A transferred zone's file is written by the resolver: its directory must be
        // writable, the file need not exist yet.
        let kept = |key: &str| given.get(key).is_some_and(|t| !t.is_null());
        (field == "file" && (kept("transfer") || kept("url"))).then(|| v(&vt::WRITABLE_FILE_PATH))
    });
    rpz.validate = Some(|m, ctx, path| {
        if is_true(m, "watchdog") && !WATCHDOG_AVAILABLE {
            return fail(path, "'watchdog' is enabled, but the required 'watchdog' dependency (optional) is not installed");
        }
        subscription_rules(m, path)?;
        // A zone kept by transfer or subscription is read by the manager itself: a regular
        // file or none yet (otherwise the file's type says it must exist and be a file).
        let kept = is_set(m, "transfer") || is_set(m, "url");
        let checked = ctx.checks != crate::PathChecks::Lenient && kept;
        let file = m.get("file").and_then(Value::as_str).filter(|_| checked);
        if let Some(not) = file.and_then(|f| crate::regular_file::not_regular(f.as_ref())) {
            return fail(&child_path(path, "file"), format!("file {not}"));
        }
        Ok(())
    });
    rpz
}

/// The formats a subscribed list may have.
const LIST_FORMATS: &[&str] = &["rpz", "hosts", "domains", "adblock"];

/// The actions `action-override` may name (Unbound's names kresd 6 can carry out).
const ACTION_OVERRIDES: &[&str] = &["nxdomain", "nodata", "passthru"];

/// The longest `url`.
const MAX_URL: usize = 2048;

/// The keys that only mean something beside `url`.
const SUBSCRIPTION_KEYS: &[&str] = &["format", "refresh", "max-size", "sha256", "action-override"];

/// `url` (http or https, no more than [`MAX_URL`] bytes, no spaces) excludes `transfer`;
/// the subscription's keys need `url`; `sha256` is 64 hex digits.
fn subscription_rules(m: &Map<String, Value>, path: &str) -> Result<(), Vec<Failure>> {
    let Some(url) = m.get("url").and_then(Value::as_str) else {
        for key in SUBSCRIPTION_KEYS {
            if is_set(m, key) {
                return fail(
                    &child_path(path, key),
                    format!("'{key}' is an option of a subscribed list: it needs 'url'"),
                );
            }
        }
        return Ok(());
    };
    let at = child_path(path, "url");
    if is_set(m, "transfer") {
        return fail(&at, "'url' and 'transfer' cannot both be set: a zone comes from its primaries or from a URL");
    }
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return fail(&at, format!("'{url}' is not an http:// or https:// URL"));
    }
    if url.len() > MAX_URL || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return fail(
            &at,
            format!("the URL is longer than {MAX_URL} bytes or has a space or a control character"),
        );
    }
    if let Some(pin) = m.get("sha256").and_then(Value::as_str) {
        if pin.len() != 64 || !pin.bytes().all(|b| b.is_ascii_hexdigit()) {
            return fail(
                &child_path(path, "sha256"),
                format!("'{pin}' is not a SHA-256 (64 hex digits)"),
            );
        }
    }
    Ok(())
}

/// Two RPZ entries naming one file: each entry renews the policy from it, and a zone kept by
/// transfer would overwrite the other's. One error per entry whose file an earlier entry
/// already names, saying which: the same path, or (`on_disk`: where the file system is
/// checked) another path of the same existing file (a link to it).
fn shared_rpz_files(files: &[&str], on_disk: bool, path: &str) -> Vec<Failure> {
    use std::os::unix::fs::MetadataExt;
    // What identifies a file without opening it (a FIFO would block an open).
    let identity = |file: &str| {
        on_disk
            .then(|| std::fs::metadata(file).ok())
            .flatten()
            .map(|m| (m.dev(), m.ino()))
    };
    let identities: Vec<Option<(u64, u64)>> = files.iter().map(|f| identity(f)).collect();
    let mut errs = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let earlier = (0..i).find(|&j| {
            let same_path = std::path::Path::new(files[j]) == std::path::Path::new(file);
            same_path || (identities[i].is_some() && identities[i] == identities[j])
        });
        if let Some(j) = earlier {
            let entry = |n: usize| child_path(&child_path(path, "rpz"), &n.to_string());
            errs.push(Failure::new(
                &child_path(&entry(i), "file"),
                format!(
                    "file '{file}' is already the file of '{}': two RPZ entries cannot share one file",
                    entry(j)
                ),
            ));
        }
    }
    errs
}

/// `local-data.rpz[].transfer`: the zone's name at its primaries, where to ask for it, how
/// to sign, where NOTIFYs are heard, and the bounds of one transfer.
fn rpz_transfer() -> ObjectDef {
    section(
        "knot_resolver.datamodel.local_data_schema.RPZTransferSchema",
        Some("Zone transfer of a Response Policy Zone from its primaries."),
        vec![
            req("zone", v(&vt::DOMAIN_NAME), "The zone's name at the primaries."),
            req("primaries", list(v(&vt::IP_ADDRESS_OPTIONAL_PORT)), "Primaries, 'address[@port]' (port 53 by default), asked in this order."),
            f("tsig-key-file", opt(v(&vt::TSIG_KEY_FILE)), Value::Null, "File with the TSIG key (as BIND's 'tsig-keygen' writes it) signing transfers and NOTIFYs."),
            f("notify-listen", opt(v(&vt::IP_ADDRESS_OPTIONAL_PORT)), Value::Null, "Where NOTIFYs from the primaries are accepted, 'address[@port]' (port 53 by default); none: the zone follows its SOA timers only."),
            f("max-size", opt(v(&vt::SIZE_UNIT)), Value::Null, "The most bytes one transfer may bring; a longer one is cut and fails, the stored zone kept. Default: sized for zones of a few million entries."),
            f("timeout", opt(v(&vt::TIME_UNIT)), Value::Null, "The longest one transfer may take; a slower one is cut and fails, the stored zone kept. Default: sized for zones of a few million entries."),
            f("max-ixfr-memory", opt(v(&vt::SIZE_UNIT)), Value::Null, "The most memory an IXFR's changes may hold; a larger IXFR is left for an AXFR, which streams to disk. Default: 64M."),
            f("first-transfer-timeout", v(&vt::TIME_UNIT), json!("30s"), "With no stored file at start, how long the start waits for the first transfer before it fails."),
        ],
    )
}

/// `local-data.addresses`: names (in their ASCII form, IDNA-encoded) and their addresses, in
/// document order, kept compact: one text of all the names and one list of all the
/// addresses, not two allocations for each of 100,000 names. The policy-loader's Lua is
/// written from them in one pass through memory (scattered names made that pass twice as
/// long).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressPairs {
    /// The names' ASCII forms, one after the other.
    names: String,
    /// For each name: where it ends in `names`, and where its addresses end in `addresses`
    /// (each starts where the previous one ends).
    ends: Vec<(u32, u32)>,
    addresses: Vec<std::net::IpAddr>,
}

impl AddressPairs {
    /// Each name (its ASCII form) with its addresses, in document order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[std::net::IpAddr])> {
        let starts = std::iter::once((0, 0)).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter().copied()).map(
            |((name_start, addr_start), (name_end, addr_end))| {
                (
                    &self.names[name_start as usize..name_end as usize],
                    &self.addresses[addr_start as usize..addr_end as usize],
                )
            },
        )
    }

    /// How many addresses all the names have together.
    pub fn address_count(&self) -> usize {
        self.addresses.len()
    }
}

/// Read from the normalized `[name, addresses]` pairs (`Ty::Dict`).
impl<'de> Deserialize<'de> for AddressPairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(PairsVisitor)
    }
}

struct PairsVisitor;

impl<'de> serde::de::Visitor<'de> for PairsVisitor {
    type Value = AddressPairs;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of [name, addresses] pairs")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<AddressPairs, A::Error> {
        let mut pairs = AddressPairs::default();
        let n = seq.size_hint().unwrap_or(0);
        pairs.ends.reserve(n);
        pairs.addresses.reserve(n);
        while seq.next_element_seed(PairSeed(&mut pairs))?.is_some() {}
        Ok(pairs)
    }
}

/// One `[name, addresses]` pair, appended to the pairs.
struct PairSeed<'a>(&'a mut AddressPairs);

impl<'de> serde::de::DeserializeSeed<'de> for PairSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PairSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a [name, addresses] pair")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let pairs = self.0;
        let name: String = seq
            .next_element()?
            .ok_or_else(|| A::Error::invalid_length(0, &"a [name, addresses] pair"))?;
        let name = DomainName::parse_owned(name).map_err(A::Error::custom)?;
        seq.next_element_seed(AddressesSeed(&mut pairs.addresses))?
            .ok_or_else(|| A::Error::invalid_length(1, &"a [name, addresses] pair"))?;
        pairs.names.push_str(name.punycode());
        // (the document's bounds keep both far below 4 GiB)
        let end = |n: usize| u32::try_from(n).map_err(|_| A::Error::custom("too many addresses"));
        let ends = (end(pairs.names.len())?, end(pairs.addresses.len())?);
        pairs.ends.push(ends);
        Ok(())
    }
}

/// A name's addresses, appended to all the addresses.
struct AddressesSeed<'a>(&'a mut Vec<std::net::IpAddr>);

impl<'de> serde::de::DeserializeSeed<'de> for AddressesSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for AddressesSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of addresses")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(addr) = seq.next_element()? {
            self.0.push(addr);
        }
        Ok(())
    }
}

/// Kinds of subtree rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubtreeKind {
    Empty,
    Nxdomain,
    Redirect,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RuleSchema {
    pub name: Option<Vec<DomainName>>,
    pub subtree: Option<SubtreeKind>,
    pub address: Option<Vec<std::net::IpAddr>>,
    pub file: Option<Vec<PathBuf>>,
    pub records: Option<EscapedStr>,
    pub tags: Option<Vec<IdPattern>>,
    pub ttl: Option<TimeUnit>,
    pub nodata: Option<bool>,
}

/// What an RPZ match logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RpzLog {
    Ip,
    Name,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RpzSchema {
    pub file: PathBuf,
    /// Zone transfer from primaries; `file` is where the zone is kept.
    pub transfer: Option<RpzTransferSchema>,
    /// Where a subscribed list is fetched from (an extension of ours); `file` is where it is
    /// kept as an RPZ zone.
    pub url: Option<String>,
    /// The subscribed list's format (none: `rpz`).
    pub format: Option<ListFormat>,
    /// How often the subscribed list is fetched again.
    pub refresh: Option<TimeUnit>,
    /// The most bytes the subscribed list may have.
    pub max_size: Option<SizeUnit>,
    /// The SHA-256 the subscribed list must have (hex).
    pub sha256: Option<String>,
    /// The action of every name of the subscribed list.
    pub action_override: Option<ActionOverride>,
    pub watchdog: bool,
    pub tags: Option<Vec<IdPattern>>,
    pub log: Option<Vec<RpzLog>>,
}

/// The format of a subscribed list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListFormat {
    /// An RPZ zone file.
    Rpz,
    /// An `/etc/hosts` file: the names after each address.
    Hosts,
    /// A name per line.
    Domains,
    /// Adblock rules: `||name^` blocks a name and the names under it; other rules are skipped.
    Adblock,
}

/// The action of every name of a subscribed list (Unbound's `rpz-action-override`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionOverride {
    /// The name does not exist.
    Nxdomain,
    /// The name exists with no data.
    Nodata,
    /// The list is an allowlist: its names are blocked by no other list.
    Passthru,
}

/// Where an RPZ comes from by zone transfer (an extension of ours: upstream has no such key).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RpzTransferSchema {
    /// The zone's name at the primaries.
    pub zone: DomainName,
    /// The primaries, asked in order.
    pub primaries: Vec<IpAddressOptionalPort>,
    /// The TSIG key signing transfers and NOTIFYs.
    pub tsig_key_file: Option<PathBuf>,
    /// Where NOTIFYs are accepted.
    pub notify_listen: Option<IpAddressOptionalPort>,
    /// The most bytes one transfer may bring.
    pub max_size: Option<SizeUnit>,
    /// The longest one transfer may take.
    pub timeout: Option<TimeUnit>,
    /// The most memory an IXFR's changes may hold.
    pub max_ixfr_memory: Option<SizeUnit>,
    /// How long a start with no stored file waits for the first transfer.
    pub first_transfer_timeout: TimeUnit,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LocalDataSchema {
    pub ttl: Option<TimeUnit>,
    pub nodata: bool,
    /// Name → addresses, in document order.
    pub addresses: Option<AddressPairs>,
    pub addresses_files: Option<Vec<PathBuf>>,
    /// Zone-file text.
    pub records: Option<String>,
    pub rules: Option<Vec<RuleSchema>>,
    pub rpz: Option<Vec<RpzSchema>>,
}
