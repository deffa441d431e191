//! When a subscribed list is fetched: one pure transition, [`ListClock::on`], of what
//! happened and the time, table-tested with a fake clock; the lists' task only carries out
//! what it says (start a fetch, sleep until `due`).
//!
//! A list is fetched a refresh interval (plus a jitter of up to a tenth, so that lists and
//! resolvers do not fetch in step) after a success; after a failure it is tried again
//! [`FIRST_RETRY`] later, doubling at each failure in a row up to the refresh interval. A
//! fetch asked for (`kresctl rpz refresh`) starts at once unless one runs, which it joins.

use std::time::Duration;

use tokio::time::Instant;

/// The wait after the first failure in a row.
pub const FIRST_RETRY: Duration = Duration::from_secs(30);

/// Where one list stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListClock {
    /// Waiting for its time (`failures`: failed fetches in a row).
    Waiting { due: Instant, failures: u32 },
    /// A fetch runs.
    Fetching { failures: u32 },
}

/// What happened to a list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListEvent {
    /// Its time came, or a fetch was asked for.
    FetchWanted,
    /// The fetch ended well (changed or not); `jitter` is the share (0 to 1) of a tenth of
    /// the interval added to it.
    Succeeded { jitter: f64 },
    /// The fetch failed, or what it brought was refused.
    Failed,
}

/// What the task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListAction {
    /// Start a fetch.
    StartFetch,
    /// Nothing now; the next fetch is due at this time.
    WaitUntil(Instant),
    /// Nothing: a fetch already runs (the one asked for joins it).
    Nothing,
}

impl ListClock {
    /// A list first due at `due`.
    pub fn new(due: Instant) -> ListClock {
        ListClock::Waiting { due, failures: 0 }
    }

    /// When it is due, while it waits.
    pub fn due(&self) -> Option<Instant> {
        match self {
            ListClock::Waiting { due, .. } => Some(*due),
            ListClock::Fetching { .. } => None,
        }
    }

    /// What `event` at `now` means for a list fetched every `interval`.
    pub fn on(&mut self, event: ListEvent, now: Instant, interval: Duration) -> ListAction {
        match (*self, event) {
            (ListClock::Waiting { failures, .. }, ListEvent::FetchWanted) => {
                *self = ListClock::Fetching { failures };
                ListAction::StartFetch
            }
            (ListClock::Fetching { .. }, ListEvent::FetchWanted) => ListAction::Nothing,
            (ListClock::Fetching { .. }, ListEvent::Succeeded { jitter }) => {
                let due = now + interval + interval.mul_f64(jitter.clamp(0.0, 1.0) / 10.0);
                *self = ListClock::Waiting { due, failures: 0 };
                ListAction::WaitUntil(due)
            }
            (ListClock::Fetching { failures }, ListEvent::Failed) => {
                let failures = failures.saturating_add(1);
                let doubled = FIRST_RETRY.saturating_mul(1 << (failures - 1).min(20));
                let due = now + doubled.min(interval);
                *self = ListClock::Waiting { due, failures };
                ListAction::WaitUntil(due)
            }
            // An outcome with no fetch running (none is started without the clock): kept.
            (ListClock::Waiting { due, .. }, ListEvent::Succeeded { .. } | ListEvent::Failed) => {
                ListAction::WaitUntil(due)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ListEvent::{Failed, FetchWanted, Succeeded};

    const HOUR: Duration = Duration::from_secs(3600);

    /// What a row expects.
    #[derive(Debug)]
    enum Expect {
        Start,
        Join,
        /// A wait until this many seconds after the start.
        Wait(u64),
    }
    use Expect::{Join, Start, Wait};

    /// Each row: the event, seconds since the start, what is expected; one clock, an
    /// interval of an hour.
    fn check(rows: &[(ListEvent, u64, Expect)]) {
        let start = Instant::now();
        let mut clock = ListClock::new(start);
        for (i, (event, at, expected)) in rows.iter().enumerate() {
            let action = clock.on(*event, start + Duration::from_secs(*at), HOUR);
            let expected = match expected {
                Start => ListAction::StartFetch,
                Join => ListAction::Nothing,
                Wait(s) => ListAction::WaitUntil(start + Duration::from_secs(*s)),
            };
            assert_eq!(action, expected, "row {i}: {event:?} at {at}s");
        }
    }

    #[test]
    fn a_success_waits_the_interval_and_failures_back_off_up_to_it() {
        check(&[
            (FetchWanted, 0, Start),
            (Succeeded { jitter: 0.0 }, 1, Wait(3601)),
            (FetchWanted, 3601, Start),
            (Failed, 3602, Wait(3632)),
            (FetchWanted, 3632, Start),
            (Failed, 3633, Wait(3693)),
            (FetchWanted, 3693, Start),
            (Failed, 3694, Wait(3814)),
            (FetchWanted, 3814, Start),
            (Failed, 3815, Wait(4055)),
            (FetchWanted, 4055, Start),
            (Failed, 4056, Wait(4536)),
            (FetchWanted, 4536, Start),
            (Failed, 4537, Wait(5497)),
            (FetchWanted, 5497, Start),
            (Failed, 5498, Wait(7418)),
            (FetchWanted, 7418, Start),
            (Failed, 7419, Wait(7419 + 3600)),
            (FetchWanted, 11019, Start),
            (Succeeded { jitter: 1.0 }, 11020, Wait(11020 + 3600 + 360)),
            (FetchWanted, 11021, Start),
            (Failed, 11022, Wait(11052)),
        ]);
    }

    #[test]
    fn a_fetch_asked_for_while_one_runs_joins_it() {
        check(&[
            (FetchWanted, 0, Start),
            (FetchWanted, 1, Join),
            (Succeeded { jitter: 0.5 }, 2, Wait(2 + 3600 + 180)),
            (Failed, 3, Wait(2 + 3600 + 180)),
        ]);
    }
}
