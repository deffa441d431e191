//! The configuration model of Knot Resolver 6.5: the description of every section for the engine
//! (types, defaults, documentation, `auto` resolution, cross-field rules, mirroring upstream's
//! `datamodel/*_schema.py`), and the typed, validated structs other code reads.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::engine::{
    child_path, flat_union, Ctx, Default, Failure, Field, IntRange, ObjectDef, Ty,
};
use super::types::{
    DomainName, EscapedStr, IdPattern, InterfaceOptionalPort, IpAddressEm, IpAddressOptionalPort,
    IpAddressPort, IpNetwork, PinSha256, SizeUnit, TimeUnit,
};
use super::value_types as vt;

/// Upstream resolves `watchdog: auto` to whether the optional Python `watchdog` library is present;
/// this implementation always has file watching.
pub const WATCHDOG_AVAILABLE: bool = true;

/// Upstream's hard-coded maximum of workers when the CPU count is unknown.
pub const WORKERS_MAX: u32 = 256;

/// Environment variable through which the manager passes its `--logtarget` (upstream's name).
pub const LOGTARGET_ENV_VAR: &str = "KRES_LOGTARGET";

// ---------------------------------------------------------------------------------------------
// building blocks

fn f(name: &'static str, ty: Ty, default: Value, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        default: Default::Value(default),
        doc,
    }
}
fn req(name: &'static str, ty: Ty, doc: &'static str) -> Field {
    Field {
        name,
        ty,
        default: Default::Required,
        doc,
    }
}
fn opt(ty: Ty) -> Ty {
    Ty::Optional(Box::new(ty))
}
fn list(ty: Ty) -> Ty {
    Ty::List(Box::new(ty))
}
fn loi(ty: Ty) -> Ty {
    Ty::ListOrItem(Box::new(ty))
}
fn v(t: &'static super::engine::ValueType) -> Ty {
    Ty::Value(t)
}
fn int(class: &'static str, min: Option<i64>, max: Option<i64>) -> Ty {
    Ty::Int(IntRange { class, min, max })
}
fn int_positive() -> Ty {
    int("IntPositive", Some(1), None)
}
fn int_non_negative() -> Ty {
    int("IntNonNegative", Some(0), None)
}
fn percent() -> Ty {
    int("Percent", Some(0), Some(100))
}
fn port_number() -> Ty {
    int("PortNumber", Some(1), Some(65535))
}
fn ip_address() -> Ty {
    Ty::Union(vec![v(&vt::IPV4_ADDRESS), v(&vt::IPV6_ADDRESS)])
}
fn obj(def: ObjectDef) -> Ty {
    Ty::Object(Arc::new(def))
}
fn section(class: &'static str, doc: Option<&'static str>, fields: Vec<Field>) -> ObjectDef {
    ObjectDef {
        class,
        doc,
        fields,
        transform: None,
        validate: None,
    }
}
fn fail(path: &str, msg: impl Into<String>) -> Result<(), Vec<Failure>> {
    Err(vec![Failure::new(path, msg)])
}
fn is_set(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).is_some_and(|v| !v.is_null())
}
/// Python truthiness of a plain `str` field: `None` and `""` are false.
fn is_nonempty_str(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key)
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}
fn is_true(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool).unwrap_or(false)
}
fn resolve_watchdog(m: &mut Map<String, Value>) {
    if m.get("watchdog").and_then(Value::as_str) == Some("auto") {
        m.insert("watchdog".into(), Value::Bool(WATCHDOG_AVAILABLE));
    }
}
fn watchdog_ty() -> Ty {
    Ty::Union(vec![Ty::Literal(&["auto"]), Ty::Bool])
}

/// Python's `repr` of a list of strings.
fn py_str_list(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Number of CPUs this process may run on (upstream: `len(os.sched_getaffinity(0))`).
pub fn usable_cpus() -> Option<u32> {
    if let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        let n = (0..nix::sched::CpuSet::count())
            .filter(|i| set.is_set(*i).unwrap_or(false))
            .count();
        if n > 0 {
            return u32::try_from(n).ok();
        }
    }
    std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok())
}

/// The largest accepted `workers` value (upstream's `workers_max_count`).
pub fn workers_max_count() -> u32 {
    usable_cpus().map_or(WORKERS_MAX, |c| c.saturating_mul(10))
}

// ---------------------------------------------------------------------------------------------
// sections

fn management() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.management_schema.ManagementSchema",
        Some("Configuration of management HTTP API."),
        vec![
            f(
                "unix-socket",
                opt(v(&vt::WRITABLE_FILE_PATH)),
                Value::Null,
                "Path to unix domain socket to listen to.",
            ),
            f(
                "interface",
                opt(v(&vt::IP_ADDRESS_PORT)),
                Value::Null,
                "IP address and port number to listen to.",
            ),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_set(m, "unix-socket") == is_set(m, "interface") {
            return fail(
                path,
                "One of 'interface' or 'unix-socket' must be configured.",
            );
        }
        Ok(())
    });
    d
}

fn options() -> ObjectDef {
    section(
        "knot_resolver.datamodel.options_schema.OptionsSchema",
        Some("Fine-tuning global parameters of DNS resolver operation."),
        vec![
            f("glue-checking", Ty::Literal(&["normal", "strict", "permissive"]), json!("normal"), "Glue records strictness checking level."),
            f("minimize", Ty::Bool, json!(true), "Send minimum amount of information in recursive queries to enhance privacy."),
            f("query-loopback", Ty::Bool, json!(false), "Permits queries to loopback addresses."),
            f("reorder-rrset", Ty::Bool, json!(true), "Controls whether resource records within a RRSet are reordered each time it is served from the cache."),
            f("query-case-randomization", Ty::Bool, json!(true), "Randomize Query Character Case."),
            f("priming", Ty::Bool, json!(true), "Initializing DNS resolver cache with Priming Queries (RFC 8109)"),
            f("rebinding-protection", Ty::Bool, json!(false), "Protection against DNS Rebinding attack."),
            f("refuse-no-rd", Ty::Bool, json!(true), "Queries without RD (recursion desired) bit set in query are answered with REFUSED."),
            f("time-jump-detection", Ty::Bool, json!(true), "Detection of difference between local system time and expiration time bounds in DNSSEC signatures for '. NS' records."),
            f("violators-workarounds", Ty::Bool, json!(false), "Workarounds for known DNS protocol violators."),
            f("serve-stale", Ty::Bool, json!(false), "Allows using timed-out records in case DNS resolver is unable to contact upstream servers."),
        ],
    )
}

fn tls() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.network_schema.TLSSchema",
        Some("TLS configuration, also affects DNS over TLS and DNS over HTTPS."),
        vec![
            f("watchdog", watchdog_ty(), json!("auto"), "Enables watchdog of changes in TLS certificate files. Requires the optional 'watchdog' dependency."),
            f("cert-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to certificate file."),
            f("key-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to certificate key file."),
            f("sticket-secret", opt(v(&vt::ESCAPED_STR_32B)), Value::Null, "Secret for TLS session resumption via tickets. (RFC 5077)."),
            f("sticket-secret-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to file with secret for TLS session resumption via tickets. (RFC 5077)."),
            f("padding", Ty::Union(vec![Ty::Bool, int("Int0_512", Some(0), Some(512))]), json!(true), "EDNS(0) padding of queries and answers sent over an encrypted channel."),
        ],
    );
    d.transform = Some(|m, _, _| {
        resolve_watchdog(m);
        Ok(())
    });
    d.validate = Some(|m, _, path| {
        if is_set(m, "sticket-secret") && is_set(m, "sticket-secret-file") {
            return fail(
                path,
                "'sticket_secret' and 'sticket_secret_file' are both defined, only one can be used",
            );
        }
        if is_set(m, "cert-file") != is_set(m, "key-file") {
            return fail(
                path,
                "'cert-file' and 'key-file' must be configured together",
            );
        }
        if is_set(m, "cert-file") && is_true(m, "watchdog") && !WATCHDOG_AVAILABLE {
            return fail(path, "'watchdog' is enabled, but the required 'watchdog' dependency (optional) is not installed");
        }
        Ok(())
    });
    d
}

const LISTEN_KINDS: &[&str] = &[
    "dns",
    "xdp",
    "dot",
    "doh-legacy",
    "doh2",
    "doh2-insecure",
    "doq",
];

