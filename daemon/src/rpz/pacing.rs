//! Pacing of refreshes: whatever arrives from the network, a zone is refreshed at most once
//! per [`REFRESH_INTERVAL`], all zones together send their primaries at most
//! [`SOA_QUERIES_PER_SECOND`] SOA queries, and NOTIFYs are told (log line and event) at most
//! once per [`REPORT_INTERVAL`] per zone, with counts of what the others came to.
//!
//! A NOTIFY is cheap to send and may be spoofed (UDP) or replayed (a signed one, within its
//! TSIG fudge); each refresh costs the primary a TCP connection and, when the serial moved, a
//! policy-loader run and a rules reset in every worker. So a NOTIFY only ever brings a
//! refresh forward: one whose serial is not newer than the stored one starts nothing, one
//! within the interval after the last refresh started is folded into a single refresh at
//! the interval's end, and one while a refresh runs into at most one refresh after it. The
//! SOA timers are held to the same interval, so a primary bumping its serial every second
//! costs at most one transfer (and one renew) per interval.
//!
//! Two pure pieces, each with a fake clock in its tests: [`ZonePacer`], one zone's machine
//! (`on(event, now) -> actions`, `wake()`), and [`SoaQueryRate`], the token bucket all
//! zones share (BIND's `serial-query-rate`). The zone's task carries out what they say.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{serial_order, SerialOrder};

/// The shortest time between the starts of two refreshes of one zone, whatever asks
/// for them (NOTIFY, the SOA's refresh or retry timer).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// The most SOA queries all zones together send their primaries per second (BIND's
/// `serial-query-rate`, whose default this is); a second's worth may go at once.
pub const SOA_QUERIES_PER_SECOND: u32 = 20;

/// The shortest time between two reports of one zone's NOTIFYs.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// What happens to a zone's pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacerEvent {
    /// A NOTIFY for the zone was accepted (from a primary, signed as it must be).
    NotifyReceived {
        /// Where it came from.
        from: SocketAddr,
        /// The serial it carried in its answer section, if any.
        serial: Option<u32>,
    },
    /// A refresh is wanted as soon as the interval allows, whatever the serials say (the
    /// stored zone cannot be loaded: it is to be transferred whole). Not a NOTIFY: not told.
    RefreshWanted,
    /// The time [`ZonePacer::wake`] asked for came.
    TimerFired,
    /// The refresh started by [`PacerAction::StartRefresh`] ended.
    RefreshEnded {
        /// When the SOA timers want the next refresh.
        next: Instant,
        /// The serial stored now (none: no stored zone).
        serial: Option<u32>,
    },
}

/// What the zone's task is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PacerAction {
    /// Refresh the zone now (then tell [`PacerEvent::RefreshEnded`]).
    StartRefresh,
    /// Tell what the NOTIFYs since the last report came to (log line, event).
    Report(NotifyReport),
}

/// What a zone's NOTIFYs came to since the last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyReport {
    /// Where the last one came from.
    pub from: SocketAddr,
    /// The serial the last one carried, if any.
    pub serial: Option<u32>,
    /// Those that started a refresh, or brought the next one forward.
    pub refreshes: u64,
    /// Those folded into a refresh already running or due by then.
    pub coalesced: u64,
    /// Those whose serial is not newer than the stored one: they started nothing.
    pub stale: u64,
}

impl NotifyReport {
    /// How many NOTIFYs it counts.
    pub fn received(&self) -> u64 {
        self.refreshes + self.coalesced + self.stale
    }
}

/// What one NOTIFY came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotifyOutcome {
    /// It started a refresh or brought the next one forward.
    Refresh,
    /// A refresh already running or due by then covers it.
    Coalesced,
    /// Its serial is not newer than the stored one.
    Stale,
}

/// Whether a refresh should follow the running one, for the NOTIFYs that came meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followup {
    /// None came (or only stale ones).
    Nothing,
    /// The newest serial they carried: another refresh unless the running one brings it.
    Serial(u32),
    /// One carried no serial: another refresh, as it cannot be told covered.
    Unknown,
}

impl Followup {
    /// This followup and a NOTIFY of `serial`.
    fn and(self, serial: Option<u32>) -> Followup {
        match (self, serial) {
            (Followup::Unknown, _) | (_, None) => Followup::Unknown,
            (Followup::Serial(had), Some(new)) if serial_order(new, had) != SerialOrder::Newer => {
                Followup::Serial(had)
            }
            (_, Some(new)) => Followup::Serial(new),
        }
    }

