//! `GET /openapi.json`: an OpenAPI 3.1 description of the management API, generated from the
//! route registration itself. `api::routes()` registers every handler through
//! `utoipa_axum::routes!`, which reads the handler's `#[utoipa::path]` and both routes it and
//! describes it, so the router cannot serve a route the document lacks. This module adds
//! what the layers around every route do (the TCP guard's 401/403/421, the time limit's 503,
//! `HEAD` beside every `GET`), the security scheme, the configuration's JSON schema
//! (`kres_config::json_schema()`, the one `/schema` serves) as the schema of
//! `/v1/config` bodies, the schema of one message of each event stream, and the patterns of
//! the query log's filters (built from the parsers' tables, too long for an annotation).

use std::borrow::Cow;
use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;

use super::fault::FaultInjection;
use super::query_log::WINDOW_PATTERN;
use super::server::{BODY_LIMIT, CHANGE_TIMEOUT, HEADER_READ_TIMEOUT, READ_TIMEOUT};
use super::ApiState;
use crate::manager::plan::{Effect, Section};
use crate::query_log::select;

/// The name of the configuration's schema among the document's component schemas.
pub const CONFIG_SCHEMA: &str = "KresConfig";

/// The configuration document, as bodies of `/v1/config` name it. Its schema in the document
/// is `kres_config::json_schema()`, put in place by [`document`]; what utoipa sees is a
/// placeholder of the same name, so every body refers to `#/components/schemas/KresConfig`.
pub struct ConfigDocument;

impl utoipa::PartialSchema for ConfigDocument {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some("the configuration's JSON schema (GET /schema)"))
            .into()
    }
}

impl utoipa::ToSchema for ConfigDocument {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(CONFIG_SCHEMA)
    }
}

/// What the document says before any route is registered: title, tags, the security scheme.
#[derive(utoipa::OpenApi)]
#[openapi(
    // The answers of changes, which the change routes' families of answers refer to by name.
    components(schemas(
        kres_wire::change::DryRun,
        kres_wire::change::ChangeSummary,
        kres_wire::change::ReloadSummary,
        kres_wire::fleet::Staged,
        kres_wire::events::Event
    )),
    info(
        title = "Knot Resolver management API",
        license(name = "GPL-3.0-or-later", identifier = "GPL-3.0-or-later"),
    ),
    tags(
        (name = "status", description = "What runs, and how it does."),
        (name = "config", description = "The configuration, read and changed as JSON (JSON \
pointers, JSON Patch, structural ETags)."),
        (name = "control", description = "Reload, renew, stop, drain, upgrade, clear the cache."),
        (name = "metrics", description = "Statistics of the workers."),
        (name = "query log", description = "The workers' answers, as kresd's dnstap stream \
brings them (`monitoring.query-log`): the newest, filtered, followed live, and top lists."),
        (name = "schema", description = "Descriptions: the configuration's JSON schema, this \
document."),
        (name = "fault-injection", description = "Fault injection, for tests of the manager's \
recovery only: these routes exist (here and in the server) only when the daemon was started \
with `KRES_FAULT_INJECTION` set."),
    ),
)]
pub struct Base;

/// The production document (no fault injection), computed once from the route registration
/// (`api::routes()`): what `kresctl openapi --local` prints.
pub fn document() -> &'static Value {
    document_for(FaultInjection::Off)
}

/// The document of a server with or without the fault-injection routes, computed once each.
pub fn document_for(faults: FaultInjection) -> &'static Value {
    static PRODUCTION: OnceLock<Value> = OnceLock::new();
    static WITH_FAULTS: OnceLock<Value> = OnceLock::new();
    let cell = match faults {
        FaultInjection::Off => &PRODUCTION,
        FaultInjection::On => &WITH_FAULTS,
    };
    cell.get_or_init(|| finish(super::routes(faults).into_openapi()))
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "schema",
    responses(
        (status = 200, description = "This document (OpenAPI 3.1).", body = Object,
         content_type = "application/json"),
    ),
)]
pub(super) async fn serve(State(state): State<ApiState>) -> Response {
    static PRODUCTION: OnceLock<String> = OnceLock::new();
    static WITH_FAULTS: OnceLock<String> = OnceLock::new();
    let faults = state.fault_injection;
    let cell = match faults {
        FaultInjection::Off => &PRODUCTION,
        FaultInjection::On => &WITH_FAULTS,
    };
    let text =
        cell.get_or_init(|| serde_json::to_string_pretty(document_for(faults)).unwrap_or_default());
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        text.as_str(),
    )
        .into_response()
}

