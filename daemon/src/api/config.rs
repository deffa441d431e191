//! `/v1/config{pointer}`: the raw configuration, read and changed through JSON pointers
//! (GET, HEAD, PUT, DELETE) and JSON Patch (PATCH), with structural ETags and `If-Match` /
//! `If-None-Match`. Every change is validated as a whole document (400 listing every error)
//! and applied by the manager, which also re-checks the ETag the change was computed from.
//! One handler per method; the three that change the document share `change`. With
//! `?dry-run=true` a change goes as far as it can without changing anything (validation, the
//! plan, sockets, the canary) and the answer says what it would do.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::{ApiError, BodyError};
use super::openapi::ConfigDocument;
use super::pointer;
use super::responses::{ConfigConditions, ConfigDelete, ConfigDeleteAll, ConfigPatch, ConfigPut};
use super::ApiState;
use crate::etag::{etag, tag_list, TagList};
use crate::manager::handle::Base;
use crate::manager::plan::Stage;
use crate::manager::ChangeError;
use kres_config::LoadedConfig;
use kres_wire::change::DryRun;

/// How many times a change without `If-Match` is recomputed when another change won the race.
const CONFLICT_RETRIES: usize = 3;

/// What a request asks of the configuration: a read or a change. A matching `If-None-Match`
/// answers 304 to a read, 412 to a change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Change,
}

/// `If-Match` and `If-None-Match`: each the list of ETags a request names (every value of the
/// header, comma-separated), or `None` when the request has none. A value that is not `*` or
/// a list of entity tags is a 400 (the document gives the pattern).
#[derive(Default, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct Preconditions {
    /// Answer only if the configuration's ETag is one of these (or `*`); 412 otherwise.
    #[param(rename = "If-Match", value_type = String, required = false,
            pattern = r#"^[ \t]*(\*|(W/)?"[!#-~]*"([ \t]*,[ \t]*(W/)?"[!#-~]*")*)[ \t]*$"#)]
    if_match: Option<TagList>,
    /// Answer only if the configuration's ETag is none of these: 304 for a read, 412 for a
    /// change otherwise.
    #[param(rename = "If-None-Match", value_type = String, required = false,
            pattern = r#"^[ \t]*(\*|(W/)?"[!#-~]*"([ \t]*,[ \t]*(W/)?"[!#-~]*")*)[ \t]*$"#)]
    if_none_match: Option<TagList>,
}

impl<S: Send + Sync> FromRequestParts<S> for Preconditions {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let list = |name: header::HeaderName, shown: &str| {
            tag_list(&parts.headers, name)
                .map_err(|not_tags| ApiError::BadRequest(format!("{shown}: {not_tags}")))
        };
        Ok(Preconditions {
            if_match: list(header::IF_MATCH, "If-Match")?,
            if_none_match: list(header::IF_NONE_MATCH, "If-None-Match")?,
        })
    }
}

impl Preconditions {
    /// Check the preconditions against the current ETag: `If-Match` failing is 412;
    /// `If-None-Match` matching is 304 for a read and 412 for a change. Returns whether an
    /// `If-Match` was given (and matched).
    fn check(&self, tag: &str, access: Access) -> Result<bool, ApiError> {
        let failed = |status| ApiError::Precondition {
            status,
            etag: tag.to_owned(),
        };
        if self.if_match.as_ref().is_some_and(|l| !l.names(tag)) {
            return Err(failed(StatusCode::PRECONDITION_FAILED));
        }
        if self.if_none_match.as_ref().is_some_and(|l| l.names(tag)) {
            return Err(failed(match access {
                Access::Read => StatusCode::NOT_MODIFIED,
                Access::Change => StatusCode::PRECONDITION_FAILED,
            }));
        }
        Ok(self.if_match.is_some())
    }
}

