//! What the resolver does, as a log of events that clients follow (`GET /events`, `kresctl
//! events`, `kresctl processes --watch`), so operators and tools see crashes, restarts, hangs
//! and configuration changes as they happen instead of polling the process table.
//!
//! - Process events are derived from successive process tables by one pure function,
//!   [`process_events`] (tables arrive coalesced: it infers what happened between any two);
//!   [`follow_processes`] feeds it the supervisor's snapshots.
//! - Configuration events are published by the manager task, the one owner of changes.
//!
//! The [`EventLog`] gives every event an id `<epoch>-<seq>`: the epoch names the manager
//! process that produced it (a new one per incarnation), `seq` counts from 1 within it. It
//! keeps the last [`RING`] events, so a client that reconnects with the last id it saw gets
//! exactly the events after it; when they are gone (too old, or the id comes from another
//! incarnation) it is told first that it missed some. Live events reach followers through one
//! bounded broadcast channel: publishing never waits for a follower, and a follower more than
//! [`FOLLOWER_BUFFER`] events behind is told so and cut.
//!
//! The kinds are one enum, [`Event`]; a new kind (the steps of an upgrade, say) is one more
//! variant, and followers print kinds they do not know as they came.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use supervisor::{ExitStatus, ProcessSnapshot, ProcessState, Snapshot};
use tokio::sync::{broadcast, watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

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
}

/// Longest reason an event carries (a canary's output can be long); longer ones are cut.
pub const MAX_REASON: usize = 2048;

/// Longest `Last-Event-ID` considered; a longer one is no id of ours.
const MAX_ID: usize = 128;

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
pub enum Event {
    /// A process of a service was started (at start-up, for a change, on request).
    ProcessSpawned { name: String, pid: i32 },
    /// The supervisor started a service's process again after it ended unasked (a crash, a
    /// kill); `restarts` counts such restarts since the service was registered.
    ProcessRestarted {
        name: String,
        pid: i32,
        restarts: u32,
    },
    /// A process announced it is ready (kresd: it serves).
    ProcessReady { name: String, pid: i32 },
    /// A process ended; `status` is its exit code or signal (unknown only when the service
    /// was removed before its table showed the exit).
    ProcessExited {
        name: String,
        pid: i32,
        status: Option<ExitStatus>,
    },
    /// A process was killed because it stopped answering (`--worker-hang-timeout`).
    ProcessHung {
        name: String,
        pid: i32,
        reason: String,
    },
    /// A service gave up: it kept failing, or could not be started.
    ProcessFailed {
        name: String,
        reason: Option<String>,
    },
    /// A service left the process table (a worker removed by a change).
    ProcessRemoved { name: String },
    /// This manager process started (`incarnation` 1 with the resolver; more after the
    /// previous one failed and was replaced): the first event of every epoch.
    ManagerStarted { incarnation: u32 },
    /// The daemon was upgraded in place (`kresctl upgrade`, SIGUSR2) and this is the first
    /// manager process since: `outcome` upgraded (`to` runs now), or failed (`from` runs on,
    /// `error` says why). Published once per upgrade, right after `manager-started`.
    Upgrade {
        generation: u32,
        outcome: crate::wire::upgrade::UpgradeOutcome,
        from: String,
        to: String,
        error: Option<String>,
    },
    /// The resolver drains: readiness is off, DNS is still answered until the stop.
    Draining,
    /// To every follower, last: this manager process stops (the resolver stops), and the
    /// stream ends with it.
    Stopping,
    /// The configuration files are read again (SIGHUP, `/reload`, `kresctl reload`, a watched
    /// configuration file changed).
    ConfigReloading { force: bool, origin: Origin },
    /// The running configuration is applied again (`/renew`, a watched file it names changed).
    ConfigRenewing { force: bool, origin: Origin },
    /// A configuration change was applied.
    ConfigApplied {
        cause: Cause,
        /// The sections that changed.
        sections: Vec<String>,
        workers: WorkersChanged,
        cache_gc: GcChanged,
    },
    /// A configuration change was refused; nothing changed.
    ConfigRefused { cause: Cause, reason: String },
    /// A change failed half-way and was rolled back (`recovered`: every worker is back on the
    /// running configuration; false when going back failed too).
    ConfigRolledBack {
        cause: Cause,
        reason: String,
        recovered: bool,
    },
    /// To one follower only, first: events after the id it resumed from are gone.
    EventsMissed {
        last_event_id: String,
        reason: String,
    },
    /// To one follower only, last: it fell behind by `lost` events and is cut.
    EventsLagged { lost: u64 },
}