/// The methods an OpenAPI path item may hold, lowercase as its keys.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// What the routes' descriptions leave to the layers around every route, and the configuration
/// schema in its place.
fn finish(openapi: utoipa::openapi::OpenApi) -> Value {
    let mut doc = serde_json::to_value(&openapi).unwrap_or_else(|_| json!({}));
    doc["info"]["version"] = json!(crate::build_version());
    doc["info"]["description"] = json!(description());
    doc["components"]["schemas"][CONFIG_SCHEMA] = config_schema();
    doc["components"]["securitySchemes"] = json!({
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": "Over TCP, when the daemon was started with KRES_API_TOKEN_FILE naming \
    a file that holds the token: `Authorization: Bearer <token>` on every request. Never asked on \
    the unix socket.",
        }
    });
    // No requirement (the unix socket, or TCP without a token), or the bearer token.
    doc["security"] = json!([{}, {"bearerAuth": []}]);
    doc["components"]["responses"] = common_responses();
    describe_event_stream(&mut doc);
    describe_query_filters(&mut doc);
    if let Some(Value::Object(paths)) = doc.get_mut("paths").map(Value::take) {
        let paths: Map<String, Value> = paths
            .into_iter()
            .map(|(path, mut item)| {
                add_head(&mut item);
                for method in METHODS {
                    if let Some(op) = item.get_mut(method) {
                        add_layer_responses(op, method);
                        add_required_role(op, method, &path);
                    }
                }
                (openapi_path(&path), item)
            })
            .collect();
        doc["paths"] = Value::Object(paths);
    }
    doc
}

/// Say which role an operation needs (`x-required-role`: `none`, `read-only` or `admin`), as
/// the guard decides it (`roles::needed`): the same table, so the two cannot disagree.
/// `GET /top/{kind}` depends on the kind: `clients` shows client addresses (admin).
fn add_required_role(op: &mut Value, method: &str, path: &str) {
    let Ok(method) = axum::http::Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
        return;
    };
    let concrete = path
        .replace("{*pointer}", "pointer")
        .replace("{kind}", "names");
    let role = if super::roles::public(&method, &concrete) {
        "none"
    } else {
        super::roles::needed(&method, &concrete).as_str()
    };
    op["x-required-role"] = json!(role);
    if path == "/top/{kind}" {
        op["x-required-role-of-kind"] = json!({"clients": "admin"});
    }
}

/// What the event streams' messages carry, as the schema of one message (`event`, `id`,
/// `data`: OpenAPI 3.1 has no keyword for the items of a stream; 3.2's `itemSchema` has this
/// form): on `/events` the `data:` line is an `EventRecord` (an
/// [`kres_wire::events::Event`] with its id and time), on `/query-log/stream` an answer.
fn describe_event_stream(doc: &mut Value) {
    doc["components"]["schemas"]["EventRecord"] = json!({
        "description": "One event as `GET /events` sends it: the JSON of an SSE message's \
    `data:` line (its `event:` line is the `kind`).",
        "allOf": [
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "`<epoch>-<seq>`, the message's \
    `id:`; none on a notice to one follower (`events-missed`, `events-lagged`, `stopping`)."},
                    "time": {"type": "number", "description": "When it was published (Unix \
    seconds)."},
                },
                "required": ["time"],
            },
            {"$ref": "#/components/schemas/Event"},
        ],
    });
    let events = sse_event(
        json!({"type": "string"}),
        json!({"$ref": "#/components/schemas/EventRecord"}),
        "One event: `event:` its kind, `id:` (none on a notice to one follower), `data:` an \
         `EventRecord`.",
    );
    let answers = json!({"oneOf": [
        sse_event(json!({"const": "answer"}), json!({"$ref": "#/components/schemas/LoggedAnswer"}),
            "An answer that passed the filters."),
        sse_event(json!({"const": "lagged"}),
            json!({"type": "object", "properties": {"missed": {"type": "integer", "minimum": 1}},
                   "required": ["missed"]}),
            "The follower fell behind: how many answers it missed (the stream goes on)."),
        sse_event(json!({"const": "stopping"}), json!({"type": "object"}),
            "The resolver stops; the stream ends."),
    ]});
    for (path, schema) in [("~1events", events), ("~1query-log~1stream", answers)] {
        let media = format!("/paths/{path}/get/responses/200/content/text~1event-stream");
        if let Some(media) = doc.pointer_mut(&media) {
            *media = json!({"schema": schema});
        }
    }
}