/// `GET` (and `HEAD`): the whole document, or the value at the pointer.
async fn read(
    state: &ApiState,
    conditions: &Preconditions,
    ptr: &str,
) -> Result<Response, ApiError> {
    let current = state.manager.config();
    let rendered = state.rendered.of(&current).await;
    conditions.check(&rendered.etag, Access::Read)?;
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
    params(Preconditions),
    responses(
        (status = 200, description = "The configuration.", body = ConfigDocument,
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 400, description = "`If-Match` or `If-None-Match` is not `*` or a list of \
         entity tags.", body = String, content_type = "text/plain"),
        ConfigConditions,
    ),
)]
pub async fn get_document(
    State(state): State<ApiState>,
    conditions: Preconditions,
) -> Result<Response, ApiError> {
    read(&state, &conditions, "").await
}

/// The value at a JSON pointer into the running configuration.
#[utoipa::path(
    get,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, Preconditions),
    responses(
        (status = 200, description = "The value (any JSON).", body = Value,
         headers(("ETag" = String, description = "The configuration's structural ETag."))),
        (status = 400, description = "An array index that is not a number, or `If-Match` or \
         `If-None-Match` that is not `*` or a list of entity tags.", body = String,
         content_type = "text/plain"),
        (status = 404, description = "Nothing at the pointer.", body = String,
         content_type = "text/plain", example = "nothing at /cache/nothing\n"),
        (status = 500, description = "The value could not be serialised.", body = String,
         content_type = "text/plain"),
        ConfigConditions,
    ),
)]
pub async fn get_value(
    State(state): State<ApiState>,
    conditions: Preconditions,
    Path(at): Path<PointerParam>,
) -> Result<Response, ApiError> {
    read(&state, &conditions, &at.pointer()).await
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
    /// On a node of a fleet: stage the change, this node getting it first and alone (a staged
    /// rollout; default: the node's `fleet.rollout.canary-node`, else the node taking it).
    #[serde(default, rename = "canary-node")]
    #[param(rename = "canary-node")]
    canary_node: Option<String>,
    /// On a node of a fleet: stage the change, the nodes after the canary getting it in waves
    /// of this size, a share of the fleet (`10%`) or a number of nodes (`3`).
    #[serde(default)]
    wave: Option<String>,
}

impl ChangeQuery {
    /// Whether the query asks for a staged rollout.
    fn stages(&self) -> bool {
        self.canary_node.is_some() || self.wave.is_some()
    }
}

/// What every change of the document starts from: the state, the request's preconditions and
/// its query.
pub struct ChangeRequest {
    /// What the handlers can see and do.
    state: ApiState,
    /// `If-Match` / `If-None-Match`.
    conditions: Preconditions,
    /// `?dry-run`.
    query: ChangeQuery,
    /// What the answer of an applied change carries.
    answer: AppliedAnswer,
}

/// What the answer of an applied change carries: nothing (as upstream's manager answers), or
/// what the change did when the client asks for JSON (`Accept: application/json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliedAnswer {
    Empty,
    Summary,
}

impl AppliedAnswer {
    /// From the request's `Accept`: a summary only when it names JSON itself (`*/*`, as
    /// curl sends, keeps the empty answer).
    pub fn from_headers(headers: &HeaderMap) -> AppliedAnswer {
        let names_json = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|m| {
                m.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
        if names_json {
            AppliedAnswer::Summary
        } else {
            AppliedAnswer::Empty
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ChangeRequest
where
    ApiState: axum::extract::FromRef<S>,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Query(query) = Query::<ChangeQuery>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let conditions = Preconditions::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(ChangeRequest {
            state: axum::extract::FromRef::from_ref(state),
            conditions,
            query,
            answer: AppliedAnswer::from_headers(&parts.headers),
        })
    }
}

/// `PUT`: replace (or add) the value at the pointer with the body.
async fn put(
    request: &ChangeRequest,
    headers: HeaderMap,
    ptr: String,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    change(request, move |doc| {
        let value = parse_body(&headers, &body)?;
        let mut doc = doc.clone();
        pointer::put(&mut doc, &ptr, value)?;
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
    params(ChangeQuery, Preconditions),
    request_body(
        description = "The new configuration.",
        content(
            (ConfigDocument = "application/json"),
            (ConfigDocument = "application/yaml"),
            (ConfigDocument = "application/toml"),
        ),
    ),
    responses(ConfigPut),
)]
pub async fn put_document(
    request: ChangeRequest,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    put(&request, headers, String::new(), body).await
}

/// Replace or add the value at a JSON pointer.
///
/// An object member is set; an array element is replaced (`-` appends). The body is any JSON
/// (or YAML, TOML) value; the resulting configuration is validated as a whole and applied.
#[utoipa::path(
    put,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, Preconditions),
    request_body(
        description = "The new value at the pointer: any JSON value (a subtree of the \
configuration).",
        content(
            (Value = "application/json"),
            (Value = "application/yaml"),
            (Value = "application/toml"),
        ),
    ),
    responses(ConfigPut),
)]
pub async fn put_value(
    request: ChangeRequest,
    headers: HeaderMap,
    Path(at): Path<PointerParam>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    put(&request, headers, at.pointer(), body).await
}

