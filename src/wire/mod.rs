//! Boundary types: what the processes of the resolver and its clients exchange, with no
//! behaviour of their own (serde and the OpenAPI schema only, small constructors and
//! `Display`). Every layer may use them; they use nothing of the crate (only the supervisor
//! crate's snapshot types), so no layer reaches another through them.

pub mod change;
pub mod events;
pub mod failures;
pub mod fleet;
pub mod processes;
pub mod query_log;
pub mod rpz;
pub mod trace;
pub mod upgrade;
pub mod upstreams;

/// A record read back as JSON text: `None` when it is longer than `max` bytes or does not
/// parse (records come from a file descriptor another process filled).
fn parse_bounded<T: serde::de::DeserializeOwned>(bytes: &[u8], max: usize) -> Option<T> {
    if bytes.len() > max {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}
