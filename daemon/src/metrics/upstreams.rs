//! The workers' upstream reports (`reply::UpstreamReport`) merged by address: the round-trip
//! samples kresd's `stats.upstreams()` keeps and the generated Lua's tallies of queries sent
//! and answers received, as `GET /upstreams` and the Prometheus text show them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::reply::UpstreamReport;
use crate::service::WorkerId;
use kres_wire::upstreams::UpstreamAddress;

/// One address merged over the workers.
#[derive(Default)]
struct Merged {
    /// RTT samples, milliseconds.
    samples: Vec<f64>,
    /// Queries sent, answers received, answers with an error rcode.
    sent: u64,
    answered: u64,
    errors: u64,
    /// Workers that hold samples or tallies of it.
    workers: Vec<String>,
}

/// A tally as a count: what is no count (negative, not finite) is none.
fn count(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        value as u64
    } else {
        0
    }
}

/// The workers' reports merged by address; a tally whose key names no address is passed
/// over.
pub fn merge(reports: &[(WorkerId, &UpstreamReport)]) -> Vec<UpstreamAddress> {
    let mut by_address: BTreeMap<String, Merged> = BTreeMap::new();
    for (id, report) in reports {
        let mut seen: Vec<String> = Vec::new();
        for (address, samples) in &report.rtt {
            if samples.0.is_empty() {
                continue;
            }
            by_address
                .entry(address.clone())
                .or_default()
                .samples
                .extend(&samples.0);
            seen.push(address.clone());
        }
        for (key, tally) in &report.tallies {
            let Some(address) = address_of_key(key) else {
                continue;
            };
            let merged = by_address.entry(address.clone()).or_default();
            merged.sent = merged.sent.saturating_add(count(tally.sent));
            merged.answered = merged.answered.saturating_add(count(tally.answered));
            merged.errors = merged.errors.saturating_add(count(tally.errors));
            seen.push(address);
        }
        seen.sort_unstable();
        seen.dedup();
        for address in seen {
            if let Some(merged) = by_address.get_mut(&address) {
                merged.workers.push(id.name());
            }
        }
    }
    by_address
        .into_iter()
        .map(|(address, m)| {
            let n = m.samples.len();
            let (avg, min, max) = if n == 0 {
                (None, None, None)
            } else {
                (
                    Some(m.samples.iter().sum::<f64>() / n as f64),
                    Some(m.samples.iter().copied().fold(f64::INFINITY, f64::min)),
                    Some(m.samples.iter().copied().fold(0.0, f64::max)),
                )
            };
            UpstreamAddress {
                address,
                samples: n as u64,
                rtt_avg_ms: avg,
                rtt_min_ms: min,
                rtt_max_ms: max,
                queries: m.sent,
                answered: m.answered,
                unanswered: m.sent.saturating_sub(m.answered),
                error_answers: m.errors,
                workers: m.workers,
            }
        })
        .collect()
}

/// Since when every worker that told counts: the latest of their `since`s.
pub fn counted_since(reports: &[(WorkerId, &UpstreamReport)]) -> Option<f64> {
    reports
        .iter()
        .filter_map(|(_, report)| report.since)
        .reduce(f64::max)
}

/// The address a tally's key names: its bytes in hex, 4 (IPv4) or 16 (IPv6), as kresd's
/// `stats.upstreams()` would write it.
fn address_of_key(key: &str) -> Option<String> {
    if !key.is_ascii() || !key.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Vec<u8> = key
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()?;
    let address: IpAddr = match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(address.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(value: serde_json::Value) -> UpstreamReport {
        serde_json::from_value(value).expect("a report")
    }

    #[test]
    fn samples_and_tallies_merge_over_workers() {
        let reports = [
            report(json!({"rtt": {"127.0.0.1": [2, 4], "::1": []},
                   "tallies": {"7f000001": {"sent": 3, "answered": 2, "errors": 1},
                               "7f000002": {"sent": 4, "answered": 0, "errors": 0}},
                   "since": 10})),
            report(json!({"rtt": {"127.0.0.1": {"1": 6}}, "since": 12})),
            report(
                json!({"rtt": [], "tallies": {"7f00000": {"sent": 1}, "zz000001": {"sent": 1},
                   "00000000000000000000000000000001": {"sent": 5, "answered": 5},
                   "7f000003": {"sent": -1, "answered": 1e300}}}),
            ),
        ];
        let reports: Vec<(WorkerId, &UpstreamReport)> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| (WorkerId(i as u32), r))
            .collect();
        let merged = merge(&reports);
        let addresses: Vec<&str> = merged.iter().map(|a| a.address.as_str()).collect();
        assert_eq!(addresses, ["127.0.0.1", "127.0.0.2", "127.0.0.3", "::1"]);
        let a = &merged[0];
        assert_eq!(
            (a.samples, a.rtt_avg_ms, a.rtt_min_ms, a.rtt_max_ms),
            (3, Some(4.0), Some(2.0), Some(6.0))
        );
        assert_eq!(
            (a.queries, a.answered, a.unanswered, a.error_answers),
            (3, 2, 1, 1)
        );
        assert_eq!(a.workers, ["kresd0", "kresd1"]);
        // Never answered: no RTT, every query unanswered.
        let dead = &merged[1];
        assert_eq!((dead.samples, dead.rtt_avg_ms), (0, None));
        assert_eq!((dead.queries, dead.unanswered), (4, 4));
        // A count out of range saturates, a negative one is none.
        assert_eq!((merged[2].queries, merged[2].unanswered), (0, 0));
        assert_eq!(merged[3].workers, ["kresd2"]);
        assert_eq!((merged[3].queries, merged[3].unanswered), (5, 0));
        assert_eq!(counted_since(&reports), Some(12.0));
    }
}
