//! Every request kresctl makes of the management API, one variant each: its method, path,
//! headers and body are written here and nowhere else, and [`ApiClient`] sends them.
//!
//! [`ApiClient`]: super::client::ApiClient

use hyper::Method;
use serde_json::Value;

/// A JSON pointer as the API takes it: `workers` is taken for `/workers` (a pointer always
/// starts with `/`; without it, the path would name no route at all).
pub fn rooted(pointer: &str) -> std::borrow::Cow<'_, str> {
    if pointer.is_empty() || pointer.starts_with('/') {
        pointer.into()
    } else {
        format!("/{pointer}").into()
    }
}

/// Which health probe `kresctl health` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `/livez`: the API answers and a worker runs.
    Live,
    /// `/readyz`: every configured worker is ready, nothing drains or stops.
    Ready,
}

/// Which workers `kresctl reload` restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadScope {
    /// Those whose configuration changed.
    Changed,
    /// All of them (`--force`).
    Forced,
}

/// The form the workers' metrics are asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    Json,
    /// The Prometheus text exposition.
    Prometheus,
}

/// Whether a new configuration is applied or only tried (`?dry-run=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    ForReal,
    DryRun,
}

/// A change staged across a fleet (`--canary-node`, `--wave`): nothing given, not staged
/// (unless the node's own `fleet.rollout` stages every change).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stage<'a> {
    pub canary_node: Option<&'a str>,
    pub wave: Option<&'a str>,
}

impl Stage<'_> {
    /// The query parameters it adds, each `&name=value`.
    fn query(&self) -> String {
        let mut out = String::new();
        for (name, value) in [("canary-node", self.canary_node), ("wave", self.wave)] {
            if let Some(value) = value {
                out.push_str(&format!("&{name}={}", percent_encoded(value)));
            }
        }
        out
    }
}

/// One request of the management API.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// The running configuration, or the part at a JSON pointer.
    GetConfig {
        pointer: &'a str,
    },
    /// Set the value at a JSON pointer.
    SetConfig {
        pointer: &'a str,
        value: &'a Value,
        run: Run,
        stage: Stage<'a>,
    },
    /// Delete the value at a JSON pointer.
    DeleteConfig {
        pointer: &'a str,
        run: Run,
        stage: Stage<'a>,
    },
    /// Apply a JSON Patch (RFC 6902) to the whole configuration.
    PatchConfig {
        operations: &'a Value,
        run: Run,
        stage: Stage<'a>,
    },
    /// A whole new configuration, against the running version `if_match` names (its ETag).
    ReplaceConfig {
        config: &'a Value,
        if_match: Option<&'a str>,
        run: Run,
    },
    Stop,
    Drain,
    Health(Probe),
    Reload(ReloadScope),
    /// The configuration's JSON schema.
    Schema,
    /// The API's OpenAPI description.
    OpenApi,
    /// Every supervised process.
    Processes,
    /// The processes of one kind (`kresd`, `gc`, `all`).
    ProcessesOf {
        kind: &'a str,
    },
    Metrics(MetricsFormat),
    /// Purge cache records; the body is checked by the caller.
    CacheClear {
        body: &'a Value,
    },
    /// The running version and how the last upgrade ended.
    UpgradeStatus,
    /// Start an in-place upgrade.
    Upgrade,
    /// The RPZ zones kept by zone transfer.
    Rpz,
    /// The subscribed lists.
    RpzLists,
    /// Fetch a subscribed list (every one when none) now.
    RpzRefresh {
        name: Option<&'a str>,
    },
    /// Which subscribed list decides a name.
    RpzCheck {
        name: &'a str,
        client: Option<&'a str>,
    },
    /// One query traced; name and type already validated.
    Trace {
        name: &'a str,
        rr_type: &'a str,
        timeout: std::time::Duration,
    },
    /// The query log's newest answers; the query string (`client=…&limit=…`) given.
    QueryLog {
        query: &'a str,
    },
    /// The query log's answers as they come, filtered by the query string given.
    QueryLogStream {
        query: &'a str,
    },
    /// The forward targets and upstreams used recently.
    Upstreams,
    /// The fleet's nodes.
    Fleet,
    /// The fleet's previous document made its own again.
    FleetRollback,
    /// A top list of the query log: its kind and the query string (`window=…&limit=…`).
    Top {
        kind: &'a str,
        query: &'a str,
    },
    /// The event stream, after the event `last_event_id` names or from now on.
    Events {
        last_event_id: Option<&'a str>,
    },
}

