//! `ApiError`: every way a request can fail, as one type that knows its status and body, so
//! handlers return `Result<Response, ApiError>` and use `?`. The texts are upstream's where
//! upstream has one (`kresctl` and operators' scripts match on them).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::pointer::{PatchError, PointerError};
use crate::manager::{ApplyError, ChangeError};
use kres_config::ValidationErrors;

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

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body could not be read as a document.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// A JSON pointer names nothing, or nothing that can be changed so.
    #[error(transparent)]
    Pointer(#[from] PointerError),
    /// A JSON Patch could not be applied.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// The resulting configuration is invalid (the errors' text carries upstream's header).
    #[error("{0}")]
    Invalid(ValidationErrors),
    /// A request body that is not what the route takes (messages already in upstream's form).
    #[error("{0}")]
    BadRequest(String),
    /// The manager refused or could not make the change.
    #[error(transparent)]
    Change(#[from] ChangeError),
    /// `If-Match` / `If-None-Match` decided: 412 or 304, with the current ETag.
    #[error("precondition: {status}")]
    Precondition { status: StatusCode, etag: String },
    /// The configuration changed under every retry of a change without `If-Match`.
    #[error("the configuration kept changing; try again")]
    KeptChanging,
    /// A route that exists only with fault injection enabled, or an unknown `{how}`.
    #[error("not found")]
    NotFound,
    /// What the route serves does not exist on this node (404 with the reason).
    #[error("{0}")]
    Absent(String),
    /// The request cannot be carried out as things are (an upgrade whose new binary failed
    /// its probe).
    #[error("{0}")]
    Conflict(String),
    /// Something the request needs is not there now (no running worker, no manager).
    #[error("{0}")]
    Unavailable(String),
    /// What the request waits for did not come in time.
    #[error("{0}")]
    TimedOut(String),
    /// As many requests of its kind as may run at once are running (`api::heavy`): 429 with
    /// `Retry-After`.
    #[error("{0}")]
    TooMany(String),
    /// The request was fine; carrying it out failed.
    #[error("request processing failed:\n{0}")]
    Failed(String),
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::Body(BodyError::UnsupportedMime(_)) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Body(_) | ApiError::Invalid(_) | ApiError::BadRequest(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::Pointer(PointerError::NotFound(_)) => StatusCode::NOT_FOUND,
            ApiError::Pointer(_) => StatusCode::BAD_REQUEST,
            ApiError::Patch(PatchError::TestFailed { .. }) => StatusCode::CONFLICT,
            ApiError::Patch(PatchError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Patch(_) => StatusCode::BAD_REQUEST,
            ApiError::Change(e) => change_status(e),
            ApiError::Precondition { status, .. } => *status,
            ApiError::KeptChanging | ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::NotFound | ApiError::Absent(_) => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TimedOut(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The body; every text ends with a newline.
    fn body(&self) -> String {
        match self {
            ApiError::Body(e) => format!("request processing error:\n{e}\n"),
            ApiError::Patch(e @ (PatchError::Malformed { .. } | PatchError::Pointer { .. })) => {
                format!("request processing error:\n{e}\n")
            }
            ApiError::Change(e) => {
                let prefix = if change_status(e) == StatusCode::INTERNAL_SERVER_ERROR {
                    "request processing failed"
                } else {
                    "Configuration validation failed"
                };
                format!("{prefix}:\n{e}\n")
            }
            ApiError::Precondition { .. } | ApiError::NotFound => String::new(),
            ApiError::Invalid(_) => self.to_string(),
            other => format!("{other}\n"),
        }
    }
}

/// The status of a change the manager refused or could not make: the configuration's fault
/// (400), a conflict, the manager's absence, or an internal failure.
fn change_status(e: &ChangeError) -> StatusCode {
    match e {
        ChangeError::Config(_) => StatusCode::BAD_REQUEST,
        ChangeError::Apply(
            ApplyError::Immutable(_)
            | ApplyError::Canary { .. }
            | ApplyError::PolicyLoader(_)
            | ApplyError::Listen(_)
            | ApplyError::RolledBack(_),
        ) => StatusCode::BAD_REQUEST,
        ChangeError::Apply(_) => StatusCode::INTERNAL_SERVER_ERROR,
        ChangeError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ChangeError::Conflict => StatusCode::CONFLICT,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = self.body();
        let mut response = (status, body).into_response();
        if let ApiError::Precondition { etag, .. } = &self {
            if let Ok(v) = header::HeaderValue::from_str(etag) {
                response.headers_mut().insert(header::ETAG, v);
            }
        }
        if let ApiError::TooMany(_) = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}
