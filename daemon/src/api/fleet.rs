//! `GET /fleet`: the fleet as this node reads it from etcd (`crate::fleet`): the newest
//! document's revision and every node's record, for `kresctl fleet status`; `POST
//! /fleet/rollback`: the previous document made the fleet's again (`kresctl fleet rollback`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::error::ApiError;
use super::{json_value, ApiState};
use kres_wire::fleet::{FleetStatus, RolledBack, MAX_EXPLAINED};

/// The node's membership of its fleet, or the 404 of a node in none.
fn membership(state: &ApiState) -> Result<std::sync::Arc<crate::fleet::Membership>, ApiError> {
    state.fleet.clone().ok_or_else(|| {
        ApiError::Absent("this node is in no fleet (no `fleet` in its configuration)".into())
    })
}

/// The fleet's nodes: which document revision each runs, which it refused and why, its
/// workers and version; the staged rollout of the newest document; and, of the node
/// answering, the paths its own file sets and the fleet's values it does not run.
#[utoipa::path(
    get,
    path = "/fleet",
    tag = "status",
    responses(
        (status = 200, description = "The newest document's revision and every node's record.", body = FleetStatus),
        (status = 404, description = "This node is in no fleet (no `fleet` in its configuration).", body = String, content_type = "text/plain"),
        (status = 503, description = "etcd cannot be read now.", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn fleet(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let membership = &membership(&state)?;
    let mut status = membership
        .status()
        .await
        .map_err(|e| ApiError::Unavailable(format!("the fleet's store: {e}")))?;
    let (shared, _) = membership
        .document()
        .await
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    let local = {
        let membership = membership.clone();
        crate::manager::off_thread(move || membership.source.load_local()).await
    }
    .map_err(|e| ApiError::Failed(e.to_string()))?;
    status.own = kres_config::overlay::set_by(&local, MAX_EXPLAINED);
    status.shadowed = kres_config::overlay::shadowed(&shared, &local);
    status.shadowed.truncate(MAX_EXPLAINED);
    Ok(json_value(StatusCode::OK, &status))
}

/// How long a rollback may take to be applied on the node that made it.
const ROLLBACK_APPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Return the fleet to its previous document: the document before the current one (from
/// etcd's history) written again as a new revision (a staged rollout of the current one ends
/// with it), validated with this node's files first,
/// as a compare-and-swap on the current one; answered once this node applied it. Every node
/// follows it as any new document.
#[utoipa::path(
    post,
    path = "/fleet/rollback",
    tag = "control",
    responses(
        (status = 200, description = "The previous document is the fleet's again.", body = RolledBack),
        (status = 400, description = "The previous document does not validate with this node's files.", body = String, content_type = "text/plain"),
        (status = 404, description = "This node is in no fleet, or the fleet has no previous document (none, or compacted away).", body = String, content_type = "text/plain"),
        (status = 409, description = "The document changed meanwhile, or this node refused the previous one.", body = String, content_type = "text/plain"),
        (status = 503, description = "etcd cannot be read or written now, or this node did not apply the document in time.", body = String, content_type = "text/plain"),
    ),
)]
pub(super) async fn rollback(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let fleet = membership(&state)?;
    use crate::fleet::WriteError;
    let unavailable = |e: WriteError| ApiError::Unavailable(e.to_string());
    let Some((previous, current)) = fleet.previous_document().await.map_err(|e| match e {
        WriteError::Store(kres_fleet::Error::Server { message, .. })
            if message.contains("compacted") =>
        {
            ApiError::Absent(format!(
                "the fleet's previous document was compacted away: {message}"
            ))
        }
        e => unavailable(e),
    })?
    else {
        return Err(ApiError::Absent(
            "the fleet has no previous document".into(),
        ));
    };
    let checked = {
        let (fleet, previous) = (fleet.clone(), previous.clone());
        crate::manager::off_thread(move || fleet.source.load_with(Some(&previous))).await
    };
    checked.map_err(|e| match e {
        kres_config::ConfigError::Invalid(errors) => ApiError::Invalid(errors),
        other => ApiError::Failed(other.to_string()),
    })?;
    let revision = match fleet.write(&previous, Some(current), None).await {
        Ok(revision) => revision,
        Err(WriteError::Store(kres_fleet::Error::Conflict { .. })) => {
            return Err(ApiError::Conflict(
                "the fleet's document changed meanwhile; look again before rolling back".into(),
            ))
        }
        Err(e) => return Err(unavailable(e)),
    };
    match fleet.applied(revision, ROLLBACK_APPLY_TIMEOUT).await {
        Ok(()) => {}
        Err(e @ WriteError::Refused { .. }) => return Err(ApiError::Conflict(e.to_string())),
        Err(e) => return Err(unavailable(e)),
    }
    Ok(json_value(
        StatusCode::OK,
        &RolledBack {
            replaced: current,
            revision,
        },
    ))
}
