//! The `network` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn tls() -> ObjectDef {
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

pub(super) fn listen() -> ObjectDef {
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

pub(super) fn network() -> ObjectDef {
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NetworkSchema {
    pub do_ipv4: bool,
    pub do_ipv6: bool,
    pub out_interface_v4: Option<std::net::Ipv4Addr>,
    pub out_interface_v6: Option<std::net::Ipv6Addr>,
    pub tcp_pipeline: u16,
    pub edns_tcp_keepalive: bool,
    pub edns_buffer_size: EdnsBufferSizeSchema,
    pub address_renumbering: Option<Vec<AddressRenumberingSchema>>,
    pub tls: TlsSchema,
    pub proxy_protocol: ProxyProtocolSchema,
    pub quic: QuicSchema,
    pub listen: Vec<ListenSchema>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EdnsBufferSizeSchema {
    pub upstream: SizeUnit,
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
    pub source: IpNetwork,
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
    pub watchdog: bool,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub sticket_secret: Option<EscapedStr>,
    pub sticket_secret_file: Option<PathBuf>,
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
    pub enable: bool,
    pub allow: Option<Vec<AddressOrNetwork>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct QuicSchema {
    pub max_conns: u16,
    pub max_streams: u16,
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
    pub interface: Option<Vec<InterfaceOptionalPort>>,
    pub unix_socket: Option<Vec<PathBuf>>,
    pub port: Option<u16>,
    pub kind: ListenKind,
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
