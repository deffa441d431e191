//! Where one RPZ zone kept by zone transfer stands between refreshes: when it is refreshed
//! next, when it expires and whether it expired. One pure transition, [`ZoneClock::on`], of the outcome of a
//! refresh and the time, table-tested with a fake clock; the zone's task only carries out
//! what it says (sleep until `next`, warn once at expiry).
//!
//! The SOA timers are followed as a secondary does (RFC 1035 §4.3.5): `refresh` after a
//! success, `retry` after a failure, and `expire` counted from the last success: for a zone
//! stored before the start, when its file was last known current (its modification time,
//! which every successful refresh renews), so that no restart of the manager or of the
//! resolver makes a zone younger than it is. Expiry changes nothing of what kresd serves: the
//! stored policy is kept, and refreshes go on at `retry`.
//!
//! Beside the clock, [`Loading`]: whether kresd loads the stored file, as the policy-loader's
//! runs report it. A zone kresd cannot load is left out of the policy; it is transferred whole
//! at once, and while it stays broken after that, whole at every refresh (never at once again:
//! a feed that keeps giving what kresd cannot load costs one transfer per refresh interval).

use std::time::{Duration, Instant};

use super::SoaTimers;

/// The shortest wait between two refreshes, whatever a primary's SOA says (a refresh of 0
/// would be a loop): the pacing's interval, so the time told is the time kept.
pub const MIN_INTERVAL: Duration = super::pacing::REFRESH_INTERVAL;

/// The longest wait between two refreshes, whatever a primary's SOA says.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// The retry interval while no SOA is known (no stored zone, no transfer yet).
pub const RETRY_WITHOUT_SOA: Duration = Duration::from_secs(60);

/// What a refresh came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// A primary answered: the zone is current, with these timers.
    Succeeded(SoaTimers),
    /// No primary gave it.
    Failed,
}

/// Whether the zone is within its SOA's expire time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Refreshed within the expire time (or not yet past it).
    Current,
    /// The expire time passed with no successful refresh; the stored policy is still served.
    Expired,
}

/// What a transition asks the task to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// When to refresh next (NOTIFYs aside).
    pub next: Instant,
    /// The zone expired just now: warn, and tell the event log.
    pub expired_now: bool,
}

/// One zone's timers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneClock {
    /// The timers of the stored zone (`None`: nothing stored yet).
    timers: Option<SoaTimers>,
    /// Since when the expire time counts: the last success, or the start.
    since: Instant,
    /// Whether it expired.
    freshness: Freshness,
}

/// `d` within [`MIN_INTERVAL`] and [`MAX_INTERVAL`].
fn bounded(d: Duration) -> Duration {
    d.clamp(MIN_INTERVAL, MAX_INTERVAL)
}

impl ZoneClock {
    /// A zone whose stored file has `timers` (or none), current as of `since`.
    pub fn new(timers: Option<SoaTimers>, since: Instant) -> ZoneClock {
        ZoneClock {
            timers,
            since,
            freshness: Freshness::Current,
        }
    }

    /// Whether the zone expired.
    pub fn freshness(&self) -> Freshness {
        self.freshness
    }

    /// When the zone expires with no successful refresh meanwhile (or expired, when that is
    /// past): the last success plus the SOA's expire time; none while no SOA is known.
    pub fn expires(&self) -> Option<Instant> {
        self.timers.and_then(|t| self.since.checked_add(t.expire))
    }

    /// What `refreshed` at `now` means for the next refresh and for expiry.
    pub fn on(&mut self, refreshed: Refreshed, now: Instant) -> Schedule {
        match refreshed {
            Refreshed::Succeeded(timers) => {
                self.timers = Some(timers);
                self.since = now;
                self.freshness = Freshness::Current;
                Schedule {
                    next: now + bounded(timers.refresh),
                    expired_now: false,
                }
            }
            Refreshed::Failed => {
                let retry = self.timers.map_or(RETRY_WITHOUT_SOA, |t| t.retry);
                let expired = self
                    .timers
                    .is_some_and(|t| now.duration_since(self.since) >= t.expire);
                let expired_now = expired && self.freshness == Freshness::Current;
                if expired {
                    self.freshness = Freshness::Expired;
                }
                Schedule {
                    next: now + bounded(retry),
                    expired_now,
                }
            }
        }
    }
}