/// Who asked for a reload or a renew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// A request to the management API (`kresctl reload`, systemd's `ExecReload`).
    Api,
    /// SIGHUP.
    Signal,
    /// The files watchdog: a watched file changed.
    WatchedFile,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Api => "asked through the API",
            Origin::Signal => "on SIGHUP",
            Origin::WatchedFile => "a watched file changed",
        })
    }
}

/// What asked for a configuration change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// `PUT`, `PATCH` or `DELETE` of `/v1/config`.
    Api,
    /// The configuration files, read again.
    Reload,
    /// The running configuration, applied again.
    Renew,
}

/// What the workers did for an applied change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum WorkersChanged {
    /// They kept running and reopened the rules.
    RulesReset,
    /// They kept running and took a logging change through their control sockets:
    /// `workers` were told, `restarted` did not take it and were restarted instead;
    /// `rules-reset`: they reopened the rules too.
    Live {
        workers: Vec<String>,
        restarted: Vec<String>,
        #[serde(rename = "rules-reset")]
        rules_reset: bool,
    },
    /// They were replaced: removed (`stop`), restarted, started.
    Restart {
        stop: Vec<String>,
        restart: Vec<String>,
        start: Vec<String>,
    },
}

/// What the cache garbage collector did for an applied change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcChanged {
    Keep,
    Replace,
}

impl Event {
    /// Its kind, as the `kind` field and the SSE `event:` line name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::ProcessSpawned { .. } => "process-spawned",
            Event::ProcessRestarted { .. } => "process-restarted",
            Event::ProcessReady { .. } => "process-ready",
            Event::ProcessExited { .. } => "process-exited",
            Event::ProcessHung { .. } => "process-hung",
            Event::ProcessFailed { .. } => "process-failed",
            Event::ProcessRemoved { .. } => "process-removed",
            Event::ManagerStarted { .. } => "manager-started",
            Event::Upgrade { .. } => "upgrade",
            Event::Draining => "draining",
            Event::Stopping => "stopping",
            Event::ConfigReloading { .. } => "config-reloading",
            Event::ConfigRenewing { .. } => "config-renewing",
            Event::ConfigApplied { .. } => "config-applied",
            Event::ConfigRefused { .. } => "config-refused",
            Event::ConfigRolledBack { .. } => "config-rolled-back",
            Event::EventsMissed { .. } => "events-missed",
            Event::EventsLagged { .. } => "events-lagged",
        }
    }

    /// Whether it is about a process (what `kresctl processes --watch` redraws on).
    pub fn is_process(&self) -> bool {
        self.kind().starts_with("process-")
    }
}

