//! Where one RPZ zone kept by zone transfer stands between refreshes: when it is refreshed
//! next and whether it expired. One pure transition, [`ZoneClock::on`], of the outcome of a
//! refresh and the time, table-tested with a fake clock; the zone's task only carries out
//! what it says (sleep until `next`, warn once at expiry).
//!
//! The SOA timers are followed as a secondary does (RFC 1035 §4.3.5): `refresh` after a
//! success, `retry` after a failure, and `expire` counted from the last success: for a zone
//! stored before the start, when its file was last known current (its modification time,
//! which every successful refresh renews), so that no restart of the manager or of the
//! resolver makes a zone younger than it is. Expiry changes nothing of what kresd serves: the
//! stored policy is kept, and refreshes go on at `retry`.

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

#[cfg(test)]
mod tests {
    use super::*;

    fn timers(refresh: u64, retry: u64, expire: u64) -> SoaTimers {
        SoaTimers {
            refresh: Duration::from_secs(refresh),
            retry: Duration::from_secs(retry),
            expire: Duration::from_secs(expire),
        }
    }

    /// (seconds since the start, outcome, next refresh in seconds since the start, expired
    /// now, freshness after).
    type Row = (u64, Refreshed, u64, bool, Freshness);

    fn check(stored: Option<SoaTimers>, rows: &[Row]) {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut clock = ZoneClock::new(stored, start);
        for (i, &(now, refreshed, next, expired_now, freshness)) in rows.iter().enumerate() {
            let schedule = clock.on(refreshed, at(now));
            assert_eq!(
                (schedule, clock.freshness()),
                (
                    Schedule {
                        next: at(next),
                        expired_now
                    },
                    freshness
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
            &[
                (0, Succeeded(t), 100, false, Current),
                (100, Failed, 110, false, Current),
                (110, Failed, 120, false, Current),
                // 135 s after the last success: expired, said once.
                (135, Failed, 145, true, Expired),
                (145, Failed, 155, false, Expired),
                (150, Succeeded(timers(50, 5, 70)), 200, false, Current),
                (200, Failed, 205, false, Current),
                (220, Failed, 225, true, Expired),
            ],
        );
    }

    #[test]
    fn a_stored_zone_expires_counted_from_the_start_and_none_never_expires() {
        use Freshness::*;
        use Refreshed::*;
        check(
            Some(timers(100, 10, 15)),
            &[
                (5, Failed, 15, false, Current),
                (15, Failed, 25, true, Expired),
            ],
        );
        check(
            None,
            &[
                (0, Failed, 60, false, Current),
                (1000, Failed, 1060, false, Current),
            ],
        );
    }

    #[test]
    fn hostile_timers_are_bounded() {
        use Freshness::*;
        use Refreshed::*;
        check(
            None,
            &[
                (0, Succeeded(timers(0, 0, 1_000_000)), 5, false, Current),
                (
                    1,
                    Succeeded(timers(10_000_000, 0, 1_000_000)),
                    1 + 86_400,
                    false,
                    Current,
                ),
                (2, Failed, 7, false, Current),
            ],
        );
    }
}