    /// Whether it asks for another refresh when `stored` is stored.
    fn wanted(self, stored: Option<u32>) -> bool {
        match self {
            Followup::Nothing => false,
            Followup::Serial(serial) => !is_stale(Some(serial), stored),
            Followup::Unknown => true,
        }
    }
}

/// Where a zone's refreshes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshState {
    /// No refresh runs: the next starts at `due`, never before `earliest` (an interval after
    /// the last one started).
    Waiting { due: Instant, earliest: Instant },
    /// The refresh started at `started` runs; `then` says whether another should follow.
    Running { started: Instant, then: Followup },
}

/// One zone's pacing of refreshes and of the reports of its NOTIFYs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonePacer {
    /// The shortest time between the starts of two refreshes.
    interval: Duration,
    /// The serial of the stored zone (none: nothing stored yet).
    stored: Option<u32>,
    /// Where the refreshes stand.
    state: RefreshState,
    /// When the last report was made.
    reported_at: Option<Instant>,
    /// What the NOTIFYs since the last report came to (none: none came).
    unreported: Option<NotifyReport>,
}

/// Whether a NOTIFY of `serial` says nothing newer than `stored` (RFC 1982).
fn is_stale(serial: Option<u32>, stored: Option<u32>) -> bool {
    match (serial, stored) {
        (Some(serial), Some(stored)) => serial_order(serial, stored) != SerialOrder::Newer,
        _ => false,
    }
}

impl ZonePacer {
    /// A zone whose stored serial is `stored`, to be refreshed first at `due`, at `now`.
    pub fn new(interval: Duration, stored: Option<u32>, due: Instant, now: Instant) -> ZonePacer {
        ZonePacer {
            interval,
            stored,
            state: RefreshState::Waiting {
                due: due.max(now),
                earliest: now,
            },
            reported_at: None,
            unreported: None,
        }
    }

    /// Where the refreshes stand.
    pub fn state(&self) -> RefreshState {
        self.state
    }