impl fmt::Display for Event {
    /// One line for an operator: the kind, then what it is about.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind();
        match self {
            Event::ProcessSpawned { name, pid } | Event::ProcessReady { name, pid } => {
                write!(f, "{kind} {name} (pid {pid})")
            }
            Event::ProcessRestarted {
                name,
                pid,
                restarts,
            } => write!(f, "{kind} {name} (pid {pid}), restart {restarts}"),
            Event::ProcessExited { name, pid, status } => match status {
                Some(status) => write!(f, "{kind} {name} (pid {pid}): {status}"),
                None => write!(f, "{kind} {name} (pid {pid})"),
            },
            Event::ProcessHung { name, pid, reason } => {
                write!(f, "{kind} {name} (pid {pid}): {reason}")
            }
            Event::ProcessFailed { name, reason } => match reason {
                Some(reason) => write!(f, "{kind} {name}: {reason}"),
                None => write!(f, "{kind} {name}"),
            },
            Event::ProcessRemoved { name } => write!(f, "{kind} {name}"),
            Event::ManagerStarted { incarnation } => write!(f, "{kind}, incarnation {incarnation}"),
            Event::Upgrade {
                generation,
                from,
                to,
                error,
                ..
            } => match error {
                None => write!(f, "{kind} {generation}: upgraded in place, {from} -> {to}"),
                Some(why) => write!(f, "{kind} {generation} failed: {why}; {from} runs on"),
            },
            Event::Draining | Event::Stopping => f.write_str(kind),
            Event::ConfigReloading { force, origin } | Event::ConfigRenewing { force, origin } => {
                write!(
                    f,
                    "{kind} ({origin}{})",
                    if *force { ", forced" } else { "" }
                )
            }
            Event::ConfigApplied {
                cause,
                sections,
                workers,
                cache_gc,
            } => {
                write!(f, "{kind} ({cause}): ")?;
                if sections.is_empty() {
                    f.write_str("no section changed")?;
                } else {
                    write!(f, "changed {}", sections.join(", "))?;
                }
                match workers {
                    WorkersChanged::RulesReset => f.write_str("; workers reset their rules")?,
                    WorkersChanged::Live {
                        workers,
                        restarted,
                        rules_reset,
                    } => {
                        write!(f, "; applied live to {} workers", workers.len())?;
                        if !restarted.is_empty() {
                            write!(f, ", restarted {} instead", restarted.join(","))?;
                        }
                        if *rules_reset {
                            f.write_str("; workers reset their rules")?;
                        }
                    }
                    WorkersChanged::Restart {
                        stop,
                        restart,
                        start,
                    } => {
                        f.write_str("; workers")?;
                        for (what, names) in [
                            ("removed", stop),
                            ("restarted", restart),
                            ("started", start),
                        ] {
                            if !names.is_empty() {
                                write!(f, " {what} {}", names.join(","))?;
                            }
                        }
                    }
                }
                if *cache_gc == GcChanged::Replace {
                    f.write_str("; cache GC replaced")?;
                }
                Ok(())
            }
            Event::ConfigRefused { cause, reason } => write!(f, "{kind} ({cause}): {reason}"),
            Event::ConfigRolledBack {
                cause,
                reason,
                recovered,
            } => {
                let back = if *recovered {
                    "every worker is back on the running configuration"
                } else {
                    "going back failed too"
                };
                write!(f, "{kind} ({cause}): {reason}; {back}")
            }
            Event::EventsMissed {
                last_event_id,
                reason,
            } => write!(f, "{kind} after {last_event_id}: {reason}"),
            Event::EventsLagged { lost } => {
                write!(
                    f,
                    "{kind}: this follower fell {lost} events behind and is cut"
                )
            }
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cause::Api => "api",
            Cause::Reload => "reload",
            Cause::Renew => "renew",
        })
    }
}

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

/// An event's id: which manager process produced it, and its place there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId {
    pub epoch: Arc<str>,
    pub seq: u64,
}

impl EventId {
    /// An id as [`EventId`]'s `Display` writes it; `None` for anything else.
    pub fn parse(text: &str) -> Option<EventId> {
        if text.len() > MAX_ID {
            return None;
        }
        let (epoch, seq) = text.rsplit_once('-')?;
        if epoch.is_empty() {
            return None;
        }
        Some(EventId {
            epoch: epoch.into(),
            seq: seq.parse().ok()?,
        })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.epoch, self.seq)
    }
}

impl Serialize for EventId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<EventId, D::Error> {
        let text = String::deserialize(d)?;
        EventId::parse(&text).ok_or_else(|| serde::de::Error::custom("not an event id"))
    }
}

/// An event as followers get it (the SSE `data:` line): its id (none for a notice to one
/// follower), when it was published (Unix seconds), and the event's own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<EventId>,
    pub time: f64,
    #[serde(flatten)]
    pub event: Event,
}

impl Record {
    /// A notice to one follower: no id, published now.
    pub fn notice(event: Event) -> Record {
        Record::now(None, event)
    }