/// What the policy-loader's last run said of the zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// kresd loaded the stored file (or there was none to load).
    Yes,
    /// kresd could not load it: the zone is left out of the policy.
    No,
}

/// What a refresh transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// What changed since the stored serial (IXFR), nothing when it is current.
    Changes,
    /// The whole zone (AXFR), whatever the stored serial.
    WholeZone,
}

/// Whether kresd loads the stored zone, and what is done about it when not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// kresd loads it (or nothing says otherwise).
    Loads,
    /// kresd cannot load the stored file; a whole transfer is due at once.
    Broken,
    /// kresd could not load the file a whole transfer stored since it broke: the next whole
    /// transfer waits for the next refresh.
    BrokenAfterTransfer,
}

/// What a change of [`Loading`] asks the zone's task to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadingAction {
    /// Nothing now.
    None,
    /// Refresh now (with [`Loading::wanted`]).
    RefreshNow,
}

impl Loading {
    /// What refreshes transfer in this state.
    pub fn wanted(self) -> Wanted {
        match self {
            Loading::Loads => Wanted::Changes,
            Loading::Broken | Loading::BrokenAfterTransfer => Wanted::WholeZone,
        }
    }

    /// The policy-loader ran and said `loaded`.
    pub fn on_report(&mut self, loaded: Loaded) -> LoadingAction {
        match (*self, loaded) {
            (_, Loaded::Yes) => {
                *self = Loading::Loads;
                LoadingAction::None
            }
            (Loading::Loads | Loading::Broken, Loaded::No) => {
                *self = Loading::Broken;
                LoadingAction::RefreshNow
            }
            (Loading::BrokenAfterTransfer, Loaded::No) => LoadingAction::None,
        }
    }

