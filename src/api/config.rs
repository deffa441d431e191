//! `/v1/config{pointer}`: the raw configuration, read and changed through JSON pointers
//! (GET, HEAD, PUT, DELETE) and JSON Patch (PATCH), with structural ETags and `If-Match` /
//! `If-None-Match`. Every change is validated as a whole document (400 listing every error)
//! and applied by the manager, which also re-checks the ETag the change was computed from.
//! One handler per method; the three that change the document share `change`. With
//! `?dry-run=true` a change goes as far as it can without changing anything (validation, the
//! plan, sockets, the canary) and the answer says what it would do.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::error::{ApiError, BodyError};
use super::openapi::ConfigDocument;
use super::pointer;
use super::ApiState;
use crate::config::{self, LoadedConfig};
use crate::etag::{etag, header_matches};
use crate::manager::plan::{ChangePlan, GcChange, RulesChange, WorkerChange};
use crate::manager::ChangeError;

/// How many times a change without `If-Match` is recomputed when another change won the race.
const CONFLICT_RETRIES: usize = 3;

/// The JSON pointer a request below `/v1/config/` addresses: `/a/b` for `/v1/config/a/b`.
fn pointer_of(rest: &str) -> String {
    format!("/{rest}")
}

/// The preconditions of a request against the current ETag: `If-Match` failing is 412;
/// `If-None-Match` matching is 304 for a read and 412 for a change. Returns whether an
/// `If-Match` was given (and matched).
fn check_preconditions(headers: &HeaderMap, tag: &str, read: bool) -> Result<bool, ApiError> {
    let if_match = header_matches(headers, "if-match", tag);
    let failed = |status| ApiError::Precondition {
        status,
        etag: tag.to_owned(),
    };
    if if_match == Some(false) {
        return Err(failed(StatusCode::PRECONDITION_FAILED));
    }
    if header_matches(headers, "if-none-match", tag) == Some(true) {
        return Err(failed(if read {
            StatusCode::NOT_MODIFIED
        } else {
            StatusCode::PRECONDITION_FAILED
        }));
    }
    Ok(if_match.is_some())
}

/// `GET` (and `HEAD`): the whole document, or the value at the pointer.
async fn read(state: &ApiState, headers: &HeaderMap, ptr: &str) -> Result<Response, ApiError> {
    let current = state.manager.config();
    let rendered = state.rendered.get(&current);
    check_preconditions(headers, &rendered.etag, true)?;
    let body = if ptr.is_empty() {
        axum::body::Bytes::clone(&rendered.json)
    } else {
        let value = pointer::get(&current.raw, ptr)?;
        serde_json::to_vec(value)
            .map_err(|e| ApiError::Failed(e.to_string()))?
            .into()
    };
    Ok(json_with_etag(body, &rendered.etag))
}

/// The running configuration, as it was written (`auto` stays `auto`).
#[utoipa::path(
    get,
    path = "/v1/config",
    tag = "config",
    params(IfMatch, IfNoneMatch),
    responses(
        (status = 200, description = "The configuration.", body = ConfigDocument,
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 304, description = "`If-None-Match` matched; empty body.",
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 412, description = "`If-Match` did not match; empty body.",
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
    ),
)]
pub async fn get_document(
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    read(&state, &headers, "").await
}

/// The value at a JSON pointer into the running configuration.
#[utoipa::path(
    get,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, IfMatch, IfNoneMatch),
    responses(
        (status = 200, description = "The value (any JSON).", body = Value,
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 304, description = "`If-None-Match` matched; empty body.",
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 400, description = "An array index that is not a number.", body = String,
         content_type = "text/plain"),
        (status = 404, description = "Nothing at the pointer.", body = String,
         content_type = "text/plain", example = "nothing at /cache/nothing\n"),
        (status = 412, description = "`If-Match` did not match; empty body.",
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 500, description = "The value could not be serialised.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn get_value(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path(rest): Path<String>,
) -> Result<Response, ApiError> {
    read(&state, &headers, &pointer_of(&rest)).await
}

/// The query of a change: `?dry-run=true` asks what it would do.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChangeQuery {
    /// `true`: validate the change, plan it, bind its new sockets and run the canary, but
    /// change nothing; the answer says what the change would do. Any other value than `true`
    /// or `false` is a 400.
    #[serde(default, rename = "dry-run")]
    #[param(rename = "dry-run")]
    dry_run: bool,
}

/// `PUT`: replace (or add) the value at the pointer with the body.
async fn put(
    state: &ApiState,
    headers: &HeaderMap,
    query: &ChangeQuery,
    ptr: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    change(state, headers, query, |doc| {
        let value = parse_body(headers, body)?;
        let mut doc = doc.clone();
        pointer::put(&mut doc, ptr, value)?;
        Ok(doc)
    })
    .await
}