fn listen() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.network_schema.ListenSchema",
        Some("Configuration of listening interface."),
        vec![
            f(
                "interface",
                opt(loi(v(&vt::INTERFACE_OPTIONAL_PORT))),
                Value::Null,
                "IP address or interface name with optional port number to listen to.",
            ),
            f(
                "unix-socket",
                opt(loi(v(&vt::WRITABLE_FILE_PATH))),
                Value::Null,
                "Path to unix domain socket to listen to.",
            ),
            f(
                "port",
                opt(port_number()),
                Value::Null,
                "Port number to listen to.",
            ),
            f(
                "kind",
                Ty::Literal(LISTEN_KINDS),
                json!("dns"),
                "Specifies DNS query transport protocol.",
            ),
            f(
                "freebind",
                Ty::Bool,
                json!(false),
                "Used for binding to non-local address.",
            ),
        ],
    );
    d.transform = Some(|m, _, path| {
        let mut errs = Vec::new();
        let port_given = is_set(m, "port");
        if let Some(Value::Array(ifaces)) = m.get("interface") {
            let mut port_set: Option<bool> = None;
            for iface in ifaces {
                let has_port = iface
                    .as_str()
                    .and_then(|s| InterfaceOptionalPort::parse(s).ok())
                    .is_some_and(|i| i.port().is_some());
                if port_given && has_port {
                    errs.push(Failure::new(path, "The port number is defined in two places ('port' option and '@<port>' syntax)."));
                    break;
                }
                if port_set.is_some_and(|p| p != has_port) {
                    errs.push(Failure::new(path, "The '@<port>' syntax must be used either for all or none of the interface in the list."));
                    break;
                }
                port_set = Some(has_port);
            }
        }
        if !port_given && is_set(m, "interface") {
            let port = match m.get("kind").and_then(Value::as_str) {
                Some("dot" | "doq") => 853,
                Some("doh-legacy" | "doh2") => 443,
                Some("doh2-insecure") => 80,
                _ => 53,
            };
            m.insert("port".into(), json!(port));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    });
    d.validate = Some(|m, _, path| {
        if is_set(m, "unix-socket") == is_set(m, "interface") {
            return fail(
                path,
                "One of 'interface' or 'unix-socket' must be configured.",
            );
        }
        if is_set(m, "port") && is_set(m, "unix-socket") {
            return fail(
                path,
                "'unix-socket' and 'port' are not compatible options. Port configuration can only be used with 'interface' option.",
            );
        }
        Ok(())
    });
    d
}

fn network() -> ObjectDef {
    let edns = section(
        "knot_resolver.datamodel.network_schema.EdnsBufferSizeSchema",
        Some("EDNS payload size advertised in DNS packets."),
        vec![
            f(
                "upstream",
                v(&vt::SIZE_UNIT),
                json!("1232B"),
                "Maximum EDNS upstream (towards other DNS servers) payload size.",
            ),
            f(
                "downstream",
                v(&vt::SIZE_UNIT),
                json!("1232B"),
                "Maximum EDNS downstream (towards clients) payload size for communication.",
            ),
        ],
    );
    let renumbering = section(
        "knot_resolver.datamodel.network_schema.AddressRenumberingSchema",
        Some("Renumbers addresses in answers to different address space."),
        vec![
            req("source", v(&vt::IP_NETWORK), "Source subnet."),
            req(
                "destination",
                flat_union(vec![v(&vt::IP_ADDRESS_EM), ip_address()]),
                "Destination address prefix.",
            ),
        ],
    );
    let proxy = section(
        "knot_resolver.datamodel.network_schema.ProxyProtocolSchema",
        Some("PROXYv2 protocol configuration."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable PROXYv2 protocol."),
            f("allow", opt(list(flat_union(vec![ip_address(), v(&vt::IP_NETWORK)]))), Value::Null, "Allow usage of the PROXYv2 protocol headers by clients on the specified addresses."),
        ],
    );
    let quic = section(
        "knot_resolver.datamodel.network_schema.QUICSchema",
        Some("Optional DoQ configuration."),
        vec![
            f("max-conns", int("Int1_4096", Some(1), Some(4096)), json!(1024), "Maximum number of active connections a single worker is allowed to accept."),
            f("max-streams", int("Int1_4096", Some(1), Some(4096)), json!(1024), "Maximum number of concurrent streams each connection is allowed to open. Each stream allocates > 64 KB of memory, setting this value too high might quicly consume a lot of memory. We recommend between 4 and 64."),
            f("require-retry", Ty::Bool, json!(false), "Require address validation for unknown source addresses. This adds a 1-RTT delay to connection establishment."),
        ],
    );
    section(
        "knot_resolver.datamodel.network_schema.NetworkSchema",
        Some("Network connections and protocols configuration."),
        vec![
            f("do-ipv4", Ty::Bool, json!(true), "Enable/disable using IPv4 for contacting upstream nameservers."),
            f("do-ipv6", Ty::Bool, json!(true), "Enable/disable using IPv6 for contacting upstream nameservers."),
            f("out-interface-v4", opt(v(&vt::IPV4_ADDRESS)), Value::Null, "IPv4 address used to perform queries. Not set by default, which lets the OS choose any address."),
            f("out-interface-v6", opt(v(&vt::IPV6_ADDRESS)), Value::Null, "IPv6 address used to perform queries. Not set by default, which lets the OS choose any address."),
            f("tcp-pipeline", int("Int0_65535", Some(0), Some(65535)), json!(100), "TCP pipeline limit. The number of outstanding queries that a single client connection can make in parallel."),
            f("edns-tcp-keepalive", Ty::Bool, json!(true), "Allows clients to discover the connection timeout. (RFC 7828)"),
            f("edns-buffer-size", obj(edns), json!({}), "Maximum EDNS payload size advertised in DNS packets. Different values can be configured for communication downstream (towards clients) and upstream (towards other DNS servers)."),
            f("address-renumbering", opt(list(obj(renumbering))), Value::Null, "Renumbers addresses in answers to different address space."),
            f("tls", obj(tls()), json!({}), "TLS configuration, also affects DNS over TLS, DNS over HTTPS and DNS over QUIC."),
            f("proxy-protocol", obj(proxy), json!({}), "PROXYv2 protocol configuration."),
            f("quic", obj(quic), json!({}), "DNS over QUIC configuration."),
            f("listen", list(obj(listen())), json!([{"interface": "127.0.0.1"}, {"interface": "::1", "freebind": true}]), "List of interfaces to listen to and its configuration."),
        ],
    )
}

