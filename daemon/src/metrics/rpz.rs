//! The series of RPZ zones kept by zone transfer (`knot_resolver_rpz_*`) and the zones'
//! status (`GET /rpz`), both tallied from the `rpz-*` events of the log, one pure step per
//! record ([`RpzTally::on`]), so the series, the status and `GET /events` always agree.

use std::collections::BTreeMap;

use super::exposition::{label, sample_line, Exposition, Kind};
use crate::events::{Event, Record};
use kres_wire::rpz::{RpzTransfer, RpzZone};

/// The label of a successful refresh in `knot_resolver_rpz_transfers_total`.
const SUCCESS: &str = "success";

/// The results of `knot_resolver_rpz_notifies_total`: a NOTIFY brought a refresh, was folded
/// into one already due, or carried a serial not newer than the stored one.
const NOTIFY_REFRESH: &str = "refresh";
const NOTIFY_COALESCED: &str = "coalesced";
const NOTIFY_STALE: &str = "stale";

/// (name, help, value of one zone) of a per-zone gauge.
type ZoneFamily = (&'static str, &'static str, fn(&RpzZone) -> Option<f64>);

/// What the `rpz-*` events said so far, per zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct RpzTally {
    /// Each zone's status, by name.
    zones: BTreeMap<String, RpzZone>,
    /// Refreshes by zone, kind and result.
    transfers: BTreeMap<(String, String, String), u64>,
    /// NOTIFYs accepted by zone and what they came to.
    notifies: BTreeMap<(String, &'static str), u64>,
    /// Each subscribed list's figures, by name.
    lists: BTreeMap<String, ListTally>,
}

/// What the `rpz-list-*` events said of one subscribed list.
#[derive(Debug, Clone, Default, PartialEq)]
struct ListTally {
    /// Entries of the version in force, as the last successful fetch told.
    entries: Option<u64>,
    /// When a fetch last succeeded (Unix time).
    last_success: Option<f64>,
    /// Fetches by result (`changed`, `unchanged`, or why it failed).
    fetches: BTreeMap<String, u64>,
}

/// When the zone is refreshed next (when told) and when it expires, as an event at `now` told
/// them (seconds from it).
fn told_times(status: &mut RpzZone, now: f64, next_refresh: Option<f64>, expires: Option<f64>) {
    if let Some(next) = next_refresh {
        status.next_refresh = Some(now + next);
    }
    status.expires = expires.map(|e| now + e);
}

impl RpzTally {
    /// What one record of the log adds.
    pub(super) fn on(&mut self, record: &Record) {
        let now = record.time;
        match &record.event {
            Event::RpzFollowed {
                zone,
                file,
                primaries,
                serial,
                next_refresh,
                expires,
            } => {
                let status = self.zone(zone);
                status.file.clone_from(file);
                status.primaries.clone_from(primaries);
                if serial.is_some() {
                    status.serial = *serial;
                }
                told_times(status, now, Some(*next_refresh), *expires);
            }
            Event::RpzTransferred {
                zone,
                primary,
                transfer: kind,
                serial,
                bytes,
                records,
                duration,
                next_refresh,
                expires,
            } => {
                self.count(zone, kind, SUCCESS);
                let status = self.zone(zone);
                status.serial = Some(*serial);
                status.expired = false;
                status.last_success = Some(now);
                told_times(status, now, Some(*next_refresh), *expires);
                status.last_transfer = Some(RpzTransfer {
                    kind: kind.clone(),
                    primary: primary.clone(),
                    time: now,
                    duration: Some(*duration),
                    bytes: Some(*bytes),
                    records: Some(*records),
                    result: SUCCESS.to_owned(),
                    error: None,
                });
            }
            Event::RpzTransferFailed {
                zone,
                primary,
                transfer: kind,
                reason,
                error,
                next_refresh,
                expires,
            } => {
                self.count(zone, kind, reason);
                let status = self.zone(zone);
                told_times(status, now, *next_refresh, *expires);
                status.last_transfer = Some(RpzTransfer {
                    kind: kind.clone(),
                    primary: primary.clone(),
                    time: now,
                    duration: None,
                    bytes: None,
                    records: None,
                    result: reason.clone(),
                    error: Some(error.clone()),
                });
            }
            Event::RpzNotified {
                zone,
                refreshes,
                coalesced,
                stale,
                ..
            } => {
                for (result, n) in [
                    (NOTIFY_REFRESH, refreshes),
                    (NOTIFY_COALESCED, coalesced),
                    (NOTIFY_STALE, stale),
                ] {
                    *self.notifies.entry((zone.clone(), result)).or_default() += n;
                }
            }
            Event::RpzExpired { zone, .. } => self.zone(zone).expired = true,
            Event::RpzZoneBroken { zone, file, reason } => {
                let status = self.zone(zone);
                if status.file.is_empty() {
                    status.file.clone_from(file);
                }
                status.broken = Some(reason.clone());
            }
            Event::RpzZoneLoaded { zone } => self.zone(zone).broken = None,
            Event::RpzListFetched { .. } | Event::RpzListFailed { .. } => {
                self.on_list(&record.event, now);
            }
            _ => {}
        }
    }