/// One server-sent event as a stream's item (the form of OpenAPI 3.2's `itemSchema`, which
/// tools read from `schema` in 3.1): its `event:` name, its optional `id:`, and its `data:`, a
/// line of JSON that `data` describes.
fn sse_event(event: Value, data: Value, description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "properties": {
            "event": event,
            "id": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json",
                     "contentSchema": data},
        },
        "required": ["event", "data"],
    })
}

/// The query log's filters and lists as exactly as their parsers take them (patterns built from
/// the DNS library's mnemonics; see `query_log::select`), so that a value the document allows
/// is one the server takes and one it forbids is refused with 400.
fn describe_query_filters(doc: &mut Value) {
    let name = json!({"type": "string", "pattern": select::NAME_PATTERN, "maxLength": 254});
    let limit = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
    let filters = [
        (
            "client",
            json!({"type": "string", "pattern": select::client_pattern()}),
        ),
        ("name", name),
        (
            "qtype",
            json!({"type": "string", "pattern": select::qtype_pattern()}),
        ),
        (
            "rcode",
            json!({"type": "string", "pattern": select::rcode_pattern()}),
        ),
        ("limit", limit.clone()),
    ];
    let top = [
        (
            "window",
            json!({"type": "string", "pattern": WINDOW_PATTERN}),
        ),
        ("limit", limit),
    ];
    // `kresctl rpz check`: a name as `rpz::lists::format::checked_name` takes it, an address
    let check = [
        (
            "name",
            json!({"type": "string", "pattern": crate::rpz::lists::format::NAME_PATTERN,
                   "maxLength": crate::rpz::lists::format::MAX_NAME}),
        ),
        (
            "client",
            json!({"type": "string", "pattern": select::address_pattern()}),
        ),
    ];
    for (path, schemas) in [
        ("/paths/~1rpz~1check/get/parameters", &check[..]),
        ("/paths/~1query-log/get/parameters", &filters[..]),
        ("/paths/~1query-log~1stream/get/parameters", &filters[..]),
        ("/paths/~1top~1{kind}/get/parameters", &top[..]),
    ] {
        let Some(Value::Array(parameters)) = doc.pointer_mut(path) else {
            continue;
        };
        for parameter in parameters.iter_mut() {
            let named = parameter.get("name").and_then(Value::as_str);
            if let Some((_, schema)) = schemas.iter().find(|(n, _)| Some(*n) == named) {
                parameter["schema"] = schema.clone();
            }
        }
    }
}

/// The configuration's JSON schema as a component schema: the same as `/schema`, without its
/// `$id` (an identifier of upstream's published file, which would make it the base of
/// references inside the document), with `null` in the `enum` of nullable enumerations, and
/// saying what the server refuses that upstream's schema leaves open: a key no object
/// defines (`additionalProperties: false`), a change of a section fixed at start-up
/// (`readOnly`: the planner's immutable sections, `rundir`, `management` and `fleet`).
/// `/schema` keeps upstream's form, where `{"type": ["string", "null"], "enum": [...],
/// "default": null}` refuses its own default (the configuration's validator accepts `null`
/// there); OpenAPI validators check defaults against their schemas.
fn config_schema() -> Value {
    let mut schema = kres_config::json_schema();
    if let Value::Object(m) = &mut schema {
        m.shift_remove("$id");
    }
    allow_null_in_nullable_enums(&mut schema);
    refuse_unknown_keys(&mut schema);
    let immutable = Section::ALL
        .iter()
        .filter(|s| s.effect() == Effect::Immutable)
        .map(|s| s.key());
    for section in immutable {
        if let Some(Value::Object(property)) = schema.pointer_mut(&format!("/properties/{section}"))
        {
            property.insert("readOnly".into(), json!(true));
            let described = property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            property.insert(
                "description".into(),
                json!(format!(
                    "{described} Fixed at start-up: a change through the API is refused (400, \
`[/{section}] cannot be changed at runtime`); restart the resolver to change it."
                )),
            );
        }
    }
    schema
}