fn views() -> ObjectDef {
    let options = section(
        "knot_resolver.datamodel.view_schema.ViewOptionsSchema",
        Some("Configuration options for clients identified by the view."),
        vec![
            f(
                "minimize",
                Ty::Bool,
                json!(true),
                "Send minimum amount of information in recursive queries to enhance privacy.",
            ),
            f("dns64", Ty::Bool, json!(true), "Enable/disable DNS64."),
            f(
                "price-factor",
                v(&vt::FLOAT_0_65535),
                json!(1.0),
                "Multiplies rate-limiting and defer prices of operations, use 0 to whitelist.",
            ),
            f(
                "fallback",
                Ty::Bool,
                json!(true),
                "Enable/disable fallback on resolution failure.",
            ),
        ],
    );
    let mut d = section(
        "knot_resolver.datamodel.view_schema.ViewSchema",
        Some("Configuration parameters that allow you to create personalized policy rules and other."),
        vec![
            req("subnets", list(v(&vt::IP_NETWORK)), "Identifies the client based on his subnet.  Rule with more precise subnet takes priority."),
            f("dst-subnet", opt(v(&vt::IP_NETWORK)), Value::Null, "Destination subnet, as an additional condition."),
            f("protocols", opt(list(Ty::Literal(&["udp53", "tcp53", "dot", "doh", "doq"]))), Value::Null, "Transport protocol, as an additional condition."),
            f("tags", opt(list(v(&vt::ID_PATTERN_TYPE))), Value::Null, "Tags to link with other policy rules."),
            f("answer", opt(Ty::Literal(&["allow", "refused", "noanswer"])), Value::Null, "Direct approach how to handle request from clients identified by the view."),
            f("options", obj(options), json!({}), "Configuration options for clients identified by the view."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_set(m, "tags") == is_set(m, "answer") {
            return fail(
                path,
                "exactly one of 'tags' and 'answer' must be configured",
            );
        }
        Ok(())
    });
    d
}

fn local_data() -> ObjectDef {
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
    let mut rpz = section(
        "knot_resolver.datamodel.local_data_schema.RPZSchema",
        Some("Configuration or Response Policy Zone (RPZ)."),
        vec![
            req("file", v(&vt::READABLE_FILE), "Path to the RPZ zone file."),
            f("watchdog", watchdog_ty(), json!("auto"), "Enables files watchdog for configured RPZ file. Requires the optional 'watchdog' dependency."),
            f("tags", opt(list(v(&vt::ID_PATTERN_TYPE))), Value::Null, "Tags to link with other policy rules."),
            f("log", opt(list(Ty::Literal(&["ip", "name"]))), Value::Null, "Enables logging information whenever this RPZ matches."),
        ],
    );
    rpz.transform = Some(|m, _, _| {
        resolve_watchdog(m);
        Ok(())
    });
    rpz.validate = Some(|m, _, path| {
        if is_true(m, "watchdog") && !WATCHDOG_AVAILABLE {
            return fail(path, "'watchdog' is enabled, but the required 'watchdog' dependency (optional) is not installed");
        }
        Ok(())
    });
    section(
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
    )
}

fn forward_server() -> Ty {
    let mut d = section(
        "knot_resolver.datamodel.forward_schema.ForwardServerSchema",
        Some("Forward server configuration."),
        vec![
            req(
                "address",
                loi(v(&vt::IP_ADDRESS_OPTIONAL_PORT)),
                "IP address(es) of a forward server.",
            ),
            f(
                "transport",
                opt(Ty::Literal(&["tls"])),
                Value::Null,
                "Transport protocol for a forward server.",
            ),
            f(
                "pin-sha256",
                opt(loi(v(&vt::PIN_SHA256))),
                Value::Null,
                "Hash of accepted CA certificate.",
            ),
            f(
                "hostname",
                opt(v(&vt::DOMAIN_NAME)),
                Value::Null,
                "Hostname of the Forward server.",
            ),
            f(
                "ca-file",
                opt(v(&vt::READABLE_FILE)),
                Value::Null,
                "Path to CA certificate file.",
            ),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_set(m, "pin-sha256") && (is_set(m, "hostname") || is_set(m, "ca-file")) {
            return fail(
                path,
                "'pin-sha256' cannot be configured together with 'hostname' or 'ca-file'",
            );
        }
        Ok(())
    });
    Ty::Union(vec![v(&vt::IP_ADDRESS_OPTIONAL_PORT), obj(d)])
}

/// Upstream's `is_port_custom`: decided by the first server that has a port or is an object.
fn is_port_custom(servers: &[Value]) -> bool {
    for server in servers {
        match server {
            Value::String(s) => {
                if let Some(port) = IpAddressOptionalPort::parse(s).ok().and_then(|a| a.port()) {
                    return port != 53;
                }
            }
            Value::Object(o) => {
                return o
                    .get("address")
                    .and_then(Value::as_array)
                    .is_some_and(|a| is_port_custom(a));
            }
            _ => {}
        }
    }
    false
}

fn forward() -> ObjectDef {
    let options = section(
        "knot_resolver.datamodel.forward_schema.ForwardOptionsSchema",
        Some("Subtree(s) forward options."),
        vec![
            f(
                "authoritative",
                Ty::Bool,
                json!(false),
                "The forwarding target is an authoritative server.",
            ),
            f("dnssec", Ty::Bool, json!(true), "Enable/disable DNSSEC."),
        ],
    );
    let mut d = section(
        "knot_resolver.datamodel.forward_schema.ForwardSchema",
        Some("Configuration of forward subtree."),
        vec![
            req(
                "subtree",
                loi(v(&vt::DOMAIN_NAME)),
                "Subtree(s) to forward.",
            ),
            req(
                "servers",
                list(forward_server()),
                "Forward servers configuration.",
            ),
            f(
                "options",
                obj(options),
                json!({}),
                "Subtree(s) forward options.",
            ),
        ],
    );
    d.validate = Some(|m, _, path| {
        let authoritative = m
            .get("options")
            .and_then(|o| o.get("authoritative"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let servers = m
            .get("servers")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if authoritative && is_port_custom(servers) {
            return fail(
                path,
                "Forwarding to authoritative servers on a custom port is currently not supported.",
            );
        }
        let tls = servers
            .iter()
            .find_map(Value::as_object)
            .is_some_and(|o| o.get("transport").and_then(Value::as_str) == Some("tls"));
        if authoritative && tls {
            return fail(
                path,
                "Forwarding to authoritative servers using TLS protocol is not supported.",
            );
        }
        Ok(())
    });
    d
}

fn fallback() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.forward_schema.FallbackSchema",
        Some("Configuration for fallback after resolution failure."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(false),
                "Enable/disable the fallback.",
            ),
            f(
                "servers",
                opt(list(forward_server())),
                Value::Null,
                "Forward servers configuration for fallback.",
            ),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "servers") {
            return fail(path, "Fallback enabled without configuring servers.");
        }
        Ok(())
    });
    d
}

fn time_seconds(m: &Map<String, Value>, key: &str) -> u64 {
    m.get(key)
        .and_then(Value::as_str)
        .and_then(|s| TimeUnit::parse(s).ok())
        .map_or(0, |t| t.seconds())
}

fn cache() -> ObjectDef {
    let gc = section(
        "knot_resolver.datamodel.cache_schema.GarbageCollectorSchema",
        Some("Configuration options of the cache garbage collector (kres-cache-gc)."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(true),
                "Enable/disable cache garbage collector.",
            ),
            f(
                "interval",
                v(&vt::TIME_UNIT),
                json!("1s"),
                "Time interval how often the garbage collector will be run.",
            ),
            f(
                "threshold",
                percent(),
                json!(80),
                "Cache usage in percent that triggers the garbage collector.",
            ),
            f(
                "release",
                percent(),
                json!(10),
                "Percent of used cache to be freed by the garbage collector.",
            ),
            f(
                "temp-keys-space",
                v(&vt::SIZE_UNIT),
                json!("0M"),
                "Maximum amount of temporary memory for copied keys (0 = unlimited).",
            ),
            f(
                "rw-deletes",
                int_non_negative(),
                json!(100),
                "Maximum number of deleted records per read-write transaction (0 = unlimited).",
            ),
            f(
                "rw-reads",
                int_non_negative(),
                json!(200),
                "Maximum number of read records per read-write transaction (0 = unlimited).",
            ),
            f(
                "rw-duration",
                v(&vt::TIME_UNIT),
                json!("0us"),
                "Maximum duration of read-write transaction (0 = unlimited).",
            ),
            f(
                "rw-delay",
                v(&vt::TIME_UNIT),
                json!("0us"),
                "Wait time between two read-write transactions.",
            ),
            f(
                "dry-run",
                Ty::Bool,
                json!(false),
                "Run the garbage collector in dry-run mode.",
            ),
        ],
    );
    let mut prefill = section(
        "knot_resolver.datamodel.cache_schema.PrefillSchema",
        Some("Prefill the cache periodically by importing zone data obtained over HTTP."),
        vec![
            req("origin", v(&vt::DOMAIN_NAME), "Origin for the imported data. Cache prefilling is only supported for the root zone ('.')."),
            req("url", v(&vt::ESCAPED_STR), "URL of the zone data to be imported."),
            f("refresh-interval", v(&vt::TIME_UNIT), json!("1d"), "Time interval between consecutive refreshes of the imported zone data."),
            f("ca-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to the file containing a CA certificate bundle that is used to authenticate the HTTPS connection."),
        ],
    );
    prefill.validate = Some(|m, _, path| {
        if m.get("origin").and_then(Value::as_str) != Some(".") {
            return fail(
                path,
                "cache prefilling is not yet supported for non-root zones",
            );
        }
        Ok(())
    });
    let prediction = section(
        "knot_resolver.datamodel.cache_schema.PredictionSchema",
        Some("Helps keep the cache hot by prefetching expiring records and learning usage patterns and repetitive queries."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable prediction."),
            f("window", v(&vt::TIME_UNIT), json!("15m"), "Sampling window length."),
            f("period", int_positive(), json!(24), "Number of windows that can be kept in memory."),
        ],
    );
    let prefetch = section(
        "knot_resolver.datamodel.cache_schema.PrefetchSchema",
        Some("These options help keep the cache hot by prefetching expiring records or learning usage patterns and repetitive queries."),
        vec![
            f("expiring", Ty::Bool, json!(false), "Prefetch expiring records."),
            f("prediction", obj(prediction), json!({}), "Prefetch record by predicting based on usage patterns and repetitive queries."),
        ],
    );
    let mut d = section(
        "knot_resolver.datamodel.cache_schema.CacheSchema",
        Some("DNS resolver cache configuration."),
        vec![
            f("storage", v(&vt::WRITABLE_DIR), json!("/var/cache/knot-resolver"), "Cache storage of the DNS resolver."),
            f("size-max", v(&vt::SIZE_UNIT), json!("100M"), "Maximum size of the cache."),
            f("garbage-collector", obj(gc), json!({}), "Use the garbage collector (kres-cache-gc) to periodically clear cache."),
            f("ttl-min", v(&vt::TIME_UNIT), json!("5s"), "Minimum time-to-live for the cache entries."),
            f("ttl-max", v(&vt::TIME_UNIT), json!("1d"), "Maximum time-to-live for the cache entries."),
            f("ns-timeout", v(&vt::TIME_UNIT), json!("1000ms"), "Time interval for which a nameserver address will be ignored after determining that it does not return (useful) answers."),
            f("prefill", opt(list(obj(prefill))), Value::Null, "Prefill the cache periodically by importing zone data obtained over HTTP."),
            f("prefetch", obj(prefetch), json!({}), "These options help keep the cache hot by prefetching expiring records or learning usage patterns and repetitive queries."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if time_seconds(m, "ttl-min") > time_seconds(m, "ttl-max") {
            return fail(path, "'ttl-max' can't be smaller than 'ttl-min'");
        }
        Ok(())
    });
    d
}

