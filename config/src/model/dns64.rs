//! The `dns64` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn dns64() -> ObjectDef {
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Dns64Schema {
    pub enable: bool,
    pub prefix: IpNetwork,
    pub reverse_ttl: Option<TimeUnit>,
    pub exclude_subnets: Option<Vec<IpNetwork>>,
}
