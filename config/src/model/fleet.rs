//! The `fleet` section, an extension of ours (upstream has no such key): how this node joins a
//! fleet of resolvers sharing one configuration on etcd, its description (types, defaults,
//! documentation and rules) and the typed form the rest of the crate reads. Without it (the
//! default, `null`) nothing changes anywhere. How the shared document and this node's file
//! combine is [`crate::overlay`]'s; the root crate's `fleet` module follows the document. A
//! change of the section is refused at run time (restart to join another fleet).

use super::blocks::*;

/// The most etcd endpoints one node lists.
pub const MAX_ETCD_ENDPOINTS: usize = 64;

/// The longest key prefix, in bytes.
pub const MAX_ETCD_PREFIX_LEN: usize = 256;

/// The longest node name, in bytes (a fully qualified host name's).
pub const MAX_NODE_NAME_LEN: usize = 253;

/// The shortest and the longest `fleet.etcd.timeout`.
const TIMEOUT_RANGE_MICROS: std::ops::RangeInclusive<u64> = 100_000..=60_000_000;

pub(super) fn fleet() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.fleet_schema.FleetSchema",
        Some("Membership of a fleet of resolvers sharing one configuration on etcd (not in upstream's schema)."),
        vec![
            f("node", opt(Ty::Str), Value::Null, "This node's name in the fleet, unique in it: letters, digits, '.', '-' and '_', starting with a letter or a digit, at most 253 bytes. Default: the 'hostname'."),
            req("etcd", obj(etcd()), "Where the fleet's configuration lives: the etcd cluster and the key prefix."),
            f("rollout", opt(obj(rollout())), Value::Null, "Stage every change made through this node: the canary node first, then waves, halting by itself when a node refuses the change or its SERVFAIL share rises. Without it a change goes to every node at once (kresctl's '--canary-node' and '--wave' stage one change)."),
        ],
    );
    d.validate = Some(|m, _, path| match m.get("node").and_then(Value::as_str) {
        Some(node) => {
            check_node_name(node).or_else(|why| fail(&child_path(path, "node"), why.to_string()))
        }
        None => Ok(()),
    });
    d
}

fn etcd() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.fleet_schema.EtcdSchema",
        Some("The etcd cluster holding the fleet's configuration (v3 API)."),
        vec![
            req("endpoints", list(v(&vt::ETCD_ENDPOINT)), "The cluster's client URLs, 'http://host:port' or 'https://host:port' (all of one scheme), at most 64."),
            req("prefix", Ty::Str, "The key prefix under which the fleet's keys live, such as '/knot-resolver/campus': starting with '/', without a final '/', segments of letters, digits, '.', '-' and '_' (not '.' or '..'), at most 256 bytes. Fleets sharing one cluster use different prefixes."),
            f("username", opt(Ty::Str), Value::Null, "The etcd user to authenticate as (with 'password-file')."),
            f("password-file", opt(v(&vt::READABLE_FILE)), Value::Null, "File holding the etcd user's password (a final newline is not part of it); required with 'username'."),
            f("ca-file", opt(v(&vt::READABLE_FILE)), Value::Null, "CA certificates (PEM) the cluster's certificates are checked against, instead of the system's (https endpoints only)."),
            f("cert-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Client certificate (PEM) for the cluster's TLS client authentication, with 'key-file' (https endpoints only)."),
            f("key-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Private key (PEM) of 'cert-file' (https endpoints only)."),
            f("timeout", v(&vt::TIME_UNIT), json!("2s"), "How long one request to the cluster may take (from 100ms to 1m); DNS never waits for it."),
        ],
    );
    d.validate = Some(check_etcd);
    d
}