fn dnssec() -> ObjectDef {
    let ta_file = section(
        "knot_resolver.datamodel.dnssec_schema.TrustAnchorFileSchema",
        Some("Trust-anchor zonefile configuration."),
        vec![
            req(
                "file",
                v(&vt::READABLE_FILE),
                "Path to the zonefile that stores trust-anchors.",
            ),
            f(
                "read-only",
                Ty::Bool,
                json!(false),
                "Blocks zonefile updates according to RFC 5011.",
            ),
        ],
    );
    section(
        "knot_resolver.datamodel.dnssec_schema.DnssecSchema",
        Some("DNSSEC configuration."),
        vec![
            f("enable", Ty::Bool, json!(true), "Enable/disable DNSSEC."),
            f("log-bogus", Ty::Bool, json!(false), "Enable logging for each DNSSEC validation failure if '/logging/level' is set to at least 'notice'."),
            f("sentinel", Ty::Bool, json!(true), "Allows users of DNSSEC validating resolver to detect which root keys are configured in resolver's chain of trust. (RFC 8509)"),
            f("signal-query", Ty::Bool, json!(true), "Signaling Trust Anchor Knowledge in DNSSEC Using Key Tag Query, according to (RFC 8145#section-5)."),
            f("trust-anchors", opt(list(v(&vt::ESCAPED_STR))), Value::Null, "Trust-anchors configuration."),
            f("trust-anchors-files", opt(list(obj(ta_file))), Value::Null, "List of zone-files where trust-anchors are stored."),
            f("negative-trust-anchors", opt(list(v(&vt::DOMAIN_NAME))), Value::Null, "List of domain names representing negative trust-anchors. (RFC 7646)"),
        ],
    )
}

fn dns64() -> ObjectDef {
    section(
        "knot_resolver.datamodel.dns64_schema.Dns64Schema",
        Some("DNS64 (RFC 6147) configuration."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable DNS64."),
            f(
                "prefix",
                v(&vt::IPV6_NETWORK_96),
                json!("64:ff9b::/96"),
                "IPv6 prefix to be used for synthesizing AAAA records.",
            ),
            f(
                "reverse-ttl",
                opt(v(&vt::TIME_UNIT)),
                Value::Null,
                "TTL in CNAME generated in the reverse 'ip6.arpa.' subtree.",
            ),
            f(
                "exclude-subnets",
                opt(list(v(&vt::IPV6_NETWORK))),
                Value::Null,
                "IPv6 subnets that are disallowed in answer.",
            ),
        ],
    )
}

/// Logging levels, in upstream's order.
pub const LOG_LEVELS: &[&str] = &["crit", "err", "warning", "notice", "info", "debug"];
const LOG_TARGETS: &[&str] = &["syslog", "stderr", "stdout"];
/// Groups that name our own processes and manager parts rather than kresd log groups: the
/// first entries of [`LOG_GROUPS`]. The Lua generator leaves them out of `log_groups()`.
pub const NON_KRESD_LOG_GROUPS: &[&str] = LOG_GROUPS.split_at(8).0;

/// Every accepted logging group (processes, manager parts, kresd groups).
pub const LOG_GROUPS: &[&str] = &[
    "manager",
    "supervisord",
    "policy-loader",
    "kresd",
    "cache-gc",
    "files",
    "metrics",
    "server",
    "system",
    "cache",
    "io",
    "net",
    "ta",
    "tasent",
    "tasign",
    "taupd",
    "tls",
    "gnutls",
    "tls_cl",
    "xdp",
    "doh",
    "dnssec",
    "hint",
    "plan",
    "iterat",
    "valdtr",
    "resolv",
    "select",
    "zoncut",
    "cookie",
    "statis",
    "rebind",
    "worker",
    "policy",
    "daf",
    "timejm",
    "timesk",
    "graphi",
    "prefil",
    "primin",
    "srvstl",
    "wtchdg",
    "nsid",
    "dnstap",
    "tests",
    "dotaut",
    "http",
    "contrl",
    "module",
    "devel",
    "renum",
    "exterr",
    "rules",
    "prlayr",
    "defer",
    "doq",
    "ngtcp2",
];

fn logging() -> ObjectDef {
    let mut dnstap = section(
        "knot_resolver.datamodel.logging_schema.DnstapSchema",
        Some("Logging DNS queries and responses to a unix socket."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(false),
                "Enable/disable DNS queries logging.",
            ),
            f(
                "unix-socket",
                opt(v(&vt::WRITABLE_FILE_PATH)),
                Value::Null,
                "Path to unix domain socket where dnstap messages will be sent.",
            ),
            f(
                "log-queries",
                Ty::Bool,
                json!(false),
                "Log queries from downstream in wire format.",
            ),
            f(
                "log-responses",
                Ty::Bool,
                json!(false),
                "Log responses to downstream in wire format.",
            ),
            f(
                "log-tcp-rtt",
                Ty::Bool,
                json!(false),
                "Log TCP RTT (Round-trip time).",
            ),
        ],
    );
    dnstap.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "unix-socket") {
            return fail(
                path,
                "DNS queries logging enabled, but 'unix-socket' not specified",
            );
        }
        Ok(())
    });
    let mut d = section(
        "knot_resolver.datamodel.logging_schema.LoggingSchema",
        Some("Logging and debugging configuration."),
        vec![
            f("level", Ty::Literal(LOG_LEVELS), json!("notice"), "Global logging level."),
            f("target", Ty::Union(vec![Ty::Literal(LOG_TARGETS), Ty::Literal(&["from-arg"])]), json!("from-arg"), "Global logging stream target. If 'from-arg', uses '--logtarget' argument ('stdout' by default)."),
            f("groups", opt(list(Ty::Literal(LOG_GROUPS))), Value::Null, "List of groups for which 'debug' logging level is set."),
            f("dnstap", obj(dnstap), json!({}), "Logging DNS requests and responses to a unix socket."),
        ],
    );
    d.transform = Some(|m, _, path| {
        if m.get("target").and_then(Value::as_str) == Some("from-arg") {
            let target = std::env::var(LOGTARGET_ENV_VAR)
                .ok()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "stdout".into());
            if !LOG_TARGETS.contains(&target.as_str()) {
                return fail(
                    path,
                    format!("logging target '{target}' from '--logtarget' argument is invalid"),
                );
            }
            m.insert("target".into(), Value::String(target));
        }
        Ok(())
    });
    d.validate = Some(|m, _, path| {
        if let Some(Value::Array(groups)) = m.get("groups") {
            for (i, g) in groups.iter().enumerate() {
                if groups[..i].contains(g) {
                    return fail(
                        path,
                        format!(
                            "duplicate logging group '{}' on index {i}",
                            g.as_str().unwrap_or_default()
                        ),
                    );
                }
            }
        }
        Ok(())
    });
    d
}

