//! The `monitoring` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn monitoring() -> ObjectDef {
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
    pub metrics: MetricsMode,
    pub graphite: GraphiteSchema,
}
