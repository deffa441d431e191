//! The control plane's own series, for Prometheus: what the manager did (changes and reloads
//! by result and how long they took, restarts by kind and reason, manager incarnations,
//! policy-loader runs) and what runs now (build, configuration generation and ETag, workers
//! ready).
//!
//! Nothing is counted where it happens: a [`ControlPlane`] follows the event log from its
//! first event (as an internal follower: it takes no place from clients) and tallies what
//! the events say, in one pure step per record ([`Tally::on`]); what runs now is read from
//! the process table and the running configuration at each scrape. So the manager task and
//! the supervisor carry no counter, and the series agree with `GET /events` by construction.
//! Counts cover this manager process (they start again with the next incarnation, which
//! Prometheus's `rate` and `increase` take as a counter reset), but for
//! `knot_resolver_manager_incarnations_total`, which the root keeps.
//!
//! Our own series carry the prefix `knot_resolver_`, the program's and the package's name:
//! upstream's `resolver_*` names are kresd's statistics and stay as they are.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use supervisor::{ExitStatus, ProcessState, Snapshot};
use tokio_util::sync::CancellationToken;

use super::exposition::{label, sample_line, Exposition, Kind};
use crate::events::{EventLog, FollowerClass, Record};
use crate::service::{self, ServiceKind, WorkerId};
use kres_wire::change::WorkersAction;
use kres_wire::events::{Cause, Event};

/// Upper bounds of the duration histograms, in seconds: a live change takes milliseconds, a
/// rolling restart of many workers or a large RPZ minutes.
const BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// A Prometheus histogram of durations in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    /// Observations at most `BUCKETS[i]`, not cumulative.
    buckets: [u64; BUCKETS.len()],
    /// Every observation, the `+Inf` bucket.
    count: u64,
    /// Their sum.
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let seconds = seconds.max(0.0);
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }

    /// Its `_bucket`, `_count` and `_sum` lines, with `labels` (may be empty) on each.
    fn lines(&self, name: &str, labels: &str) -> String {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut out = String::new();
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(self.buckets) {
            cumulative += n;
            out.push_str(&sample_line(
                &format!("{name}_bucket"),
                &format!("{labels}{sep}le=\"{bound}\""),
                cumulative as f64,
            ));
        }
        out.push_str(&sample_line(
            &format!("{name}_bucket"),
            &format!("{labels}{sep}le=\"+Inf\""),
            self.count as f64,
        ));
        out.push_str(&sample_line(
            &format!("{name}_count"),
            labels,
            self.count as f64,
        ));
        out.push_str(&sample_line(&format!("{name}_sum"), labels, self.sum));
        out
    }
}

/// How a configuration change ended, as the `result` label says it.
fn change_result(event: &Event) -> Option<(Cause, &'static str)> {
    Some(match event {
        Event::ConfigApplied { cause, change } => (
            *cause,
            match change.workers {
                WorkersAction::Restart { .. } => "applied",
                WorkersAction::Live { .. } => "live",
                WorkersAction::RulesReset => "rules_reset",
            },
        ),
        Event::ConfigRefused { cause, .. } => (*cause, "refused"),
        Event::ConfigRolledBack {
            cause, recovered, ..
        } => (
            *cause,
            if *recovered {
                "rolled_back"
            } else {
                "rollback_failed"
            },
        ),
        _ => return None,
    })
}

/// Every cause a change can have.
const CAUSES: [Cause; 3] = [Cause::Api, Cause::Reload, Cause::Renew];

/// Every result [`change_result`] gives.
const RESULTS: [&str; 6] = [
    "applied",
    "live",
    "rules_reset",
    "refused",
    "rolled_back",
    "rollback_failed",
];

/// The changes by cause and result, every pair of [`CAUSES`] and [`RESULTS`] there from 0
/// on: a series that first appears at 1 has no increase for Prometheus, so the first refusal
/// would never show in `increase()` (nor fire an alert) if its series began with it.
fn every_change(tally: &Tally) -> BTreeMap<(&'static str, &'static str), u64> {
    let mut all: BTreeMap<_, u64> = CAUSES
        .iter()
        .flat_map(|&cause| {
            RESULTS
                .iter()
                .map(move |&result| (cause_label(cause), result))
        })
        .map(|key| (key, 0))
        .collect();
    all.extend(&tally.changes);
    all
}