    /// When to tell [`PacerEvent::TimerFired`] next (none: only other events matter now).
    pub fn wake(&self) -> Option<Instant> {
        let refresh = match self.state {
            RefreshState::Waiting { due, .. } => Some(due),
            RefreshState::Running { .. } => None,
        };
        let report = self.report_due();
        match (refresh, report) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What `event` at `now` calls for.
    pub fn on(&mut self, event: PacerEvent, now: Instant) -> Vec<PacerAction> {
        let mut actions = Vec::new();
        match event {
            PacerEvent::NotifyReceived { from, serial } => {
                let outcome = self.notified(serial, now, &mut actions);
                self.count(from, serial, outcome);
            }
            PacerEvent::RefreshWanted => {
                // as a NOTIFY of no serial: at once, or at the interval's end, or after the
                // refresh running
                let _ = self.notified(None, now, &mut actions);
            }
            PacerEvent::TimerFired => {
                if let RefreshState::Waiting { due, .. } = self.state {
                    if now >= due {
                        self.start(now, &mut actions);
                    }
                }
            }
            PacerEvent::RefreshEnded { next, serial } => {
                if let RefreshState::Running { started, then } = self.state {
                    self.stored = serial;
                    let earliest = started + self.interval;
                    let mut due = next.max(earliest);
                    if then.wanted(serial) {
                        due = due.min(now.max(earliest));
                    }
                    self.state = RefreshState::Waiting { due, earliest };
                }
            }
        }
        let report_due = self
            .reported_at
            .is_none_or(|at| now >= at + REPORT_INTERVAL);
        if report_due {
            if let Some(report) = self.unreported.take() {
                self.reported_at = Some(now);
                actions.push(PacerAction::Report(report));
            }
        }
        actions
    }

    /// Start a refresh now.
    fn start(&mut self, now: Instant, actions: &mut Vec<PacerAction>) {
        self.state = RefreshState::Running {
            started: now,
            then: Followup::Nothing,
        };
        actions.push(PacerAction::StartRefresh);
    }

    /// What a NOTIFY of `serial` at `now` does to the refreshes.
    fn notified(
        &mut self,
        serial: Option<u32>,
        now: Instant,
        actions: &mut Vec<PacerAction>,
    ) -> NotifyOutcome {
        if is_stale(serial, self.stored) {
            return NotifyOutcome::Stale;
        }
        match self.state {
            RefreshState::Waiting { due, earliest } => {
                let wanted = now.max(earliest);
                if wanted >= due {
                    NotifyOutcome::Coalesced
                } else if wanted <= now {
                    self.start(now, actions);
                    NotifyOutcome::Refresh
                } else {
                    self.state = RefreshState::Waiting {
                        due: wanted,
                        earliest,
                    };
                    NotifyOutcome::Refresh
                }
            }
            RefreshState::Running { started, then } => {
                let followup = then.and(serial);
                self.state = RefreshState::Running {
                    started,
                    then: followup,
                };
                if then == Followup::Nothing {
                    NotifyOutcome::Refresh
                } else {
                    NotifyOutcome::Coalesced
                }
            }
        }
    }

    /// Count a NOTIFY's `outcome` for the next report.
    fn count(&mut self, from: SocketAddr, serial: Option<u32>, outcome: NotifyOutcome) {
        let report = self.unreported.get_or_insert(NotifyReport {
            from,
            serial,
            refreshes: 0,
            coalesced: 0,
            stale: 0,
        });
        report.from = from;
        report.serial = serial;
        match outcome {
            NotifyOutcome::Refresh => report.refreshes += 1,
            NotifyOutcome::Coalesced => report.coalesced += 1,
            NotifyOutcome::Stale => report.stale += 1,
        }
    }

    /// When the NOTIFYs not yet told may be (none: there are none; a first report is made
    /// at once, so never waits).
    fn report_due(&self) -> Option<Instant> {
        self.unreported.as_ref()?;
        self.reported_at.map(|at| at + REPORT_INTERVAL)
    }
}

/// The token bucket of SOA queries all zones share (a generic cell rate: one query per
/// `1 s / rate`, a second's worth at once). Queries beyond it wait; queries a refresh made
/// beyond the one it was let through for are charged afterwards, so the rate holds on
/// average whatever the number of primaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoaQueryRate {
    /// The time one query costs.
    spacing: Duration,
    /// How far ahead of now the bucket may be filled (a second's worth, less one query).
    burst: Duration,
    /// When the bucket is empty again: the queries let through, each `spacing` long, laid end
    /// to end from the first after a quiet time.
    full_until: Option<Instant>,
}

impl SoaQueryRate {
    /// At most `per_second` queries a second (at least one).
    pub fn new(per_second: u32) -> SoaQueryRate {
        let per_second = per_second.max(1);
        let spacing = Duration::from_secs(1) / per_second;
        SoaQueryRate {
            spacing,
            burst: spacing * (per_second - 1),
            full_until: None,
        }
    }

    /// Let one query through at `now`, or say when one may go.
    pub fn take(&mut self, now: Instant) -> Result<(), Instant> {
        let from = self.full_until.map_or(now, |at| at.max(now));
        let ahead = from.duration_since(now);
        if ahead > self.burst {
            return Err(now + (ahead - self.burst));
        }
        self.full_until = Some(from + self.spacing);
        Ok(())
    }

