//! The `forward` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn forward_server() -> Ty {
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
pub(super) fn is_port_custom(servers: &[Value]) -> bool {
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

pub(super) fn forward() -> ObjectDef {
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

/// Forward transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardTransport {
    Tls,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForwardServerSchema {
    pub address: Vec<IpAddressOptionalPort>,
    pub transport: Option<ForwardTransport>,
    pub pin_sha256: Option<Vec<PinSha256>>,
    pub hostname: Option<DomainName>,
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
    pub authoritative: bool,
    pub dnssec: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForwardSchema {
    pub subtree: Vec<DomainName>,
    pub servers: Vec<ForwardServer>,
    pub options: ForwardOptionsSchema,
}
