//! The secondary: one task per `local-data.rpz[]` entry with `transfer`, in the manager
//! process. Each keeps its zone's file up to date from the entry's primaries (tried in
//! order) by the SOA timers (`status::ZoneClock`) and on NOTIFY, through [`super::refresh`];
//! after a new file it renews the running configuration, so the policy-loader reads it and
//! the workers reset their rules (a renew with no section changed is a rules reset: workers
//! are never restarted for it). One [`NotifyListener`] serves each distinct `notify-listen`
//! address, for every entry naming it; the zone in a NOTIFY picks the entry. Each task's
//! refreshes are paced by its [`ZonePacer`] (at most one per interval, NOTIFYs folded and
//! told at most once a second) and its SOA queries by the [`SoaQueryRate`] all tasks share.
//!
//! Failures keep the running policy: the stored file is replaced only by a complete
//! transfer, and a failed one is logged and told to the event log (`rpz-transfer-failed`,
//! whence `/metrics` and `GET /rpz`); past the SOA's expire time the stored policy is still
//! served (`rpz-expired`). The tasks are rebuilt when the configuration changes what they
//! follow, and end with the manager process.
//!
//! At the start (before the first policy-loader run), [`first_transfers`] brings the zones
//! that have no stored file, each within its deadline; a zone with a stored file waits for
//! nothing, so READY never waits for the network when the file exists.
//!
//! A stored zone kresd cannot load (the policy-loader leaves it out and reports it, see
//! `manager::rpz_loads`) is transferred whole at once, at the start as after any change;
//! while it stays broken, every refresh transfers it whole (`status::Loading`).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::pacing::{
    NotifyReport, PacerAction, PacerEvent, SoaQueryRate, ZonePacer, REFRESH_INTERVAL,
    SOA_QUERIES_PER_SECOND,
};
use super::status::{Loaded, Loading, LoadingAction, Refreshed, Wanted, ZoneClock};
use super::{
    refresh, refresh_whole, stored, zone_name, AddressError, KeyFileError, Limits, Notified,
    NotifyListener, NotifyZone, Primary, TransferError, TransferKind, TransferReport, TsigKey,
    ZoneNameError,
};
use crate::events::{Event, EventLog, Origin};
use crate::manager::plan::Restart;
use crate::manager::rpz_loads::RpzLoads;
use crate::manager::ManagerHandle;
use kres_config::{KresConfig, LoadedConfig, RpzSchema};

/// One zone to follow, from its configuration entry.
#[derive(Clone)]
pub struct Zone {
    /// The zone's name, normalised (lower case, absolute).
    pub name: String,
    /// Where the zone is kept.
    pub file: PathBuf,
    /// The primaries, in the order they are asked.
    pub primaries: Vec<Primary>,
    /// The key signing transfers and NOTIFYs.
    pub key: Option<TsigKey>,
    /// Where NOTIFYs for the zone are accepted.
    pub notify_listen: Option<SocketAddr>,
    /// The bounds of one refresh.
    pub limits: Limits,
    /// How long a start with no stored file waits for the first transfer.
    pub first_deadline: Duration,
}

/// Why a configuration entry cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("RPZ zone '{zone}': {source}")]
    Name {
        zone: String,
        #[source]
        source: ZoneNameError,
    },
    #[error("RPZ zone {zone}: address '{text}': {source}")]
    Address {
        zone: String,
        text: String,
        #[source]
        source: AddressError,
    },
    #[error("RPZ zone {zone}: key file {}: {source}", path.display())]
    Key {
        zone: String,
        path: PathBuf,
        #[source]
        source: KeyFileError,
    },
}

impl ZoneError {
    /// The zone it is about, as written.
    fn zone(&self) -> &str {
        match self {
            ZoneError::Name { zone, .. }
            | ZoneError::Address { zone, .. }
            | ZoneError::Key { zone, .. } => zone,
        }
    }
}

/// The entries of `cfg` kept by zone transfer, as written (what the tasks are rebuilt on).
fn transfer_entries(cfg: &KresConfig) -> Vec<RpzSchema> {
    cfg.local_data
        .rpz
        .iter()
        .flatten()
        .filter(|rpz| rpz.transfer.is_some())
        .cloned()
        .collect()
}