    fn now(id: Option<EventId>, event: Event) -> Record {
        let time = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Record { id, time, event }
    }
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
            FollowerClass::Privileged => None,
            FollowerClass::Ordinary => Some(
                self.shared
                    .ordinary
                    .clone()
                    .try_acquire_owned()
                    .map_err(|_| TooManyFollowers::Ordinary(ordinary))?,
            ),
        };
        let permit = self
            .shared
            .followers
            .clone()
            .try_acquire_owned()
            .map_err(|_| TooManyFollowers::All(all))?;
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
            last_event_id: prefix(last, MAX_ID).to_owned(),
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
    /// Its place among the followers (and among the ordinary ones), given back when it is
    /// dropped.
    _permits: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
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

/// What happened between two process tables, in the order it happened for each service.
/// Tables arrive coalesced, so steps in between may be missing: a new pid means the old
/// process exited (its status is the table's last exit) and a new one started.
pub fn process_events(old: &Snapshot, new: &Snapshot) -> Vec<Event> {
    let mut events = Vec::new();
    for p in &new.processes {
        let before = old.processes.iter().find(|o| o.name == p.name);
        service_events(before, p, &mut events);
    }
    for o in &old.processes {
        if !new.processes.iter().any(|p| p.name == o.name) {
            if let Some(pid) = o.pid {
                events.push(Event::ProcessExited {
                    name: o.name.clone(),
                    pid,
                    status: None,
                });
            }
            events.push(Event::ProcessRemoved {
                name: o.name.clone(),
            });
        }
    }
    if new.draining && !old.draining {
        events.push(Event::Draining);
    }
    events
}

/// The events of one service between its entries `old` (none: just registered) and `new`.
fn service_events(old: Option<&ProcessSnapshot>, new: &ProcessSnapshot, events: &mut Vec<Event>) {
    let name = || new.name.clone();
    let old_pid = old.and_then(|o| o.pid);
    let kill = |p: &ProcessSnapshot| (p.killed_pid, p.kill_reason.clone());
    if let (Some(pid), Some(reason)) = (new.killed_pid, &new.kill_reason) {
        if old.is_none_or(|o| kill(o) != kill(new)) {
            events.push(Event::ProcessHung {
                name: name(),
                pid,
                reason: bounded_reason(reason),
            });
        }
    }
    if let Some(pid) = old_pid.filter(|&pid| new.pid != Some(pid)) {
        events.push(Event::ProcessExited {
            name: name(),
            pid,
            status: new.last_exit,
        });
    }
    if let Some(pid) = new.pid.filter(|&pid| old_pid != Some(pid)) {
        let restarted = old.is_some_and(|o| new.restarts > o.restarts);
        events.push(if restarted {
            Event::ProcessRestarted {
                name: name(),
                pid,
                restarts: new.restarts,
            }
        } else {
            Event::ProcessSpawned { name: name(), pid }
        });
    }
    if let Some(pid) = new.pid.filter(|_| new.state == ProcessState::Running) {
        let was_ready = old.is_some_and(|o| o.state == ProcessState::Running && o.pid == Some(pid));
        if !was_ready {
            events.push(Event::ProcessReady { name: name(), pid });
        }
    }
    if new.state == ProcessState::Failed && old.is_none_or(|o| o.state != ProcessState::Failed) {
        events.push(Event::ProcessFailed {
            name: name(),
            reason: new.failure.as_deref().map(bounded_reason),
        });
    }
}