/// Replace the whole configuration.
///
/// The body is a whole configuration as JSON, YAML or TOML (by `Content-Type`). It is
/// validated as a whole and applied by the manager: workers are restarted when a section
/// they read changed.
#[utoipa::path(
    put,
    path = "/v1/config",
    tag = "config",
    params(ChangeQuery, IfMatch, IfNoneMatch),
    request_body(
        description = "The new configuration.",
        content(
            (ConfigDocument = "application/json"),
            (ConfigDocument = "application/yaml"),
            (ConfigDocument = "application/toml"),
        ),
    ),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = CHANGE_400, body = String, content_type = "text/plain"),
        (status = 404, description = "The parent of the pointer does not exist.",
         body = String, content_type = "text/plain"),
        (status = 409, description = CHANGE_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 413, description = "The body is larger than the limit.", body = String,
         content_type = "text/plain"),
        (status = 415, description = "A `Content-Type` that is none of JSON, YAML, TOML.",
         body = String, content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn put_document(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    put(&state, &headers, &query, "", &body).await
}

/// Replace or add the value at a JSON pointer.
///
/// An object member is set; an array element is replaced (`-` appends). The body is any JSON
/// (or YAML, TOML) value; the resulting configuration is validated as a whole and applied.
#[utoipa::path(
    put,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, IfMatch, IfNoneMatch),
    request_body(
        description = "The new value at the pointer: any JSON value (a subtree of the \
configuration).",
        content(
            (Value = "application/json"),
            (Value = "application/yaml"),
            (Value = "application/toml"),
        ),
    ),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = CHANGE_400, body = String, content_type = "text/plain"),
        (status = 404, description = "The parent of the pointer does not exist.",
         body = String, content_type = "text/plain"),
        (status = 409, description = CHANGE_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 413, description = "The body is larger than the limit.", body = String,
         content_type = "text/plain"),
        (status = 415, description = "A `Content-Type` that is none of JSON, YAML, TOML.",
         body = String, content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn put_value(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    Path(rest): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    put(&state, &headers, &query, &pointer_of(&rest), &body).await
}

/// `DELETE`: remove the value at the pointer.
async fn delete(
    state: &ApiState,
    headers: &HeaderMap,
    query: &ChangeQuery,
    ptr: &str,
) -> Result<Response, ApiError> {
    change(state, headers, query, |doc| {
        let mut doc = doc.clone();
        pointer::remove(&mut doc, ptr)?;
        Ok(doc)
    })
    .await
}

/// Remove the whole configuration: every section falls back to its default.
#[utoipa::path(
    delete,
    path = "/v1/config",
    tag = "config",
    params(ChangeQuery, IfMatch, IfNoneMatch),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = CHANGE_400, body = String, content_type = "text/plain"),
        (status = 409, description = CHANGE_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn delete_document(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
) -> Result<Response, ApiError> {
    delete(&state, &headers, &query, "").await
}

/// Remove the value at a JSON pointer.
#[utoipa::path(
    delete,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, IfMatch, IfNoneMatch),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = CHANGE_400, body = String, content_type = "text/plain"),
        (status = 404, description = "Nothing at the pointer.", body = String,
         content_type = "text/plain"),
        (status = 409, description = CHANGE_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn delete_value(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    Path(rest): Path<String>,
) -> Result<Response, ApiError> {
    delete(&state, &headers, &query, &pointer_of(&rest)).await
}

/// `PATCH`: apply the body, a JSON Patch (RFC 6902), to the whole document.
async fn patch(
    state: &ApiState,
    headers: &HeaderMap,
    query: &ChangeQuery,
    body: &[u8],
) -> Result<Response, ApiError> {
    change(state, headers, query, |doc| {
        let ops = parse_body(headers, body)?;
        Ok(pointer::patch(doc, &ops)?)
    })
    .await
}

/// Apply a JSON Patch (RFC 6902) to the configuration.
#[utoipa::path(
    patch,
    path = "/v1/config",
    tag = "config",
    params(ChangeQuery, IfMatch, IfNoneMatch),
    request_body(
        description = "A JSON Patch: an array of operations (`add`, `remove`, `replace`, \
`move`, `copy`, `test`) on the whole document.",
        content(
            (Vec<Value> = "application/json"),
            (Vec<Value> = "application/json-patch+json"),
        ),
    ),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = PATCH_400, body = String, content_type = "text/plain"),
        (status = 409, description = PATCH_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 413, description = PATCH_413, body = String, content_type = "text/plain"),
        (status = 415, description = "A `Content-Type` that is none of JSON, YAML, TOML.",
         body = String, content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn patch_document(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    patch(&state, &headers, &query, &body).await
}

/// Apply a JSON Patch to the whole configuration (the pointer is not used).
///
/// As `PATCH /v1/config`: the operations' paths are pointers from the document's root, whatever
/// the request's path below `/v1/config/`.
#[utoipa::path(
    patch,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, IfMatch, IfNoneMatch),
    request_body(
        description = "A JSON Patch on the whole document.",
        content(
            (Vec<Value> = "application/json"),
            (Vec<Value> = "application/json-patch+json"),
        ),
    ),
    responses(
        (status = 200, description = "Applied (empty body), or, with `dry-run=true`, what the \
change would do.", body = DryRun, headers(("ETag" = String, description = "The ETag of the configuration the change made (with `dry-run`: would make, also in the body)."))),
        (status = 400, description = PATCH_400, body = String, content_type = "text/plain"),
        (status = 409, description = PATCH_409, body = String, content_type = "text/plain"),
        (status = 412, description = CHANGE_412, headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 413, description = PATCH_413, body = String, content_type = "text/plain"),
        (status = 415, description = "A `Content-Type` that is none of JSON, YAML, TOML.",
         body = String, content_type = "text/plain"),
        (status = 500, description = "Applying failed.", body = String,
         content_type = "text/plain"),
        (status = 503, description = "The manager is not running.", body = String,
         content_type = "text/plain"),
    ),
)]
pub async fn patch_value(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    Path(_rest): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    patch(&state, &headers, &query, &body).await
}

