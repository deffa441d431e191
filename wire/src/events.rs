//! The events of `GET /events`: what the resolver did, as the event log publishes it
//! (`events`) and followers read it back (`kresctl events`, `kresctl processes --watch`). The
//! kinds are one enum, [`Event`]; a new kind (the steps of an upgrade, say) is one more
//! variant, and followers print kinds they do not know as they came.

use std::fmt;

use serde::{Deserialize, Serialize};
use supervisor_types::ExitStatus;

use super::change::ChangeSummary;
use super::upgrade::UpgradeOutcome;

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case"
)]
// `rename_all_fields` is serde's; the variants with fields of several words say it again
// for the API's document (utoipa reads a variant's own `rename_all`).
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
        outcome: UpgradeOutcome,
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
    /// A configuration asked for through the API (`PUT`, `PATCH` or `DELETE` of `/v1/config`)
    /// is being applied; its outcome follows (`cause` `api`).
    ConfigChanging,
    /// The policy-loader ran to its end (`status`), or past its deadline and was stopped
    /// (no status), taking `seconds` from its start, as the manager waited for it. Told by the
    /// manager itself: a run is often shorter than the gap between two process tables.
    PolicyLoaderFinished {
        seconds: f64,
        status: Option<ExitStatus>,
    },
    /// A configuration change was applied.
    ConfigApplied {
        cause: Cause,
        /// What it did: the sections that changed, what the workers and the cache garbage
        /// collector went through.
        #[serde(flatten)]
        change: ChangeSummary,
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
    /// An RPZ zone kept by zone transfer is followed (at the start, and when the
    /// configuration changes its transfer): its stored file, with its serial when there is
    /// one, is what kresd serves until a transfer brings a newer one.
    #[serde(rename_all = "kebab-case")]
    RpzFollowed {
        zone: String,
        file: String,
        primaries: Vec<String>,
        serial: Option<u32>,
        /// Seconds until the first refresh.
        next_refresh: f64,
        /// Seconds until the stored zone expires with no successful refresh (negative: it
        /// expired that long ago); none while no SOA is known.
        #[serde(default)]
        expires: Option<f64>,
    },
    /// Primaries sent NOTIFYs for the zone: told at most once a second per zone, for every
    /// NOTIFY accepted since the last (`received`); `from` and `serial` are the last one's.
    /// `refreshes` started a refresh or brought the next one forward, `coalesced` were folded
    /// into one already running or due (a zone is refreshed at most once per interval),
    /// `stale` carried a serial not newer than the stored one and started nothing.
    RpzNotified {
        zone: String,
        from: String,
        serial: Option<u32>,
        #[serde(default)]
        received: u64,
        #[serde(default)]
        refreshes: u64,
        #[serde(default)]
        coalesced: u64,
        #[serde(default)]
        stale: u64,
    },
    /// A refresh of an RPZ zone succeeded: `transfer` `axfr` or `ixfr` (a new file was stored and
    /// the policy is renewed: the policy-loader runs, the workers reset their rules) or
    /// `up-to-date`.
    #[serde(rename_all = "kebab-case")]
    RpzTransferred {
        zone: String,
        primary: String,
        transfer: String,
        serial: u32,
        bytes: u64,
        records: u64,
        /// Seconds.
        duration: f64,
        /// Seconds until the next refresh.
        next_refresh: f64,
        /// Seconds until the zone expires with no successful refresh (the SOA's expire time).
        #[serde(default)]
        expires: Option<f64>,
    },
    /// A refresh of an RPZ zone from one primary failed; the stored file and the running
    /// policy are kept. `reason` is a short label (`timeout`, `too-large`, `tsig`, …);
    /// `next_refresh` (seconds) is set when no other primary is tried now; `expires`
    /// (seconds, negative once past) when the last success, or the stored zone, gave a SOA.
    #[serde(rename_all = "kebab-case")]
    RpzTransferFailed {
        zone: String,
        primary: String,
        transfer: String,
        reason: String,
        error: String,
        next_refresh: Option<f64>,
        #[serde(default)]
        expires: Option<f64>,
    },
    /// The zone's SOA expire time passed with no successful refresh: kresd keeps serving the
    /// stored policy, and refreshes go on.
    RpzExpired { zone: String, serial: Option<u32> },
    /// NOTIFYs cannot be received on `address`: its zones follow their SOA timers only.
    RpzNotifyListenFailed { address: String, reason: String },
    /// kresd cannot load the zone's stored file (`reason`, as its zone reader says): the
    /// policy-loader left the zone out and loaded the rest of the policy. The zone is
    /// transferred whole again. Told at every policy-loader run that leaves it out.
    RpzZoneBroken {
        zone: String,
        file: String,
        reason: String,
    },
    /// A zone kresd could not load is loaded again.
    RpzZoneLoaded { zone: String },
    /// A subscribed list was fetched: `result` `changed` (a new version is stored, the
    /// policy is renewed with the others fetched with it) or `unchanged` (the server said
    /// 304: nothing stored, no policy-loader run). `entries` and `skipped` are the stored
    /// version's; `next_refresh` in seconds.
    #[serde(rename_all = "kebab-case")]
    RpzListFetched {
        list: String,
        url: String,
        result: String,
        entries: u64,
        skipped: u64,
        bytes: u64,
        etag: Option<String>,
        next_refresh: f64,
    },
    /// A fetch of a subscribed list failed, or what it brought was refused (`reason`: a
    /// short label, `html`, `shrank`, `sha256`, `too-large`, `redirects`, …); the previous
    /// version stays in force. `next_refresh` (seconds) is the retry.
    #[serde(rename_all = "kebab-case")]
    RpzListFailed {
        list: String,
        url: String,
        reason: String,
        error: String,
        next_refresh: f64,
    },
    /// To one follower only, first: events after the id it resumed from are gone.
    #[serde(rename_all = "kebab-case")]
    EventsMissed {
        last_event_id: String,
        reason: String,
    },
    /// To one follower only, last: it fell behind by `lost` events and is cut.
    EventsLagged { lost: u64 },
}