/// `DELETE`: remove the value at the pointer.
async fn delete(request: &ChangeRequest, ptr: String) -> Result<Response, ApiError> {
    change(request, move |doc| {
        let mut doc = doc.clone();
        pointer::remove(&mut doc, &ptr)?;
        Ok(doc)
    })
    .await
}

/// Remove the whole configuration: every section falls back to its default.
#[utoipa::path(
    delete,
    path = "/v1/config",
    tag = "config",
    params(ChangeQuery, Preconditions),
    responses(ConfigDeleteAll)
)]
pub async fn delete_document(request: ChangeRequest) -> Result<Response, ApiError> {
    delete(&request, String::new()).await
}

/// Remove the value at a JSON pointer.
#[utoipa::path(
    delete,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, Preconditions),
    responses(ConfigDelete)
)]
pub async fn delete_value(
    request: ChangeRequest,
    Path(at): Path<PointerParam>,
) -> Result<Response, ApiError> {
    delete(&request, at.pointer()).await
}

/// `PATCH`: apply the body, a JSON Patch (RFC 6902), to the whole document.
async fn patch(
    request: &ChangeRequest,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    change(request, move |doc| {
        let ops = parse_patch(&headers, &body)?;
        Ok(pointer::patch(doc, &ops)?)
    })
    .await
}

/// Apply a JSON Patch (RFC 6902) to the configuration.
#[utoipa::path(
    patch,
    path = "/v1/config",
    tag = "config",
    params(ChangeQuery, Preconditions),
    request_body(
        description = "A JSON Patch: an array of operations (`add`, `remove`, `replace`, \
`move`, `copy`, `test`) on the whole document.",
        content(
            (Vec<Value> = "application/json"),
            (Vec<Value> = "application/json-patch+json"),
        ),
    ),
    responses(ConfigPatch),
)]
pub async fn patch_document(
    request: ChangeRequest,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    patch(&request, headers, body).await
}

/// Apply a JSON Patch to the whole configuration (the pointer is not used).
///
/// As `PATCH /v1/config`: the operations' paths are pointers from the document's root, whatever
/// the request's path below `/v1/config/`.
#[utoipa::path(
    patch,
    path = "/v1/config/{*pointer}",
    tag = "config",
    params(PointerParam, ChangeQuery, Preconditions),
    request_body(
        description = "A JSON Patch on the whole document.",
        content(
            (Vec<Value> = "application/json"),
            (Vec<Value> = "application/json-patch+json"),
        ),
    ),
    responses(ConfigPatch),
)]
pub async fn patch_value(
    request: ChangeRequest,
    headers: HeaderMap,
    Path(_): Path<PointerParam>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    patch(&request, headers, body).await
}

/// The pointer of the routes below `/v1/config/`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PointerParam {
    /// A JSON pointer (RFC 6901) without its leading `/`, which may hold more `/`:
    /// `/v1/config/network/listen/0` addresses `/network/listen/0`.
    pointer: String,
}

impl PointerParam {
    /// The JSON pointer the request addresses: `/a/b` for `/v1/config/a/b`.
    fn pointer(&self) -> String {
        format!("/{}", self.pointer)
    }
}

