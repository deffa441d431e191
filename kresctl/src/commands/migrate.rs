//! `kresctl migrate`: rewrites a configuration written for an older 6.x release into the
//! current schema, offline, with upstream's rules (`client/commands/migrate.py`): removed
//! options go, boolean/null section forms become `enable`, renamed keys move, and empty
//! top-level sections are dropped. Every step is reported as `removed /x` or `added /y`.
//!
//! Two of upstream's rules lose information, and we do not copy them: a renamed key whose
//! value is falsy (`trust-anchor-sentinel: false`) is removed and never re-added upstream,
//! and a `false` section (`logging.dnstap: false`, `cache.prefetch.prediction: false`,
//! `network.proxy-protocol: false`) becomes `enable: true` upstream; `dns64` with an
//! `enable` already set gets it overwritten with `true`.

use std::path::Path;

use serde_json::{Map, Value};

use super::FileError;
use crate::cli::MigrateArgs;
use crate::output::{self, OutputFormat};

/// `kresctl migrate`: rewrite an older configuration (offline), print what changed and the
/// result, like upstream.
pub fn command(args: &MigrateArgs) -> Result<(), FileError> {
    let text = std::fs::read_to_string(&args.input_file).map_err(|source| FileError::Read {
        path: args.input_file.clone(),
        source,
    })?;
    // JSON first, then YAML, whatever the file is called (as upstream).
    let parsed = serde_json::from_str::<Value>(&text).or_else(|_| {
        kres_config::parse_document(&text, Path::new("input.yaml")).map_err(FileError::Config)
    })?;
    let doc = match parsed {
        Value::Object(doc) => doc,
        Value::Null => Map::new(),
        _ => return Err(FileError::NotAMapping(args.input_file.clone())),
    };
    let (doc, log) = migrate(doc);
    for line in log {
        output::println(&line)?;
    }
    let doc = Value::Object(doc);
    // Compact JSON, as upstream prints it.
    let dumped = match args.format {
        OutputFormat::Json => format!("{doc}\n"),
        OutputFormat::Yaml | OutputFormat::Text => output::to_yaml(&doc),
    };
    match &args.output_file {
        Some(path) => std::fs::write(path, dumped).map_err(|source| FileError::Write {
            path: path.clone(),
            source,
        }),
        None => {
            output::print(&format!(
                "\nNew migrated configuration (v{}):\n---\n{dumped}",
                kres_config::SCHEMA_VERSION
            ))?;
            Ok(())
        }
    }
}

/// Keys removed from the schema.
const REMOVED: &[&str] = &[
    "/dnssec/refresh-time",
    "/dnssec/hold-down-time",
    "/dnssec/time-skew-detection",
    "/dnssec/keep-removed",
    "/local-data/root-fallback-addresses",
    "/local-data/root-fallback-addresses-files",
    "/logging/debugging",
    "/max-workers",
    "/network/tls/auto-discovery",
    "/webmgmt",
];

/// A migration in progress: the document and what was done to it.
struct Migration {
    doc: Map<String, Value>,
    log: Vec<String>,
}

