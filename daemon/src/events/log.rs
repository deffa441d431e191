//! The event log: every event gets an id `<epoch>-<seq>` (the epoch names the manager
//! process that produced it, a new one per incarnation; `seq` counts from 1 within it). It
//! keeps the last [`RING`] events, so a client that reconnects with the last id it saw gets
//! exactly the events after it; when they are gone (too old, or the id comes from another
//! incarnation) it is told first that it missed some. Live events reach followers through one
//! bounded broadcast channel: publishing never waits for a follower, and a follower more than
//! [`FOLLOWER_BUFFER`] events behind is told so and cut.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, OwnedSemaphorePermit, Semaphore};

use super::prefix;
use kres_wire::events::{Event, EventId, Record};

/// Events kept for clients that resume.
pub const RING: usize = 1024;

/// Live events a follower may be behind before it is cut.
pub const FOLLOWER_BUFFER: usize = 256;

/// Followers at once; more are refused (the API answers 503).
pub const MAX_FOLLOWERS: usize = 32;

/// Of [`MAX_FOLLOWERS`], the places only [`FollowerClass::Privileged`] followers may take
/// (a quarter of any limit): ordinary ones cannot hold them all.
pub const RESERVED_FOLLOWERS: usize = MAX_FOLLOWERS / 4;

/// Which places a follower may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerClass {
    /// Any place, those kept in reserve included (the API's admins).
    Privileged,
    /// The places not kept in reserve (the API's readers).
    Ordinary,
    /// No place: a reader inside the manager process that follows the log for its whole life
    /// (the control plane's metrics), so clients keep every place.
    Internal,
}
/// Why a follower was refused.
#[derive(Debug, thiserror::Error)]
pub enum TooManyFollowers {
    #[error("too many event streams are open (at most {0}); try again later")]
    All(usize),
    #[error(
        "too many event streams are open for this client's role (at most {0}; the rest are \
         kept for admins); try again later"
    )]
    Ordinary(usize),
}

/// The log: cheap to clone, one per publisher and per reader.
#[derive(Clone)]
pub struct EventLog {
    shared: Arc<Shared>,
}

struct Shared {
    /// This manager process's name in ids.
    epoch: Arc<str>,
    /// The ring, the counter and the live channel change together, under one lock, so a
    /// follower's backlog and its live events neither overlap nor leave a gap.
    state: Mutex<LogState>,
    /// How many events the ring keeps.
    capacity: usize,
    /// One permit per follower.
    followers: Arc<Semaphore>,
    /// One more permit per ordinary follower: fewer than `followers` holds, so some places
    /// are left to privileged ones.
    ordinary: Arc<Semaphore>,
    /// The permits of `followers` and of `ordinary` at the start, for refusals' texts.
    limits: (usize, usize),
}

struct LogState {
    /// The last `capacity` events, oldest first.
    ring: VecDeque<Arc<Record>>,
    /// The seq of the next event.
    next: u64,
    /// Every follower's live feed.
    live: broadcast::Sender<Arc<Record>>,
}

impl EventLog {
    /// A log whose ids carry `epoch` (no `-` in it), with the default limits.
    pub fn new(epoch: &str) -> EventLog {
        EventLog::with_limits(epoch, RING, FOLLOWER_BUFFER, MAX_FOLLOWERS)
    }

    /// A log keeping `ring` events, cutting followers `buffer` events behind, and serving at
    /// most `followers` at once, a quarter of them privileged ones only.
    pub fn with_limits(epoch: &str, ring: usize, buffer: usize, followers: usize) -> EventLog {
        let (live, _) = broadcast::channel(buffer.max(1));
        let ordinary = followers - followers / 4;
        EventLog {
            shared: Arc::new(Shared {
                epoch: epoch.replace('-', ".").into(),
                state: Mutex::new(LogState {
                    ring: VecDeque::with_capacity(ring.min(RING)),
                    next: 1,
                    live,
                }),
                capacity: ring.max(1),
                followers: Arc::new(Semaphore::new(followers)),
                ordinary: Arc::new(Semaphore::new(ordinary)),
                limits: (followers, ordinary),
            }),
        }
    }

