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
use serde_json::Value;

use super::error::{ApiError, BodyError};
use super::pointer;
use super::ApiState;
use crate::config::{self, LoadedConfig, ValidationContext};
use crate::etag::{etag, header_matches};
use crate::manager::plan::{ChangePlan, GcChange, RulesChange, WorkerChange};
use crate::manager::ChangeError;

/// How many times a change without `If-Match` is recomputed when another change won the race.
const CONFLICT_RETRIES: usize = 3;

/// The JSON pointer a request addresses: empty for `/v1/config`, `/a/b` for `/v1/config/a/b`.
fn pointer_of(rest: Option<Path<String>>) -> String {
    rest.map(|Path(rest)| format!("/{rest}"))
        .unwrap_or_default()
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
pub async fn get(
    State(state): State<ApiState>,
    headers: HeaderMap,
    rest: Option<Path<String>>,
) -> Result<Response, ApiError> {
    let ptr = pointer_of(rest);
    let current = state.manager.config();
    let rendered = state.rendered.get(&current);
    check_preconditions(&headers, &rendered.etag, true)?;
    let body = if ptr.is_empty() {
        axum::body::Bytes::clone(&rendered.json)
    } else {
        let value = pointer::get(&current.raw, &ptr)?;
        serde_json::to_vec(value)
            .map_err(|e| ApiError::Failed(e.to_string()))?
            .into()
    };
    Ok(json_with_etag(body, &rendered.etag))
}

/// The query of a change: `?dry-run=true` asks what it would do.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ChangeQuery {
    #[serde(default, rename = "dry-run")]
    dry_run: bool,
}

/// `PUT`: replace (or add) the value at the pointer with the body.
pub async fn put(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    rest: Option<Path<String>>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let ptr = pointer_of(rest);
    change(&state, &headers, &query, |doc| {
        let value = parse_body(&headers, &body)?;
        let mut doc = doc.clone();
        pointer::put(&mut doc, &ptr, value)?;
        Ok(doc)
    })
    .await
}

/// `DELETE`: remove the value at the pointer.
pub async fn delete(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    rest: Option<Path<String>>,
) -> Result<Response, ApiError> {
    let ptr = pointer_of(rest);
    change(&state, &headers, &query, |doc| {
        let mut doc = doc.clone();
        pointer::remove(&mut doc, &ptr)?;
        Ok(doc)
    })
    .await
}

/// `PATCH`: apply the body, a JSON Patch (RFC 6902), to the whole document.
pub async fn patch(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<ChangeQuery>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    change(&state, &headers, &query, |doc| {
        let ops = parse_body(&headers, &body)?;
        Ok(pointer::patch(doc, &ops)?)
    })
    .await
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
        let ctx = ValidationContext {
            resolve_root: state.resolve_root.clone(),
            strict: true,
        };
        let model = config::validate(&doc, &ctx).map_err(ApiError::Invalid)?;
        let new_tag = etag(&doc);
        let loaded = LoadedConfig { raw: doc, model };
        let outcome = if query.dry_run {
            state.manager.dry_run(loaded, Some(tag)).await
        } else {
            state.manager.apply(loaded, Some(tag)).await
        };
        match outcome {
            Ok(plan) if query.dry_run => {
                return Ok(super::json_response(
                    StatusCode::OK,
                    &plan_json(&plan, &new_tag),
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
fn plan_json(plan: &ChangePlan, new_tag: &str) -> Value {
    let names = |ids: &[crate::service::WorkerId]| -> Vec<String> {
        ids.iter().map(|id| id.name()).collect()
    };
    let workers = match &plan.workers {
        WorkerChange::ResetRules => serde_json::json!({"action": "rules-reset"}),
        WorkerChange::Live(live) => serde_json::json!({
            "action": "live",
            "workers": names(&live.workers),
            "rules-reset": live.rules == RulesChange::Reset,
        }),
        WorkerChange::Roll(roll) => serde_json::json!({
            "action": "restart",
            "canary": roll.unlink.is_empty(),
            "stop": names(&roll.stop),
            "restart": names(&roll.restart),
            "start": names(&roll.start),
            "unlink": roll.unlink.iter().map(|s| s.file_name()).collect::<Vec<_>>(),
        }),
    };
    serde_json::json!({
        "dry-run": true,
        "changed": plan.changed.iter().map(|s| s.key()).collect::<Vec<_>>(),
        "workers": workers,
        "cache-gc": match plan.gc {
            GcChange::Keep => "keep",
            GcChange::Replace => "replace",
        },
        "etag": new_tag,
    })
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
