//! What the resolver does, as a log of events that clients follow (`GET /events`, `kresctl
//! events`, `kresctl processes --watch`), so operators and tools see crashes, restarts, hangs
//! and configuration changes as they happen instead of polling the process table.
//!
//! - The events themselves are boundary types ([`kres_wire::events`]): this module only
//!   produces and keeps them.
//! - Process events are derived from successive process tables by one pure function,
//!   [`process_events`] (tables arrive coalesced: it infers what happened between any two);
//!   [`follow_processes`] feeds it the supervisor's snapshots (`derive`).
//! - Configuration events are published by the manager task, the one owner of changes.
//! - The [`EventLog`] numbers, keeps and hands out events to followers (`log`).

mod derive;
mod log;

pub use derive::{follow_processes, process_events};
pub use kres_wire::events::{Cause, Event, EventId, Origin, Record};
pub use log::{
    EventLog, Follower, FollowerClass, TooManyFollowers, FOLLOWER_BUFFER, MAX_FOLLOWERS,
    RESERVED_FOLLOWERS, RING,
};

/// Longest reason an event carries (a canary's output can be long); longer ones are cut.
pub const MAX_REASON: usize = 2048;
/// `reason` cut to [`MAX_REASON`] bytes (on a character boundary).
pub fn bounded_reason(reason: &str) -> String {
    let cut = prefix(reason, MAX_REASON);
    if cut.len() == reason.len() {
        reason.to_owned()
    } else {
        format!("{cut}…")
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_bounded() {
        let long = "é".repeat(MAX_REASON);
        let cut = bounded_reason(&long);
        assert!(cut.len() <= MAX_REASON + '…'.len_utf8());
        assert_eq!(bounded_reason("short"), "short");
    }
}