fn monitoring() -> ObjectDef {
    let mut graphite = section(
        "knot_resolver.datamodel.monitoring_schema.GraphiteSchema",
        None,
        vec![
            f("enable", Ty::Bool, json!(false), ""),
            f(
                "host",
                Ty::Union(vec![
                    Ty::Null,
                    v(&vt::IPV4_ADDRESS),
                    v(&vt::IPV6_ADDRESS),
                    v(&vt::DOMAIN_NAME),
                ]),
                Value::Null,
                "",
            ),
            f("port", port_number(), json!(2003), ""),
            f("prefix", v(&vt::ESCAPED_STR), json!(""), ""),
            f("interval", v(&vt::TIME_UNIT), json!("5s"), ""),
            f("tcp", Ty::Bool, json!(false), ""),
        ],
    );
    graphite.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "host") {
            return fail(
                path,
                "'host' option must be configured to enable graphite bridge",
            );
        }
        Ok(())
    });
    section(
        "knot_resolver.datamodel.monitoring_schema.MonitoringSchema",
        Some(""),
        vec![
            f(
                "metrics",
                Ty::Literal(&["manager-only", "lazy", "always"]),
                json!("lazy"),
                "configures, whether metrics/statistics will be collected by the resolver",
            ),
            f(
                "graphite",
                obj(graphite),
                json!({}),
                "optionally configures where should graphite metrics be sent to",
            ),
        ],
    )
}

fn rate_limiting() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.rate_limiting_schema.RateLimitingSchema",
        Some("Configuration of rate limiting."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable rate limiting"),
            f("rate-limit", opt(int_positive()), Value::Null, "Maximal number of allowed queries per second from a single host."),
            f("instant-limit", int_positive(), json!(50), "Maximal number of allowed queries at a single point in time from a single host."),
            f("capacity", int_positive(), json!(524288), "Expected maximal number of blocked networks/hosts at the same time."),
            f("slip", int("Int0_32", Some(0), Some(32)), json!(2), "Number of restricted responses out of which one is sent as truncated, the others are dropped."),
            f("log-period", v(&vt::TIME_UNIT), json!("0s"), "Minimal time between two log messages, or '0s' to disable."),
            f("dry-run", Ty::Bool, json!(false), "Perform only classification and logging but no restrictions."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_true(m, "enable") && !is_set(m, "rate-limit") {
            return fail(
                path,
                "'rate-limit' has to be configured to enable rate limiting",
            );
        }
        let max_instant: u64 = (1u64 << 32) / 768 - 1;
        let instant = m
            .get("instant-limit")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        if instant > max_instant {
            return fail(
                path,
                format!("'instant-limit' has to be in range 1..{max_instant}"),
            );
        }
        if let Some(rate) = m.get("rate-limit").and_then(Value::as_u64) {
            if u128::from(rate) > 1000 * u128::from(instant) {
                return fail(
                    path,
                    "'rate-limit' has to be in range 1..(1000 * instant-limit)",
                );
            }
        }
        Ok(())
    });
    d
}

fn defer() -> ObjectDef {
    section(
        "knot_resolver.datamodel.defer_schema.DeferSchema",
        Some("Configuration of request prioritization (defer)."),
        vec![
            f(
                "enable",
                Ty::Bool,
                json!(true),
                "Use request prioritization.",
            ),
            f(
                "log-period",
                v(&vt::TIME_UNIT),
                json!("0s"),
                "Minimal time between two log messages, or '0s' to disable.",
            ),
        ],
    )
}

fn lua() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.lua_schema.LuaSchema",
        Some("Custom Lua configuration."),
        vec![
            f("script-only", Ty::Bool, json!(false), "Ignore declarative configuration intended for workers and use only Lua script or script file configured in this section."),
            f("script", opt(Ty::Str), Value::Null, "Custom Lua configuration script intended for workers."),
            f("script-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to file that contains Lua configuration script for workers."),
            f("policy-script-only", Ty::Bool, json!(false), "Ignore declarative configuration intended for policy-loader and use only Lua script or script file configured in this section."),
            f("policy-script", opt(Ty::Str), Value::Null, "Custom Lua configuration script intended for policy-loader."),
            f("policy-script-file", opt(v(&vt::READABLE_FILE)), Value::Null, "Path to file that contains Lua configuration script for policy-loader."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if is_nonempty_str(m, "script") && is_set(m, "script-file") {
            return fail(
                path,
                "'lua.script' and 'lua.script-file' are both defined, only one can be used",
            );
        }
        if is_nonempty_str(m, "policy-script") && is_set(m, "policy-script-file") {
            return fail(path, "'lua.policy-script' and 'lua.policy-script-file' are both defined, only one can be used");
        }
        Ok(())
    });
    d
}

/// Tags used by `rules` or `rpz` entries, and a failure for each entry using tags no view defines.
/// The path names `rules` and counts only entries with tags, like upstream (even for `rpz`).
fn check_local_data_tags(
    views_tags: &[String],
    entries: Option<&Value>,
) -> (Vec<String>, Vec<Failure>) {
    let mut tags = Vec::new();
    let mut errs = Vec::new();
    let mut i = 0;
    for entry in entries
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let Some(Value::Array(entry_tags)) = entry.get("tags") else {
            continue;
        };
        let mut missing = Vec::new();
        for t in entry_tags.iter().filter_map(Value::as_str) {
            if !tags.iter().any(|x| x == t) {
                tags.push(t.to_owned());
            }
            if !views_tags.iter().any(|x| x == t) && !missing.iter().any(|x| x == t) {
                missing.push(t.to_owned());
            }
        }
        if !missing.is_empty() {
            let path = child_path(&child_path("/local-data/rules", &i.to_string()), "tags");
            errs.push(Failure::new(
                &path,
                format!(
                    "some tags {} not found in '/views' tags",
                    py_str_list(&missing)
                ),
            ));
        }
        i += 1;
    }
    (tags, errs)
}

fn root() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.config_schema.KresConfig",
        Some("Version Knot Resolver 6.5.0"),
        vec![
            f("version", Ty::PlainInt, json!(1), "Version of the configuration schema. By default it is the latest supported by the resolver, but couple of versions back are be supported as well."),
            f("nsid", opt(v(&vt::ESCAPED_STR)), Value::Null, "Name Server Identifier (RFC 5001) which allows DNS clients to request resolver to send back its NSID along with the reply to a DNS request."),
            f("hostname", opt(v(&vt::ESCAPED_STR)), Value::Null, "Internal DNS resolver hostname. Default is machine hostname."),
            f("rundir", v(&vt::WRITABLE_DIR), json!("/run/knot-resolver"), "Directory where the resolver can create files and which will be it's cwd."),
            f("workers", Ty::Union(vec![Ty::Literal(&["auto"]), int_positive()]), json!(1), "The number of running kresd (Knot Resolver daemon) workers. If set to 'auto', it is equal to number of CPUs available."),
            f("management", obj(management()), json!({"unix-socket": "/run/knot-resolver/kres-api.sock"}), "Configuration of management HTTP API."),
            f("options", obj(options()), json!({}), "Fine-tuning global parameters of DNS resolver operation."),
            f("network", obj(network()), json!({}), "Network connections and protocols configuration."),
            f("views", opt(list(obj(views()))), Value::Null, "List of views and its configuration."),
            f("local-data", obj(local_data()), json!({}), "Local data for forward records (A/AAAA) and reverse records (PTR)."),
            f("forward", opt(list(obj(forward()))), Value::Null, "List of Forward Zones and its configuration."),
            f("fallback", obj(fallback()), json!({}), "Config for fallback on resolution failure."),
            f("cache", obj(cache()), json!({}), "DNS resolver cache configuration."),
            f("dnssec", obj(dnssec()), json!({}), "DNSSEC configuration."),
            f("dns64", obj(dns64()), json!({}), "DNS64 (RFC 6147) configuration."),
            f("logging", obj(logging()), json!({}), "Logging and debugging configuration."),
            f("monitoring", obj(monitoring()), json!({}), "Metrics exposition configuration (Prometheus, Graphite)"),
            f("rate-limiting", obj(rate_limiting()), json!({}), "Configuration of rate limiting."),
            f("defer", obj(defer()), json!({}), "Configuration of request prioritization (defer)."),
            f("lua", obj(lua()), json!({}), "Custom Lua configuration."),
        ],
    );
    d.transform = Some(|m, _, path| {
        m.remove("version");
        if !is_set(m, "hostname") {
            let host = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            m.insert("hostname".into(), Value::String(host));
        }
        if m.get("workers").and_then(Value::as_str) == Some("auto") {
            match usable_cpus() {
                Some(n) => {
                    m.insert("workers".into(), json!(n));
                }
                None => {
                    return fail(
                        path,
                        "The number of available CPUs to automatically set the number of running 'kresd' workers could not be determined.\
                         The number of workers can be configured manually in 'workers' option.",
                    )
                }
            }
        }
        Ok(())
    });
    d.validate = Some(|m, _, path| {
        let max = workers_max_count();
        if m.get("workers").and_then(Value::as_u64).unwrap_or(0) > u64::from(max) {
            return fail(path, format!("can't run with more workers than the recommended maximum {max} or hardcoded {WORKERS_MAX}"));
        }
        let mut views_tags: Vec<String> = Vec::new();
        for view in m
            .get("views")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            for t in view
                .get("tags")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                if let Some(t) = t.as_str() {
                    if !views_tags.iter().any(|x| x == t) {
                        views_tags.push(t.to_owned());
                    }
                }
            }
        }
        let local = m.get("local-data");
        let (rule_tags, mut errs) =
            check_local_data_tags(&views_tags, local.and_then(|l| l.get("rules")));
        let (rpz_tags, mut rpz_errs) =
            check_local_data_tags(&views_tags, local.and_then(|l| l.get("rpz")));
        errs.append(&mut rpz_errs);
        let mut unused = views_tags.clone();
        for t in rule_tags.iter().chain(rpz_tags.iter()) {
            if let Some(pos) = unused.iter().position(|x| x == t) {
                unused.remove(pos);
            }
        }
        if unused.len() > 1 {
            errs.push(Failure::new(
                "/views",
                format!("unused tags {} found", py_str_list(&unused)),
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs)
        }
    });
    d
}