/// `path?query`, or `path` for an empty query.
fn with_query(path: &str, query: &str) -> String {
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

impl Request<'_> {
    pub fn method(&self) -> Method {
        match self {
            Request::GetConfig { .. }
            | Request::Health(_)
            | Request::Schema
            | Request::OpenApi
            | Request::Processes
            | Request::ProcessesOf { .. }
            | Request::Metrics(_)
            | Request::UpgradeStatus
            | Request::Rpz
            | Request::RpzLists
            | Request::RpzCheck { .. }
            | Request::Trace { .. }
            | Request::QueryLog { .. }
            | Request::QueryLogStream { .. }
            | Request::Top { .. }
            | Request::Upstreams
            | Request::Fleet
            | Request::Events { .. } => Method::GET,
            Request::SetConfig { .. } | Request::ReplaceConfig { .. } => Method::PUT,
            Request::DeleteConfig { .. } => Method::DELETE,
            Request::PatchConfig { .. } => Method::PATCH,
            Request::Stop
            | Request::Drain
            | Request::Reload(_)
            | Request::CacheClear { .. }
            | Request::FleetRollback
            | Request::RpzRefresh { .. }
            | Request::Upgrade => Method::POST,
        }
    }

    /// The path, with its query.
    pub fn path(&self) -> String {
        let query = |run: &Run, stage: &Stage| {
            let query = match run {
                Run::ForReal => String::new(),
                Run::DryRun => "&dry-run=true".into(),
            } + &stage.query();
            query.replacen('&', "?", 1)
        };
        match self {
            Request::GetConfig { pointer } => format!("/v1/config{}", rooted(pointer)),
            Request::SetConfig {
                pointer,
                run,
                stage,
                ..
            }
            | Request::DeleteConfig {
                pointer,
                run,
                stage,
            } => format!("/v1/config{}{}", rooted(pointer), query(run, stage)),
            Request::ReplaceConfig { run, .. } => {
                format!("/v1/config{}", query(run, &Stage::default()))
            }
            Request::PatchConfig { run, stage, .. } => format!("/v1/config{}", query(run, stage)),
            Request::Stop => "/stop".into(),
            Request::Drain => "/drain".into(),
            Request::Health(Probe::Live) => "/livez".into(),
            Request::Health(Probe::Ready) => "/readyz".into(),
            Request::Reload(ReloadScope::Changed) => "/reload".into(),
            Request::Reload(ReloadScope::Forced) => "/reload/force".into(),
            Request::Schema => "/schema".into(),
            Request::OpenApi => "/openapi.json".into(),
            Request::Processes => "/processes".into(),
            Request::ProcessesOf { kind } => format!("/processes/{kind}"),
            Request::Metrics(MetricsFormat::Json) => "/metrics/json".into(),
            Request::Metrics(MetricsFormat::Prometheus) => "/metrics/prometheus".into(),
            Request::CacheClear { .. } => "/cache/clear".into(),
            Request::UpgradeStatus | Request::Upgrade => "/upgrade".into(),
            Request::Rpz => "/rpz".into(),
            Request::RpzLists => "/rpz/lists".into(),
            Request::RpzRefresh { name: None } => "/rpz/lists/refresh".into(),
            Request::RpzRefresh { name: Some(name) } => {
                format!("/rpz/lists/refresh?name={}", percent_encoded(name))
            }
            Request::RpzCheck { name, client } => match client {
                None => format!("/rpz/check?name={}", percent_encoded(name)),
                Some(client) => format!(
                    "/rpz/check?name={}&client={}",
                    percent_encoded(name),
                    percent_encoded(client)
                ),
            },
            Request::Trace {
                name,
                rr_type,
                timeout,
            } => format!(
                "/trace/{}/{}?timeout={}",
                percent_encoded(name),
                percent_encoded(rr_type),
                timeout.as_secs_f64()
            ),
            Request::QueryLog { query } => with_query("/query-log", query),
            Request::QueryLogStream { query } => with_query("/query-log/stream", query),
            Request::Top { kind, query } => with_query(&format!("/top/{kind}"), query),
            Request::Upstreams => "/upstreams".into(),
            Request::Fleet => "/fleet".into(),
            Request::FleetRollback => "/fleet/rollback".into(),
            Request::Events { .. } => "/events".into(),
        }
    }

    /// Headers beside `Host`, `Content-Type` and `Authorization`. A change asks for its
    /// summary as JSON (`Accept`): the answer says what the resolver did.
    pub fn headers(&self) -> Vec<(&'static str, &str)> {
        const SUMMARY: (&str, &str) = ("Accept", "application/json");
        match self {
            Request::ReplaceConfig {
                if_match: Some(etag),
                ..
            } => vec![("If-Match", etag), SUMMARY],
            Request::ReplaceConfig { .. }
            | Request::SetConfig { .. }
            | Request::DeleteConfig { .. }
            | Request::PatchConfig { .. }
            | Request::Reload(_) => vec![SUMMARY],
            Request::Events {
                last_event_id: Some(id),
            } => vec![("last-event-id", id)],
            _ => Vec::new(),
        }
    }

    /// The body: the JSON of the value sent, or nothing.
    pub fn body(&self) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            Request::SetConfig { value, .. }
            | Request::ReplaceConfig { config: value, .. }
            | Request::PatchConfig {
                operations: value, ..
            }
            | Request::CacheClear { body: value } => serde_json::to_vec(value),
            _ => Ok(Vec::new()),
        }
    }
}