/// Rename the keys of the objects in `value`, a default of the schema `node`, that the schema
/// knows only with `-` for `_`: through properties, array items and alternatives.
fn dash_keys(value: &mut Value, node: &Map<String, Value>) {
    let sub = |key: &str| node.get(key).and_then(Value::as_object);
    for alternative in ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| node.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_object)
    {
        dash_keys(value, alternative);
    }
    match value {
        Value::Array(items) => {
            if let Some(item) = sub("items") {
                items.iter_mut().for_each(|v| dash_keys(v, item));
            }
        }
        Value::Object(object) => {
            let Some(properties) = sub("properties") else {
                return;
            };
            let renamed: Map<String, Value> = std::mem::take(object)
                .into_iter()
                .map(|(key, mut v)| {
                    let dashed = key.replace('_', "-");
                    let key = if !properties.contains_key(&key) && properties.contains_key(&dashed)
                    {
                        dashed
                    } else {
                        key
                    };
                    if let Some(property) = properties.get(&key).and_then(Value::as_object) {
                        dash_keys(&mut v, property);
                    }
                    (key, v)
                })
                .collect();
            *object = renamed;
        }
        _ => {}
    }
}

/// `additionalProperties: false` on every object of the schema that lists its properties
/// and says nothing of others: the validator refuses a key it does not know
/// (`unexpected extra key(s)`). The schema is ours and its depth bounded.
fn refuse_unknown_keys(node: &mut Value) {
    match node {
        Value::Object(m) => {
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), json!(false));
            }
            // Upstream's schema writes the keys of object defaults as Python names
            // (`unix_socket`); the configuration's own are `unix-socket`.
            if let Some(mut default) = m.get("default").cloned() {
                dash_keys(&mut default, m);
                m.insert("default".into(), default);
            }
            m.values_mut().for_each(refuse_unknown_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(refuse_unknown_keys),
        _ => {}
    }
}

/// Add `null` to every `enum` whose node's `type` allows it. The schema is ours and its depth
/// bounded by the configuration model's.
fn allow_null_in_nullable_enums(node: &mut Value) {
    match node {
        Value::Object(m) => {
            let nullable = m
                .get("type")
                .and_then(Value::as_array)
                .is_some_and(|types| types.iter().any(|t| t == "null"));
            if let (true, Some(Value::Array(values))) = (nullable, m.get_mut("enum")) {
                if !values.contains(&Value::Null) {
                    values.push(Value::Null);
                }
            }
            m.values_mut().for_each(allow_null_in_nullable_enums);
        }
        Value::Array(items) => items.iter_mut().for_each(allow_null_in_nullable_enums),
        _ => {}
    }
}

/// axum's catch-all `{*name}` as an OpenAPI template variable `{name}` (which may then hold
/// slashes, as the parameter's description says).
fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}

/// `HEAD` beside every `GET` (axum answers it with the `GET` handler, without the body).
fn add_head(item: &mut Value) {
    let Some(get) = item.get("get") else { return };
    if item.get("head").is_some() {
        return;
    }
    let mut head = get.clone();
    if let Some(id) = head.get("operationId").and_then(Value::as_str) {
        head["operationId"] = json!(format!("{id}_head"));
    }
    head["summary"] = json!(format!(
        "{} (headers only)",
        head.get("summary")
            .and_then(Value::as_str)
            .unwrap_or("HEAD")
    ));
    if let Some(Value::Object(responses)) = head.get_mut("responses") {
        for response in responses.values_mut() {
            if let Value::Object(r) = response {
                r.shift_remove("content");
            }
        }
    }
    item["head"] = head;
}

/// The answers of the layers every route is behind: the TCP guard and the time limit.
fn add_layer_responses(op: &mut Value, method: &str) {
    let Some(Value::Object(responses)) = op.get_mut("responses") else {
        return;
    };
    for (status, name) in [
        ("401", "Unauthorized"),
        ("403", "Forbidden"),
        ("421", "MisdirectedRequest"),
    ] {
        responses
            .entry(status)
            .or_insert_with(|| json!({"$ref": format!("#/components/responses/{name}")}));
    }
    let limit = if method == "get" || method == "head" {
        READ_TIMEOUT
    } else {
        CHANGE_TIMEOUT
    };
    let timed_out = format!(
        "No answer within {} s: `request processing failed:\\nno answer within {} seconds\\n`.",
        limit.as_secs(),
        limit.as_secs()
    );
    match responses.get_mut("503") {
        Some(Value::Object(r)) => {
            let before = r
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let both = format!("{before} Or: {timed_out}");
            r.insert("description".into(), json!(both));
        }
        _ => {
            responses.insert("503".into(), text_response(&timed_out));
        }
    }
}