/// The model description, built once.
pub(crate) fn root_def() -> &'static ObjectDef {
    static ROOT: OnceLock<ObjectDef> = OnceLock::new();
    ROOT.get_or_init(root)
}

/// Validate a raw document (a mapping; `null` counts as empty) into its normalized form.
pub(crate) fn normalize(raw: &Value, ctx: &Ctx<'_>) -> Result<Value, Vec<Failure>> {
    match raw {
        Value::Null => super::engine::map_object(root_def(), &Map::new(), "", ctx),
        Value::Object(m) => super::engine::map_object(root_def(), m, "", ctx),
        other => Err(vec![Failure::new(
            "",
            format!(
                "expected dict-like object, found '{}'",
                super::engine::py_type(other)
            ),
        )]),
    }
}

// ---------------------------------------------------------------------------------------------
// the typed model

/// The validated configuration: defaults applied, `auto` resolved, relative paths resolved.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KresConfig {
    /// NSID prefix; each worker appends its id.
    pub nsid: Option<String>,
    /// Hostname (the machine's when not configured).
    pub hostname: String,
    /// The manager's working directory for runtime files.
    pub rundir: PathBuf,
    /// Number of kresd workers (`auto` resolved to the usable CPUs).
    pub workers: u32,
    /// Configuration of management HTTP API.
    pub management: ManagementSchema,
    /// Fine-tuning global parameters of DNS resolver operation.
    pub options: OptionsSchema,
    /// Network connections and protocols configuration.
    pub network: NetworkSchema,
    /// List of views and its configuration.
    pub views: Option<Vec<ViewSchema>>,
    /// Local data for forward records (A/AAAA) and reverse records (PTR).
    pub local_data: LocalDataSchema,
    /// List of Forward Zones and its configuration.
    pub forward: Option<Vec<ForwardSchema>>,
    /// Config for fallback on resolution failure.
    pub fallback: FallbackSchema,
    /// DNS resolver cache configuration.
    pub cache: CacheSchema,
    /// DNSSEC configuration.
    pub dnssec: DnssecSchema,
    /// DNS64 (RFC 6147) configuration.
    pub dns64: Dns64Schema,
    /// Logging and debugging configuration.
    pub logging: LoggingSchema,
    /// Metrics exposition configuration (Prometheus, Graphite)
    pub monitoring: MonitoringSchema,
    /// Configuration of rate limiting.
    pub rate_limiting: RateLimitingSchema,
    /// Configuration of request prioritization (defer).
    pub defer: DeferSchema,
    /// Custom Lua configuration.
    pub lua: LuaSchema,
}

/// Where the management HTTP API listens (exactly one is set).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ManagementSchema {
    /// Path to unix domain socket to listen to.
    pub unix_socket: Option<PathBuf>,
    /// IP address and port number to listen to.
    pub interface: Option<IpAddressPort>,
}

/// Glue records strictness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GlueChecking {
    Normal,
    Strict,
    Permissive,
}