/// The `cause` label of a change.
fn cause_label(cause: Cause) -> &'static str {
    match cause {
        Cause::Api => "api",
        Cause::Reload => "reload",
        Cause::Renew => "renew",
    }
}

/// The `kind` label of a process, from its name (the names are the crate's own:
/// [`service`]'s constants and worker names).
fn kind_of(name: &str) -> &'static str {
    let kind = match name {
        service::CANARY => ServiceKind::Canary,
        service::POLICY_LOADER => ServiceKind::PolicyLoader,
        service::CACHE_GC => ServiceKind::CacheGc,
        service::MANAGER => ServiceKind::Manager,
        service::UPGRADE_PROBE => ServiceKind::UpgradeProbe,
        _ if WorkerId::from_name(name).is_some() => ServiceKind::Kresd,
        _ => return "other",
    };
    kind.as_str()
}

/// Why a process ended, as the `reason` label of its restart says it.
fn exit_reason(status: Option<ExitStatus>) -> &'static str {
    match status {
        Some(ExitStatus::Signaled { .. }) => "signal",
        Some(ExitStatus::Code(0)) => "exit_success",
        Some(ExitStatus::Code(_)) => "exit_failure",
        None => "unknown",
    }
}

/// What the tally knows of one process between its events.
#[derive(Debug, Clone, Default, PartialEq)]
struct ProcessNote {
    /// Its restart count at its last restart seen (`None`: no restart seen in this manager
    /// process, so the next one counts once).
    restarts: Option<u32>,
    /// Why its last process ended (the next restart's reason); `None` when not seen.
    ended: Option<&'static str>,
}

/// What the events said so far.
#[derive(Debug, Clone, Default, PartialEq)]
struct Tally {
    /// The incarnation of this manager process (`manager-started`).
    incarnation: u32,
    /// Configurations run by this manager process: 1 for the one it started with, one more
    /// per applied change that changed a section.
    generation: u64,
    /// Changes by cause and result.
    changes: BTreeMap<(&'static str, &'static str), u64>,
    /// When the change under way began (its start's record's time), and its cause.
    change_began: Option<(Cause, f64)>,
    /// How long changes took, by cause.
    change_seconds: BTreeMap<&'static str, Histogram>,
    /// Automatic restarts by kind and reason.
    restarts: BTreeMap<(&'static str, &'static str), u64>,
    /// Per process, what the next restart is counted with.
    processes: BTreeMap<String, ProcessNote>,
    /// How long policy-loader runs took, as the manager told them.
    policy_loader_seconds: Histogram,
    /// Events this tally never saw (its follower fell behind and the log had dropped them).
    missed: u64,
    /// The RPZ zones kept by zone transfer.
    rpz: super::rpz::RpzTally,
}

impl Tally {
    /// What one record of the log adds.
    fn on(&mut self, record: &Record) {
        self.rpz.on(record);
        let now = record.time;
        if let Some((cause, result)) = change_result(&record.event) {
            *self
                .changes
                .entry((cause_label(cause), result))
                .or_default() += 1;
            if let Some((began_for, began)) = self.change_began.take() {
                if began_for == cause {
                    self.change_seconds
                        .entry(cause_label(cause))
                        .or_default()
                        .observe(now - began);
                }
            }
        }
        match &record.event {
            Event::ManagerStarted { incarnation } => {
                self.incarnation = *incarnation;
                self.generation = 1;
            }
            Event::ConfigApplied { change, .. } if !change.changed.is_empty() => {
                self.generation += 1;
            }
            Event::ConfigReloading { .. } => self.change_began = Some((Cause::Reload, now)),
            Event::ConfigRenewing { .. } => self.change_began = Some((Cause::Renew, now)),
            Event::ConfigChanging => self.change_began = Some((Cause::Api, now)),
            Event::PolicyLoaderFinished { seconds, .. } => {
                self.policy_loader_seconds.observe(*seconds);
            }
            Event::ProcessExited { name, status, .. } => {
                let note = self.processes.entry(name.clone()).or_default();
                // A hang's kill ends in a signal: the hang is the reason.
                if note.ended != Some("hung") {
                    note.ended = Some(exit_reason(*status));
                }
            }
            Event::ProcessHung { name, .. } => {
                self.processes.entry(name.clone()).or_default().ended = Some("hung");
            }
            Event::ProcessRestarted { name, restarts, .. } => self.restarted(name, *restarts),
            Event::ProcessRemoved { name } => {
                self.processes.remove(name);
            }
            Event::EventsMissed { .. } => self.missed += 1,
            _ => {}
        }
    }