/// Every byte but the unreserved ones of RFC 3986 (`A-Z a-z 0-9 - . _ ~`).
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` as one path segment: every byte but the unreserved ones percent-encoded.
fn percent_encoded(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, RESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each request as `METHOD path [header: value…] body`.
    fn check(rows: &[(Request<'_>, &str)]) {
        for (request, want) in rows {
            let mut got = format!("{} {}", request.method(), request.path());
            for (name, value) in request.headers() {
                got.push_str(&format!(" [{name}: {value}]"));
            }
            let body = request.body().expect("body");
            got.push(' ');
            got.push_str(&String::from_utf8_lossy(&body));
            assert_eq!(got.trim_end(), *want, "{request:?}");
        }
    }

    #[test]
    fn methods_paths_headers_and_bodies() {
        let value = json!({"workers": 2});
        check(&[
            (Request::GetConfig { pointer: "" }, "GET /v1/config"),
            (
                Request::GetConfig {
                    pointer: "/workers",
                },
                "GET /v1/config/workers",
            ),
            (
                Request::GetConfig { pointer: "workers" },
                "GET /v1/config/workers",
            ),
            (
                Request::SetConfig {
                    pointer: "/cache",
                    value: &value,
                    run: Run::ForReal,
                    stage: Stage::default(),
                },
                r#"PUT /v1/config/cache [Accept: application/json] {"workers":2}"#,
            ),
            (
                Request::SetConfig {
                    pointer: "/cache",
                    value: &value,
                    run: Run::DryRun,
                    stage: Stage::default(),
                },
                r#"PUT /v1/config/cache?dry-run=true [Accept: application/json] {"workers":2}"#,
            ),
            (
                Request::SetConfig {
                    pointer: "/cache",
                    value: &value,
                    run: Run::ForReal,
                    stage: Stage {
                        canary_node: Some("ns 1&x"),
                        wave: Some("10%"),
                    },
                },
                r#"PUT /v1/config/cache?canary-node=ns%201%26x&wave=10%25 [Accept: application/json] {"workers":2}"#,
            ),
            (
                Request::DeleteConfig {
                    pointer: "/local-data",
                    run: Run::DryRun,
                    stage: Stage {
                        canary_node: None,
                        wave: Some("3"),
                    },
                },
                "DELETE /v1/config/local-data?dry-run=true&wave=3 [Accept: application/json]",
            ),
            (
                Request::DeleteConfig {
                    pointer: "/local-data",
                    run: Run::ForReal,
                    stage: Stage::default(),
                },
                "DELETE /v1/config/local-data [Accept: application/json]",
            ),
            (
                Request::DeleteConfig {
                    pointer: "/local-data",
                    run: Run::DryRun,
                    stage: Stage::default(),
                },
                "DELETE /v1/config/local-data?dry-run=true [Accept: application/json]",
            ),
            (
                Request::PatchConfig {
                    operations: &value,
                    run: Run::DryRun,
                    stage: Stage::default(),
                },
                r#"PATCH /v1/config?dry-run=true [Accept: application/json] {"workers":2}"#,
            ),
            (
                Request::ReplaceConfig {
                    config: &value,
                    if_match: Some("\"e1\""),
                    run: Run::DryRun,
                },
                r#"PUT /v1/config?dry-run=true [If-Match: "e1"] [Accept: application/json] {"workers":2}"#,
            ),
            (
                Request::ReplaceConfig {
                    config: &value,
                    if_match: None,
                    run: Run::ForReal,
                },
                r#"PUT /v1/config [Accept: application/json] {"workers":2}"#,
            ),
            (Request::Stop, "POST /stop"),
            (Request::Drain, "POST /drain"),
            (Request::Health(Probe::Live), "GET /livez"),
            (Request::Health(Probe::Ready), "GET /readyz"),
            (
                Request::Reload(ReloadScope::Changed),
                "POST /reload [Accept: application/json]",
            ),
            (
                Request::Reload(ReloadScope::Forced),
                "POST /reload/force [Accept: application/json]",
            ),
            (Request::Schema, "GET /schema"),
            (Request::OpenApi, "GET /openapi.json"),
            (Request::Processes, "GET /processes"),
            (
                Request::ProcessesOf { kind: "kresd" },
                "GET /processes/kresd",
            ),
            (Request::Metrics(MetricsFormat::Json), "GET /metrics/json"),
            (
                Request::Metrics(MetricsFormat::Prometheus),
                "GET /metrics/prometheus",
            ),
            (
                Request::CacheClear { body: &value },
                r#"POST /cache/clear {"workers":2}"#,
            ),
            (Request::UpgradeStatus, "GET /upgrade"),
            (Request::Rpz, "GET /rpz"),
            (
                Request::Trace {
                    name: "a b/c.",
                    rr_type: "AAAA",
                    timeout: std::time::Duration::from_millis(2500),
                },
                "GET /trace/a%20b%2Fc./AAAA?timeout=2.5",
            ),
            (
                Request::QueryLog { query: "limit=5" },
                "GET /query-log?limit=5",
            ),
            (
                Request::QueryLogStream { query: "" },
                "GET /query-log/stream",
            ),
            (
                Request::Top {
                    kind: "clients",
                    query: "window=5m",
                },
                "GET /top/clients?window=5m",
            ),
            (Request::Upgrade, "POST /upgrade"),
            (
                Request::Events {
                    last_event_id: Some("1.f-3"),
                },
                "GET /events [last-event-id: 1.f-3]",
            ),
            (
                Request::Events {
                    last_event_id: None,
                },
                "GET /events",
            ),
        ]);
    }
}