/// Publish what happens in the process table from now on, until `stop` or the table's end.
pub async fn follow_processes(
    mut table: watch::Receiver<Arc<Snapshot>>,
    log: EventLog,
    stop: CancellationToken,
) {
    let mut last = table.borrow_and_update().clone();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = table.changed() => if changed.is_err() {
                return;
            },
        }
        let now = table.borrow_and_update().clone();
        for event in process_events(&last, &now) {
            log.publish(event);
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service's entry with the fields the diff reads.
    fn proc(name: &str, pid: Option<i32>, state: ProcessState) -> ProcessSnapshot {
        ProcessSnapshot {
            name: name.into(),
            kind: "kresd".into(),
            pid,
            state,
            since: None,
            ready_at: None,
            restarts: 0,
            last_exit: None,
            failure: None,
            status_text: None,
            kill_reason: None,
            killed_pid: None,
            takes_queries: None,
        }
    }

    fn table(processes: Vec<ProcessSnapshot>) -> Snapshot {
        Snapshot {
            processes,
            ..Snapshot::default()
        }
    }

    fn restarts(mut p: ProcessSnapshot, n: u32) -> ProcessSnapshot {
        p.restarts = n;
        p
    }

    fn exited(mut p: ProcessSnapshot, status: ExitStatus) -> ProcessSnapshot {
        p.last_exit = Some(status);
        p
    }

    fn killed(mut p: ProcessSnapshot, pid: i32, reason: &str) -> ProcessSnapshot {
        p.killed_pid = Some(pid);
        p.kill_reason = Some(reason.into());
        p
    }

    fn failed(mut p: ProcessSnapshot, reason: &str) -> ProcessSnapshot {
        p.failure = Some(reason.into());
        p
    }

    const SIGKILL: ExitStatus = ExitStatus::Signaled {
        signal: 9,
        core_dumped: false,
    };

    struct Row {
        name: &'static str,
        old: Snapshot,
        new: Snapshot,
        want: Vec<Event>,
    }

    fn check(rows: Vec<Row>) {
        for row in rows {
            assert_eq!(
                process_events(&row.old, &row.new),
                row.want,
                "row: {}",
                row.name
            );
        }
    }

    fn s(v: &str) -> String {
        v.to_owned()
    }

    #[test]
    fn process_tables_diff_into_events() {
        use ProcessState::*;
        let k = "kresd0";
        check(vec![
            Row {
                name: "nothing changed",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![],
            },
            Row {
                name: "spawned",
                old: table(vec![proc(k, None, Idle)]),
                new: table(vec![proc(k, Some(10), Starting)]),
                want: vec![Event::ProcessSpawned {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "registered and started at once",
                old: table(vec![]),
                new: table(vec![proc(k, Some(10), Starting)]),
                want: vec![Event::ProcessSpawned {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "registered without a process",
                old: table(vec![]),
                new: table(vec![proc(k, None, Idle)]),
                want: vec![],
            },
            Row {
                name: "ready",
                old: table(vec![proc(k, Some(10), Starting)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![Event::ProcessReady {
                    name: s(k),
                    pid: 10,
                }],
            },
            Row {
                name: "spawned and ready between two tables",
                old: table(vec![proc(k, None, Idle)]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![
                    Event::ProcessSpawned {
                        name: s(k),
                        pid: 10,
                    },
                    Event::ProcessReady {
                        name: s(k),
                        pid: 10,
                    },
                ],
            },
            Row {
                name: "exited, waiting to be restarted",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![exited(proc(k, None, Backoff), SIGKILL)]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 10,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "restarted after the exit",
                old: table(vec![exited(proc(k, None, Backoff), SIGKILL)]),
                new: table(vec![restarts(
                    exited(proc(k, Some(11), Starting), SIGKILL),
                    1,
                )]),
                want: vec![Event::ProcessRestarted {
                    name: s(k),
                    pid: 11,
                    restarts: 1,
                }],
            },
            Row {
                name: "exited and restarted between two tables, then ready",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![restarts(
                    exited(proc(k, Some(11), Running), SIGKILL),
                    1,
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(SIGKILL),
                    },
                    Event::ProcessRestarted {
                        name: s(k),
                        pid: 11,
                        restarts: 1,
                    },
                    Event::ProcessReady {
                        name: s(k),
                        pid: 11,
                    },
                ],
            },
            Row {
                name: "replaced on request (a change): exited, spawned, no restart counted",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![exited(
                    proc(k, Some(11), Starting),
                    ExitStatus::Code(0),
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(ExitStatus::Code(0)),
                    },
                    Event::ProcessSpawned {
                        name: s(k),
                        pid: 11,
                    },
                ],
            },
            Row {
                name: "failed for good",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![failed(
                    exited(proc(k, None, Failed), ExitStatus::Code(1)),
                    "start limit hit",
                )]),
                want: vec![
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(ExitStatus::Code(1)),
                    },
                    Event::ProcessFailed {
                        name: s(k),
                        reason: Some(s("start limit hit")),
                    },
                ],
            },
            Row {
                name: "still failed: said once",
                old: table(vec![failed(proc(k, None, Failed), "x")]),
                new: table(vec![failed(proc(k, None, Failed), "x")]),
                want: vec![],
            },
            Row {
                name: "hung: the kill seen before the exit",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![killed(proc(k, Some(10), Running), 10, "hung: x")]),
                want: vec![Event::ProcessHung {
                    name: s(k),
                    pid: 10,
                    reason: s("hung: x"),
                }],
            },
            Row {
                name: "hung: then its exit, the reason not repeated",
                old: table(vec![killed(proc(k, Some(10), Running), 10, "hung: x")]),
                new: table(vec![killed(
                    exited(proc(k, None, Backoff), SIGKILL),
                    10,
                    "hung: x",
                )]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 10,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "hung, killed and restarted between two tables",
                old: table(vec![proc(k, Some(10), Running)]),
                new: table(vec![restarts(
                    killed(exited(proc(k, Some(11), Starting), SIGKILL), 10, "hung: x"),
                    1,
                )]),
                want: vec![
                    Event::ProcessHung {
                        name: s(k),
                        pid: 10,
                        reason: s("hung: x"),
                    },
                    Event::ProcessExited {
                        name: s(k),
                        pid: 10,
                        status: Some(SIGKILL),
                    },
                    Event::ProcessRestarted {
                        name: s(k),
                        pid: 11,
                        restarts: 1,
                    },
                ],
            },
            Row {
                name: "hung again with the same reason: another pid, another event",
                old: table(vec![restarts(
                    killed(proc(k, Some(11), Running), 10, "hung: x"),
                    1,
                )]),
                new: table(vec![restarts(
                    killed(proc(k, Some(11), Running), 11, "hung: x"),
                    1,
                )]),
                want: vec![Event::ProcessHung {
                    name: s(k),
                    pid: 11,
                    reason: s("hung: x"),
                }],
            },
            Row {
                name: "a crash after an old kill is no hang",
                old: table(vec![killed(proc(k, Some(11), Running), 10, "hung: x")]),
                new: table(vec![killed(
                    exited(proc(k, None, Backoff), SIGKILL),
                    10,
                    "hung: x",
                )]),
                want: vec![Event::ProcessExited {
                    name: s(k),
                    pid: 11,
                    status: Some(SIGKILL),
                }],
            },
            Row {
                name: "removed while running",
                old: table(vec![
                    proc(k, Some(10), Running),
                    proc("kresd1", Some(12), Running),
                ]),
                new: table(vec![proc(k, Some(10), Running)]),
                want: vec![
                    Event::ProcessExited {
                        name: s("kresd1"),
                        pid: 12,
                        status: None,
                    },
                    Event::ProcessRemoved { name: s("kresd1") },
                ],
            },
            Row {
                name: "draining",
                old: table(vec![]),
                new: Snapshot {
                    processes: vec![],
                    shutting_down: false,
                    draining: true,
                },
                want: vec![Event::Draining],
            },
        ]);
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
                status: Some(SIGKILL),
            },
            Event::ConfigApplied {
                cause: Cause::Api,
                sections: vec![s("local-data")],
                workers: WorkersChanged::Restart {
                    stop: vec![],
                    restart: vec![s("kresd0")],
                    start: vec![],
                },
                cache_gc: GcChanged::Keep,
            },
            Event::ConfigApplied {
                cause: Cause::Api,
                sections: vec![s("logging")],
                workers: WorkersChanged::Live {
                    workers: vec![s("kresd0"), s("kresd1")],
                    restarted: vec![s("kresd1")],
                    rules_reset: false,
                },
                cache_gc: GcChanged::Replace,
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

    #[test]
    fn reasons_are_bounded() {
        let long = "é".repeat(MAX_REASON);
        let cut = bounded_reason(&long);
        assert!(cut.len() <= MAX_REASON + '…'.len_utf8());
        assert_eq!(bounded_reason("short"), "short");
    }
}