    /// Charge `queries` more, sent at `now` beyond the ones let through.
    pub fn charge(&mut self, queries: u32, now: Instant) {
        if queries > 0 {
            let from = self.full_until.map_or(now, |at| at.max(now));
            self.full_until = Some(from + self.spacing * queries);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: &str = "127.0.0.1:53";

    /// What happens in a table, times in milliseconds since the start.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// A NOTIFY with this serial.
        Notify(Option<u32>),
        /// The timer fired.
        Tick,
        /// The refresh ended: the SOA timers want the next at this time; this serial stored.
        Ended(u64, Option<u32>),
        /// The stored zone cannot be loaded: a whole transfer is wanted.
        Wanted,
    }

    /// (milliseconds since the start, what happens, the actions expected).
    type Row = (u64, Step, Vec<PacerAction>);

    fn report(refreshes: u64, coalesced: u64, stale: u64, serial: Option<u32>) -> PacerAction {
        PacerAction::Report(NotifyReport {
            from: PRIMARY.parse().expect("an address"),
            serial,
            refreshes,
            coalesced,
            stale,
        })
    }

    /// Run `rows` on a pacer of a 5 s interval with `stored`, first due at `first_due` ms;
    /// check every row's actions; the pacer at the end, and the time at milliseconds.
    fn check(
        stored: Option<u32>,
        first_due: u64,
        rows: &[Row],
    ) -> (ZonePacer, impl Fn(u64) -> Instant) {
        let start = Instant::now();
        let at = move |ms: u64| start + Duration::from_millis(ms);
        let mut pacer = ZonePacer::new(Duration::from_secs(5), stored, at(first_due), start);
        for (i, (ms, step, expected)) in rows.iter().enumerate() {
            let event = match *step {
                Step::Notify(serial) => PacerEvent::NotifyReceived {
                    from: PRIMARY.parse().expect("an address"),
                    serial,
                },
                Step::Tick => PacerEvent::TimerFired,
                Step::Wanted => PacerEvent::RefreshWanted,
                Step::Ended(next, serial) => PacerEvent::RefreshEnded {
                    next: at(next),
                    serial,
                },
            };
            let actions = pacer.on(event, at(*ms));
            assert_eq!(&actions, expected, "row {i} at {ms} ms: {step:?}");
        }
        (pacer, at)
    }

    use PacerAction::StartRefresh;
    use Step::{Ended, Notify, Tick, Wanted};

    #[test]
    fn a_zone_that_cannot_be_loaded_is_refreshed_within_the_interval_and_not_told() {
        let (pacer, at) = check(
            Some(5),
            300_000,
            &[
                // at once when the interval allows, whatever the serial
                (0, Wanted, vec![StartRefresh]),
                (50, Ended(300_050, Some(5)), vec![]),
                // within the interval: at its end, once however often it is asked
                (1_000, Wanted, vec![]),
                (2_000, Wanted, vec![]),
                (5_000, Tick, vec![StartRefresh]),
                // while a refresh runs: one more after it
                (5_010, Wanted, vec![]),
                (5_100, Ended(305_100, Some(5)), vec![]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Waiting {
                due: at(10_000),
                earliest: at(10_000),
            }
        );
    }

    #[test]
    fn a_flood_of_notifies_brings_one_refresh_per_interval() {
        let (pacer, at) = check(
            Some(5),
            300_000,
            &[
                // The first NOTIFY starts a refresh at once and is told at once.
                (
                    0,
                    Notify(Some(6)),
                    vec![StartRefresh, report(1, 0, 0, Some(6))],
                ),
                // While it runs, one more refresh is queued; the rest are folded into it.
                (10, Notify(Some(6)), vec![]),
                (20, Notify(Some(7)), vec![]),
                (30, Notify(None), vec![]),
                // It brought serial 6; serial 7 and the serial-less one want another, at the
                // interval's end.
                (100, Ended(300_100, Some(6)), vec![]),
                (200, Notify(Some(7)), vec![]),
                // A second after the first report, the NOTIFYs since are told.
                (1_000, Tick, vec![report(1, 3, 0, Some(7))]),
                (4_999, Tick, vec![]),
                (5_000, Tick, vec![StartRefresh]),
                (5_050, Ended(305_050, Some(7)), vec![]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Waiting {
                due: at(305_050),
                earliest: at(10_000),
            },
            "all told, the next refresh at the SOA timer"
        );
        assert_eq!(pacer.wake(), Some(at(305_050)));
    }

    #[test]
    fn a_notify_within_the_interval_schedules_one_refresh_at_its_end() {
        let (pacer, at) = check(
            Some(5),
            0,
            &[
                (0, Tick, vec![StartRefresh]),
                (50, Ended(300_050, Some(5)), vec![]),
                (2_000, Notify(Some(6)), vec![report(1, 0, 0, Some(6))]),
                (2_500, Notify(Some(6)), vec![]),
                (3_500, Notify(None), vec![report(0, 2, 0, None)]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Waiting {
                due: at(5_000),
                earliest: at(5_000),
            }
        );
    }

    #[test]
    fn notifies_not_newer_than_the_stored_serial_start_nothing() {
        let (pacer, at) = check(
            Some(10),
            60_000,
            &[
                (0, Notify(Some(10)), vec![report(0, 0, 1, Some(10))]),
                (1, Notify(Some(9)), vec![]),
                // RFC 1982: half the serial space away is not newer.
                (2, Notify(Some(10 + (1 << 31))), vec![]),
                (999, Tick, vec![]),
                (1_000, Tick, vec![report(0, 0, 2, Some(10 + (1 << 31)))]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Waiting {
                due: at(60_000),
                earliest: at(0),
            },
            "the SOA timer's refresh, no other"
        );
        assert_eq!(pacer.wake(), Some(at(60_000)));
    }

    #[test]
    fn a_running_refresh_that_brings_the_notified_serial_needs_no_other() {
        let (pacer, at) = check(
            Some(1),
            0,
            &[
                (0, Tick, vec![StartRefresh]),
                (10, Notify(Some(3)), vec![report(1, 0, 0, Some(3))]),
                (20, Notify(Some(2)), vec![]),
                (30, Ended(60_030, Some(3)), vec![]),
                // Stale against the serial the refresh brought.
                (40, Notify(Some(3)), vec![]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Waiting {
                due: at(60_030),
                earliest: at(5_000),
            }
        );
        assert_eq!(pacer.wake(), Some(at(1_010)), "the report of the two since");
    }

    #[test]
    fn soa_timers_shorter_than_the_interval_wait_for_it() {
        let (pacer, at) = check(
            None,
            0,
            &[
                (0, Tick, vec![StartRefresh]),
                // A failed first transfer: the SOA-less retry would be 1 s.
                (200, Ended(1_200, None), vec![]),
                (1_200, Tick, vec![]),
                (5_000, Tick, vec![StartRefresh]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Running {
                started: at(5_000),
                then: Followup::Nothing,
            }
        );
        assert_eq!(pacer.wake(), None, "nothing to wait for but the refresh");
    }

    #[test]
    fn a_stored_zone_of_no_serial_takes_every_notify() {
        let (pacer, at) = check(
            None,
            60_000,
            &[
                (
                    0,
                    Notify(Some(1)),
                    vec![StartRefresh, report(1, 0, 0, Some(1))],
                ),
                (1, Notify(Some(1)), vec![]),
            ],
        );
        assert_eq!(
            pacer.state(),
            RefreshState::Running {
                started: at(0),
                then: Followup::Serial(1),
            },
            "the second may not be covered by the first refresh"
        );
    }

    /// (milliseconds since the start, a query sent: let through, or the milliseconds it
    /// may go at).
    type RateRow = (u64, Result<(), u64>);

    fn check_rate(per_second: u32, rows: &[RateRow]) -> SoaQueryRate {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut rate = SoaQueryRate::new(per_second);
        for (i, &(ms, expected)) in rows.iter().enumerate() {
            assert_eq!(
                rate.take(at(ms)),
                expected.map_err(at),
                "row {i} at {ms} ms"
            );
        }
        rate
    }

    #[test]
    fn a_second_of_queries_goes_at_once_then_one_per_spacing() {
        let mut rows: Vec<RateRow> = (0..4).map(|_| (0, Ok(()))).collect();
        rows.extend([
            (0, Err(250)),
            (100, Err(250)),
            (250, Ok(())),
            (250, Err(500)),
            // Quiet for a while: a second's worth again.
            (5_000, Ok(())),
            (5_000, Ok(())),
            (5_000, Ok(())),
            (5_000, Ok(())),
            (5_000, Err(5_250)),
        ]);
        check_rate(4, &rows);
    }

    #[test]
    fn queries_beyond_the_one_let_through_are_charged() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut rate = SoaQueryRate::new(20);
        assert_eq!(rate.take(at(0)), Ok(()));
        // That refresh asked three primaries: two more queries.
        rate.charge(2, at(0));
        for _ in 0..17 {
            assert_eq!(rate.take(at(0)), Ok(()));
        }
        assert_eq!(rate.take(at(0)), Err(at(50)));
        // However many a refresh charges, the wait is for what was sent.
        rate.charge(40, at(0));
        assert_eq!(rate.take(at(0)), Err(at(2_050)));
    }

    #[test]
    fn a_rate_of_nothing_is_one_a_second() {
        check_rate(0, &[(0, Ok(())), (0, Err(1_000)), (1_000, Ok(()))]);
    }

    #[test]
    fn a_flood_of_queries_goes_at_the_rate_on_average() {
        // 1,000 queries asked each millisecond for 10 s: a second's worth, then 20 a second.
        let start = Instant::now();
        let mut rate = SoaQueryRate::new(20);
        let sent = (0..10_000)
            .filter(|ms| rate.take(start + Duration::from_millis(*ms)).is_ok())
            .count();
        assert_eq!(sent, 20 + 10 * 20 - 1);
    }
}
