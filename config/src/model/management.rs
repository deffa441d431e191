//! The `management` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn management() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.management_schema.ManagementSchema",
        Some("Configuration of management HTTP API."),
        vec![
            f(
                "unix-socket",
                opt(v(&vt::API_SOCKET_PATH)),
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

/// Where the management HTTP API listens (exactly one is set).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ManagementSchema {
    pub unix_socket: Option<PathBuf>,
    pub interface: Option<IpAddressPort>,
}