/// Who asked for a reload or a renew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// A request to the management API (`kresctl reload`, systemd's `ExecReload`).
    Api,
    /// SIGHUP.
    Signal,
    /// The files watchdog: a watched file changed.
    WatchedFile,
    /// A zone transfer stored a new RPZ zone.
    ZoneTransfer,
    /// The fleet's shared document changed (`fleet`).
    Fleet,
    /// A fetch stored a new version of a subscribed list.
    Subscription,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Api => "asked through the API",
            Origin::Signal => "on SIGHUP",
            Origin::WatchedFile => "a watched file changed",
            Origin::ZoneTransfer => "a zone transfer stored a new RPZ zone",
            Origin::Fleet => "the fleet's document changed",
            Origin::Subscription => "a subscribed list changed",
        })
    }
}

/// What asked for a configuration change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// `PUT`, `PATCH` or `DELETE` of `/v1/config`.
    Api,
    /// The configuration files, read again.
    Reload,
    /// The running configuration, applied again.
    Renew,
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
            Event::ConfigChanging => "config-changing",
            Event::PolicyLoaderFinished { .. } => "policy-loader-finished",
            Event::ConfigApplied { .. } => "config-applied",
            Event::ConfigRefused { .. } => "config-refused",
            Event::ConfigRolledBack { .. } => "config-rolled-back",
            Event::RpzFollowed { .. } => "rpz-followed",
            Event::RpzNotified { .. } => "rpz-notified",
            Event::RpzTransferred { .. } => "rpz-transferred",
            Event::RpzTransferFailed { .. } => "rpz-transfer-failed",
            Event::RpzExpired { .. } => "rpz-expired",
            Event::RpzNotifyListenFailed { .. } => "rpz-notify-listen-failed",
            Event::RpzZoneBroken { .. } => "rpz-zone-broken",
            Event::RpzZoneLoaded { .. } => "rpz-zone-loaded",
            Event::RpzListFetched { .. } => "rpz-list-fetched",
            Event::RpzListFailed { .. } => "rpz-list-failed",
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
            Event::Draining | Event::Stopping | Event::ConfigChanging => f.write_str(kind),
            Event::ConfigReloading { force, origin } | Event::ConfigRenewing { force, origin } => {
                write!(
                    f,
                    "{kind} ({origin}{})",
                    if *force { ", forced" } else { "" }
                )
            }
            Event::PolicyLoaderFinished { seconds, status } => match status {
                Some(status) => write!(f, "{kind} in {seconds:.3} s: {status}"),
                None => write!(f, "{kind} in {seconds:.3} s: stopped at its deadline"),
            },
            Event::ConfigApplied { cause, change } => write!(f, "{kind} ({cause}): {change}"),
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
            Event::RpzFollowed { .. }
            | Event::RpzNotified { .. }
            | Event::RpzTransferred { .. }
            | Event::RpzTransferFailed { .. }
            | Event::RpzExpired { .. }
            | Event::RpzNotifyListenFailed { .. }
            | Event::RpzZoneBroken { .. }
            | Event::RpzZoneLoaded { .. }
            | Event::RpzListFetched { .. }
            | Event::RpzListFailed { .. } => write_rpz(self, kind, f),
            Event::EventsLagged { lost } => {
                write!(
                    f,
                    "{kind}: this follower fell {lost} events behind and is cut"
                )
            }
        }
    }
}