fn rollout() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.fleet_schema.RolloutSchema",
        Some("How a change made through this node is staged across the fleet."),
        vec![
            f("canary-node", opt(Ty::Str), Value::Null, "The node that gets a change first, alone. Default: this node."),
            f("wave", Ty::Str, json!("25%"), "How many nodes each following wave holds: a share of the fleet ('10%') or a number of nodes ('3')."),
            f("soak", v(&vt::TIME_UNIT), json!("30s"), "How long each wave's answers are watched after it applied the change, before the next wave (from 0s to 1h)."),
            f("max-servfail-rise", Ty::Str, json!("5%"), "How far a node's SERVFAIL share may rise over the soak (percentage points of its answers) before the rollout halts."),
            f("wave-timeout", v(&vt::TIME_UNIT), json!("5m"), "How long a wave may take to apply the change before the rollout halts (from 1s to 1d)."),
        ],
    );
    d.validate = Some(|m, _, path| {
        let at = |field: &str| child_path(path, field);
        let mut errs = Vec::new();
        if let Some(Err(why)) = m
            .get("canary-node")
            .and_then(Value::as_str)
            .map(check_node_name)
        {
            errs.push(Failure::new(&at("canary-node"), why.to_string()));
        }
        if let Some(Err(why)) = m.get("wave").and_then(Value::as_str).map(Wave::parse) {
            errs.push(Failure::new(&at("wave"), why.to_string()));
        }
        if let Some(Err(why)) = m
            .get("max-servfail-rise")
            .and_then(Value::as_str)
            .map(parse_percent)
        {
            errs.push(Failure::new(&at("max-servfail-rise"), why.to_string()));
        }
        for (field, range) in [
            ("soak", 0..=3_600_000_000),
            ("wave-timeout", 1_000_000..=86_400_000_000),
        ] {
            let micros = m
                .get(field)
                .and_then(Value::as_str)
                .and_then(|t| TimeUnit::parse(t).ok())
                .map_or(0, |t| t.micros());
            if !range.contains(&micros) {
                errs.push(Failure::new(
                    &at(field),
                    if field == "soak" {
                        "must be from 0s to 1h"
                    } else {
                        "must be from 1s to 1d"
                    },
                ));
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    });
    d
}

/// Why a value of `fleet` is not what its field asks for.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FleetValueError {
    #[error(
        "'{0}' is no wave: a share of the fleet from 1% to 100% ('10%') or a number of nodes ('3')"
    )]
    NoWave(String),
    #[error("'{0}' is no percentage from 0% to 100% ('5%')")]
    NoPercentage(String),
    #[error("node name '{name}' {why}")]
    NodeName { name: String, why: &'static str },
    #[error("key prefix '{prefix}' {why}")]
    KeyPrefix { prefix: String, why: &'static str },
}

/// The size of a rollout's waves after the first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wave {
    /// A share of the fleet's nodes, from 0 (exclusive) to 1.
    Share(f64),
    /// A number of nodes (at least 1).
    Nodes(usize),
}

impl Wave {
    /// `10%` or `3`.
    pub fn parse(text: &str) -> Result<Wave, FleetValueError> {
        let text = text.trim();
        if text.ends_with('%') {
            let share = parse_percent(text)?;
            if share > 0.0 {
                return Ok(Wave::Share(share));
            }
        } else if let Ok(n @ 1..) = text.parse::<usize>() {
            return Ok(Wave::Nodes(n));
        }
        Err(FleetValueError::NoWave(text.to_owned()))
    }

    /// How many of `nodes` one wave holds (at least one).
    pub fn size(self, nodes: usize) -> usize {
        match self {
            Wave::Share(share) => ((nodes as f64 * share).ceil() as usize).max(1),
            Wave::Nodes(n) => n,
        }
    }
}

/// `5%` as 0.05; from 0% to 100%.
pub fn parse_percent(text: &str) -> Result<f64, FleetValueError> {
    text.trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|n| (0.0..=100.0).contains(n))
        .map(|n| n / 100.0)
        .ok_or_else(|| FleetValueError::NoPercentage(text.to_owned()))
}