const CHANGE_400: &str = "The body does not parse (or is not UTF-8), the pointer is \
malformed, `dry-run` is not a boolean, the resulting configuration is invalid (every error is \
listed: `Configuration validation error detected:`), or the manager refused it (an immutable \
section changed, the canary or the policy-loader failed, a socket could not be bound, a rolling \
restart was rolled back: `Configuration validation failed:`).";
const CHANGE_409: &str = "The configuration kept changing under the request (another change won \
the race every time); try again.";
const CHANGE_412: &str = "`If-Match` did not match, `If-None-Match` matched, or, with \
`If-Match`, another change won the race; empty body, the current ETag in `ETag`.";
const PATCH_400: &str = "The body does not parse, an operation is malformed or names \
nothing, `dry-run` is not a boolean, or the resulting configuration is invalid or refused (as \
for `PUT`).";
const PATCH_409: &str = "A `test` operation failed, or the configuration kept changing under \
the request.";
const PATCH_413: &str = "The body is larger than the limit, or the document would outgrow the \
bounds of a configuration.";

/// `If-Match`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Only described: the handlers read the headers.
struct IfMatch {
    /// Answer only if the configuration's ETag is one of these (or `*`); 412 otherwise.
    #[param(rename = "If-Match")]
    if_match: Option<String>,
}

/// `If-None-Match`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Only described: the handlers read the headers.
struct IfNoneMatch {
    /// Answer only if the configuration's ETag is none of these: 304 for a read, 412 for a
    /// change otherwise.
    #[param(rename = "If-None-Match")]
    if_none_match: Option<String>,
}

/// The pointer of the routes below `/v1/config/`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Only described: the handlers extract the path.
struct PointerParam {
    /// A JSON pointer (RFC 6901) without its leading `/`, which may hold more `/`:
    /// `/v1/config/network/listen/0` addresses `/network/listen/0`.
    pointer: String,
}

