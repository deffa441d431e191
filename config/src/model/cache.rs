//! The `cache` section: its description (types, defaults, documentation and rules, as in
//! upstream's datamodel) and the typed form the rest of the crate reads. Field documentation
//! lives in the description only; it is what `kresctl schema` serves.

use super::blocks::*;

pub(super) fn time_seconds(m: &Map<String, Value>, key: &str) -> u64 {
    m.get(key)
        .and_then(Value::as_str)
        .and_then(|s| TimeUnit::parse(s).ok())
        .map_or(0, |t| t.seconds())
}

/// `cache.garbage-collector`: kres-cache-gc's arguments.
fn garbage_collector() -> ObjectDef {
    section(
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
    )
}

/// `cache.prefill[]`: one zone imported over HTTP.
fn prefill() -> ObjectDef {
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
    prefill
}

/// `cache.prefetch`, with its `prediction`.
fn prefetch() -> ObjectDef {
    let prediction = section(
        "knot_resolver.datamodel.cache_schema.PredictionSchema",
        Some("Helps keep the cache hot by prefetching expiring records and learning usage patterns and repetitive queries."),
        vec![
            f("enable", Ty::Bool, json!(false), "Enable/disable prediction."),
            f("window", v(&vt::TIME_UNIT), json!("15m"), "Sampling window length."),
            f("period", int_positive(), json!(24), "Number of windows that can be kept in memory."),
        ],
    );
    section(
        "knot_resolver.datamodel.cache_schema.PrefetchSchema",
        Some("These options help keep the cache hot by prefetching expiring records or learning usage patterns and repetitive queries."),
        vec![
            f("expiring", Ty::Bool, json!(false), "Prefetch expiring records."),
            f("prediction", obj(prediction), json!({}), "Prefetch record by predicting based on usage patterns and repetitive queries."),
        ],
    )
}

pub(super) fn cache() -> ObjectDef {
    let mut d = section(
        "knot_resolver.datamodel.cache_schema.CacheSchema",
        Some("DNS resolver cache configuration."),
        vec![
            f("storage", v(&vt::WRITABLE_DIR), json!("/var/cache/knot-resolver"), "Cache storage of the DNS resolver."),
            f("size-max", v(&vt::SIZE_UNIT), json!("100M"), "Maximum size of the cache."),
            f("garbage-collector", obj(garbage_collector()), json!({}), "Use the garbage collector (kres-cache-gc) to periodically clear cache."),
            f("ttl-min", v(&vt::TIME_UNIT), json!("5s"), "Minimum time-to-live for the cache entries."),
            f("ttl-max", v(&vt::TIME_UNIT), json!("1d"), "Maximum time-to-live for the cache entries."),
            f("ns-timeout", v(&vt::TIME_UNIT), json!("1000ms"), "Time interval for which a nameserver address will be ignored after determining that it does not return (useful) answers."),
            f("prefill", opt(list(obj(prefill()))), Value::Null, "Prefill the cache periodically by importing zone data obtained over HTTP."),
            f("prefetch", obj(prefetch()), json!({}), "These options help keep the cache hot by prefetching expiring records or learning usage patterns and repetitive queries."),
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

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct GarbageCollectorSchema {
    pub enable: bool,
    pub interval: TimeUnit,
    pub threshold: u8,
    pub release: u8,
    pub temp_keys_space: SizeUnit,
    pub rw_deletes: u64,
    pub rw_reads: u64,
    pub rw_duration: TimeUnit,
    pub rw_delay: TimeUnit,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PrefillSchema {
    pub origin: DomainName,
    pub url: EscapedStr,
    pub refresh_interval: TimeUnit,
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PredictionSchema {
    pub enable: bool,
    pub window: TimeUnit,
    pub period: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PrefetchSchema {
    pub expiring: bool,
    pub prediction: PredictionSchema,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CacheSchema {
    pub storage: PathBuf,
    pub size_max: SizeUnit,
    pub garbage_collector: GarbageCollectorSchema,
    pub ttl_min: TimeUnit,
    pub ttl_max: TimeUnit,
    pub ns_timeout: TimeUnit,
    pub prefill: Option<Vec<PrefillSchema>>,
    pub prefetch: PrefetchSchema,
}