    /// What an `rpz-list-*` event at `now` adds.
    fn on_list(&mut self, event: &Event, now: f64) {
        match event {
            Event::RpzListFetched {
                list,
                result,
                entries,
                ..
            } => {
                let tally = self.lists.entry(list.clone()).or_default();
                tally.entries = Some(*entries);
                tally.last_success = Some(now);
                *tally.fetches.entry(result.clone()).or_default() += 1;
            }
            Event::RpzListFailed { list, reason, .. } => {
                let tally = self.lists.entry(list.clone()).or_default();
                *tally.fetches.entry(reason.clone()).or_default() += 1;
            }
            _ => {}
        }
    }

    fn zone(&mut self, zone: &str) -> &mut RpzZone {
        self.zones
            .entry(zone.to_owned())
            .or_insert_with(|| RpzZone {
                zone: zone.to_owned(),
                file: String::new(),
                primaries: Vec::new(),
                serial: None,
                last_transfer: None,
                last_success: None,
                next_refresh: None,
                expires: None,
                expired: false,
                broken: None,
            })
    }

    fn count(&mut self, zone: &str, kind: &str, result: &str) {
        *self
            .transfers
            .entry((zone.to_owned(), kind.to_owned(), result.to_owned()))
            .or_default() += 1;
    }

    /// The zones' status, by name.
    pub(super) fn zones(&self) -> Vec<RpzZone> {
        self.zones.values().cloned().collect()
    }

    /// The `knot_resolver_rpz_*` families (none while no zone is kept by transfer and no
    /// list is subscribed).
    pub(super) fn write(&self, out: &mut Exposition) {
        self.write_lists(out);
        if self.zones.is_empty() {
            return;
        }
        let zone_label = |zone: &str| format!("zone=\"{}\"", label(zone));
        let per_zone: [ZoneFamily; 5] = [
            (
                "knot_resolver_rpz_serial",
                "the serial of the stored RPZ zone (absent before its first transfer)",
                |z| z.serial.map(f64::from),
            ),
            (
                "knot_resolver_rpz_last_success_timestamp_seconds",
                "when the last successful refresh of the RPZ zone ended (Unix time)",
                |z| z.last_success,
            ),
            (
                "knot_resolver_rpz_expires_timestamp_seconds",
                "when the RPZ zone expires with no successful refresh meanwhile: its last \
                 success plus its SOA expire time (Unix time; past once expired, absent while no \
                 SOA is known)",
                |z| z.expires,
            ),
            (
                "knot_resolver_rpz_expired",
                "1 when the RPZ zone's SOA expire time passed with no successful refresh (the \
                 stored policy is still served), otherwise 0",
                |z| Some(f64::from(u8::from(z.expired))),
            ),
            (
                "knot_resolver_rpz_broken",
                "1 when kresd cannot load the stored RPZ zone (the policy-loader left it out, the \
                 rest of the policy is in force, and it is transferred whole again), otherwise 0",
                |z| Some(f64::from(u8::from(z.broken.is_some()))),
            ),
        ];
        for (name, help, value) in per_zone {
            let samples = out.family(name, help, Kind::Gauge);
            for z in self.zones.values() {
                if let Some(v) = value(z) {
                    samples.push_str(&sample_line(name, &zone_label(&z.zone), v));
                }
            }
        }
        let name = "knot_resolver_rpz_transfers_total";
        let samples = out.family(
            name,
            "refreshes of RPZ zones by zone, kind (axfr, ixfr, up-to-date) and result \
             (success, or why it failed: timeout, too-large, tsig, refused and the like)",
            Kind::Counter,
        );
        for ((zone, kind, result), n) in &self.transfers {
            let labels = format!(
                "{},kind=\"{}\",result=\"{}\"",
                zone_label(zone),
                label(kind),
                label(result)
            );
            samples.push_str(&sample_line(name, &labels, *n as f64));
        }
        if self.notifies.is_empty() {
            return;
        }
        let name = "knot_resolver_rpz_notifies_total";
        let samples = out.family(
            name,
            "NOTIFYs accepted for RPZ zones by zone and result (refresh: it started a refresh or \
             brought the next one forward; coalesced: folded into one already running or due; \
             stale: its serial is not newer than the stored one)",
            Kind::Counter,
        );
        for ((zone, result), n) in &self.notifies {
            let labels = format!("{},result=\"{result}\"", zone_label(zone));
            samples.push_str(&sample_line(name, &labels, *n as f64));
        }
    }
}