/// A response with a plain-text body.
fn text_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"text/plain": {"schema": {"type": "string"}}},
    })
}

/// The guard's refusals, shared by every operation.
fn common_responses() -> Value {
    json!({
        "Unauthorized": text_response(
            "TCP only: a bearer token is configured and the request has no valid \
             `Authorization: Bearer` header."),
        "Forbidden": text_response(
            "The client's role does not allow the request (`POST /reload needs the admin role; \
             this client has the read-only role`: unix peers by their groups, TCP clients by \
             their bearer token), or over TCP the request's `Origin` is not this endpoint (a \
             cross-site request)."),
        "MisdirectedRequest": text_response(
            "TCP only: the `Host` header names neither this endpoint nor a loopback name (DNS \
             rebinding)."),
    })
}

/// What the document says of every route, with the server's limits.
fn description() -> String {
    format!(
        "The management API of Knot Resolver 6's manager (the knot-resolver daemon), served on a \
unix socket (guarded by its file permissions) or on TCP (`management.interface`).\n\n\
Answers every route can give:\n\
- `404` for a path no route serves (a line saying so, and what a configuration path \
lacking the `/` of its JSON pointer meant); `405` with an `Allow` header listing the methods \
served, for a method a path does not serve.\n\
- Every `GET` also answers `HEAD`, with the same status and headers and no body.\n\
- Over TCP only: `421` when `Host` names neither the endpoint nor a loopback name, `403` for a \
cross-origin `Origin`, `401` without the bearer token when one is configured \
(`KRES_API_TOKEN_FILE`, the `bearerAuth` security scheme).\n\
- `403` when the client's role does not allow the request: only `GET` and `HEAD` of the reading \
routes are open to the read-only role (unix peers in `--api-read-only-group`, TCP clients with \
the read-only token); everything else needs the admin role, and so do the reads that show \
client addresses or single queries (`/query-log`, `/query-log/stream`, `/top/clients`, \
`/trace`). Each operation's `x-required-role` names its role (`none`, `read-only`, `admin`).\n\
- `503` when the handler found no answer within its time limit ({read} s for GET and HEAD, \
{change} s for other methods).\n\
- A request head not read within {head} s closes the connection without an answer (no `408` \
is sent); a malformed head is answered `400`, an overlong URI `414`, overlong headers `431`, \
before any route is reached.\n\
- Where a route reads a request body, bodies over {body} bytes are refused with `413`.\n\
- After a `401`, `403`, `421` or `413` the server closes the connection (`Connection: close`).\n\n\
Error bodies are plain text ending with a newline, in upstream's words where upstream has them.",
        read = READ_TIMEOUT.as_secs(),
        change = CHANGE_TIMEOUT.as_secs(),
        head = HEADER_READ_TIMEOUT.as_secs(),
        body = BODY_LIMIT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kresctl carries the document as text (`kres_wire::OPENAPI_DOCUMENT`, from
    /// `wire/openapi.json`) without building it from the server's routes; this holds that
    /// copy to what the server serves. `KRES_BLESS=1` writes the file anew.
    #[test]
    fn kresctls_copy_of_the_document_is_the_servers() {
        let built = format!(
            "{}\n",
            serde_json::to_string_pretty(document()).expect("serialises")
        );
        if std::env::var_os("KRES_BLESS").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../wire/openapi.json");
            std::fs::write(path, &built).expect("writes wire/openapi.json");
        } else {
            assert!(
                built == kres_wire::OPENAPI_DOCUMENT,
                "wire/openapi.json is not the API's document: run \
                 `KRES_BLESS=1 cargo test -p kres-daemon --lib openapi` and commit the file"
            );
        }
    }

    #[test]
    fn nullable_enumerations_take_null() {
        let mut schema = json!({"properties": {
            "answer": {"type": ["string", "null"], "enum": ["allow"], "default": null},
            "mode": {"type": "string", "enum": ["a"]},
        }});
        allow_null_in_nullable_enums(&mut schema);
        assert_eq!(
            schema["properties"]["answer"]["enum"],
            json!(["allow", null])
        );
        assert_eq!(schema["properties"]["mode"]["enum"], json!(["a"]));
    }

    /// A documented pattern as proptest's generator takes it (no anchors).
    fn unanchored(pattern: &str) -> String {
        pattern
            .trim_start_matches('^')
            .trim_end_matches('$')
            .to_owned()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]
        /// Every value a documented pattern allows is one the server's parser takes: what
        /// schemathesis generates as valid is accepted (the other way, values outside the
        /// patterns refused, is what `tests/api_conformance.rs` tries).
        #[test]
        fn documented_patterns_are_what_the_parsers_take(
            tags in proptest::string::string_regex(&unanchored(crate::etag::TAG_LIST_PATTERN)).unwrap(),
            client in proptest::string::string_regex(&unanchored(&select::client_pattern())).unwrap(),
            name in proptest::string::string_regex(&unanchored(select::NAME_PATTERN)).unwrap(),
            qtype in proptest::string::string_regex(&unanchored(&select::qtype_pattern())).unwrap(),
            rcode in proptest::string::string_regex(&unanchored(&select::rcode_pattern())).unwrap(),
            window in proptest::string::string_regex(&unanchored(WINDOW_PATTERN)).unwrap(),
            checked in proptest::string::string_regex(&unanchored(crate::rpz::lists::format::NAME_PATTERN)).unwrap(),
            address in proptest::string::string_regex(&unanchored(&select::address_pattern())).unwrap(),
        ) {
            let fits = checked.len() <= crate::rpz::lists::format::MAX_NAME;
            let taken = crate::rpz::lists::format::checked_name(&checked).is_some();
            proptest::prop_assert_eq!(fits, taken, "{:?}", checked);
            proptest::prop_assert!(address.parse::<std::net::IpAddr>().is_ok(), "{address:?}");
            proptest::prop_assert!(crate::etag::TagList::parse(&tags).is_some(), "{tags:?}");
            let name = if name.len() > 254 { "." } else { &name };
            let filter = select::Filter::parse(Some(&client), Some(name), Some(&qtype), Some(&rcode));
            proptest::prop_assert!(filter.is_ok(), "{filter:?}");
            proptest::prop_assert!(super::super::query_log::parse_window(&window).is_ok(), "{window:?}");
        }
    }

    #[test]
    fn the_documents_patterns_are_the_parsers() {
        let doc = document();
        let pattern = |path: &str, name: &str| {
            let parameters = doc["paths"][path]["get"]["parameters"]
                .as_array()
                .expect("parameters");
            let parameter = parameters.iter().find(|p| p["name"] == name);
            parameter.map(|p| p["schema"]["pattern"].clone())
        };
        let tags = Some(json!(crate::etag::TAG_LIST_PATTERN));
        assert_eq!(pattern("/v1/config", "If-Match"), tags);
        assert_eq!(pattern("/v1/config/{pointer}", "If-None-Match"), tags);
        assert_eq!(
            pattern("/rpz/check", "name"),
            Some(json!(crate::rpz::lists::format::NAME_PATTERN))
        );
        assert_eq!(
            pattern("/rpz/check", "client"),
            Some(json!(select::address_pattern()))
        );
        for path in ["/query-log", "/query-log/stream"] {
            assert_eq!(
                pattern(path, "client"),
                Some(json!(select::client_pattern()))
            );
            assert_eq!(pattern(path, "name"), Some(json!(select::NAME_PATTERN)));
            assert_eq!(pattern(path, "qtype"), Some(json!(select::qtype_pattern())));
            assert_eq!(pattern(path, "rcode"), Some(json!(select::rcode_pattern())));
        }
        assert_eq!(
            pattern("/top/{kind}", "window"),
            Some(json!(WINDOW_PATTERN))
        );
    }

    #[test]
    fn catch_all_segments_become_template_variables() {
        assert_eq!(
            openapi_path("/v1/config/{*pointer}"),
            "/v1/config/{pointer}"
        );
        assert_eq!(openapi_path("/processes/{kind}"), "/processes/{kind}");
    }
}