/// `fleet.etcd`'s rules, every broken one reported at the field it names: the endpoints
/// bounded, of one scheme and each once; the prefix a key prefix; the timeout in range; a
/// username with its password file and back; a certificate with its key and back; TLS files
/// only with `https://` endpoints.
fn check_etcd(m: &mut Map<String, Value>, _: &Ctx, path: &str) -> Result<(), Vec<Failure>> {
    let at = |field: &str| child_path(path, field);
    let mut errs = Vec::new();
    let endpoints: Vec<&str> = m
        .get("endpoints")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if endpoints.len() > MAX_ETCD_ENDPOINTS {
        errs.push(Failure::new(
            &at("endpoints"),
            format!(
                "{} endpoints, at most {MAX_ETCD_ENDPOINTS} are allowed",
                endpoints.len()
            ),
        ));
    }
    let tls = endpoints.first().is_some_and(|e| e.starts_with("https://"));
    for (i, endpoint) in endpoints.iter().enumerate().take(MAX_ETCD_ENDPOINTS) {
        let item = child_path(&at("endpoints"), &i.to_string());
        if endpoint.starts_with("https://") != tls {
            errs.push(Failure::new(
                &item,
                format!(
                    "'{endpoint}' mixes schemes: every endpoint is 'http://' or every one is 'https://' (endpoint 0 is '{}')",
                    endpoints[0]
                ),
            ));
        } else if let Some(first) = endpoints[..i].iter().position(|e| e == endpoint) {
            errs.push(Failure::new(
                &item,
                format!("'{endpoint}' is listed twice (endpoint {first} too)"),
            ));
        }
    }
    if let Some(prefix) = m.get("prefix").and_then(Value::as_str) {
        if let Err(why) = check_prefix(prefix) {
            errs.push(Failure::new(&at("prefix"), why.to_string()));
        }
    }
    let timeout = m
        .get("timeout")
        .and_then(Value::as_str)
        .and_then(|t| TimeUnit::parse(t).ok())
        .map_or(0, |t| t.micros());
    if !TIMEOUT_RANGE_MICROS.contains(&timeout) {
        errs.push(Failure::new(&at("timeout"), "must be from 100ms to 1m"));
    }
    if m.get("username").and_then(Value::as_str) == Some("") {
        errs.push(Failure::new(&at("username"), "must not be empty"));
    }
    for (given, missing) in [
        ("username", "password-file"),
        ("password-file", "username"),
        ("cert-file", "key-file"),
        ("key-file", "cert-file"),
    ] {
        if is_set(m, given) && !is_set(m, missing) {
            errs.push(Failure::new(
                &at(missing),
                format!("required with '{given}'"),
            ));
        }
    }
    if !tls {
        for file in ["ca-file", "cert-file", "key-file"] {
            if is_set(m, file) {
                errs.push(Failure::new(
                    &at(file),
                    "TLS options need 'https://' endpoints; the endpoints are 'http://'",
                ));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Whether `name` can name a node: the text saying why not.
pub(super) fn check_node_name(name: &str) -> Result<(), FleetValueError> {
    let why = if name.is_empty() {
        "must not be empty"
    } else if name.len() > MAX_NODE_NAME_LEN {
        "is longer than 253 bytes"
    } else if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        "must start with a letter or a digit"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        "may hold only letters, digits, '.', '-' and '_'"
    } else {
        return Ok(());
    };
    Err(FleetValueError::NodeName {
        name: name.to_owned(),
        why,
    })
}

/// Whether `prefix` is a key prefix: the text saying why not.
fn check_prefix(prefix: &str) -> Result<(), FleetValueError> {
    let why = if prefix.len() > MAX_ETCD_PREFIX_LEN {
        "is longer than 256 bytes"
    } else if !prefix.starts_with('/') {
        "must start with '/'"
    } else if prefix == "/" {
        "must name at least one segment ('/knot-resolver/NAME')"
    } else if prefix.ends_with('/') {
        "must not end with '/'"
    } else if prefix[1..].split('/').any(str::is_empty) {
        "must not hold an empty segment ('//')"
    } else if prefix[1..].split('/').any(|s| s == "." || s == "..") {
        "must not hold a '.' or '..' segment"
    } else if !prefix[1..]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'))
    {
        "may hold only letters, digits, '.', '-', '_' and '/'"
    } else {
        return Ok(());
    };
    Err(FleetValueError::KeyPrefix {
        prefix: prefix.to_owned(),
        why,
    })
}

/// `fleet` (ours): this node's membership of a fleet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FleetSchema {
    /// This node's name in the fleet (the configuration's `hostname` when not given).
    pub node: String,
    /// Where the fleet's configuration lives.
    pub etcd: EtcdSchema,
    /// How changes made through this node are staged (none: to every node at once).
    pub rollout: Option<RolloutSchema>,
}

/// `fleet.rollout` (ours): how a change made through this node is staged.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RolloutSchema {
    /// The first node to get a change (this node when not given).
    pub canary_node: Option<String>,
    /// The size of each following wave (`25%`, `3`).
    pub wave: String,
    /// How long each wave's answers are watched.
    pub soak: TimeUnit,
    /// The most a node's SERVFAIL share may rise (`5%`).
    pub max_servfail_rise: String,
    /// How long a wave may take to apply.
    pub wave_timeout: TimeUnit,
}

/// `fleet.etcd` (ours): the cluster, the key prefix, and how to authenticate.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EtcdSchema {
    /// The cluster's client URLs, all `http://` or all `https://`, each once.
    pub endpoints: Vec<EtcdEndpoint>,
    /// The key prefix (`/a/b`: a leading `/`, no trailing one).
    pub prefix: String,
    /// The etcd user, with `password_file`.
    pub username: Option<String>,
    /// The file holding the user's password, with `username`.
    pub password_file: Option<PathBuf>,
    /// CA certificates to check the cluster's against (https only).
    pub ca_file: Option<PathBuf>,
    /// Client certificate, with `key_file` (https only).
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key, with `cert_file` (https only).
    pub key_file: Option<PathBuf>,
    /// How long one request to the cluster may take.
    pub timeout: TimeUnit,
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::types::EtcdEndpoint;
    use crate::{validate, KresConfig, LogTargetArg, PathChecks, ValidationContext};

    fn ctx() -> ValidationContext {
        ValidationContext {
            resolve_root: "/etc/knot-resolver".into(),
            checks: PathChecks::Lenient,
            logtarget_arg: LogTargetArg::default(),
        }
    }

    /// A document validated: the model, or every error as `[path] message`.
    fn validated(doc: Value) -> Result<KresConfig, Vec<String>> {
        validate(&doc, &ctx()).map_err(|e| e.0.iter().map(ToString::to_string).collect())
    }

    /// The smallest `fleet.etcd`, with `changes` laid over it.
    fn etcd(changes: Value) -> Value {
        let mut etcd =
            json!({"endpoints": ["http://127.0.0.1:2379"], "prefix": "/knot-resolver/f"});
        if let (Some(e), Value::Object(changes)) = (etcd.as_object_mut(), changes) {
            e.extend(changes);
        }
        etcd
    }

    #[test]
    fn without_fleet_nothing_is_set() {
        for doc in [json!({}), json!({"fleet": null})] {
            assert_eq!(validated(doc.clone()).expect("valid").fleet, None, "{doc}");
        }
    }

    #[test]
    fn defaults_and_parsed_values() {
        let cfg = validated(json!({"hostname": "ns1.example", "fleet": {"etcd": etcd(json!({}))}}))
            .expect("valid");
        let fleet = cfg.fleet.expect("fleet");
        assert_eq!(
            fleet.node, "ns1.example",
            "the node is named by the hostname"
        );
        assert_eq!(fleet.etcd.prefix, "/knot-resolver/f");
        assert_eq!(fleet.etcd.timeout.millis(), 2000);
        assert_eq!(fleet.etcd.username, None);
        assert_eq!(fleet.etcd.password_file, None);
        assert_eq!(
            (
                fleet.etcd.ca_file,
                fleet.etcd.cert_file,
                fleet.etcd.key_file
            ),
            (None, None, None)
        );
        let endpoint = &fleet.etcd.endpoints[0];
        assert_eq!(
            (
                endpoint.as_str(),
                endpoint.is_tls(),
                endpoint.host(),
                endpoint.port()
            ),
            ("http://127.0.0.1:2379", false, "127.0.0.1", 2379)
        );

        // without a hostname, the machine's names both
        let cfg = validated(json!({"fleet": {"etcd": etcd(json!({}))}})).expect("valid");
        assert_eq!(cfg.fleet.map(|f| f.node), Some(cfg.hostname.clone()));

        // everything given; relative paths resolve like the others
        let cfg = validated(
            json!({"hostname": "x y", "fleet": {"node": "ns-2_b.example", "etcd": {
                "endpoints": ["https://[2001:db8::1]:2379", "https://etcd-1.example:2379"],
                "prefix": "/kr/campus.v2/a-b_c",
                "username": "kres",
                "password-file": "etcd/password",
                "ca-file": "/etc/etcd/ca.pem",
                "cert-file": "/etc/etcd/node.pem",
                "key-file": "/etc/etcd/node.key",
                "timeout": "500ms",
            }}}),
        )
        .expect("valid");
        let fleet = cfg.fleet.expect("fleet");
        assert_eq!(fleet.node, "ns-2_b.example");
        let endpoints: Vec<(bool, &str, u16)> = fleet
            .etcd
            .endpoints
            .iter()
            .map(|e| (e.is_tls(), e.host(), e.port()))
            .collect();
        assert_eq!(
            endpoints,
            [(true, "2001:db8::1", 2379), (true, "etcd-1.example", 2379)]
        );
        assert_eq!(fleet.etcd.username.as_deref(), Some("kres"));
        assert_eq!(
            fleet.etcd.password_file,
            Some("/etc/knot-resolver/etcd/password".into())
        );
        assert_eq!(fleet.etcd.key_file, Some("/etc/etcd/node.key".into()));
        assert_eq!(fleet.etcd.timeout.millis(), 500);
    }

    #[test]
    fn every_broken_rule_is_named_by_its_path() {
        let many: Vec<String> = (0..65).map(|i| format!("http://etcd-{i}:2379")).collect();
        let rows: Vec<(Value, &[&str])> = vec![
            (json!({}), &["[/fleet] missing attribute 'etcd'."]),
            (
                json!({"etcd": {}}),
                &[
                    "[/fleet/etcd] missing attribute 'endpoints'.",
                    "[/fleet/etcd] missing attribute 'prefix'.",
                ],
            ),
            (
                json!({"etcd": etcd(json!({})), "staging": {}}),
                &["[/fleet] unexpected extra key(s) 'staging'"],
            ),
            (
                json!({"etcd": etcd(json!({})), "rollout": {"canary-node": "-a", "wave": "0%",
                    "soak": "2h", "max-servfail-rise": "5", "wave-timeout": "0s"}}),
                &[
                    "[/fleet/rollout/canary-node] node name '-a' must start with a letter or a digit",
                    "[/fleet/rollout/wave] '0%' is no wave: a share of the fleet from 1% to 100% ('10%') or a number of nodes ('3')",
                    "[/fleet/rollout/max-servfail-rise] '5' is no percentage from 0% to 100% ('5%')",
                    "[/fleet/rollout/soak] must be from 0s to 1h",
                    "[/fleet/rollout/wave-timeout] must be from 1s to 1d",
                ],
            ),
            (json!([]), &["[/fleet] expected 'dict' or 'NoRenameBaseSchema' object, found '<class 'knot_resolver.utils.modeling.renaming.RenamedList'>'"]),
            (
                json!({"etcd": etcd(json!({"endpoints": []}))}),
                &["[/fleet/etcd/endpoints] empty list is not allowed"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": "http://a:1"}))}),
                &["[/fleet/etcd/endpoints] expected list, got string"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": ["http://a:1", "http://b"]}))}),
                &["[/fleet/etcd/endpoints/1] 'http://b' is not an etcd endpoint 'http://host:port' or 'https://host:port': the port is missing ('host:port')"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": ["https://a:1", "https://b:1", "http://c:1"]}))}),
                &["[/fleet/etcd/endpoints/2] 'http://c:1' mixes schemes: every endpoint is 'http://' or every one is 'https://' (endpoint 0 is 'https://a:1')"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": ["http://a:1", "http://b:1", "http://a:1"]}))}),
                &["[/fleet/etcd/endpoints/2] 'http://a:1' is listed twice (endpoint 0 too)"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": many}))}),
                &["[/fleet/etcd/endpoints] 65 endpoints, at most 64 are allowed"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "knot-resolver"}))}),
                &["[/fleet/etcd/prefix] key prefix 'knot-resolver' must start with '/'"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "/"}))}),
                &["[/fleet/etcd/prefix] key prefix '/' must name at least one segment ('/knot-resolver/NAME')"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "/kr/"}))}),
                &["[/fleet/etcd/prefix] key prefix '/kr/' must not end with '/'"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "/kr//f"}))}),
                &["[/fleet/etcd/prefix] key prefix '/kr//f' must not hold an empty segment ('//')"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "/kr/../f"}))}),
                &["[/fleet/etcd/prefix] key prefix '/kr/../f' must not hold a '.' or '..' segment"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": "/kr/f g"}))}),
                &["[/fleet/etcd/prefix] key prefix '/kr/f g' may hold only letters, digits, '.', '-', '_' and '/'"],
            ),
            (
                json!({"etcd": etcd(json!({"prefix": true}))}),
                &["[/fleet/etcd/prefix] Expected str, found bool. Be careful, that YAML parsers consider even \"no\" and \"yes\" as a bool. Search for the Norway Problem for more details. And please use quotes explicitly."],
            ),
            (
                json!({"etcd": etcd(json!({"timeout": "50ms"}))}),
                &["[/fleet/etcd/timeout] must be from 100ms to 1m"],
            ),
            (
                json!({"etcd": etcd(json!({"timeout": "61s"}))}),
                &["[/fleet/etcd/timeout] must be from 100ms to 1m"],
            ),
            (
                json!({"etcd": etcd(json!({"timeout": "2"}))}),
                &["[/fleet/etcd/timeout] Unexpected value for '<class 'knot_resolver.datamodel.types.types.TimeUnit'>'. Expected string that matches pattern '^(\\d+)(us|ms|s|m|h|d)$'. Positive integer and one of the units ['us', 'ms', 's', 'm', 'h', 'd'], got '2'."],
            ),
            (
                json!({"etcd": etcd(json!({"username": "", "password-file": "/p"}))}),
                &["[/fleet/etcd/username] must not be empty"],
            ),
            (
                json!({"etcd": etcd(json!({"username": "kres"}))}),
                &["[/fleet/etcd/password-file] required with 'username'"],
            ),
            (
                json!({"etcd": etcd(json!({"password-file": "/p"}))}),
                &["[/fleet/etcd/username] required with 'password-file'"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": ["https://a:1"], "cert-file": "/c"}))}),
                &["[/fleet/etcd/key-file] required with 'cert-file'"],
            ),
            (
                json!({"etcd": etcd(json!({"endpoints": ["https://a:1"], "key-file": "/k"}))}),
                &["[/fleet/etcd/cert-file] required with 'key-file'"],
            ),
            (
                json!({"etcd": etcd(json!({"ca-file": "/ca", "cert-file": "/c", "key-file": "/k"}))}),
                &[
                    "[/fleet/etcd/ca-file] TLS options need 'https://' endpoints; the endpoints are 'http://'",
                    "[/fleet/etcd/cert-file] TLS options need 'https://' endpoints; the endpoints are 'http://'",
                    "[/fleet/etcd/key-file] TLS options need 'https://' endpoints; the endpoints are 'http://'",
                ],
            ),
            (
                json!({"etcd": etcd(json!({"password-file": 5}))}),
                &["[/fleet/etcd/password-file] expected file path in a string, got '5' with type '<class 'int'>'."],
            ),
            (
                json!({"node": "", "etcd": etcd(json!({}))}),
                &["[/fleet/node] node name '' must not be empty"],
            ),
            (
                json!({"node": "-ns1", "etcd": etcd(json!({}))}),
                &["[/fleet/node] node name '-ns1' must start with a letter or a digit"],
            ),
            (
                json!({"node": "ns1/a", "etcd": etcd(json!({}))}),
                &["[/fleet/node] node name 'ns1/a' may hold only letters, digits, '.', '-' and '_'"],
            ),
            (
                json!({"node": true, "etcd": etcd(json!({}))}),
                &["[/fleet/node] Expected str, found bool. Be careful, that YAML parsers consider even \"no\" and \"yes\" as a bool. Search for the Norway Problem for more details. And please use quotes explicitly."],
            ),
        ];
        for (fleet, expected) in rows {
            let row = fleet.to_string();
            assert_eq!(
                validated(json!({"fleet": fleet})).map(drop),
                Err(expected.iter().map(|s| (*s).to_owned()).collect()),
                "row: {row}"
            );
        }
        let prefix = format!("/{}", "a".repeat(256));
        assert_eq!(
            validated(json!({"fleet": {"etcd": etcd(json!({"prefix": prefix}))}})).map(drop),
            Err(vec![format!(
                "[/fleet/etcd/prefix] key prefix '{prefix}' is longer than 256 bytes"
            )])
        );
        let long = "a".repeat(254);
        assert_eq!(
            validated(json!({"fleet": {"node": long, "etcd": etcd(json!({}))}})).map(drop),
            Err(vec![format!(
                "[/fleet/node] node name '{long}' is longer than 253 bytes"
            )])
        );
        // a number is a name (like every `str` field's)
        let cfg = validated(json!({"fleet": {"node": 7, "etcd": etcd(json!({}))}})).expect("valid");
        assert_eq!(cfg.fleet.map(|f| f.node).as_deref(), Some("7"));
    }

    #[test]
    fn a_hostname_that_names_no_node_needs_node_set() {
        assert_eq!(
            validated(json!({"hostname": "ns 1", "fleet": {"etcd": etcd(json!({}))}})).map(drop),
            Err(vec![
                "[/fleet/node] node name 'ns 1' may hold only letters, digits, '.', '-' and '_': the hostname does not name a node; set 'node'".to_owned()
            ])
        );
    }

    #[test]
    fn endpoints_are_http_or_https_host_and_port() {
        let ok: &[(&str, bool, &str, u16)] = &[
            ("http://127.0.0.1:2379", false, "127.0.0.1", 2379),
            ("https://[::1]:2379", true, "::1", 2379),
            ("https://etcd.example:1", true, "etcd.example", 1),
            ("http://localhost:65535", false, "localhost", 65535),
            ("http://a-b.c0:80", false, "a-b.c0", 80),
        ];
        for (text, tls, host, port) in ok {
            let e = EtcdEndpoint::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (e.is_tls(), e.host(), e.port()),
                (*tls, *host, *port),
                "{text}"
            );
            assert_eq!(e.as_str(), *text);
        }
        let long = format!("http://{}:1", "a".repeat(300));
        let refused: &[(&str, &str)] = &[
            ("ftp://a:1", "it must start with 'http://' or 'https://'"),
            ("HTTP://a:1", "it must start with 'http://' or 'https://'"),
            ("a:1", "it must start with 'http://' or 'https://'"),
            (
                "http://a:1/",
                "nothing may follow 'host:port' (no path, query or user info)",
            ),
            (
                "http://a:1/v3",
                "nothing may follow 'host:port' (no path, query or user info)",
            ),
            (
                "http://a:1?x",
                "nothing may follow 'host:port' (no path, query or user info)",
            ),
            (
                "http://u:p@a:1",
                "nothing may follow 'host:port' (no path, query or user info)",
            ),
            ("http://a", "the port is missing ('host:port')"),
            ("http://a:", "the port is not a number from 1 to 65535"),
            ("http://a:0", "the port is not a number from 1 to 65535"),
            ("http://a:65536", "the port is not a number from 1 to 65535"),
            ("http://a:+1", "the port is not a number from 1 to 65535"),
            (
                "http://::1:2379",
                "an IPv6 address goes in brackets ('[2001:db8::1]:2379')",
            ),
            (
                "http://[::1]",
                "an IPv6 address in brackets is followed by ':port'",
            ),
            (
                "http://[::1]2379",
                "an IPv6 address in brackets is followed by ':port'",
            ),
            ("http://[etcd]:1", "no IPv6 address in the brackets"),
            (
                "http://:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (
                "http://-a:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (
                "http://a..b:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (
                "http://a_b:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (
                "http://a.:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (
                "http://999.0.0.1:1",
                "the host is neither an IPv4 address nor a host name",
            ),
            (&long, "longer than 300 bytes"),
        ];
        for (text, why) in refused {
            let got = EtcdEndpoint::parse(text)
                .map(drop)
                .map_err(|e| e.to_string());
            let expected = format!(
                "'{text}' is not an etcd endpoint 'http://host:port' or 'https://host:port': {why}"
            );
            assert_eq!(got, Err(expected), "{text}");
        }
    }

    #[test]
    fn the_schema_describes_the_section() {
        let schema = crate::json_schema();
        let fleet = &schema["properties"]["fleet"];
        assert_eq!(fleet["type"], json!(["object", "null"]));
        assert_eq!(fleet["default"], Value::Null);
        assert!(fleet["description"]
            .as_str()
            .is_some_and(|d| d.contains("Not in upstream's schema")));
        let etcd = &fleet["properties"]["etcd"]["properties"];
        assert_eq!(etcd["timeout"]["default"], json!("2s"));
        assert_eq!(etcd["endpoints"]["type"], json!("array"));
        for key in [
            "endpoints",
            "prefix",
            "username",
            "password-file",
            "ca-file",
            "cert-file",
            "key-file",
            "timeout",
        ] {
            assert!(
                etcd[key]["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{key} is described"
            );
        }
    }
}