/// The zone of one entry (the key file is read now).
fn zone_of(rpz: &RpzSchema) -> Option<Result<Zone, ZoneError>> {
    let transfer = rpz.transfer.as_ref()?;
    let written = transfer.zone.as_str().to_owned();
    let address = |text: &str| {
        Primary::parse(text).map_err(|source| ZoneError::Address {
            zone: written.clone(),
            text: text.to_owned(),
            source,
        })
    };
    let zone = || -> Result<Zone, ZoneError> {
        let name = zone_name(&written).map_err(|source| ZoneError::Name {
            zone: written.clone(),
            source,
        })?;
        let primaries = transfer
            .primaries
            .iter()
            .map(|p| address(p.as_str()))
            .collect::<Result<Vec<_>, _>>()?;
        let notify_listen = match &transfer.notify_listen {
            Some(at) => Some(address(at.as_str())?.addr),
            None => None,
        };
        let key = match &transfer.tsig_key_file {
            Some(path) => Some(TsigKey::from_file(path).map_err(|source| ZoneError::Key {
                zone: written.clone(),
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        let mut limits = Limits::default();
        if let Some(size) = &transfer.max_size {
            limits.max_bytes = size.bytes();
        }
        if let Some(timeout) = &transfer.timeout {
            limits.max_duration = Duration::from_micros(timeout.micros());
        }
        if let Some(memory) = &transfer.max_ixfr_memory {
            limits.max_ixfr_memory = memory.bytes();
        }
        Ok(Zone {
            name,
            file: rpz.file.clone(),
            primaries,
            key,
            notify_listen,
            limits,
            first_deadline: Duration::from_micros(transfer.first_transfer_timeout.micros()),
        })
    };
    Some(zone())
}

/// Every zone `cfg` keeps by zone transfer.
pub fn zones(cfg: &KresConfig) -> Vec<Result<Zone, ZoneError>> {
    cfg.local_data
        .rpz
        .iter()
        .flatten()
        .filter_map(zone_of)
        .collect()
}

/// What trying a zone's primaries came to.
struct Attempt {
    /// The primary that answered, and what it gave.
    success: Option<(Primary, TransferReport)>,
    /// The primaries that failed before, in order, and why.
    failures: Vec<(Primary, TransferError)>,
}

/// Bring `zone` up to date from its primaries, in order, until one answers, transferring
/// what is `wanted`; no refresh goes past `deadline`.
async fn attempt(zone: &Zone, deadline: Option<Instant>, wanted: Wanted) -> Attempt {
    let mut failures = Vec::new();
    for primary in &zone.primaries {
        let (name, key, file, limits) = (&zone.name, zone.key.as_ref(), &zone.file, &zone.limits);
        let refreshing = async move {
            match wanted {
                Wanted::Changes => refresh(name, primary, key, file, limits).await,
                Wanted::WholeZone => refresh_whole(name, primary, key, file, limits).await,
            }
        };
        let result = match deadline {
            Some(at) => match tokio::time::timeout_at(at, refreshing).await {
                Ok(result) => result,
                Err(_) => Err(TransferError::Timeout(
                    "the start's deadline for the first transfer passed".into(),
                )),
            },
            None => refreshing.await,
        };
        match result {
            Ok(report) => {
                return Attempt {
                    success: Some((*primary, report)),
                    failures,
                }
            }
            Err(e) => failures.push((*primary, e)),
        }
    }
    Attempt {
        success: None,
        failures,
    }
}

/// The zones a start transferred because it had no stored file for them.
#[derive(Default)]
pub struct FirstTransfers(Vec<(String, Primary, TransferReport)>);

/// Why the first transfer of a zone with no stored file failed at the start.
#[derive(Debug, thiserror::Error)]
#[error(
    "RPZ zone {zone} has no stored file ({}) and its first transfer from {primaries} failed: {why}",
    file.display()
)]
pub struct FirstTransferFailed {
    /// The zone.
    pub zone: String,
    /// Where it was to be kept.
    pub file: PathBuf,
    /// The primaries asked, in order.
    pub primaries: String,
    /// Why, per primary.
    pub why: String,
}

/// Whether there is no stored `file`: nothing there, or no regular file (a FIFO is not
/// opened, and the first transfer replaces it). A regular file that cannot be read as a zone
/// is no reason to wait at the start: the policy-loader leaves it out and reports it, and its
/// task transfers it whole.
fn missing(file: &Path) -> bool {
    !std::fs::metadata(file).is_ok_and(|meta| meta.is_file())
}

/// Transfer every zone of `cfg` that has no stored file (all at once), each within its
/// `first-transfer-timeout`; a zone with a stored file (loadable or not) is left to its task.
/// An entry that cannot be followed is an error only when it has no stored file.
pub async fn first_transfers(cfg: &KresConfig) -> Result<FirstTransfers, FirstTransferFailed> {
    let mut running = JoinSet::new();
    for zone in zones(cfg) {
        let zone = match zone {
            Ok(zone) if missing(&zone.file) => zone,
            Ok(_) => continue,
            Err(e) => {
                let file = cfg
                    .local_data
                    .rpz
                    .iter()
                    .flatten()
                    .find(|r| r.transfer.as_ref().map(|t| t.zone.as_str()) == Some(e.zone()))
                    .map(|r| r.file.clone())
                    .unwrap_or_default();
                if !missing(&file) {
                    continue;
                }
                return Err(FirstTransferFailed {
                    zone: e.zone().to_owned(),
                    file,
                    primaries: "its primaries".into(),
                    why: e.to_string(),
                });
            }
        };
        tracing::info!(zone = %zone.name, "no stored RPZ zone: waiting for its first transfer");
        running.spawn(async move {
            let deadline = Instant::now() + zone.first_deadline;
            let attempt = attempt(&zone, Some(deadline), Wanted::Changes).await;
            (zone, attempt)
        });
    }
    let mut done = FirstTransfers::default();
    while let Some(joined) = running.join_next().await {
        let Ok((zone, attempt)) = joined else {
            continue;
        };
        match attempt.success {
            Some((primary, report)) => done.0.push((zone.name.clone(), primary, report)),
            None => return Err(first_failure(&zone, &attempt.failures)),
        }
    }
    Ok(done)
}

/// The start-up error of a zone no primary gave.
fn first_failure(zone: &Zone, failures: &[(Primary, TransferError)]) -> FirstTransferFailed {
    let why = failures
        .iter()
        .map(|(p, e)| format!("{}: {}", p.addr, kres_wire::error_line(e)))
        .collect::<Vec<_>>()
        .join("; ");
    FirstTransferFailed {
        zone: zone.name.clone(),
        file: zone.file.clone(),
        primaries: primaries_text(zone),
        why: if why.is_empty() {
            "no primary".into()
        } else {
            why
        },
    }
}

/// The primaries of a zone, for messages.
fn primaries_text(zone: &Zone) -> String {
    zone.primaries
        .iter()
        .map(|p| p.addr.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the tasks share.
#[derive(Clone)]
struct Shared {
    /// For the renew after a new file.
    manager: ManagerHandle,
    /// Where what happens is told.
    events: EventLog,
    /// The SOA queries all zones may send their primaries.
    soa_queries: SoaQueries,
}

/// The SOA queries all zones' tasks may send their primaries: one [`SoaQueryRate`], shared.
#[derive(Clone)]
struct SoaQueries(Arc<Mutex<SoaQueryRate>>);

impl SoaQueries {
    /// At most `per_second` a second.
    fn new(per_second: u32) -> SoaQueries {
        SoaQueries(Arc::new(Mutex::new(SoaQueryRate::new(per_second))))
    }

    /// Wait until one more SOA query may go.
    async fn allowed(&self) {
        loop {
            let taken = self.rate().take(Instant::now().into_std());
            match taken {
                Ok(()) => return,
                Err(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
            }
        }
    }

    /// Charge `queries` SOA queries sent beyond the one let go.
    fn sent_beyond(&self, queries: usize) {
        let queries = u32::try_from(queries).unwrap_or(u32::MAX);
        self.rate().charge(queries, Instant::now().into_std());
    }

    /// The rate (its state stays whole whatever happened to a holder: each change is one
    /// assignment).
    fn rate(&self) -> std::sync::MutexGuard<'_, SoaQueryRate> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Follow the zones of the running configuration until `stop`; rebuild the tasks whenever
/// the configuration changes what they follow. `first` are the transfers the start made.
/// The task, for its owner to run (and wait for at its stop).
pub fn start(
    manager: ManagerHandle,
    events: EventLog,
    first: FirstTransfers,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let config = manager.subscribe();
    let shared = Shared {
        manager,
        events,
        soa_queries: SoaQueries::new(SOA_QUERIES_PER_SECOND),
    };
    run(config, shared, first, stop)
}

async fn run(
    mut config: watch::Receiver<Arc<LoadedConfig>>,
    shared: Shared,
    first: FirstTransfers,
    stop: CancellationToken,
) {
    let mut first = Some(first);
    loop {
        let entries = transfer_entries(&config.borrow_and_update().model);
        let following = stop.child_token();
        let tasks = TaskTracker::new();
        if !entries.is_empty() {
            let done = first.take().unwrap_or_default();
            follow_all(&entries, &shared, done, &following, &tasks).await;
        }
        tasks.close();
        let rebuild = loop {
            tokio::select! {
                () = stop.cancelled() => break false,
                changed = config.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    if transfer_entries(&config.borrow().model) != entries {
                        break true;
                    }
                }
            }
        };
        following.cancel();
        tasks.wait().await;
        if !rebuild {
            return;
        }
        tracing::info!("the RPZ zones kept by zone transfer changed; following them anew");
    }
}

/// Start a task per zone and a listener per NOTIFY address, on `tasks`, until `stop`.
async fn follow_all(
    entries: &[RpzSchema],
    shared: &Shared,
    first: FirstTransfers,
    stop: &CancellationToken,
    tasks: &TaskTracker,
) {
    let mut first: BTreeMap<String, (Primary, TransferReport)> = first
        .0
        .into_iter()
        .map(|(zone, primary, report)| (zone, (primary, report)))
        .collect();
    let mut inboxes: BTreeMap<String, mpsc::Sender<Notified>> = BTreeMap::new();
    let mut listening: BTreeMap<SocketAddr, Vec<NotifyZone>> = BTreeMap::new();
    for rpz in entries {
        let zone = match zone_of(rpz) {
            Some(Ok(zone)) => zone,
            Some(Err(e)) => {
                tracing::error!("{}; the zone is not refreshed", kres_wire::error_line(&e));
                continue;
            }
            None => continue,
        };
        let (inbox, notified) = mpsc::channel(NOTIFY_INBOX);
        inboxes.insert(zone.name.clone(), inbox);
        if let Some(at) = zone.notify_listen {
            listening.entry(at).or_default().push(NotifyZone {
                zone: zone.name.clone(),
                primaries: zone.primaries.iter().map(|p| p.addr.ip()).collect(),
                key: zone.key.clone(),
            });
        }
        let transferred = first.remove(&zone.name);
        tasks.spawn(follow(
            zone,
            notified,
            transferred,
            shared.clone(),
            stop.clone(),
        ));
    }
    let (accepted, mut notifies) = mpsc::channel::<Notified>(64);
    for (at, zones) in listening {
        match NotifyListener::bind(at, zones).await {
            Ok(listener) => {
                tracing::info!(address = %at, "accepting NOTIFY for RPZ zones");
                tasks.spawn(listener.serve(accepted.clone(), stop.clone()));
            }
            Err(e) => {
                tracing::error!(address = %at, "cannot accept NOTIFY: {e}; its zones follow their SOA timers");
                shared.events.publish(Event::RpzNotifyListenFailed {
                    address: at.to_string(),
                    reason: e.to_string(),
                });
            }
        }
    }
    drop(accepted);
    let stop = stop.clone();
    tasks.spawn(async move {
        loop {
            let notified = tokio::select! {
                () = stop.cancelled() => return,
                n = notifies.recv() => n,
            };
            let Some(notified) = notified else { return };
            if let Some(inbox) = inboxes.get(&notified.zone) {
                // The zone's task takes NOTIFYs as fast as they come (its pacer only counts
                // and folds them), so none is lost to its count.
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = inbox.send(notified) => {}
                }
            }
        }
    });
}

/// NOTIFYs waiting for a zone's task at most.
const NOTIFY_INBOX: usize = 64;

/// Seconds from now until `at`.
fn seconds_until(at: Instant) -> f64 {
    at.saturating_duration_since(Instant::now()).as_secs_f64()
}

/// Seconds from now until the zone `clock` follows expires, negative once past (a zone
/// stored long before the start); none while no SOA is known.
fn seconds_to_expiry(clock: &ZoneClock) -> Option<f64> {
    let expires = Instant::from_std(clock.expires()?);
    let now = Instant::now();
    Some(if expires >= now {
        expires.duration_since(now).as_secs_f64()
    } else {
        -now.duration_since(expires).as_secs_f64()
    })
}

/// How long ago the stored `file` was last known current: its modification time, which a
/// transfer (a new file) and [`mark_current`] set.
fn current_for(file: &Path) -> Option<Duration> {
    let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok()?;
    SystemTime::now().duration_since(modified).ok()
}

/// The stored `file` is current now (a primary said so): its modification time says when,
/// for the expire time at the next start.
fn mark_current(file: &Path) {
    // A regular file (the owner sets its times): a FIFO put there meanwhile is not waited on.
    let marked = kres_config::regular_file::open_regular(file)
        .map_err(std::io::Error::other)
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = marked {
        tracing::warn!(file = %file.display(), "cannot mark the stored RPZ zone current: {e}");
    }
}

/// Follow one zone until `stop`: refresh at the clock's times and on NOTIFY, as its pacer
/// lets it; renew the policy after a new file.
async fn follow(
    zone: Zone,
    mut notified: mpsc::Receiver<Notified>,
    transferred: Option<(Primary, TransferReport)>,
    shared: Shared,
    stop: CancellationToken,
) {
    let stored = stored(&zone.file);
    let now = Instant::now().into_std();
    let since = stored
        .and_then(|_| current_for(&zone.file))
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(now);
    let mut clock = ZoneClock::new(stored.map(|(_, t)| t), since);
    let mut next = Instant::now();
    if let Some((primary, report)) = &transferred {
        next = clock
            .on(
                Refreshed::Succeeded(report.timers),
                Instant::now().into_std(),
            )
            .next
            .into();
        let expires = seconds_to_expiry(&clock);
        publish_transferred(&shared.events, &zone, *primary, report, next, expires);
    }
    // What the policy-loader said before this task (at the start, say) counts now.
    let mut loads = Some(shared.manager.rpz_loads());
    let mut loading = Loading::Loads;
    if let Some(loads) = loads.as_mut() {
        let report = loaded_in(&loads.borrow_and_update(), &zone.name);
        if loading.on_report(report) == LoadingAction::RefreshNow {
            next = Instant::now();
        }
    }
    shared.events.publish(Event::RpzFollowed {
        zone: zone.name.clone(),
        file: zone.file.display().to_string(),
        primaries: zone.primaries.iter().map(|p| p.addr.to_string()).collect(),
        serial: stored.map(|(serial, _)| serial),
        next_refresh: seconds_until(next),
        expires: seconds_to_expiry(&clock),
    });
    let mut pacer = ZonePacer::new(
        REFRESH_INTERVAL,
        stored.map(|(serial, _)| serial),
        next.into_std(),
        Instant::now().into_std(),
    );
    // The clock is lent to the refresh running, and handed back with its end.
    let mut idle_clock = Some(clock);
    let mut refreshing: Option<Refreshing<'_>> = None;
    loop {
        let wake = pacer.wake().map(Instant::from_std);
        let woke = tokio::select! {
            () = stop.cancelled() => return,
            Some(n) = notified.recv() => Woke::Notified(n),
            report = next_report(&mut loads, &zone.name) => Woke::Loaded(report),
            () = sleep_until_if(wake) => Woke::Timer,
            ended = finished(&mut refreshing) => Woke::Refreshed(ended),
        };
        let now = Instant::now().into_std();
        let event = match woke {
            Woke::Notified(n) => PacerEvent::NotifyReceived {
                from: n.from,
                serial: n.serial,
            },
            Woke::Loaded(report) => {
                if loading.on_report(report) != LoadingAction::RefreshNow {
                    continue;
                }
                tracing::info!(zone = %zone.name, "kresd cannot load the stored RPZ zone: transferring it whole");
                PacerEvent::RefreshWanted
            }
            Woke::Timer => PacerEvent::TimerFired,
            Woke::Refreshed(ended) => {
                refreshing = None;
                idle_clock = Some(ended.clock);
                if ended.whole {
                    loading.on_whole_transfer();
                }
                PacerEvent::RefreshEnded {
                    next: ended.next.into_std(),
                    serial: super::stored(&zone.file).map(|(serial, _)| serial),
                }
            }
        };
        for action in pacer.on(event, now) {
            match action {
                PacerAction::StartRefresh => {
                    if let Some(clock) = idle_clock.take() {
                        let wanted = loading.wanted();
                        refreshing = Some(Box::pin(paced_refresh(&zone, clock, wanted, &shared)));
                    }
                }
                PacerAction::Report(report) => report_notifies(&zone, &report, &shared.events),
            }
        }
    }
}

/// What `loads` says of `zone`.
fn loaded_in(loads: &RpzLoads, zone: &str) -> Loaded {
    if loads.broken.contains_key(zone) {
        Loaded::No
    } else {
        Loaded::Yes
    }
}

/// What the next run of the policy-loader says of `zone`; never, when nothing publishes runs.
async fn next_report(loads: &mut Option<watch::Receiver<RpzLoads>>, zone: &str) -> Loaded {
    loop {
        let Some(receiver) = loads.as_mut() else {
            return std::future::pending().await;
        };
        if receiver.changed().await.is_err() {
            *loads = None;
            continue;
        }
        return loaded_in(&receiver.borrow_and_update(), zone);
    }
}

/// A refresh running: it hands the zone's clock back, with what came of it.
type Refreshing<'a> = Pin<Box<dyn Future<Output = RefreshEnded> + Send + 'a>>;

/// What a refresh hands back when it ends.
struct RefreshEnded {
    /// The zone's clock, lent to the refresh.
    clock: ZoneClock,
    /// When the SOA timers want the next refresh.
    next: Instant,
    /// Whether the whole zone was transferred (what a zone kresd cannot load waits for).
    whole: bool,
}

/// What woke a zone's task.
enum Woke {
    /// A NOTIFY for the zone was accepted.
    Notified(Notified),
    /// The policy-loader's latest word on whether it loads the zone.
    Loaded(Loaded),
    /// The pacer's time came.
    Timer,
    /// The refresh running ended.
    Refreshed(RefreshEnded),
}

/// Sleep until `at`; forever when there is no such time.
async fn sleep_until_if(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The end of the refresh running; never, when none runs.
async fn finished(refreshing: &mut Option<Refreshing<'_>>) -> RefreshEnded {
    match refreshing {
        Some(refresh) => refresh.await,
        None => std::future::pending().await,
    }
}

/// One refresh of `zone` (of what `wanted` says) within the SOA queries all zones may send:
/// try its primaries, tell what came of it and renew the policy after a new file; the clock
/// back, when the zone is refreshed next, and whether it came whole.
async fn paced_refresh(
    zone: &Zone,
    mut clock: ZoneClock,
    wanted: Wanted,
    shared: &Shared,
) -> RefreshEnded {
    shared.soa_queries.allowed().await;
    let attempt = attempt(zone, None, wanted).await;
    let asked = attempt.failures.len() + usize::from(attempt.success.is_some());
    shared.soa_queries.sent_beyond(asked.saturating_sub(1));
    let whole = attempt
        .success
        .as_ref()
        .is_some_and(|(_, report)| report.kind == TransferKind::Axfr);
    let next = carry_out(zone, &mut clock, attempt, wanted, shared).await;
    RefreshEnded { clock, next, whole }
}

/// Tell what a zone's NOTIFYs came to since the last report: a line of the log and an
/// `rpz-notified` event (at most one each a second per zone, whatever arrives).
fn report_notifies(zone: &Zone, report: &NotifyReport, events: &EventLog) {
    let serial = report
        .serial
        .map_or_else(|| "no serial".to_owned(), |s| format!("serial {s}"));
    if report.received() == 1 {
        let outcome = if report.refreshes == 1 {
            "the zone is refreshed"
        } else if report.coalesced == 1 {
            "a refresh is already due"
        } else {
            "not newer than the stored zone: nothing to do"
        };
        tracing::info!(zone = %zone.name, from = %report.from, "NOTIFY received ({serial}): {outcome}");
    } else {
        tracing::info!(
            zone = %zone.name,
            from = %report.from,
            "{} NOTIFYs received (the last: {serial}): {} brought a refresh, {} folded into one already due, {} not newer than the stored zone",
            report.received(),
            report.refreshes,
            report.coalesced,
            report.stale
        );
    }
    events.publish(Event::RpzNotified {
        zone: zone.name.clone(),
        from: report.from.to_string(),
        serial: report.serial,
        received: report.received(),
        refreshes: report.refreshes,
        coalesced: report.coalesced,
        stale: report.stale,
    });
}

/// Tell what an attempt came to, renew the policy after a new file, and say when the zone
/// is refreshed next.
async fn carry_out(
    zone: &Zone,
    clock: &mut ZoneClock,
    attempt: Attempt,
    wanted: Wanted,
    shared: &Shared,
) -> Instant {
    let refreshed = match &attempt.success {
        Some((_, report)) => Refreshed::Succeeded(report.timers),
        None => Refreshed::Failed,
    };
    let schedule = clock.on(refreshed, Instant::now().into_std());
    let next = Instant::from_std(schedule.next);
    let expires = seconds_to_expiry(clock);
    let kind = if wanted == Wanted::Changes && stored(&zone.file).is_some() {
        TransferKind::Ixfr
    } else {
        TransferKind::Axfr
    };
    let last = attempt.failures.len();
    for (i, (primary, e)) in attempt.failures.iter().enumerate() {
        let error = kres_wire::error_line(e);
        tracing::warn!(zone = %zone.name, primary = %primary.addr, "RPZ refresh failed: {error}; the running policy is kept");
        let told_next = attempt.success.is_none() && i + 1 == last;
        shared.events.publish(Event::RpzTransferFailed {
            zone: zone.name.clone(),
            primary: primary.addr.to_string(),
            transfer: kind.as_str().to_owned(),
            reason: e.reason().to_owned(),
            error,
            next_refresh: told_next.then(|| seconds_until(next)),
            expires,
        });
    }
    if schedule.expired_now {
        tracing::warn!(zone = %zone.name, "RPZ zone expired: no refresh within its SOA expire time; the stored policy is still served");
        shared.events.publish(Event::RpzExpired {
            zone: zone.name.clone(),
            serial: stored(&zone.file).map(|(serial, _)| serial),
        });
    }
    if let Some((primary, report)) = &attempt.success {
        if report.kind == TransferKind::UpToDate {
            mark_current(&zone.file);
        }
        publish_transferred(&shared.events, zone, *primary, report, next, expires);
        if report.kind != TransferKind::UpToDate {
            renew(zone, &shared.manager).await;
        }
    }
    next
}

/// Tell a successful refresh; `next` refresh and `expires` (seconds, see
/// [`seconds_to_expiry`]) as the zone's clock says after it.
fn publish_transferred(
    events: &EventLog,
    zone: &Zone,
    primary: Primary,
    report: &TransferReport,
    next: Instant,
    expires: Option<f64>,
) {
    tracing::info!(
        zone = %zone.name,
        primary = %primary.addr,
        serial = report.serial,
        records = report.records,
        "RPZ refresh: {}",
        report.kind.as_str()
    );
    events.publish(Event::RpzTransferred {
        zone: zone.name.clone(),
        primary: primary.addr.to_string(),
        transfer: report.kind.as_str().to_owned(),
        serial: report.serial,
        bytes: report.bytes,
        records: report.records,
        duration: report.duration.as_secs_f64(),
        next_refresh: seconds_until(next),
        expires,
    });
}

/// Apply the running configuration again: the policy-loader reads the new file, the
/// workers reset their rules (no section changed, so no worker restarts). A refusal is
/// logged and told by the manager; the workers keep the running policy.
async fn renew(zone: &Zone, manager: &ManagerHandle) {
    if let Err(e) = manager
        .renew(Restart::WhenNeeded, Origin::ZoneTransfer)
        .await
    {
        tracing::warn!(zone = %zone.name, "the new RPZ zone is stored but not in force: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_config::{validate, PathChecks, ValidationContext};

    fn config(transfer: serde_json::Value) -> KresConfig {
        let raw = serde_json::json!({"local-data": {"rpz": [
            {"file": "/var/rpz/plain.rpz"},
            {"file": "/var/rpz/block.rpz", "transfer": transfer},
        ]}});
        let ctx = ValidationContext {
            resolve_root: PathBuf::from("/etc/knot-resolver"),
            checks: PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        validate(&raw, &ctx).expect("valid")
    }

    #[test]
    fn an_entry_with_transfer_is_a_zone_with_its_bounds_and_addresses() {
        let cfg = config(serde_json::json!({
            "zone": "Block.RPZ", "primaries": ["192.0.2.53", "2001:db8::53@5353"],
            "notify-listen": "127.0.0.1@5354", "max-size": "1M", "timeout": "2m",
            "max-ixfr-memory": "16M",
        }));
        let zones = zones(&cfg);
        assert_eq!(zones.len(), 1, "only the entry with transfer");
        let Some(Ok(zone)) = zones.into_iter().next() else {
            panic!("a zone")
        };
        assert_eq!(zone.name, "block.rpz.");
        assert_eq!(zone.file, PathBuf::from("/var/rpz/block.rpz"));
        let primaries: Vec<String> = zone.primaries.iter().map(|p| p.addr.to_string()).collect();
        assert_eq!(primaries, ["192.0.2.53:53", "[2001:db8::53]:5353"]);
        assert_eq!(
            zone.notify_listen,
            Some("127.0.0.1:5354".parse().expect("address"))
        );
        assert_eq!(zone.limits.max_bytes, 1 << 20);
        assert_eq!(zone.limits.max_duration, Duration::from_secs(120));
        assert_eq!(zone.limits.max_records, Limits::default().max_records);
        assert_eq!(zone.limits.max_ixfr_memory, 16 << 20);
        assert_eq!(zone.first_deadline, Duration::from_secs(30));
        assert!(zone.key.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn soa_queries_of_all_tasks_wait_for_the_shared_rate() {
        let queries = SoaQueries::new(20);
        let start = Instant::now();
        let mut tasks = JoinSet::new();
        for _ in 0..100 {
            let queries = queries.clone();
            tasks.spawn(async move {
                queries.allowed().await;
                Instant::now().duration_since(start)
            });
        }
        let mut sent = Vec::new();
        while let Some(at) = tasks.join_next().await {
            sent.push(at.expect("a task"));
        }
        sent.sort();
        // A second's worth at once, then one each 50 ms.
        assert!(sent[..20].iter().all(|at| at.is_zero()), "{sent:?}");
        for (i, at) in sent.iter().enumerate().skip(20) {
            let expected = Duration::from_millis(50 * (i as u64 - 19));
            assert_eq!(*at, expected, "query {i}");
        }
        // A refresh that asked two more primaries delays the next ones by as much.
        queries.sent_beyond(2);
        let before = Instant::now();
        queries.allowed().await;
        assert_eq!(
            Instant::now().duration_since(before),
            Duration::from_millis(150)
        );
    }

    #[test]
    fn only_a_regular_file_is_a_stored_zone_the_start_does_not_wait_for() {
        let dir = std::env::temp_dir().join(format!("kres-rpz-missing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let broken = dir.join("broken.rpz");
        std::fs::write(&broken, "not a zone kresd can read\n").expect("file");
        assert!(
            !missing(&broken),
            "a file kresd cannot load is left to its task"
        );
        assert!(missing(&dir.join("none.rpz")));
        let fifo = dir.join("fifo.rpz");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        assert!(missing(&fifo), "a FIFO is replaced by the first transfer");
        assert!(missing(&dir));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_key_file_gone_since_validation_is_an_error_naming_the_zone() {
        let cfg = config(serde_json::json!({
            "zone": "block.rpz.", "primaries": ["192.0.2.53"],
            "tsig-key-file": "/nonexistent/xfr.key",
        }));
        let Some(Err(e)) = zones(&cfg).into_iter().next() else {
            panic!("an error")
        };
        let text = e.to_string();
        assert!(
            text.contains("block.rpz.") && text.contains("/nonexistent/xfr.key"),
            "{text}"
        );
    }
}