/// One line for an operator about an RPZ zone kept by zone transfer.
fn write_rpz(event: &Event, kind: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match event {
        Event::RpzFollowed {
            zone, file, serial, ..
        } => match serial {
            Some(serial) => write!(f, "{kind} {zone}: serial {serial} in {file}"),
            None => write!(f, "{kind} {zone}: no stored zone in {file} yet"),
        },
        Event::RpzNotified {
            zone,
            from,
            received,
            refreshes,
            coalesced,
            stale,
            ..
        } => match received {
            0 | 1 => write!(f, "{kind} {zone} by {from}"),
            _ => write!(
                f,
                "{kind} {zone}: {received} NOTIFYs (the last by {from}), {refreshes} brought a \
                 refresh, {coalesced} folded into one due, {stale} not newer than the stored zone"
            ),
        },
        Event::RpzTransferred {
            zone,
            primary,
            transfer: how,
            serial,
            records,
            ..
        } => write!(
            f,
            "{kind} {zone} from {primary}: {how}, serial {serial}, {records} records"
        ),
        Event::RpzTransferFailed {
            zone,
            primary,
            error,
            ..
        } => write!(
            f,
            "{kind} {zone} from {primary}: {error}; the running policy is kept"
        ),
        Event::RpzExpired { zone, .. } => write!(
            f,
            "{kind} {zone}: no refresh within the SOA expire time; the stored policy is still served"
        ),
        Event::RpzNotifyListenFailed { address, reason } => {
            write!(f, "{kind} {address}: {reason}")
        }
        Event::RpzZoneBroken { zone, file, reason } => write!(
            f,
            "{kind} {zone}: kresd cannot load {file} ({reason}); the zone is left out, the rest of the policy is in force, and it is transferred whole again"
        ),
        Event::RpzZoneLoaded { zone } => write!(f, "{kind} {zone}: loaded again"),
        Event::RpzListFetched {
            list,
            result,
            entries,
            skipped,
            ..
        } => write!(
            f,
            "{kind} {list}: {result}, {entries} entries, {skipped} lines skipped"
        ),
        Event::RpzListFailed { list, error, .. } => write!(
            f,
            "{kind} {list}: {error}; the previous version stays in force"
        ),
        _ => f.write_str(kind),
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

/// Longest `Last-Event-ID` considered; a longer one is no id of ours.
pub const MAX_ID: usize = 128;
/// An event's id: which manager process produced it, and its place there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId {
    pub epoch: std::sync::Arc<str>,
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
    /// A record of `event` at `time` (seconds), with no id: what a follower's tests feed it.
    pub fn at(time: f64, event: Event) -> Record {
        Record {
            id: None,
            time,
            event,
        }
    }

    /// A notice to one follower: no id, published now.
    pub fn notice(event: Event) -> Record {
        Record::now(None, event)
    }

    /// A record of `event` published now, with `id`.
    pub fn now(id: Option<EventId>, event: Event) -> Record {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Record { id, time, event }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::change::tests::names;
    use crate::change::{GcAction, WorkersAction};

    #[test]
    fn notifies_are_told_with_their_counts_and_older_records_read_as_none() {
        let notified = |received, refreshes, coalesced, stale| Event::RpzNotified {
            zone: "block.rpz.".into(),
            from: "192.0.2.53:4711".into(),
            serial: Some(7),
            received,
            refreshes,
            coalesced,
            stale,
        };
        assert_eq!(
            notified(1, 1, 0, 0).to_string(),
            "rpz-notified block.rpz. by 192.0.2.53:4711"
        );
        assert_eq!(
            notified(1000, 1, 989, 10).to_string(),
            "rpz-notified block.rpz.: 1000 NOTIFYs (the last by 192.0.2.53:4711), 1 brought a \
             refresh, 989 folded into one due, 10 not newer than the stored zone"
        );
        let text = serde_json::to_value(notified(3, 1, 2, 0)).expect("JSON");
        assert_eq!(
            (&text["received"], &text["coalesced"], &text["stale"]),
            (&json!(3), &json!(2), &json!(0))
        );
        let older = json!({"kind": "rpz-notified", "zone": "block.rpz.",
                           "from": "192.0.2.53:4711", "serial": null});
        assert_eq!(
            serde_json::from_value::<Event>(older).expect("an older record"),
            Event::RpzNotified {
                zone: "block.rpz.".into(),
                from: "192.0.2.53:4711".into(),
                serial: None,
                received: 0,
                refreshes: 0,
                coalesced: 0,
                stale: 0,
            }
        );
    }

    #[test]
    fn a_zone_expiry_is_told_in_seconds_and_older_records_read_as_unknown() {
        let transferred = |expires| Event::RpzTransferred {
            zone: "block.rpz.".into(),
            primary: "192.0.2.53:53".into(),
            transfer: "axfr".into(),
            serial: 8,
            bytes: 300,
            records: 4,
            duration: 0.5,
            next_refresh: 300.0,
            expires,
        };
        let text = serde_json::to_value(transferred(Some(86_400.0))).expect("JSON");
        assert_eq!(
            (&text["next-refresh"], &text["expires"]),
            (&json!(300.0), &json!(86_400.0))
        );
        // As earlier versions wrote them: no `expires`.
        let older = json!({"kind": "rpz-transferred", "zone": "block.rpz.",
                           "primary": "192.0.2.53:53", "transfer": "axfr", "serial": 8,
                           "bytes": 300, "records": 4, "duration": 0.5, "next-refresh": 300.0});
        assert_eq!(
            serde_json::from_value::<Event>(older).expect("an older record"),
            transferred(None)
        );
        for older in [
            json!({"kind": "rpz-followed", "zone": "block.rpz.", "file": "/var/rpz/block.rpz",
                   "primaries": [], "serial": null, "next-refresh": 0.0}),
            json!({"kind": "rpz-transfer-failed", "zone": "block.rpz.",
                   "primary": "192.0.2.53:53", "transfer": "ixfr", "reason": "timeout",
                   "error": "timed out", "next-refresh": null}),
        ] {
            let read = serde_json::from_value::<Event>(older.clone()).expect("an older record");
            let expires = match read {
                Event::RpzFollowed { expires, .. } | Event::RpzTransferFailed { expires, .. } => {
                    expires
                }
                other => panic!("{other:?} from {older}"),
            };
            assert_eq!(expires, None, "{older}");
        }
    }

    #[test]
    fn an_applied_change_keeps_its_fields_and_reads_older_ones() {
        let applied = Event::ConfigApplied {
            cause: Cause::Reload,
            change: ChangeSummary {
                changed: names(&["workers"]),
                workers: WorkersAction::Restart {
                    canary: true,
                    stop: vec![],
                    restart: names(&["kresd0"]),
                    start: names(&["kresd1"]),
                    unlink: names(&["defer"]),
                },
                cache_gc: GcAction::Keep,
            },
        };
        assert_eq!(
            serde_json::to_value(&applied).expect("JSON"),
            json!({"kind": "config-applied", "cause": "reload", "changed": ["workers"],
                   "workers": {"action": "restart", "canary": true, "stop": [],
                               "restart": ["kresd0"], "start": ["kresd1"], "unlink": ["defer"]},
                   "cache-gc": "keep"})
        );
        assert_eq!(
            applied.to_string(),
            "config-applied (reload): changed workers; workers restarted kresd0 started kresd1 \
             on new shared memory (defer)"
        );
        // As earlier versions wrote it: `sections`, no canary nor unlink.
        let older = json!({"kind": "config-applied", "cause": "api", "sections": ["logging"],
                           "workers": {"action": "live", "workers": ["kresd0"],
                                       "restarted": [], "rules-reset": false},
                           "cache-gc": "replace"});
        let read: Event = serde_json::from_value(older).expect("reads");
        assert_eq!(
            read,
            Event::ConfigApplied {
                cause: Cause::Api,
                change: ChangeSummary {
                    changed: names(&["logging"]),
                    workers: WorkersAction::Live {
                        workers: names(&["kresd0"]),
                        restarted: Some(vec![]),
                        rules_reset: false,
                    },
                    cache_gc: GcAction::Replace,
                },
            }
        );
        let older = json!({"kind": "config-applied", "cause": "api", "sections": [],
                           "workers": {"action": "restart", "stop": [], "restart": ["kresd0"],
                                       "start": []},
                           "cache-gc": "keep"});
        assert!(serde_json::from_value::<Event>(older).is_ok());
    }
}