impl GlueChecking {
    /// The configuration spelling, which is also kresd's `mode()` argument.
    pub fn as_str(self) -> &'static str {
        match self {
            GlueChecking::Normal => "normal",
            GlueChecking::Strict => "strict",
            GlueChecking::Permissive => "permissive",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OptionsSchema {
    /// Glue records strictness checking level.
    pub glue_checking: GlueChecking,
    /// Send minimum amount of information in recursive queries to enhance privacy.
    pub minimize: bool,
    /// Permits queries to loopback addresses.
    pub query_loopback: bool,
    /// Controls whether resource records within a RRSet are reordered each time it is served from the cache.
    pub reorder_rrset: bool,
    /// Randomize Query Character Case.
    pub query_case_randomization: bool,
    /// Initializing DNS resolver cache with Priming Queries (RFC 8109)
    pub priming: bool,
    /// Protection against DNS Rebinding attack.
    pub rebinding_protection: bool,
    /// Queries without RD (recursion desired) bit set in query are answered with REFUSED.
    pub refuse_no_rd: bool,
    /// Detection of difference between local system time and expiration time bounds in DNSSEC signatures for '. NS' records.
    pub time_jump_detection: bool,
    /// Workarounds for known DNS protocol violators.
    pub violators_workarounds: bool,
    /// Allows using timed-out records in case DNS resolver is unable to contact upstream servers.
    pub serve_stale: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NetworkSchema {
    /// Enable/disable using IPv4 for contacting upstream nameservers.
    pub do_ipv4: bool,
    /// Enable/disable using IPv6 for contacting upstream nameservers.
    pub do_ipv6: bool,
    /// IPv4 address used to perform queries. Not set by default, which lets the OS choose any address.
    pub out_interface_v4: Option<std::net::Ipv4Addr>,
    /// IPv6 address used to perform queries. Not set by default, which lets the OS choose any address.
    pub out_interface_v6: Option<std::net::Ipv6Addr>,
    /// TCP pipeline limit. The number of outstanding queries that a single client connection can make in parallel.
    pub tcp_pipeline: u16,
    /// Allows clients to discover the connection timeout. (RFC 7828)
    pub edns_tcp_keepalive: bool,
    /// Maximum EDNS payload size advertised in DNS packets. Different values can be configured for communication downstream (towards clients) and upstream (towards other DNS servers).
    pub edns_buffer_size: EdnsBufferSizeSchema,
    /// Renumbers addresses in answers to different address space.
    pub address_renumbering: Option<Vec<AddressRenumberingSchema>>,
    /// TLS configuration, also affects DNS over TLS, DNS over HTTPS and DNS over QUIC.
    pub tls: TlsSchema,
    /// PROXYv2 protocol configuration.
    pub proxy_protocol: ProxyProtocolSchema,
    /// DNS over QUIC configuration.
    pub quic: QuicSchema,
    /// List of interfaces to listen to and its configuration.
    pub listen: Vec<ListenSchema>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EdnsBufferSizeSchema {
    /// Maximum EDNS upstream (towards other DNS servers) payload size.
    pub upstream: SizeUnit,
    /// Maximum EDNS downstream (towards clients) payload size for communication.
    pub downstream: SizeUnit,
}

/// Destination of an address renumbering: an address, or an address with `!`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RenumberingDestination {
    Exact(IpAddressEm),
    Prefix(std::net::IpAddr),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AddressRenumberingSchema {
    /// Source subnet.
    pub source: IpNetwork,
    /// Destination address prefix.
    pub destination: RenumberingDestination,
}

/// EDNS padding: on/off or a block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TlsPadding {
    Enabled(bool),
    BlockSize(u16),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TlsSchema {
    /// Enables watchdog of changes in TLS certificate files. Requires the optional 'watchdog' dependency.
    pub watchdog: bool,
    /// Path to certificate file.
    pub cert_file: Option<PathBuf>,
    /// Path to certificate key file.
    pub key_file: Option<PathBuf>,
    /// Secret for TLS session resumption via tickets. (RFC 5077).
    pub sticket_secret: Option<EscapedStr>,
    /// Path to file with secret for TLS session resumption via tickets. (RFC 5077).
    pub sticket_secret_file: Option<PathBuf>,
    /// EDNS(0) padding of queries and answers sent over an encrypted channel.
    pub padding: TlsPadding,
}

/// An address or a network (PROXYv2 `allow`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum AddressOrNetwork {
    Address(std::net::IpAddr),
    Network(IpNetwork),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ProxyProtocolSchema {
    /// Enable/disable PROXYv2 protocol.
    pub enable: bool,
    /// Allow usage of the PROXYv2 protocol headers by clients on the specified addresses.
    pub allow: Option<Vec<AddressOrNetwork>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct QuicSchema {
    /// Maximum number of active connections a single worker is allowed to accept.
    pub max_conns: u16,
    /// Maximum number of concurrent streams each connection is allowed to open. Each stream allocates > 64 KB of memory, setting this value too high might quicly consume a lot of memory. We recommend between 4 and 64.
    pub max_streams: u16,
    /// Require address validation for unknown source addresses. This adds a 1-RTT delay to connection establishment.
    pub require_retry: bool,
}

/// The DNS transport of a listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenKind {
    Dns,
    Xdp,
    Dot,
    DohLegacy,
    Doh2,
    Doh2Insecure,
    Doq,
}

impl ListenKind {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenKind::Dns => "dns",
            ListenKind::Xdp => "xdp",
            ListenKind::Dot => "dot",
            ListenKind::DohLegacy => "doh-legacy",
            ListenKind::Doh2 => "doh2",
            ListenKind::Doh2Insecure => "doh2-insecure",
            ListenKind::Doq => "doq",
        }
    }
}

/// One listening specification: `interface` xor `unix_socket`; `port` is filled in from `kind`
/// for interfaces without `@port`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ListenSchema {
    /// IP address or interface name with optional port number to listen to.
    pub interface: Option<Vec<InterfaceOptionalPort>>,
    /// Path to unix domain socket to listen to.
    pub unix_socket: Option<Vec<PathBuf>>,
    /// Port number to listen to.
    pub port: Option<u16>,
    /// Specifies DNS query transport protocol.
    pub kind: ListenKind,
    /// Used for binding to non-local address.
    pub freebind: bool,
}

impl ListenSchema {
    /// Whether the daemon can bind the sockets of `iface` and hand them to kresd with
    /// `-S fd[:tls]`: plain DNS (UDP and TCP) and DoT, over an address without an IPv6 scope or
    /// an interface name. Other kinds (kresd 6.5 rejects `doh2` there) and scoped addresses are
    /// bound by kresd itself from the Lua configuration.
    pub fn daemon_binds(&self, iface: &InterfaceOptionalPort) -> bool {
        matches!(self.kind, ListenKind::Dns | ListenKind::Dot) && !iface.host_str().contains('%')
    }
}

/// View protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewProtocol {
    Udp53,
    Tcp53,
    Dot,
    Doh,
    Doq,
}