/// Check the preconditions, compute the new document from the current one with `edit` (which
/// also reads the body: a failed precondition answers before a bad body), validate it and have the
/// manager apply it. When another change won the race in between, a request without
/// `If-Match` is recomputed (up to [`CONFLICT_RETRIES`] times); one with it gets 412.
async fn change(
    state: &ApiState,
    headers: &HeaderMap,
    query: &ChangeQuery,
    edit: impl Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    for _ in 0..CONFLICT_RETRIES {
        let current = state.manager.config();
        let tag = state.rendered.get(&current).etag.clone();
        let conditional = check_preconditions(headers, &tag, false)?;
        let doc = edit(&current.raw)?;
        let model = config::validate(&doc, &state.validation).map_err(ApiError::Invalid)?;
        let new_tag = etag(&doc);
        let loaded = LoadedConfig { raw: doc, model };
        let outcome = if query.dry_run {
            state.manager.dry_run(loaded, Some(tag)).await
        } else {
            state.manager.apply(loaded, Some(tag)).await
        };
        match outcome {
            Ok(plan) if query.dry_run => {
                return Ok(super::json_value(
                    StatusCode::OK,
                    &dry_run_answer(&plan, &new_tag),
                ))
            }
            Ok(_) => return Ok(with_etag(StatusCode::OK.into_response(), &new_tag)),
            Err(ChangeError::Conflict) if !conditional => continue,
            Err(ChangeError::Conflict) => {
                return Err(ApiError::Precondition {
                    status: StatusCode::PRECONDITION_FAILED,
                    etag: state.rendered.get(&state.manager.config()).etag.clone(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::KeptChanging)
}

/// What a dry run answers: what the change would do, and the ETag the result would have.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DryRun {
    /// Always `true`.
    dry_run: bool,
    /// The sections the change touches.
    changed: Vec<&'static str>,
    /// What the workers would go through.
    workers: WorkersAction,
    /// Whether the cache garbage collector would be replaced.
    cache_gc: GcAction,
    /// The ETag the configuration would have.
    etag: String,
}

/// What a change does to the workers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum WorkersAction {
    /// The workers keep running; their rules are reloaded.
    RulesReset,
    /// The change reaches the running workers through their control sockets (a `logging`
    /// change): no worker restarts.
    Live {
        /// The workers told, by name.
        workers: Vec<String>,
        /// Whether their rules are reloaded too.
        #[serde(rename = "rules-reset")]
        rules_reset: bool,
    },
    /// A rolling restart.
    Restart {
        /// Whether a canary worker tries the configuration first.
        canary: bool,
        /// Workers stopped (scale-down), restarted, started (scale-up), by name.
        stop: Vec<String>,
        restart: Vec<String>,
        start: Vec<String>,
        /// Shared-memory files removed first.
        unlink: Vec<&'static str>,
    },
}

/// What a change does to the cache garbage collector.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GcAction {
    Keep,
    Replace,
}

fn dry_run_answer(plan: &ChangePlan, new_tag: &str) -> DryRun {
    let names = |ids: &[crate::service::WorkerId]| -> Vec<String> {
        ids.iter().map(|id| id.name()).collect()
    };
    let workers = match &plan.workers {
        WorkerChange::ResetRules => WorkersAction::RulesReset,
        WorkerChange::Live(live) => WorkersAction::Live {
            workers: names(&live.workers),
            rules_reset: live.rules == RulesChange::Reset,
        },
        WorkerChange::Roll(roll) => WorkersAction::Restart {
            canary: roll.unlink.is_empty(),
            stop: names(&roll.stop),
            restart: names(&roll.restart),
            start: names(&roll.start),
            unlink: roll.unlink.iter().map(|s| s.file_name()).collect(),
        },
    };
    DryRun {
        dry_run: true,
        changed: plan.changed.iter().map(|s| s.key()).collect(),
        workers,
        cache_gc: match plan.gc {
            GcChange::Keep => GcAction::Keep,
            GcChange::Replace => GcAction::Replace,
        },
        etag: new_tag.to_owned(),
    }
}

/// The ETag and compact JSON of one configuration version.
pub struct Rendered {
    pub etag: String,
    pub json: axum::body::Bytes,
}

/// The configuration version a [`Rendered`] belongs to, and the rendering.
type RenderedEntry = (Arc<LoadedConfig>, Arc<Rendered>);

/// Memo of [`Rendered`] for the latest configuration, keyed by its `Arc`.
#[derive(Clone, Default)]
pub struct RenderedCache {
    inner: Arc<std::sync::Mutex<Option<RenderedEntry>>>,
}

impl RenderedCache {
    pub fn get(&self, config: &Arc<LoadedConfig>) -> Arc<Rendered> {
        if let Ok(guard) = self.inner.lock() {
            if let Some((c, r)) = guard.as_ref() {
                if Arc::ptr_eq(c, config) {
                    return r.clone();
                }
            }
        }
        let rendered = Arc::new(Rendered {
            etag: etag(&config.raw),
            json: axum::body::Bytes::from(serde_json::to_vec(&config.raw).unwrap_or_default()),
        });
        if let Ok(mut guard) = self.inner.lock() {
            *guard = Some((config.clone(), rendered.clone()));
        }
        rendered
    }
}

fn json_with_etag(body: axum::body::Bytes, tag: &str) -> Response {
    let response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    with_etag(response, tag)
}

fn with_etag(mut r: Response, tag: &str) -> Response {
    if let Ok(v) = header::HeaderValue::from_str(tag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

/// A request body as JSON, or YAML (`application/yaml`, `text/yaml`…), or TOML.
pub fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, BodyError> {
    let mime = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let text = std::str::from_utf8(body).map_err(|_| BodyError::NotUtf8)?;
    let origin = match mime.as_str() {
        "" | "application/json" | "application/octet-stream" | "text/json" => "request.json",
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml"
        | "text/vnd.yaml" => "request.yaml",
        "application/toml" | "text/toml" => "request.toml",
        other => return Err(BodyError::UnsupportedMime(other.to_owned())),
    };
    if origin == "request.json" {
        return serde_json::from_str(text).map_err(|e| BodyError::Parse(e.to_string()));
    }
    config::parse_document(text, std::path::Path::new(origin))
        .map_err(|e| BodyError::Parse(e.to_string()))
}