    /// A refresh stored a new file of the whole zone.
    pub fn on_whole_transfer(&mut self) {
        if *self == Loading::Broken {
            *self = Loading::BrokenAfterTransfer;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_zone_is_transferred_whole_at_once_then_at_its_refreshes() {
        use Loaded::{No, Yes};
        use Loading::{Broken, BrokenAfterTransfer, Loads};
        /// An input: a report of the policy-loader, or a whole transfer stored.
        enum Step {
            Report(Loaded),
            WholeTransfer,
        }
        use Step::*;
        // (step, state after, action, what refreshes transfer after)
        let rows = [
            (Report(Yes), Loads, LoadingAction::None, Wanted::Changes),
            (
                Report(No),
                Broken,
                LoadingAction::RefreshNow,
                Wanted::WholeZone,
            ),
            // Reported again before the transfer (another change ran the policy-loader).
            (
                Report(No),
                Broken,
                LoadingAction::RefreshNow,
                Wanted::WholeZone,
            ),
            (
                WholeTransfer,
                BrokenAfterTransfer,
                LoadingAction::None,
                Wanted::WholeZone,
            ),
            // What the transfer brought cannot be loaded either: no transfer at once again.
            (
                Report(No),
                BrokenAfterTransfer,
                LoadingAction::None,
                Wanted::WholeZone,
            ),
            (
                WholeTransfer,
                BrokenAfterTransfer,
                LoadingAction::None,
                Wanted::WholeZone,
            ),
            (Report(Yes), Loads, LoadingAction::None, Wanted::Changes),
            (WholeTransfer, Loads, LoadingAction::None, Wanted::Changes),
            (
                Report(No),
                Broken,
                LoadingAction::RefreshNow,
                Wanted::WholeZone,
            ),
        ];
        let mut loading = Loading::Loads;
        for (i, (step, state, action, wanted)) in rows.into_iter().enumerate() {
            let done = match step {
                Report(loaded) => loading.on_report(loaded),
                WholeTransfer => {
                    loading.on_whole_transfer();
                    LoadingAction::None
                }
            };
            assert_eq!(
                (loading, done, loading.wanted()),
                (state, action, wanted),
                "row {i}"
            );
        }
    }

    fn timers(refresh: u64, retry: u64, expire: u64) -> SoaTimers {
        SoaTimers {
            refresh: Duration::from_secs(refresh),
            retry: Duration::from_secs(retry),
            expire: Duration::from_secs(expire),
        }
    }

    /// (seconds since the start, outcome, next refresh in seconds since the start, expired
    /// now, freshness after, expiry after in seconds since the start).
    type Row = (u64, Refreshed, u64, bool, Freshness, Option<u64>);

    /// The clock of a zone stored with `stored` timers, current as of the start (when it
    /// expires before any refresh: `expires`), through `rows`.
    fn check(stored: Option<SoaTimers>, expires: Option<u64>, rows: &[Row]) {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut clock = ZoneClock::new(stored, start);
        assert_eq!(clock.expires(), expires.map(at), "before any refresh");
        for (i, &(now, refreshed, next, expired_now, freshness, expires)) in rows.iter().enumerate()
        {
            let schedule = clock.on(refreshed, at(now));
            assert_eq!(
                (schedule, clock.freshness(), clock.expires()),
                (
                    Schedule {
                        next: at(next),
                        expired_now
                    },
                    freshness,
                    expires.map(at)
                ),
                "row {i}"
            );
        }
    }

    #[test]
    fn refresh_after_success_retry_after_failure_and_expiry_once() {
        use Freshness::*;
        use Refreshed::*;
        let t = timers(100, 10, 135);
        check(
            Some(t),
            Some(135),
            &[
                (0, Succeeded(t), 100, false, Current, Some(135)),
                // Failures leave the expiry where the last success put it.
                (100, Failed, 110, false, Current, Some(135)),
                (110, Failed, 120, false, Current, Some(135)),
                // 135 s after the last success: expired, said once.
                (135, Failed, 145, true, Expired, Some(135)),
                (145, Failed, 155, false, Expired, Some(135)),
                // A success counts the new SOA's expire time from itself.
                (
                    150,
                    Succeeded(timers(50, 5, 70)),
                    200,
                    false,
                    Current,
                    Some(220),
                ),
                (200, Failed, 205, false, Current, Some(220)),
                (220, Failed, 225, true, Expired, Some(220)),
            ],
        );
    }

    #[test]
    fn a_stored_zone_expires_counted_from_the_start_and_none_never_expires() {
        use Freshness::*;
        use Refreshed::*;
        check(
            Some(timers(100, 10, 15)),
            Some(15),
            &[
                (5, Failed, 15, false, Current, Some(15)),
                (15, Failed, 25, true, Expired, Some(15)),
            ],
        );
        // No SOA known: no expiry, until a success brings one.
        check(
            None,
            None,
            &[
                (0, Failed, 60, false, Current, None),
                (1000, Failed, 1060, false, Current, None),
                (
                    1010,
                    Succeeded(timers(100, 10, 500)),
                    1110,
                    false,
                    Current,
                    Some(1510),
                ),
            ],
        );
    }

    #[test]
    fn hostile_timers_are_bounded() {
        use Freshness::*;
        use Refreshed::*;
        check(
            None,
            None,
            &[
                (
                    0,
                    Succeeded(timers(0, 0, 1_000_000)),
                    5,
                    false,
                    Current,
                    Some(1_000_000),
                ),
                (
                    1,
                    Succeeded(timers(10_000_000, 0, 1_000_000)),
                    1 + 86_400,
                    false,
                    Current,
                    Some(1_000_001),
                ),
                (2, Failed, 7, false, Current, Some(1_000_001)),
                // The largest expire a SOA can hold (2^32 - 1 s, 136 years) is told as it is.
                (
                    3,
                    Succeeded(timers(100, 10, u64::from(u32::MAX))),
                    103,
                    false,
                    Current,
                    Some(3 + u64::from(u32::MAX)),
                ),
            ],
        );
    }
}