    /// The epoch of this log's ids.
    pub fn epoch(&self) -> &str {
        &self.shared.epoch
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        // A panic while the lock was held left the ring intact: every change is one push.
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Record `event` and hand it to every follower; never waits for one.
    pub fn publish(&self, event: Event) -> EventId {
        let mut state = self.state();
        let id = EventId {
            epoch: self.shared.epoch.clone(),
            seq: state.next,
        };
        state.next += 1;
        let record = Arc::new(Record::now(Some(id.clone()), event));
        if state.ring.len() >= self.shared.capacity {
            state.ring.pop_front();
        }
        state.ring.push_back(record.clone());
        // No follower is no error.
        let _ = state.live.send(record);
        id
    }

    /// A follower of the events after `last` (the id a client saw last; `None`: only events
    /// from now on), in one of the places `class` may take.
    pub fn follow(
        &self,
        last: Option<&str>,
        class: FollowerClass,
    ) -> Result<Follower, TooManyFollowers> {
        let (all, ordinary) = self.shared.limits;
        let ordinary_permit = match class {
            FollowerClass::Privileged | FollowerClass::Internal => None,
            FollowerClass::Ordinary => Some(
                self.shared
                    .ordinary
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| TooManyFollowers::Ordinary(ordinary))?,
            ),
        };
        let permit = match class {
            FollowerClass::Internal => None,
            FollowerClass::Privileged | FollowerClass::Ordinary => Some(
                self.shared
                    .followers
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| TooManyFollowers::All(all))?,
            ),
        };
        let state = self.state();
        let (missed, backlog) = match last {
            None => (None, VecDeque::new()),
            Some(last) => resume(&self.shared.epoch, &state.ring, state.next, last),
        };
        Ok(Follower {
            missed,
            backlog,
            live: state.live.subscribe(),
            ended: false,
            _permits: (permit, ordinary_permit),
        })
    }
}

/// What a client resuming after `last` gets before the live events: a notice when some are
/// gone, then the kept events it has not seen.
fn resume(
    epoch: &str,
    ring: &VecDeque<Arc<Record>>,
    next: u64,
    last: &str,
) -> (Option<Event>, VecDeque<Arc<Record>>) {
    let oldest = ring
        .front()
        .and_then(|r| r.id.as_ref())
        .map_or(next, |id| id.seq);
    let missed = |reason: String| {
        let notice = Event::EventsMissed {
            last_event_id: prefix(last, kres_wire::events::MAX_ID).to_owned(),
            reason,
        };
        (Some(notice), ring.iter().cloned().collect())
    };
    let Some(id) = EventId::parse(last) else {
        return missed("not an event id of this resolver".into());
    };
    if *id.epoch != *epoch {
        return missed(format!(
            "the manager restarted since (its events are now {epoch}-N); only the last {} are kept",
            ring.len()
        ));
    }
    if id.seq >= next {
        return missed(format!("no event {id} was published yet"));
    }
    if id.seq + 1 < oldest {
        return missed(format!(
            "the events after it are too old; only the last {} are kept",
            ring.len()
        ));
    }
    let after = ring
        .iter()
        .filter(|r| r.id.as_ref().is_some_and(|i| i.seq > id.seq))
        .cloned()
        .collect();
    (None, after)
}

/// One client's view of the log: the notice of missed events, the backlog, then live events
/// until it falls behind.
pub struct Follower {
    missed: Option<Event>,
    backlog: VecDeque<Arc<Record>>,
    live: broadcast::Receiver<Arc<Record>>,
    /// Cut after it lagged: the notice was its last event.
    ended: bool,
    /// Its place among the followers (none for an internal one) and among the ordinary ones,
    /// given back when it is dropped.
    _permits: (Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>),
}