/// Check the preconditions, compute the new document from the current one with `edit` (which
/// also reads the body: a failed precondition answers before a bad body), validate it and have the
/// manager apply it. Reading the body, validating and hashing run on the blocking pool: the
/// runtime's one thread keeps answering other requests (probes included) meanwhile. When another change won the race in between, a request without
/// `If-Match` is recomputed (up to [`CONFLICT_RETRIES`] times); one with it gets 412.
async fn change(
    request: &ChangeRequest,
    edit: impl Fn(&Value) -> Result<Value, ApiError> + Send + Sync + 'static,
) -> Result<Response, ApiError> {
    let ChangeRequest {
        state,
        conditions,
        query,
        answer,
    } = request;
    let edit = Arc::new(edit);
    if let Some(fleet) = &state.fleet {
        return fleet_change(request, fleet, edit).await;
    }
    if query.stages() {
        return Err(ApiError::BadRequest(
            "'canary-node' and 'wave' stage a change across a fleet; this node is in no fleet \
             (no `fleet` in its configuration)"
                .into(),
        ));
    }
    for _ in 0..CONFLICT_RETRIES {
        let current = state.manager.config();
        let tag = state.rendered.of(&current).await.etag.clone();
        let conditional = conditions.check(&tag, Access::Change)?;
        let edited = {
            let (edit, current) = (edit.clone(), current.clone());
            blocking(move || edit(&current.raw)).await??
        };
        let (loaded, new_tag) = validate_and_tag(edited, &state.validation).await?;
        let base = Some(Base {
            config: current,
            tag,
        });
        let outcome = if query.dry_run {
            state.manager.dry_run(loaded, base).await
        } else {
            state.manager.apply(loaded, base).await
        };
        match outcome {
            Ok(plan) if query.dry_run => {
                return Ok(super::json_value(
                    StatusCode::OK,
                    &DryRun::new(plan.summary(Stage::DryRun), new_tag),
                ))
            }
            Ok(plan) => {
                let response = match answer {
                    // Empty, as upstream answers, and typed (upstream's says JSON).
                    AppliedAnswer::Empty => (StatusCode::OK, "").into_response(),
                    AppliedAnswer::Summary => {
                        super::json_value(StatusCode::OK, &plan.summary(Stage::Applied))
                    }
                };
                return Ok(with_etag(response, &new_tag));
            }
            Err(ChangeError::Conflict) if !conditional => continue,
            Err(ChangeError::Conflict) => {
                return Err(ApiError::Precondition {
                    status: StatusCode::PRECONDITION_FAILED,
                    etag: state
                        .rendered
                        .of(&state.manager.config())
                        .await
                        .etag
                        .clone(),
                })
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::KeptChanging)
}

/// An edit of a configuration document (what a change makes of the current one).
type Edit = dyn Fn(&Value) -> Result<Value, ApiError> + Send + Sync;

/// How long a change written to the fleet may take to be applied on the node that wrote it.
const FLEET_APPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// [`change`] on a node of a fleet: the edit is made to the fleet's document (not to what this
/// node runs), refused where the node's own file decides (`kres_config::overlay::pinned_by`),
/// validated composed with the node's files and dry-run here, then written to the store as a
/// compare-and-swap on the revision read (a race with another writer computes it again, up to
/// [`CONFLICT_RETRIES`] times); the answer comes once this node applied it. Every node of the
/// fleet follows the new revision. `If-Match` names what this node runs, as without a fleet.
async fn fleet_change(
    request: &ChangeRequest,
    fleet: &Arc<crate::fleet::Membership>,
    edit: Arc<Edit>,
) -> Result<Response, ApiError> {
    let ChangeRequest {
        state,
        conditions,
        query,
        answer,
    } = request;
    let store_error = |e: crate::fleet::WriteError| ApiError::Unavailable(e.to_string());
    for _ in 0..CONFLICT_RETRIES {
        let current = state.manager.config();
        let tag = state.rendered.of(&current).await.etag.clone();
        let conditional = conditions.check(&tag, Access::Change)?;
        let (shared, revision) = fleet.document().await.map_err(store_error)?;
        // The tag names what this node runs; the fleet may be past it (another node's change
        // not applied here yet): a conditional change then names a stale document.
        let running = fleet.following.borrow().revision;
        if conditional && revision.is_some() && running != revision {
            return Err(ApiError::Precondition {
                status: StatusCode::PRECONDITION_FAILED,
                etag: tag,
            });
        }
        let (edited, loaded) = {
            let (edit, fleet, running) = (edit.clone(), fleet.clone(), current.clone());
            blocking(move || fleet_edit(&fleet, &shared, &running.raw, &*edit)).await??
        };
        let new_tag = {
            let raw = loaded.raw.clone();
            blocking(move || etag(&raw)).await?
        };
        let base = Some(Base {
            config: current,
            tag,
        });
        // What the node runs changed meanwhile (a fleet's document arrived): again.
        let plan = match state.manager.dry_run(loaded, base).await {
            Ok(plan) => plan,
            Err(ChangeError::Conflict) => continue,
            Err(e) => return Err(e.into()),
        };
        if query.dry_run {
            return Ok(super::json_value(
                StatusCode::OK,
                &DryRun::new(plan.summary(Stage::DryRun), new_tag),
            ));
        }
        let rollout = staged_rollout(state, fleet, query, revision).await?;
        let written = match fleet.write(&edited, revision, rollout.as_ref()).await {
            Ok(written) => written,
            Err(crate::fleet::WriteError::Store(kres_fleet::Error::Conflict { .. })) => continue,
            Err(e) => return Err(store_error(e)),
        };
        if let Some(rollout) = rollout {
            let staged = kres_wire::fleet::Staged {
                revision: written,
                waves: rollout.waves,
            };
            return Ok(super::json_value(StatusCode::ACCEPTED, &staged));
        }
        match fleet.applied(written, FLEET_APPLY_TIMEOUT).await {
            Ok(()) => {}
            Err(e @ crate::fleet::WriteError::Refused { .. }) => {
                return Err(ApiError::Conflict(e.to_string()))
            }
            Err(e) => return Err(ApiError::Unavailable(e.to_string())),
        }
        let response = match answer {
            AppliedAnswer::Empty => (StatusCode::OK, "").into_response(),
            AppliedAnswer::Summary => {
                super::json_value(StatusCode::OK, &plan.summary(Stage::Applied))
            }
        };
        let tag = state
            .rendered
            .of(&state.manager.config())
            .await
            .etag
            .clone();
        return Ok(with_etag(response, &tag));
    }
    Err(ApiError::KeptChanging)
}

/// The staged rollout a change through this node makes (`None`: the change goes to every node
/// at once): asked for by the query, or by the node's `fleet.rollout`, each value of the query
/// over the policy's; the waves over the nodes that published themselves. `previous` is the
/// revision of the document the change replaces.
async fn staged_rollout(
    state: &ApiState,
    fleet: &crate::fleet::Membership,
    query: &ChangeQuery,
    previous: Option<i64>,
) -> Result<Option<kres_wire::fleet::Rollout>, ApiError> {
    use kres_wire::fleet::{Rollout, RolloutState};
    let policy = state
        .manager
        .config()
        .model
        .fleet
        .as_ref()
        .and_then(|f| f.rollout.clone());
    if !query.stages() && policy.is_none() {
        return Ok(None);
    }
    let wave_text = query
        .wave
        .clone()
        .or_else(|| policy.as_ref().map(|p| p.wave.clone()))
        .unwrap_or_else(|| "25%".into());
    let wave = kres_config::Wave::parse(&wave_text)
        .map_err(|why| ApiError::BadRequest(format!("wave: {why}")))?;
    let canary = query
        .canary_node
        .clone()
        .or_else(|| policy.as_ref().and_then(|p| p.canary_node.clone()))
        .unwrap_or_else(|| fleet.node.clone());
    let status = fleet
        .status()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the fleet's store: {e}")))?;
    let names: Vec<String> = status.nodes.into_iter().map(|n| n.node).collect();
    let Some(waves) = crate::fleet::rollout::plan(&names, &canary, wave) else {
        return Err(ApiError::Conflict(format!(
            "canary-node: no node named '{canary}' is in the fleet now (`kresctl fleet status` \
             lists them)"
        )));
    };
    let (soak, rise, timeout) = match &policy {
        Some(p) => (
            p.soak.duration().as_secs_f64(),
            kres_config::parse_percent(&p.max_servfail_rise).unwrap_or(0.05),
            p.wave_timeout.duration().as_secs_f64(),
        ),
        None => (30.0, 0.05, 300.0),
    };
    Ok(Some(Rollout {
        document: String::new(),
        revision: None,
        previous,
        driver: fleet.node.clone(),
        waves,
        admitted: 1,
        admitted_at: crate::fleet::follower::now(),
        state: RolloutState::Rolling,
        halted: None,
        soak_seconds: soak,
        max_servfail_rise: rise,
        wave_timeout_seconds: timeout,
    }))
}

/// The fleet's document `shared` edited, and what this node would run with it. The edit is
/// made to what the node runs (`running`: its parents exist there whether the fleet's document
/// or the node's file set them, so it means what it means without a fleet), and each path it
/// changed is carried into the fleet's document (parents made as mappings where missing). It
/// is refused where it touches a path the node's own file decides, or when the result does
/// not validate.
fn fleet_edit(
    fleet: &crate::fleet::Membership,
    shared: &Value,
    running: &Value,
    edit: &Edit,
) -> Result<(Value, LoadedConfig), ApiError> {
    let edited_running = edit(running)?;
    let local = fleet
        .source
        .load_local()
        .map_err(|e| ApiError::Failed(e.to_string()))?;
    let mut edited = shared.clone();
    for difference in kres_config::document_diff::differences(running, &edited_running) {
        let path = difference.path();
        if let Some(pin) = kres_config::overlay::pinned_by(&local, path) {
            return Err(ApiError::Conflict(format!(
                "{path} is this node's own in the fleet ({pin} is set by its file or always \
                 the node's): change it in the node's file"
            )));
        }
        carry(&mut edited, &difference);
    }
    let loaded = fleet.source.load_with(Some(&edited)).map_err(|e| match e {
        kres_config::ConfigError::Invalid(errors) => ApiError::Invalid(errors),
        other => ApiError::Failed(other.to_string()),
    })?;
    Ok((edited, loaded))
}

/// Make `difference` in `doc`: a value set at its path (mappings made on the way, anything
/// else there replaced), or removed from it (nothing when it is not there).
fn carry(doc: &mut Value, difference: &kres_config::document_diff::Difference) {
    use kres_config::document_diff::Difference;
    let segments: Vec<String> = difference
        .path()
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut at = doc;
    for segment in parents {
        if !at.is_object() {
            *at = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = at else { return };
        at = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(serde_json::Map::new());
    }
    let Value::Object(map) = at else { return };
    match difference {
        Difference::Add { value, .. } | Difference::Replace { value, .. } => {
            map.insert(last.clone(), value.clone());
        }
        Difference::Remove { .. } => {
            map.shift_remove(last);
        }
    }
}

/// Run CPU-heavy work (reading a body, validating, hashing, serialising a configuration)
/// on the blocking pool and wait for it.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::Failed(format!("the work on the configuration failed: {e}")))
}

/// Validate `doc` and hash its ETag, both at once on the blocking pool (they only read it).
async fn validate_and_tag(
    doc: Value,
    ctx: &kres_config::ValidationContext,
) -> Result<(LoadedConfig, String), ApiError> {
    let doc = Arc::new(doc);
    let validated = {
        let (doc, ctx) = (doc.clone(), ctx.clone());
        blocking(move || kres_config::validate(&doc, &ctx))
    };
    let tagged = {
        let doc = doc.clone();
        blocking(move || etag(&doc))
    };
    let (model, tag) = tokio::join!(validated, tagged);
    let model = model?.map_err(ApiError::Invalid)?;
    let tag = tag?;
    let raw = Arc::try_unwrap(doc).unwrap_or_else(|doc| (*doc).clone());
    Ok((LoadedConfig { raw, model }, tag))
}

/// The ETag and compact JSON of one configuration version.
pub struct Rendered {
    pub etag: String,
    pub json: axum::body::Bytes,
}

/// The configuration version a [`Rendered`] belongs to, and its rendering once made.
type RenderedEntry = (Arc<LoadedConfig>, Arc<std::sync::OnceLock<Arc<Rendered>>>);

/// Memo of [`Rendered`] for the latest configuration, keyed by its `Arc`. A version is
/// rendered once: whoever asks while it is being rendered (the first `GET` right after a
/// start, while the copy kept in the root is made) waits for that rendering.
#[derive(Clone, Default)]
pub struct RenderedCache {
    inner: Arc<std::sync::Mutex<Option<RenderedEntry>>>,
}

impl RenderedCache {
    /// [`RenderedCache::get`] from an async caller: a rendering still to be made (or being
    /// made) is waited for on the blocking pool.
    pub async fn of(&self, config: &Arc<LoadedConfig>) -> Arc<Rendered> {
        let slot = self.slot(config);
        if let Some(rendered) = slot.get() {
            return rendered.clone();
        }
        let config = config.clone();
        let render = move || render_into(&slot, &config);
        match tokio::task::spawn_blocking(render.clone()).await {
            Ok(rendered) => rendered,
            // The pool is gone (the runtime stops): render here.
            Err(_) => render(),
        }
    }

    /// The rendering of `config`, made now unless it was made before (a blocking call).
    pub fn get(&self, config: &Arc<LoadedConfig>) -> Arc<Rendered> {
        render_into(&self.slot(config), config)
    }

    /// The memo's slot for `config`: the one kept when `config` is the latest version asked
    /// for, a new one kept from now on otherwise.
    fn slot(&self, config: &Arc<LoadedConfig>) -> Arc<std::sync::OnceLock<Arc<Rendered>>> {
        match self.inner.lock() {
            Ok(mut guard) => match guard.as_ref() {
                Some((c, slot)) if Arc::ptr_eq(c, config) => slot.clone(),
                _ => {
                    let slot = Arc::new(std::sync::OnceLock::new());
                    *guard = Some((config.clone(), slot.clone()));
                    slot
                }
            },
            Err(_) => Arc::new(std::sync::OnceLock::new()),
        }
    }
}

/// The rendering in `slot`, made from `config` unless it was made before.
fn render_into(slot: &std::sync::OnceLock<Arc<Rendered>>, config: &LoadedConfig) -> Arc<Rendered> {
    slot.get_or_init(|| {
        Arc::new(Rendered {
            etag: etag(&config.raw),
            json: axum::body::Bytes::from(serde_json::to_vec(&config.raw).unwrap_or_default()),
        })
    })
    .clone()
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

/// A JSON Patch body: `application/json-patch+json` (RFC 6902's type), or any type
/// [`parse_body`] reads.
fn parse_patch(headers: &HeaderMap, body: &[u8]) -> Result<Value, BodyError> {
    let patch_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json-patch+json"));
    if !patch_type {
        return parse_body(headers, body);
    }
    let text = std::str::from_utf8(body).map_err(|_| BodyError::NotUtf8)?;
    serde_json::from_str(text).map_err(|e| BodyError::Parse(e.to_string()))
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
    kres_config::parse_document(text, std::path::Path::new(origin))
        .map_err(|e| BodyError::Parse(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_to_what_a_node_runs_is_carried_into_the_fleets_document() {
        let running = json!({"local-data": {"ttl": "1h"}, "workers": 2});
        // (what the edit did to the running document, the fleet's document before, after)
        let rows: &[(Value, Value, Value)] = &[
            // A parent the fleet's document lacks is made.
            (
                json!({"local-data": {"ttl": "1h", "records": "a. 1 A 192.0.2.1"}, "workers": 2}),
                json!({}),
                json!({"local-data": {"records": "a. 1 A 192.0.2.1"}}),
            ),
            // A value replaced, another of the fleet's kept.
            (
                json!({"local-data": {"ttl": "2h"}, "workers": 2}),
                json!({"local-data": {"ttl": "1h"}, "options": {"minimize": true}}),
                json!({"local-data": {"ttl": "2h"}, "options": {"minimize": true}}),
            ),
            // A removal of what the fleet's document does not hold changes nothing.
            (
                json!({"workers": 2}),
                json!({"options": {}}),
                json!({"options": {}}),
            ),
        ];
        for (edited, shared, expected) in rows {
            let mut doc = shared.clone();
            for difference in kres_config::document_diff::differences(&running, edited) {
                carry(&mut doc, &difference);
            }
            assert_eq!(&doc, expected, "{edited}");
        }
    }
}
