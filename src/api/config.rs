//! `/v1/config{pointer}`: the raw configuration, read and changed through JSON pointers
//! (GET, HEAD, PUT, DELETE) and JSON Patch (PATCH), with structural ETags and `If-Match` /
//! `If-None-Match`. Every change is validated as a whole document (400 listing every error)
//! and applied by the manager, which also re-checks the ETag the change was computed from.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::oneshot;

use super::pointer::{self, PointerError};
use super::ApiState;
use crate::config::{self, LoadedConfig, ValidationContext};
use crate::etag::{etag, header_matches};
use crate::manager::task::{ChangeError, ManagerCommand};

/// How many times a change without `If-Match` is recomputed when another change won the race.
const CONFLICT_RETRIES: usize = 3;

pub async fn root(
    state: State<ApiState>,
    method: Method,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    handle(state, method, headers, String::new(), body).await
}

pub async fn at(
    state: State<ApiState>,
    method: Method,
    headers: HeaderMap,
    Path(rest): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    handle(state, method, headers, format!("/{rest}"), body).await
}

async fn handle(
    State(state): State<ApiState>,
    method: Method,
    headers: HeaderMap,
    ptr: String,
    body: axum::body::Bytes,
) -> Response {
    let read = method == Method::GET || method == Method::HEAD;
    for _ in 0..CONFLICT_RETRIES {
        let current: Arc<LoadedConfig> = state.config.borrow().clone();
        let rendered = state.rendered.get(&current);
        let tag = rendered.etag.clone();
        let if_match = header_matches(&headers, "if-match", &tag);
        let if_none_match = header_matches(&headers, "if-none-match", &tag);
        if if_match == Some(false) {
            return with_etag(StatusCode::PRECONDITION_FAILED.into_response(), &tag);
        }
        if if_none_match == Some(true) {
            let status = if read {
                StatusCode::NOT_MODIFIED
            } else {
                StatusCode::PRECONDITION_FAILED
            };
            return with_etag(status.into_response(), &tag);
        }
        if read {
            if ptr.is_empty() {
                let body = axum::body::Bytes::clone(&rendered.json);
                return with_etag(
                    (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/json")],
                        body,
                    )
                        .into_response(),
                    &tag,
                );
            }
            return match pointer::get(&current.raw, &ptr) {
                Ok(v) => with_etag(compact_json(v), &tag),
                Err(e) => pointer_error(e),
            };
        }
        let mut doc = current.raw.clone();
        let changed = match method.as_str() {
            "PUT" => match parse_body(&headers, &body) {
                Ok(value) => pointer::put(&mut doc, &ptr, value).map(|()| doc),
                Err(e) => return e.into_response(),
            },
            "DELETE" => pointer::remove(&mut doc, &ptr).map(|_| doc),
            "PATCH" => match parse_body(&headers, &body) {
                Ok(ops) => match pointer::patch(&doc, &ops) {
                    Ok(d) => Ok(d),
                    Err(e @ pointer::PatchError::TestFailed { .. }) => {
                        return (StatusCode::CONFLICT, format!("{e}\n")).into_response();
                    }
                    Err(e @ pointer::PatchError::TooLarge { .. }) => {
                        return (StatusCode::PAYLOAD_TOO_LARGE, format!("{e}\n")).into_response();
                    }
                    Err(e) => {
                        return (
                            StatusCode::BAD_REQUEST,
                            format!("request processing error:\n{e}\n"),
                        )
                            .into_response()
                    }
                },
                Err(e) => return e.into_response(),
            },
            _ => return StatusCode::METHOD_NOT_ALLOWED.into_response(),
        };
        let doc = match changed {
            Ok(d) => d,
            Err(e) => return pointer_error(e),
        };
        let ctx = ValidationContext {
            resolve_root: state.resolve_root.clone(),
            strict: true,
        };
        let model = match config::validate(&doc, &ctx) {
            Ok(m) => m,
            Err(errors) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("Configuration validation error detected:\n{errors}"),
                )
                    .into_response();
            }
        };
        let new_tag = etag(&doc);
        let (reply, result) = oneshot::channel();
        let command = ManagerCommand::Apply {
            config: Box::new(LoadedConfig { raw: doc, model }),
            base: Some(tag),
            reply,
        };
        if state.manager.send(command).await.is_err() {
            return change_error(ChangeError::Unavailable);
        }
        match result.await {
            Ok(Ok(_)) => return with_etag(StatusCode::OK.into_response(), &new_tag),
            Ok(Err(ChangeError::Conflict)) if if_match.is_none() => continue,
            Ok(Err(ChangeError::Conflict)) => {
                return StatusCode::PRECONDITION_FAILED.into_response()
            }
            Ok(Err(e)) => return change_error(e),
            Err(_) => return change_error(ChangeError::Unavailable),
        }
    }
    (
        StatusCode::CONFLICT,
        "the configuration kept changing; try again\n",
    )
        .into_response()
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

fn compact_json(v: &Value) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn with_etag(mut r: Response, tag: &str) -> Response {
    if let Ok(v) = header::HeaderValue::from_str(tag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

fn pointer_error(e: PointerError) -> Response {
    let status = match e {
        PointerError::NotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    (status, format!("{e}\n")).into_response()
}

/// Why a request body was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the body is not UTF-8")]
    NotUtf8,
    #[error("unsupported MIME type '{0}'")]
    UnsupportedMime(String),
    #[error("{0}")]
    Parse(String),
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        let status = match self {
            BodyError::UnsupportedMime(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::BAD_REQUEST,
        };
        (status, format!("request processing error:\n{self}\n")).into_response()
    }
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

/// The response for a change the manager refused or could not make.
pub fn change_error(e: ChangeError) -> Response {
    use crate::manager::ApplyError as A;
    let status = match &e {
        ChangeError::Config(_) => StatusCode::BAD_REQUEST,
        ChangeError::Apply(
            A::Immutable { .. } | A::Canary { .. } | A::PolicyLoader(_) | A::Listen(_),
        ) => StatusCode::BAD_REQUEST,
        ChangeError::Apply(_) => StatusCode::INTERNAL_SERVER_ERROR,
        ChangeError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ChangeError::Conflict => StatusCode::CONFLICT,
    };
    let prefix = if status == StatusCode::INTERNAL_SERVER_ERROR {
        "request processing failed"
    } else {
        "Configuration validation failed"
    };
    (status, format!("{prefix}:\n{e}\n")).into_response()
}