impl Follower {
    /// The next event for this follower; `None` once it is cut (or the log is gone).
    pub async fn next(&mut self) -> Option<Arc<Record>> {
        if self.ended {
            return None;
        }
        if let Some(notice) = self.missed.take() {
            return Some(Arc::new(Record::now(None, notice)));
        }
        if let Some(record) = self.backlog.pop_front() {
            return Some(record);
        }
        match self.live.recv().await {
            Ok(record) => Some(record),
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                self.ended = true;
                Some(Arc::new(Record::now(None, Event::EventsLagged { lost })))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_wire::change::{ChangeSummary, GcAction, WorkersAction};
    use kres_wire::events::{Cause, Origin};
    use supervisor::ExitStatus;

    fn s(v: &str) -> String {
        v.to_owned()
    }

    fn texts(records: &[Arc<Record>]) -> Vec<String> {
        records
            .iter()
            .map(|r| match &r.event {
                Event::ProcessRemoved { name } => name.clone(),
                other => other.kind().to_owned(),
            })
            .collect()
    }

    fn removed(n: usize) -> Event {
        Event::ProcessRemoved {
            name: format!("e{n}"),
        }
    }

    /// Everything a follower has without waiting.
    fn drain(f: &mut Follower) -> Vec<Arc<Record>> {
        let mut got = Vec::new();
        while let Some(Some(r)) = futures_util::FutureExt::now_or_never(f.next()) {
            got.push(r);
        }
        got
    }

    #[test]
    fn a_resumed_follower_gets_exactly_the_events_after_its_last_id() {
        let log = EventLog::with_limits("7.abc", 4, 16, 8);
        let ids: Vec<EventId> = (0..6).map(|n| log.publish(removed(n))).collect();
        assert_eq!(ids[0].to_string(), "7.abc-1");
        // Within the ring: exactly the events after it, then live ones.
        let mut f = log
            .follow(Some(&ids[3].to_string()), FollowerClass::Privileged)
            .expect("follow");
        log.publish(removed(6));
        assert_eq!(texts(&drain(&mut f)), ["e4", "e5", "e6"]);
        // The newest id: nothing but live events.
        let mut f = log
            .follow(Some("7.abc-7"), FollowerClass::Privileged)
            .expect("follow");
        assert!(drain(&mut f).is_empty());
        // The one just before the oldest kept (e3 is the oldest of 4): nothing is missing.
        let mut f = log
            .follow(Some("7.abc-3"), FollowerClass::Privileged)
            .expect("follow");
        assert_eq!(texts(&drain(&mut f)), ["e3", "e4", "e5", "e6"]);
        // Too old, another incarnation, from the future, not an id: told first, then the ring.
        for last in [
            "7.abc-1",
            "8.abc-3",
            "7.abc-99",
            "garbage",
            &"9".repeat(500),
        ] {
            let mut f = log
                .follow(Some(last), FollowerClass::Privileged)
                .expect("follow");
            let got = drain(&mut f);
            assert_eq!(
                texts(&got),
                ["events-missed", "e3", "e4", "e5", "e6"],
                "{last}"
            );
            assert!(got[0].id.is_none());
            let Event::EventsMissed { last_event_id, .. } = &got[0].event else {
                unreachable!()
            };
            assert!(last.starts_with(last_event_id.as_str()));
        }
        // No id: live events only.
        let mut f = log.follow(None, FollowerClass::Privileged).expect("follow");
        assert!(drain(&mut f).is_empty());
    }

    #[test]
    fn ordinary_followers_leave_the_reserve_to_privileged_ones() {
        let log = EventLog::new("1.x");
        let ordinary: Vec<Follower> = (0..MAX_FOLLOWERS - RESERVED_FOLLOWERS)
            .map(|_| log.follow(None, FollowerClass::Ordinary).expect("follow"))
            .collect();
        assert!(matches!(
            log.follow(None, FollowerClass::Ordinary),
            Err(TooManyFollowers::Ordinary(_))
        ));
        let privileged: Vec<Follower> = (0..RESERVED_FOLLOWERS)
            .map(|_| log.follow(None, FollowerClass::Privileged).expect("follow"))
            .collect();
        assert!(matches!(
            log.follow(None, FollowerClass::Privileged),
            Err(TooManyFollowers::All(MAX_FOLLOWERS))
        ));
        // An ordinary follower gone leaves a place for either class.
        drop(ordinary);
        drop(privileged);
        let _privileged: Vec<Follower> = (0..MAX_FOLLOWERS)
            .map(|_| log.follow(None, FollowerClass::Privileged).expect("follow"))
            .collect();
        assert!(matches!(
            log.follow(None, FollowerClass::Ordinary),
            Err(TooManyFollowers::All(MAX_FOLLOWERS))
        ));
    }

    #[test]
    fn an_internal_follower_takes_no_place_from_clients() {
        let log = EventLog::new("1.x");
        let mut internal = log.follow(None, FollowerClass::Internal).expect("follow");
        let _all: Vec<Follower> = (0..MAX_FOLLOWERS)
            .map(|_| log.follow(None, FollowerClass::Privileged).expect("follow"))
            .collect();
        assert!(log.follow(None, FollowerClass::Internal).is_ok());
        log.publish(Event::Draining);
        assert_eq!(texts(&drain(&mut internal)), vec!["draining"]);
    }

    #[test]
    fn a_follower_that_falls_behind_is_told_and_cut_and_never_slows_the_log() {
        let log = EventLog::with_limits("1.x", RING, 8, 2);
        let mut slow = log.follow(None, FollowerClass::Privileged).expect("follow");
        let mut keeping_up = log.follow(None, FollowerClass::Privileged).expect("follow");
        assert!(
            log.follow(None, FollowerClass::Privileged).is_err(),
            "a third follower is refused"
        );
        let started = std::time::Instant::now();
        let mut seen = 0;
        for n in 0..10_000 {
            log.publish(removed(n));
            seen += drain(&mut keeping_up).len();
        }
        eprintln!("10,000 events published in {:?}", started.elapsed());
        assert_eq!(seen, 10_000);
        let got = drain(&mut slow);
        assert_eq!(got.len(), 1, "{:?}", texts(&got));
        assert!(
            matches!(got[0].event, Event::EventsLagged { lost } if lost > 0),
            "{got:?}"
        );
        assert!(futures_util::FutureExt::now_or_never(slow.next()) == Some(None));
        drop(slow);
        assert!(
            log.follow(None, FollowerClass::Privileged).is_ok(),
            "its place is given back"
        );
    }

    #[test]
    fn records_read_back_as_written_and_kinds_match_the_enum() {
        let events = vec![
            Event::ProcessExited {
                name: s("kresd0"),
                pid: 3,
                status: Some(ExitStatus::Signaled {
                    signal: 9,
                    core_dumped: false,
                }),
            },
            Event::ConfigApplied {
                cause: Cause::Api,
                change: ChangeSummary {
                    changed: vec![s("local-data")],
                    workers: WorkersAction::Restart {
                        canary: true,
                        stop: vec![],
                        restart: vec![s("kresd0")],
                        start: vec![],
                        unlink: vec![],
                    },
                    cache_gc: GcAction::Keep,
                },
            },
            Event::ConfigApplied {
                cause: Cause::Api,
                change: ChangeSummary {
                    changed: vec![s("logging")],
                    workers: WorkersAction::Live {
                        workers: vec![s("kresd0"), s("kresd1")],
                        restarted: Some(vec![s("kresd1")]),
                        rules_reset: false,
                    },
                    cache_gc: GcAction::Replace,
                },
            },
            Event::ConfigRolledBack {
                cause: Cause::Reload,
                reason: s("x"),
                recovered: true,
            },
            Event::EventsMissed {
                last_event_id: s("1-1"),
                reason: s("y"),
            },
            Event::Draining,
            Event::ManagerStarted { incarnation: 2 },
            Event::ConfigReloading {
                force: false,
                origin: Origin::Signal,
            },
        ];
        let log = EventLog::new("3.f");
        for event in events {
            let id = log.publish(event.clone());
            let record = Record::now(Some(id), event);
            let json = serde_json::to_value(&record).expect("JSON");
            assert_eq!(json["kind"], record.event.kind(), "{json}");
            let back: Record = serde_json::from_value(json.clone()).expect("reads back");
            assert_eq!(back, record, "{json}");
            assert!(record.event.to_string().starts_with(record.event.kind()));
        }
    }
}
