//! Read-only views of the process table, published by the actor through a `watch` channel
//! for `/processes`, `kresctl processes` and metrics. Readers never lock the actor. The
//! types are `supervisor-types`' (a reader needs nothing else of the supervisor); what
//! a machine's state shows as is decided here.

pub use supervisor_types::snapshot::{ProcessSnapshot, ProcessState, Snapshot};

use crate::machine::State;

/// How a machine's state shows in snapshots: a process steered away from or killed is
/// running (or starting) until it is down.
pub(crate) fn shown(state: &State) -> ProcessState {
    match state {
        State::Idle => ProcessState::Idle,
        State::Starting { .. } | State::Killed { ready_at: None, .. } => ProcessState::Starting,
        State::Running { .. }
        | State::Draining { .. }
        | State::Killed {
            ready_at: Some(_), ..
        } => ProcessState::Running,
        State::Stopping { .. } => ProcessState::Stopping,
        State::Backoff { .. } => ProcessState::Backoff,
        State::Exited { .. } => ProcessState::Exited,
        State::Failed { .. } => ProcessState::Failed,
    }
}