impl RpzTally {
    /// The `knot_resolver_rpz_list_*` families (none while no list was fetched).
    fn write_lists(&self, out: &mut Exposition) {
        if self.lists.is_empty() {
            return;
        }
        let list_label = |list: &str| format!("list=\"{}\"", label(list));
        let name = "knot_resolver_rpz_list_entries";
        let samples = out.family(
            name,
            "entries of the version in force of a subscribed list",
            Kind::Gauge,
        );
        for (list, tally) in &self.lists {
            if let Some(entries) = tally.entries {
                samples.push_str(&sample_line(name, &list_label(list), entries as f64));
            }
        }
        let name = "knot_resolver_rpz_list_last_success_timestamp_seconds";
        let samples = out.family(
            name,
            "when a fetch of a subscribed list last succeeded, changed or not (Unix time)",
            Kind::Gauge,
        );
        for (list, tally) in &self.lists {
            if let Some(at) = tally.last_success {
                samples.push_str(&sample_line(name, &list_label(list), at));
            }
        }
        let name = "knot_resolver_rpz_list_fetches_total";
        let samples = out.family(
            name,
            "fetches of subscribed lists by list and result (changed, unchanged, or why the \
             version in force was kept: html, shrank, sha256, too-large, redirects, network and \
             the like)",
            Kind::Counter,
        );
        for (list, tally) in &self.lists {
            for (result, n) in &tally.fetches {
                let labels = format!("{},result=\"{}\"", list_label(list), label(result));
                samples.push_str(&sample_line(name, &labels, *n as f64));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_of_a_list_make_its_series() {
        let mut tally = RpzTally::default();
        let fetched = |result: &str, entries| Event::RpzListFetched {
            list: "ads".into(),
            url: "http://lists.example/ads".into(),
            result: result.into(),
            entries,
            skipped: 0,
            bytes: 10,
            etag: None,
            next_refresh: 60.0,
        };
        tally.on(&record(100.0, fetched("changed", 7)));
        tally.on(&record(
            200.0,
            Event::RpzListFailed {
                list: "ads".into(),
                url: "http://lists.example/ads".into(),
                reason: "html".into(),
                error: "an HTML page".into(),
                next_refresh: 30.0,
            },
        ));
        tally.on(&record(300.0, fetched("unchanged", 7)));
        let mut out = Exposition::default();
        tally.write(&mut out);
        let text = out.render();
        for line in [
            "knot_resolver_rpz_list_entries{list=\"ads\"} 7",
            "knot_resolver_rpz_list_last_success_timestamp_seconds{list=\"ads\"} 300",
            "knot_resolver_rpz_list_fetches_total{list=\"ads\",result=\"changed\"} 1",
            "knot_resolver_rpz_list_fetches_total{list=\"ads\",result=\"html\"} 1",
            "knot_resolver_rpz_list_fetches_total{list=\"ads\",result=\"unchanged\"} 1",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(
            !text.contains("knot_resolver_rpz_serial"),
            "no zone: {text}"
        );
    }

    fn record(time: f64, event: Event) -> Record {
        Record::at(time, event)
    }

    #[test]
    fn the_events_of_a_zone_make_its_status_and_series() {
        let zone = || "block.rpz.".to_owned();
        let mut tally = RpzTally::default();
        let rows = [
            record(
                100.0,
                Event::RpzFollowed {
                    zone: zone(),
                    file: "/var/rpz/block.rpz".into(),
                    primaries: vec!["192.0.2.53".into()],
                    serial: Some(7),
                    next_refresh: 0.0,
                    // Stored 40 s before it expires.
                    expires: Some(40.0),
                },
            ),
            record(
                101.0,
                Event::RpzTransferFailed {
                    zone: zone(),
                    primary: "192.0.2.53".into(),
                    transfer: "ixfr".into(),
                    reason: "tsig".into(),
                    error: "TSIG: bad signature".into(),
                    next_refresh: Some(60.0),
                    expires: Some(39.0),
                },
            ),
            record(
                150.0,
                Event::RpzExpired {
                    zone: zone(),
                    serial: Some(7),
                },
            ),
        ];
        for r in &rows {
            tally.on(r);
        }
        let status = &tally.zones()[0];
        assert_eq!(status.serial, Some(7));
        assert!(status.expired);
        assert_eq!(status.next_refresh, Some(161.0));
        assert_eq!(status.expires, Some(140.0), "kept past the expiry");
        assert_eq!(
            status.last_transfer.as_ref().map(|t| t.result.as_str()),
            Some("tsig")
        );
        tally.on(&record(
            200.0,
            Event::RpzTransferred {
                zone: zone(),
                primary: "192.0.2.53".into(),
                transfer: "ixfr".into(),
                serial: 8,
                bytes: 300,
                records: 4,
                duration: 0.5,
                next_refresh: 3600.0,
                expires: Some(86_400.0),
            },
        ));
        for (refreshes, coalesced, stale) in [(1, 0, 0), (1, 999, 20)] {
            tally.on(&record(
                201.0,
                Event::RpzNotified {
                    zone: zone(),
                    from: "192.0.2.53:4711".into(),
                    serial: Some(9),
                    received: refreshes + coalesced + stale,
                    refreshes,
                    coalesced,
                    stale,
                },
            ));
        }
        let status = &tally.zones()[0];
        assert_eq!((status.serial, status.expired), (Some(8), false));
        assert_eq!(status.last_success, Some(200.0));
        assert_eq!(
            status.expires,
            Some(86_600.0),
            "the new SOA from the success"
        );
        let mut out = Exposition::default();
        tally.write(&mut out);
        let text = out.render();
        for line in [
            "knot_resolver_rpz_serial{zone=\"block.rpz.\"} 8",
            "knot_resolver_rpz_expired{zone=\"block.rpz.\"} 0",
            "knot_resolver_rpz_expires_timestamp_seconds{zone=\"block.rpz.\"} 86600.0",
            "knot_resolver_rpz_broken{zone=\"block.rpz.\"} 0",
            "knot_resolver_rpz_transfers_total{zone=\"block.rpz.\",kind=\"ixfr\",result=\"tsig\"} 1",
            "knot_resolver_rpz_transfers_total{zone=\"block.rpz.\",kind=\"ixfr\",result=\"success\"} 1",
            "knot_resolver_rpz_notifies_total{zone=\"block.rpz.\",result=\"refresh\"} 2",
            "knot_resolver_rpz_notifies_total{zone=\"block.rpz.\",result=\"coalesced\"} 999",
            "knot_resolver_rpz_notifies_total{zone=\"block.rpz.\",result=\"stale\"} 20",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn a_zone_kresd_cannot_load_is_broken_until_it_loads_again() {
        let mut tally = RpzTally::default();
        let broken = Event::RpzZoneBroken {
            zone: "block.rpz.".into(),
            file: "/var/rpz/block.rpz".into(),
            reason: "line 4: invalid domain name character".into(),
        };
        assert_eq!(
            broken.to_string(),
            "rpz-zone-broken block.rpz.: kresd cannot load /var/rpz/block.rpz (line 4: invalid \
             domain name character); the zone is left out, the rest of the policy is in force, \
             and it is transferred whole again"
        );
        tally.on(&record(100.0, broken));
        let status = &tally.zones()[0];
        assert_eq!(status.file, "/var/rpz/block.rpz");
        assert_eq!(
            status.broken.as_deref(),
            Some("line 4: invalid domain name character")
        );
        let mut out = Exposition::default();
        tally.write(&mut out);
        let text = out.render();
        assert!(
            text.contains("knot_resolver_rpz_broken{zone=\"block.rpz.\"} 1"),
            "{text}"
        );
        assert!(
            !text.contains("knot_resolver_rpz_expires_timestamp_seconds{"),
            "no expiry while no SOA is known: {text}"
        );
        let loaded = Event::RpzZoneLoaded {
            zone: "block.rpz.".into(),
        };
        assert_eq!(
            loaded.to_string(),
            "rpz-zone-loaded block.rpz.: loaded again"
        );
        tally.on(&record(200.0, loaded));
        assert_eq!(tally.zones()[0].broken, None);
    }
}