/// Migrate a parsed configuration. Returns the new document and the `removed`/`added` lines.
pub fn migrate(doc: Map<String, Value>) -> (Map<String, Value>, Vec<String>) {
    let mut m = Migration {
        doc,
        log: Vec::new(),
    };
    for path in REMOVED {
        m.remove(path);
    }
    // `false` (or absent in old releases: `null`) meant off; any other form meant on.
    m.section_to_enable("/cache/garbage-collector");
    m.section_to_enable("/cache/prefetch/prediction");
    m.rename("/defer/enabled", "/defer/enable");
    m.section_to_enable("/dns64");
    m.rename("/dns64/rev-ttl", "/dns64/reverse-ttl");
    if m.get("/dnssec") == Some(&Value::Bool(false)) {
        m.add("/dnssec/enable", Value::Bool(false));
    }
    m.rename("/dnssec/trust-anchor-sentinel", "/dnssec/sentinel");
    m.rename("/dnssec/trust-anchor-signal-query", "/dnssec/signal-query");
    m.section_to_enable("/logging/dnstap");
    m.rename("/logging/dnssec-bogus", "/dnssec/log-bogus");
    m.rename("/monitoring/enabled", "/monitoring/metrics");
    m.section_to_enable("/monitoring/graphite");
    m.section_to_enable("/network/proxy-protocol");
    m.rename("/network/tls/files-watchdog", "/network/tls/watchdog");
    if m.doc.contains_key("rate-limiting") {
        m.section_to_enable("/rate-limiting");
    }
    // Empty top-level sections go (upstream drops every falsy top-level value).
    m.doc.retain(|_, v| truthy(v));
    (m.doc, m.log)
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn keys(path: &str) -> Vec<&str> {
    path.split('/').skip(1).collect()
}

impl Migration {
    fn get(&self, path: &str) -> Option<&Value> {
        let mut keys = keys(path).into_iter();
        let mut current = self.doc.get(keys.next()?)?;
        for key in keys {
            current = current.as_object()?.get(key)?;
        }
        Some(current)
    }

    /// Remove the value at `path` if its parent is an object holding it.
    fn remove(&mut self, path: &str) -> Option<Value> {
        let keys = keys(path);
        let (last, parents) = keys.split_last()?;
        let mut current = &mut self.doc;
        for key in parents {
            current = current.get_mut(*key)?.as_object_mut()?;
        }
        let value = current.shift_remove(*last)?;
        self.log.push(format!("removed {path}"));
        Some(value)
    }

    /// Set the value at `path` unless it is already there; a missing or non-object parent
    /// becomes an object.
    fn add(&mut self, path: &str, value: Value) {
        let keys = keys(path);
        let Some((last, parents)) = keys.split_last() else {
            return;
        };
        let mut current = &mut self.doc;
        for key in parents {
            let slot = current
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            let Value::Object(next) = slot else {
                return;
            };
            current = next;
        }
        if !current.contains_key(*last) {
            current.insert(last.to_string(), value);
            self.log.push(format!("added {path}"));
        }
    }

    fn rename(&mut self, from: &str, to: &str) {
        if let Some(value) = self.remove(from) {
            self.add(to, value);
        }
    }

    /// A section that used to be `false`/`null` (off), `true` or an object (on) gets an
    /// explicit `enable`, unless it has one already.
    fn section_to_enable(&mut self, path: &str) {
        let Some(value) = self.get(path) else {
            return;
        };
        let enable = !matches!(value, Value::Null | Value::Bool(false));
        self.add(&format!("{path}/enable"), Value::Bool(enable));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(input: Value, expected: Value, log: &[&str]) {
        let Value::Object(doc) = input else {
            panic!("not an object")
        };
        let (out, lines) = migrate(doc);
        assert_eq!(Value::Object(out), expected);
        assert_eq!(lines, log);
    }

    #[test]
    fn removed_renamed_and_enabled() {
        check(
            json!({
                "max-workers": 4,
                "webmgmt": {"interface": "127.0.0.1@8453"},
                "dnssec": {"refresh-time": "1h", "trust-anchor-sentinel": false},
                "logging": {"level": "info", "dnssec-bogus": true, "dnstap": {"unix-socket": "/x"}},
                "dns64": true,
                "monitoring": {"enabled": "always"},
                "rate-limiting": {"rate-limit": 100},
            }),
            json!({
                "dnssec": {"sentinel": false, "log-bogus": true},
                "logging": {"level": "info", "dnstap": {"unix-socket": "/x", "enable": true}},
                "dns64": {"enable": true},
                "monitoring": {"metrics": "always"},
                "rate-limiting": {"rate-limit": 100, "enable": true},
            }),
            &[
                "removed /dnssec/refresh-time",
                "removed /max-workers",
                "removed /webmgmt",
                "added /dns64/enable",
                "removed /dnssec/trust-anchor-sentinel",
                "added /dnssec/sentinel",
                "added /logging/dnstap/enable",
                "removed /logging/dnssec-bogus",
                "added /dnssec/log-bogus",
                "removed /monitoring/enabled",
                "added /monitoring/metrics",
                "added /rate-limiting/enable",
            ],
        );
    }

    #[test]
    fn off_forms_stay_off_and_existing_enable_is_kept() {
        check(
            json!({
                "cache": {"garbage-collector": false, "prefetch": {"prediction": null}},
                "logging": {"dnstap": false},
                "dns64": {"enable": false},
                "dnssec": false,
                "network": {"proxy-protocol": false, "tls": {"files-watchdog": false}},
                "local-data": {"root-fallback-addresses": {}},
            }),
            json!({
                "cache": {"garbage-collector": {"enable": false}, "prefetch": {"prediction": {"enable": false}}},
                "logging": {"dnstap": {"enable": false}},
                "dns64": {"enable": false},
                "dnssec": {"enable": false},
                "network": {"proxy-protocol": {"enable": false}, "tls": {"watchdog": false}},
            }),
            &[
                "removed /local-data/root-fallback-addresses",
                "added /cache/garbage-collector/enable",
                "added /cache/prefetch/prediction/enable",
                "added /dnssec/enable",
                "added /logging/dnstap/enable",
                "added /network/proxy-protocol/enable",
                "removed /network/tls/files-watchdog",
                "added /network/tls/watchdog",
            ],
        );
    }
}