    /// `name` was restarted automatically, its `restarts`th time: counted by the growth of
    /// that number (tables are coalesced: two restarts may show as one event).
    fn restarted(&mut self, name: &str, restarts: u32) {
        let note = self.processes.entry(name.to_owned()).or_default();
        let grew = note
            .restarts
            .map_or(1, |seen| restarts.saturating_sub(seen).max(1));
        let reason = note.ended.take().unwrap_or("unknown");
        note.restarts = Some(restarts);
        *self.restarts.entry((kind_of(name), reason)).or_default() += u64::from(grew);
    }
}

/// What runs now, as a scrape reads it.
pub struct Current<'a> {
    /// The process table.
    pub snapshot: &'a Snapshot,
    /// The running configuration's ETag, as `GET /v1/config` answers it (quoted).
    pub etag: &'a str,
    /// The workers the running configuration asks for.
    pub workers: u32,
    /// The version of the kresd the workers run, when it is known.
    pub kresd_version: Option<&'a str>,
    /// The query log's state, when the scrape has it.
    pub query_log: Option<&'a kres_wire::query_log::QueryLogStatus>,
    /// The upstream addresses the workers used recently.
    pub upstreams: &'a [kres_wire::upstreams::UpstreamAddress],
    /// This node's record in its fleet, when it is in one.
    pub fleet: Option<&'a kres_wire::fleet::FleetNode>,
}

/// The control plane's series: a tally of the event log, shared by its follower and the
/// scrapes. Cheap to clone.
#[derive(Clone, Default)]
pub struct ControlPlane {
    tally: Arc<Mutex<Tally>>,
}

