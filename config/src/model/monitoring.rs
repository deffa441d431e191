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
                "query-log",
                obj(query_log()),
                json!({}),
                "The query log: kresd's answers, read by the manager from kresd's dnstap stream and kept in a ring for 'kresctl querylog' and 'kresctl top'. Not in upstream's schema.",
            ),
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

/// `monitoring.query-log`, an extension of ours (upstream has no such key): whether the
/// workers send their answers to the manager's query log, how many it keeps, and how much of
/// a client's address, for how long and in how much memory it keeps them.
fn query_log() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.monitoring_schema.QueryLogSchema",
        Some("The query log kept by the manager from the workers' own records of their answers (not in upstream's schema)."),
        vec![
            f("enabled", Ty::Bool, json!(false), "Send every answer of the workers to the manager's query log (a Lua layer of the workers; 'logging.dnstap' is independent of it)."),
            f("entries", int("Int1_1000000", Some(1), Some(1_000_000)), json!(10000), "How many answers the ring keeps; the oldest give way."),
            f("ipv4-prefix", int("Int0_32", Some(0), Some(32)), json!(32), "How many leading bits of an IPv4 client's address are kept (24: only its /24)."),
            f("ipv6-prefix", int("Int0_128", Some(0), Some(128)), json!(128), "How many leading bits of an IPv6 client's address are kept (56: only its /56)."),
            f("max-age", v(&vt::TIME_UNIT), json!("24h"), "How long an answer is kept at most (at least 1s); older ones are dropped."),
            f("max-memory", v(&vt::SIZE_UNIT), json!("64M"), "How much memory the ring's answers may take at most (at least 1M); the oldest give way."),
        ],
    );
    d.validate = Some(|m, _, path| {
        if super::cache::time_seconds(m, "max-age") < 1 {
            return fail(&format!("{path}/max-age"), "must be at least 1s");
        }
        let memory = m
            .get("max-memory")
            .and_then(Value::as_str)
            .and_then(|s| SizeUnit::parse(s).ok())
            .map_or(0, |s| s.bytes());
        if memory < 1024 * 1024 {
            return fail(&format!("{path}/max-memory"), "must be at least 1M");
        }
        Ok(())
    });
    d
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

/// `monitoring.query-log` (ours, not upstream's).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct QueryLogSchema {
    /// Whether the workers send their answers to the query log.
    pub enabled: bool,
    /// The ring's size in answers.
    pub entries: u32,
    /// Leading bits kept of an IPv4 client's address.
    pub ipv4_prefix: u8,
    /// Leading bits kept of an IPv6 client's address.
    pub ipv6_prefix: u8,
    /// How long an answer is kept at most.
    pub max_age: TimeUnit,
    /// How much memory the ring's answers may take at most.
    pub max_memory: SizeUnit,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MonitoringSchema {
    /// The query log (ours).
    pub query_log: QueryLogSchema,
    pub metrics: MetricsMode,
    pub graphite: GraphiteSchema,
}