/// Direct answers of a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewAnswer {
    Allow,
    Refused,
    Noanswer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ViewOptionsSchema {
    /// Send minimum amount of information in recursive queries to enhance privacy.
    pub minimize: bool,
    /// Enable/disable DNS64.
    pub dns64: bool,
    /// Multiplies rate-limiting and defer prices of operations, use 0 to whitelist.
    pub price_factor: f64,
    /// Enable/disable fallback on resolution failure.
    pub fallback: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ViewSchema {
    /// Identifies the client based on his subnet.  Rule with more precise subnet takes priority.
    pub subnets: Vec<IpNetwork>,
    /// Destination subnet, as an additional condition.
    pub dst_subnet: Option<IpNetwork>,
    /// Transport protocol, as an additional condition.
    pub protocols: Option<Vec<ViewProtocol>>,
    /// Tags to link with other policy rules.
    pub tags: Option<Vec<IdPattern>>,
    /// Direct approach how to handle request from clients identified by the view.
    pub answer: Option<ViewAnswer>,
    /// Configuration options for clients identified by the view.
    pub options: ViewOptionsSchema,
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
    /// Hostname(s).
    pub name: Option<Vec<DomainName>>,
    /// Type of subtree.
    pub subtree: Option<SubtreeKind>,
    /// Address(es) to pair with hostname(s).
    pub address: Option<Vec<std::net::IpAddr>>,
    /// Path to file(s) with hostname and IP address(es) pairs in '/etc/hosts' like format.
    pub file: Option<Vec<PathBuf>>,
    /// Direct addition of records in DNS zone file format.
    pub records: Option<EscapedStr>,
    /// Tags to link with other policy rules.
    pub tags: Option<Vec<IdPattern>>,
    /// Optional, TTL value used for these answers.
    pub ttl: Option<TimeUnit>,
    /// Optional, use NODATA synthesis. NODATA will be synthesized for matching name, but mismatching type(e.g. AAAA query when only A exists).
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
    /// Path to the RPZ zone file.
    pub file: PathBuf,
    /// Enables files watchdog for configured RPZ file. Requires the optional 'watchdog' dependency.
    pub watchdog: bool,
    /// Tags to link with other policy rules.
    pub tags: Option<Vec<IdPattern>>,
    /// Enables logging information whenever this RPZ matches.
    pub log: Option<Vec<RpzLog>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LocalDataSchema {
    /// Default TTL value used for added local data/records.
    pub ttl: Option<TimeUnit>,
    /// Use NODATA synthesis. NODATA will be synthesized for matching name, but mismatching type(e.g. AAAA query when only A exists).
    pub nodata: bool,
    /// Name → addresses, in document order.
    #[serde(deserialize_with = "de_addresses")]
    pub addresses: Option<Vec<(DomainName, Vec<std::net::IpAddr>)>>,
    /// Direct addition of hostname and IP addresses pairs from files in '/etc/hosts' like format.
    pub addresses_files: Option<Vec<PathBuf>>,
    /// Zone-file text.
    pub records: Option<String>,
    /// Local data rules.
    pub rules: Option<Vec<RuleSchema>>,
    /// List of Response Policy Zones and its configuration.
    pub rpz: Option<Vec<RpzSchema>>,
}

/// Forward transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardTransport {
    Tls,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForwardServerSchema {
    /// IP address(es) of a forward server.
    pub address: Vec<IpAddressOptionalPort>,
    /// Transport protocol for a forward server.
    pub transport: Option<ForwardTransport>,
    /// Hash of accepted CA certificate.
    pub pin_sha256: Option<Vec<PinSha256>>,
    /// Hostname of the Forward server.
    pub hostname: Option<DomainName>,
    /// Path to CA certificate file.
    pub ca_file: Option<PathBuf>,
}

/// A forward target: a bare address or a detailed server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum ForwardServer {
    Address(IpAddressOptionalPort),
    Server(ForwardServerSchema),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForwardOptionsSchema {
    /// The forwarding target is an authoritative server.
    pub authoritative: bool,
    /// Enable/disable DNSSEC.
    pub dnssec: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForwardSchema {
    /// Subtree(s) to forward.
    pub subtree: Vec<DomainName>,
    /// Forward servers configuration.
    pub servers: Vec<ForwardServer>,
    /// Subtree(s) forward options.
    pub options: ForwardOptionsSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct FallbackSchema {
    /// Enable/disable the fallback.
    pub enable: bool,
    /// Forward servers configuration for fallback.
    pub servers: Option<Vec<ForwardServer>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GarbageCollectorSchema {
    /// Enable/disable cache garbage collector.
    pub enable: bool,
    /// Time interval how often the garbage collector will be run.
    pub interval: TimeUnit,
    /// Cache usage in percent that triggers the garbage collector.
    pub threshold: u8,
    /// Percent of used cache to be freed by the garbage collector.
    pub release: u8,
    /// Maximum amount of temporary memory for copied keys (0 = unlimited).
    pub temp_keys_space: SizeUnit,
    /// Maximum number of deleted records per read-write transaction (0 = unlimited).
    pub rw_deletes: u64,
    /// Maximum number of read records per read-write transaction (0 = unlimited).
    pub rw_reads: u64,
    /// Maximum duration of read-write transaction (0 = unlimited).
    pub rw_duration: TimeUnit,
    /// Wait time between two read-write transactions.
    pub rw_delay: TimeUnit,
    /// Run the garbage collector in dry-run mode.
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PrefillSchema {
    /// Origin for the imported data. Cache prefilling is only supported for the root zone ('.').
    pub origin: DomainName,
    /// URL of the zone data to be imported.
    pub url: EscapedStr,
    /// Time interval between consecutive refreshes of the imported zone data.
    pub refresh_interval: TimeUnit,
    /// Path to the file containing a CA certificate bundle that is used to authenticate the HTTPS connection.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PredictionSchema {
    /// Enable/disable prediction.
    pub enable: bool,
    /// Sampling window length.
    pub window: TimeUnit,
    /// Number of windows that can be kept in memory.
    pub period: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PrefetchSchema {
    /// Prefetch expiring records.
    pub expiring: bool,
    /// Prefetch record by predicting based on usage patterns and repetitive queries.
    pub prediction: PredictionSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CacheSchema {
    /// Cache storage of the DNS resolver.
    pub storage: PathBuf,
    /// Maximum size of the cache.
    pub size_max: SizeUnit,
    /// Use the garbage collector (kres-cache-gc) to periodically clear cache.
    pub garbage_collector: GarbageCollectorSchema,
    /// Minimum time-to-live for the cache entries.
    pub ttl_min: TimeUnit,
    /// Maximum time-to-live for the cache entries.
    pub ttl_max: TimeUnit,
    /// Time interval for which a nameserver address will be ignored after determining that it does not return (useful) answers.
    pub ns_timeout: TimeUnit,
    /// Prefill the cache periodically by importing zone data obtained over HTTP.
    pub prefill: Option<Vec<PrefillSchema>>,
    /// These options help keep the cache hot by prefetching expiring records or learning usage patterns and repetitive queries.
    pub prefetch: PrefetchSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TrustAnchorFileSchema {
    /// Path to the zonefile that stores trust-anchors.
    pub file: PathBuf,
    /// Blocks zonefile updates according to RFC 5011.
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DnssecSchema {
    /// Enable/disable DNSSEC.
    pub enable: bool,
    /// Enable logging for each DNSSEC validation failure if '/logging/level' is set to at least 'notice'.
    pub log_bogus: bool,
    /// Allows users of DNSSEC validating resolver to detect which root keys are configured in resolver's chain of trust. (RFC 8509)
    pub sentinel: bool,
    /// Signaling Trust Anchor Knowledge in DNSSEC Using Key Tag Query, according to (RFC 8145#section-5).
    pub signal_query: bool,
    /// Trust-anchors configuration.
    pub trust_anchors: Option<Vec<EscapedStr>>,
    /// List of zone-files where trust-anchors are stored.
    pub trust_anchors_files: Option<Vec<TrustAnchorFileSchema>>,
    /// List of domain names representing negative trust-anchors. (RFC 7646)
    pub negative_trust_anchors: Option<Vec<DomainName>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Dns64Schema {
    /// Enable/disable DNS64.
    pub enable: bool,
    /// IPv6 prefix to be used for synthesizing AAAA records.
    pub prefix: IpNetwork,
    /// TTL in CNAME generated in the reverse 'ip6.arpa.' subtree.
    pub reverse_ttl: Option<TimeUnit>,
    /// IPv6 subnets that are disallowed in answer.
    pub exclude_subnets: Option<Vec<IpNetwork>>,
}

/// Logging verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    Crit,
    Err,
    Warning,
    Notice,
    Info,
    Debug,
}

impl LogLevel {
    /// The configuration spelling (`notice`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Crit => "crit",
            LogLevel::Err => "err",
            LogLevel::Warning => "warning",
            LogLevel::Notice => "notice",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// Where logs go (`from-arg` resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogTarget {
    Syslog,
    Stderr,
    Stdout,
}

impl LogTarget {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LogTarget::Syslog => "syslog",
            LogTarget::Stderr => "stderr",
            LogTarget::Stdout => "stdout",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DnstapSchema {
    /// Enable/disable DNS queries logging.
    pub enable: bool,
    /// Path to unix domain socket where dnstap messages will be sent.
    pub unix_socket: Option<PathBuf>,
    /// Log queries from downstream in wire format.
    pub log_queries: bool,
    /// Log responses to downstream in wire format.
    pub log_responses: bool,
    /// Log TCP RTT (Round-trip time).
    pub log_tcp_rtt: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LoggingSchema {
    /// Global logging level.
    pub level: LogLevel,
    /// Global logging stream target. If 'from-arg', uses '--logtarget' argument ('stdout' by default).
    pub target: LogTarget,
    /// Groups with debug logging (values from [`LOG_GROUPS`]).
    pub groups: Option<Vec<String>>,
    /// Logging DNS requests and responses to a unix socket.
    pub dnstap: DnstapSchema,
}

/// When metrics are collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricsMode {
    ManagerOnly,
    Lazy,
    Always,
}

/// Graphite host: an address or a name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum GraphiteHost {
    Address(std::net::IpAddr),
    Name(DomainName),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GraphiteSchema {
    /// Send metrics to Graphite.
    pub enable: bool,
    /// Graphite server address or name.
    pub host: Option<GraphiteHost>,
    /// Graphite server port.
    pub port: u16,
    /// Prefix of the metric names.
    pub prefix: EscapedStr,
    /// How often metrics are sent.
    pub interval: TimeUnit,
    /// Use TCP instead of UDP.
    pub tcp: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MonitoringSchema {
    /// configures, whether metrics/statistics will be collected by the resolver
    pub metrics: MetricsMode,
    /// optionally configures where should graphite metrics be sent to
    pub graphite: GraphiteSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RateLimitingSchema {
    /// Enable/disable rate limiting
    pub enable: bool,
    /// Maximal number of allowed queries per second from a single host.
    pub rate_limit: Option<u64>,
    /// Maximal number of allowed queries at a single point in time from a single host.
    pub instant_limit: u64,
    /// Expected maximal number of blocked networks/hosts at the same time.
    pub capacity: u64,
    /// Number of restricted responses out of which one is sent as truncated, the others are dropped.
    pub slip: u8,
    /// Minimal time between two log messages, or '0s' to disable.
    pub log_period: TimeUnit,
    /// Perform only classification and logging but no restrictions.
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DeferSchema {
    /// Use request prioritization.
    pub enable: bool,
    /// Minimal time between two log messages, or '0s' to disable.
    pub log_period: TimeUnit,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LuaSchema {
    /// Ignore declarative configuration intended for workers and use only Lua script or script file configured in this section.
    pub script_only: bool,
    /// Custom Lua configuration script intended for workers.
    pub script: Option<String>,
    /// Path to file that contains Lua configuration script for workers.
    pub script_file: Option<PathBuf>,
    /// Ignore declarative configuration intended for policy-loader and use only Lua script or script file configured in this section.
    pub policy_script_only: bool,
    /// Custom Lua configuration script intended for policy-loader.
    pub policy_script: Option<String>,
    /// Path to file that contains Lua configuration script for policy-loader.
    pub policy_script_file: Option<PathBuf>,
}

type AddressPairs = Vec<(DomainName, Vec<std::net::IpAddr>)>;

fn de_addresses<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AddressPairs>, D::Error> {
    use serde::de::Error;
    let Some(map) = Option::<Map<String, Value>>::deserialize(d)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(map.len());
    for (name, addrs) in map {
        let name = DomainName::parse(&name).map_err(D::Error::custom)?;
        let addrs: Vec<std::net::IpAddr> =
            serde_json::from_value(addrs).map_err(D::Error::custom)?;
        out.push((name, addrs));
    }
    Ok(Some(out))
}