impl ControlPlane {
    /// Tally `events` from its first event on, on `tasks` until `stop`.
    pub fn follow(
        events: &EventLog,
        tasks: &tokio_util::task::TaskTracker,
        stop: CancellationToken,
    ) -> ControlPlane {
        let plane = ControlPlane::default();
        tasks.spawn(plane.clone().run(events.clone(), stop));
        plane
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        // Every change to the tally is one step of `Tally::on`: a panic leaves it whole.
        self.tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follow the log; after falling behind, resume after the last event seen (the log's
    /// ring still has it unless more than a ring's worth came meanwhile: then the tally
    /// counts what it missed).
    async fn run(self, events: EventLog, stop: CancellationToken) {
        let mut last = format!("{}-0", events.epoch());
        loop {
            // An internal follower takes no place: it is never refused.
            let Ok(mut follower) = events.follow(Some(&last), FollowerClass::Internal) else {
                return;
            };
            loop {
                let record = tokio::select! {
                    () = stop.cancelled() => return,
                    record = follower.next() => record,
                };
                let Some(record) = record else { break };
                if let Some(id) = &record.id {
                    last = id.to_string();
                }
                self.tally().on(&record);
            }
        }
    }

    /// Our series, into `out`.
    pub fn write(&self, out: &mut Exposition, now: &Current<'_>) {
        write_current(out, now);
        let tally = self.tally().clone();
        write_tally(out, &tally);
        tally.rpz.write(out);
    }

    /// Configurations this manager process has run (`knot_resolver_config_generation`).
    pub fn generation(&self) -> u64 {
        self.tally().generation
    }

    /// The RPZ zones kept by zone transfer, as the events told them (`GET /rpz`).
    pub fn rpz_zones(&self) -> Vec<kres_wire::rpz::RpzZone> {
        self.tally().rpz.zones()
    }
}

/// The series of what runs now.
fn write_current(out: &mut Exposition, now: &Current<'_>) {
    out.sample(
        "knot_resolver_build_info",
        "the version of the running knot-resolver and of the kresd its workers run (empty \
         until known), as labels; always 1",
        Kind::Gauge,
        &format!(
            "version=\"{}\",kresd_version=\"{}\"",
            label(&crate::build_version()),
            label(now.kresd_version.unwrap_or_default())
        ),
        1.0,
    );
    out.sample(
        "knot_resolver_config_info",
        "the running configuration's ETag (GET /v1/config, without its quotes) as a label; always 1",
        Kind::Gauge,
        &format!("etag=\"{}\"", label(now.etag.trim_matches('"'))),
        1.0,
    );
    let ready = now
        .snapshot
        .processes
        .iter()
        .filter(|p| ServiceKind::of(p) == Some(ServiceKind::Kresd))
        .filter(|p| p.state == ProcessState::Running)
        .count();
    out.sample(
        "knot_resolver_workers_ready",
        "kresd workers running and ready",
        Kind::Gauge,
        "",
        ready as f64,
    );
    out.sample(
        "knot_resolver_workers_configured",
        "kresd workers the running configuration asks for",
        Kind::Gauge,
        "",
        f64::from(now.workers),
    );
}

/// The series the event log's tally gives.
fn write_tally(out: &mut Exposition, tally: &Tally) {
    out.sample(
        "knot_resolver_manager_incarnations_total",
        "manager processes started since the resolver started (1: never replaced)",
        Kind::Counter,
        "",
        f64::from(tally.incarnation),
    );
    out.sample(
        "knot_resolver_config_generation",
        "configurations this manager process has run: 1 for the one it started with, one more \
         per applied change that changed a section",
        Kind::Gauge,
        "",
        tally.generation as f64,
    );
    let changes = out.family(
        "knot_resolver_config_changes_total",
        "configuration changes by cause (api, reload, renew) and result (applied, live, \
         rules_reset, refused, rolled_back, rollback_failed)",
        Kind::Counter,
    );
    for ((cause, result), n) in &every_change(tally) {
        changes.push_str(&sample_line(
            "knot_resolver_config_changes_total",
            &format!("cause=\"{cause}\",result=\"{result}\""),
            *n as f64,
        ));
    }
    let seconds = out.family(
        "knot_resolver_config_change_duration_seconds",
        "how long configuration changes took by cause (api, reload, renew), from their start \
         to their outcome",
        Kind::Histogram,
    );
    for (cause, h) in &tally.change_seconds {
        seconds.push_str(&h.lines(
            "knot_resolver_config_change_duration_seconds",
            &format!("cause=\"{cause}\""),
        ));
    }
    let restarts = out.family(
        "knot_resolver_process_restarts_total",
        "automatic restarts of supervised processes by kind and by why the process before \
         ended (signal, exit_failure, exit_success, hung, unknown)",
        Kind::Counter,
    );
    // The restarts operators alert on are written from 0 on, so that the first one is an
    // increase (`increase()` sees nothing in a series that appears at 1).
    let mut counted: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for kind in [ServiceKind::Kresd, ServiceKind::CacheGc] {
        for reason in ["signal", "exit_failure", "exit_success", "hung"] {
            counted.insert((kind.as_str(), reason), 0);
        }
    }
    counted.extend(tally.restarts.iter().map(|(k, n)| (*k, *n)));
    for ((kind, reason), n) in &counted {
        restarts.push_str(&sample_line(
            "knot_resolver_process_restarts_total",
            &format!("kind=\"{kind}\",reason=\"{reason}\""),
            *n as f64,
        ));
    }
    out.family(
        "knot_resolver_policy_loader_duration_seconds",
        "how long policy-loader runs took, from their start to their exit (or their stop at \
         the deadline)",
        Kind::Histogram,
    )
    .push_str(
        &tally
            .policy_loader_seconds
            .lines("knot_resolver_policy_loader_duration_seconds", ""),
    );
    out.sample(
        "knot_resolver_events_missed_total",
        "times these series' follower of the event log fell behind and lost events",
        Kind::Counter,
        "",
        tally.missed as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_wire::change::{ChangeSummary, GcAction};

    fn record(time: f64, event: Event) -> Record {
        Record::at(time, event)
    }

    fn applied(cause: Cause, changed: &[&str], workers: WorkersAction) -> Event {
        Event::ConfigApplied {
            cause,
            change: ChangeSummary {
                changed: changed.iter().map(|s| s.to_string()).collect(),
                workers,
                cache_gc: GcAction::Keep,
            },
        }
    }

    fn tally(events: Vec<(f64, Event)>) -> Tally {
        let mut t = Tally::default();
        for (time, event) in events {
            t.on(&record(time, event));
        }
        t
    }

    #[test]
    fn changes_are_counted_by_cause_and_result_and_timed() {
        let t = tally(vec![
            (0.0, Event::ManagerStarted { incarnation: 3 }),
            (0.75, Event::ConfigChanging),
            (
                1.0,
                applied(
                    Cause::Api,
                    &["logging"],
                    WorkersAction::Live {
                        workers: vec![],
                        restarted: Some(vec![]),
                        rules_reset: false,
                    },
                ),
            ),
            (
                2.0,
                Event::ConfigReloading {
                    force: false,
                    origin: kres_wire::events::Origin::Signal,
                },
            ),
            (2.5, applied(Cause::Reload, &[], WorkersAction::RulesReset)),
            (2.75, Event::ConfigChanging),
            (
                3.0,
                Event::ConfigRefused {
                    cause: Cause::Api,
                    reason: "no".into(),
                },
            ),
            (
                4.0,
                Event::ConfigRenewing {
                    force: true,
                    origin: kres_wire::events::Origin::Api,
                },
            ),
            (
                16.0,
                Event::ConfigRolledBack {
                    cause: Cause::Renew,
                    reason: "worker".into(),
                    recovered: true,
                },
            ),
        ]);
        assert_eq!(t.incarnation, 3);
        assert_eq!(t.generation, 2, "only the change of a section counts");
        let changes: Vec<_> = t.changes.iter().map(|(k, n)| (*k, *n)).collect();
        assert_eq!(
            changes,
            vec![
                (("api", "live"), 1),
                (("api", "refused"), 1),
                (("reload", "rules_reset"), 1),
                (("renew", "rolled_back"), 1),
            ]
        );
        assert_eq!(t.change_seconds["reload"].count, 1);
        assert_eq!(t.change_seconds["reload"].sum, 0.5);
        assert_eq!(t.change_seconds["renew"].sum, 12.0);
        assert_eq!(
            t.change_seconds["api"].count, 2,
            "applied and refused alike"
        );
        assert_eq!(t.change_seconds["api"].sum, 0.5);
    }

    #[test]
    fn restarts_are_counted_by_kind_and_reason() {
        let killed = Some(ExitStatus::Signaled {
            signal: 9,
            core_dumped: false,
        });
        let exited = |name: &str, status| Event::ProcessExited {
            name: name.into(),
            pid: 1,
            status,
        };
        let restarted = |name: &str, restarts| Event::ProcessRestarted {
            name: name.into(),
            pid: 2,
            restarts,
        };
        let gc = service::CACHE_GC;
        let t = tally(vec![
            (1.0, exited("kresd1", killed)),
            (1.0, restarted("kresd1", 1)),
            (
                2.0,
                Event::ProcessHung {
                    name: "kresd0".into(),
                    pid: 1,
                    reason: "hung".into(),
                },
            ),
            (2.0, exited("kresd0", killed)),
            (2.0, restarted("kresd0", 1)),
            (3.0, exited(gc, Some(ExitStatus::Code(1)))),
            (3.0, restarted(gc, 1)),
            // Coalesced tables: two restarts of the GC seen as one event.
            (4.0, exited(gc, Some(ExitStatus::Code(1)))),
            (4.0, restarted(gc, 3)),
            (5.0, exited("kresd1", killed)),
            (5.0, restarted("kresd1", 2)),
            // Restarted before this manager process: its first restart seen counts once.
            (6.0, exited("kresd2", killed)),
            (6.0, restarted("kresd2", 5)),
        ]);
        let restarts: Vec<_> = t.restarts.iter().map(|(k, n)| (*k, *n)).collect();
        assert_eq!(
            restarts,
            vec![
                (("gc", "exit_failure"), 3),
                (("kresd", "hung"), 1),
                (("kresd", "signal"), 3),
            ]
        );
    }

    #[test]
    fn policy_loader_runs_are_timed() {
        // As the manager tells them; the process tables' view of a run (often none: it can
        // fall between two tables) is not what is timed.
        let t = tally(vec![
            (
                10.0,
                Event::ProcessSpawned {
                    name: service::POLICY_LOADER.into(),
                    pid: 1,
                },
            ),
            (
                10.3,
                Event::PolicyLoaderFinished {
                    seconds: 0.3,
                    status: Some(ExitStatus::Code(0)),
                },
            ),
            (
                10.3,
                Event::ProcessExited {
                    name: service::POLICY_LOADER.into(),
                    pid: 1,
                    status: Some(ExitStatus::Code(0)),
                },
            ),
            (
                20.0,
                Event::PolicyLoaderFinished {
                    seconds: 60.0,
                    status: None,
                },
            ),
        ]);
        assert_eq!(
            t.policy_loader_seconds.count, 2,
            "a run stopped at its deadline too"
        );
        assert!((t.policy_loader_seconds.sum - 60.3).abs() < 1e-9);
        assert_eq!(
            t.policy_loader_seconds.buckets[4], 1,
            "le 0.25 < 0.3 <= 0.5"
        );
        assert!(t.restarts.is_empty());
    }

    #[test]
    fn the_series_are_strictly_valid() {
        let plane = ControlPlane::default();
        *plane.tally() = tally(vec![
            (0.0, Event::ManagerStarted { incarnation: 1 }),
            (
                1.0,
                Event::ConfigReloading {
                    force: false,
                    origin: kres_wire::events::Origin::Api,
                },
            ),
            (
                1.2,
                applied(
                    Cause::Reload,
                    &["workers"],
                    WorkersAction::Restart {
                        canary: true,
                        stop: vec![],
                        restart: vec![],
                        start: vec![],
                        unlink: vec![],
                    },
                ),
            ),
        ]);
        let mut out = Exposition::default();
        plane.write(
            &mut out,
            &Current {
                snapshot: &Snapshot::default(),
                etag: "\"abc\"",
                workers: 2,
                kresd_version: Some("6.5.0"),
                query_log: None,
                upstreams: &[],
                fleet: None,
            },
        );
        let text = out.render();
        let parsed = super::super::strict::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(
            parsed.value("knot_resolver_config_info", &[("etag", "abc")]),
            Some(1.0)
        );
        assert_eq!(
            parsed.value("knot_resolver_config_generation", &[]),
            Some(2.0)
        );
        assert_eq!(
            parsed.value(
                "knot_resolver_config_changes_total",
                &[("cause", "reload"), ("result", "applied")]
            ),
            Some(1.0)
        );
        assert_eq!(
            parsed.value(
                "knot_resolver_config_changes_total",
                &[("cause", "api"), ("result", "refused")]
            ),
            Some(0.0),
            "every cause and result is there from 0 on"
        );
        assert_eq!(
            parsed.samples("knot_resolver_config_changes_total").len(),
            CAUSES.len() * RESULTS.len()
        );
        assert_eq!(
            parsed.value(
                "knot_resolver_config_change_duration_seconds_bucket",
                &[("cause", "reload"), ("le", "0.25")]
            ),
            Some(1.0)
        );
        assert_eq!(
            parsed.value("knot_resolver_workers_configured", &[]),
            Some(2.0)
        );
    }
}
