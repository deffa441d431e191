//! What the query log and the workers' upstreams add to the Prometheus text, with a bounded
//! number of series whatever the traffic: the query log's counts (one series each) and, per
//! upstream address, its round-trip time,
//! samples, queries sent, queries unanswered and error answers for the [`MAX_UPSTREAMS`]
//! addresses sent the most queries (the number of all of them beside, so a cut is seen).

use super::exposition::{label, sample_line, Exposition, Kind};
use kres_wire::query_log::QueryLogStatus;
use kres_wire::upstreams::UpstreamAddress;

/// Upstream addresses exported at most: those with the most samples (ties by address).
pub const MAX_UPSTREAMS: usize = 20;

/// The query log's series.
pub fn write_query_log(out: &mut Exposition, status: &QueryLogStatus) {
    let families: [(&str, &str, Kind, u64); 8] = [
        (
            "knot_resolver_query_log_enabled",
            "1 if the configuration has the workers send their answers to the query log",
            Kind::Gauge,
            u64::from(status.enabled),
        ),
        (
            "knot_resolver_query_log_answers_received_total",
            "Answers the query log received since the manager process started",
            Kind::Counter,
            status.received,
        ),
        (
            "knot_resolver_query_log_answers_missed_total",
            "Answers the workers gave that never reached the query log (a worker drops them when the reader lags or is away)",
            Kind::Counter,
            status.missed,
        ),
        (
            "knot_resolver_query_log_datagrams_malformed_total",
            "Datagrams of the workers, or parts of them, the query log did not read",
            Kind::Counter,
            status.malformed,
        ),
        (
            "knot_resolver_query_log_entries",
            "Answers the query log's ring holds now",
            Kind::Gauge,
            status.held,
        ),
        (
            "knot_resolver_query_log_capacity_entries",
            "Answers the query log's ring holds at most",
            Kind::Gauge,
            status.capacity,
        ),
        (
            "knot_resolver_query_log_entries_bytes",
            "Bytes the query log's ring holds now, as it counts them toward max-memory",
            Kind::Gauge,
            status.held_bytes,
        ),
        (
            "knot_resolver_query_log_peers_refused_total",
            "Datagrams refused because their sender did not run as the workers' user",
            Kind::Counter,
            status.refused_peers,
        ),
    ];
    for (name, help, kind, value) in families {
        out.family(name, help, kind)
            .push_str(&sample_line(name, "", value as f64));
    }
}

/// The upstream addresses' series: the [`MAX_UPSTREAMS`] sent the most queries (then with
/// the most samples, then by address). The tallies are counters of the running workers (a
/// restarted worker starts again from zero, which Prometheus reads as a reset).
pub fn write_upstreams(out: &mut Exposition, addresses: &[UpstreamAddress]) {
    out.family(
        "knot_resolver_upstream_addresses",
        "Upstream addresses the workers hold samples or tallies of (series are written for the 20 sent the most queries)",
        Kind::Gauge,
    )
    .push_str(&sample_line(
        "knot_resolver_upstream_addresses",
        "",
        addresses.len() as f64,
    ));
    let mut top: Vec<&UpstreamAddress> = addresses.iter().collect();
    top.sort_by(|a, b| {
        (b.queries, b.samples)
            .cmp(&(a.queries, a.samples))
            .then(a.address.cmp(&b.address))
    });
    top.truncate(MAX_UPSTREAMS);
    for a in top {
        let labels = format!("address=\"{}\"", label(&a.address));
        if let Some(avg) = a.rtt_avg_ms {
            out.family(
                "knot_resolver_upstream_rtt_seconds",
                "Mean round-trip time of the samples the workers hold of an upstream address",
                Kind::Gauge,
            )
            .push_str(&sample_line(
                "knot_resolver_upstream_rtt_seconds",
                &labels,
                avg / 1e3,
            ));
        }
        let families = [
            (
                "knot_resolver_upstream_rtt_samples",
                "Round-trip samples the workers hold of an upstream address (kresd keeps the most recent answers')",
                Kind::Gauge,
                a.samples,
            ),
            (
                "knot_resolver_upstream_queries_total",
                "Queries the workers sent to an upstream address, each retry counted",
                Kind::Counter,
                a.queries,
            ),
            (
                "knot_resolver_upstream_unanswered_total",
                "Queries to an upstream address that got no answer: timed out, or the connection failed",
                Kind::Counter,
                a.unanswered,
            ),
            (
                "knot_resolver_upstream_error_answers_total",
                "Answers from an upstream address with an rcode other than NOERROR and NXDOMAIN",
                Kind::Counter,
                a.error_answers,
            ),
        ];
        for (name, help, kind, value) in families {
            out.family(name, help, kind)
                .push_str(&sample_line(name, &labels, value as f64));
        }
    }
}

/// A fleet node's series: the document revision it runs and the newest it saw (their
/// difference: how far behind it is), the newest it refused, whether it reads the store, and
/// how many nodes it saw.
pub fn write_fleet(out: &mut Exposition, node: &kres_wire::fleet::FleetNode) {
    let revision = |r: Option<i64>| r.map_or(0.0, |r| r as f64);
    let families: [(&str, &str, f64); 5] = [
        (
            "knot_resolver_fleet_document_revision",
            "The store revision of the fleet's document this node runs (0: none yet)",
            revision(node.revision),
        ),
        (
            "knot_resolver_fleet_newest_document_revision",
            "The store revision of the newest fleet document this node has seen",
            revision(node.newest_seen),
        ),
        (
            "knot_resolver_fleet_refused_document_revision",
            "The store revision of the newest fleet document this node refused (0: none)",
            revision(node.refused.as_ref().map(|r| r.revision)),
        ),
        (
            "knot_resolver_fleet_store_up",
            "1 if this node reads the fleet's store, 0 while it cannot",
            if node.store_error.is_none() { 1.0 } else { 0.0 },
        ),
        (
            "knot_resolver_fleet_nodes",
            "The nodes whose records this node saw in the store when it last looked",
            node.nodes_seen.unwrap_or(0) as f64,
        ),
    ];
    for (name, help, value) in families {
        out.sample(name, help, Kind::Gauge, "", value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(address: &str, queries: u64) -> UpstreamAddress {
        UpstreamAddress {
            address: address.to_owned(),
            samples: queries / 2,
            rtt_avg_ms: queries.is_multiple_of(2).then_some(2.5),
            rtt_min_ms: Some(1.0),
            rtt_max_ms: Some(4.0),
            queries,
            answered: queries / 2,
            unanswered: queries - queries / 2,
            error_answers: 1,
            workers: vec!["kresd0".into()],
        }
    }

    #[test]
    fn only_the_most_queried_upstreams_are_written() {
        let addresses: Vec<UpstreamAddress> = (0..30)
            .map(|i| upstream(&format!("192.0.2.{i}"), i))
            .collect();
        let mut out = Exposition::default();
        write_upstreams(&mut out, &addresses);
        let text = out.render();
        assert!(
            text.contains("knot_resolver_upstream_addresses 30.0\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("knot_resolver_upstream_queries_total{")
                .count(),
            20
        );
        // An address with no sample has no RTT series, its tallies all the same.
        assert_eq!(
            text.matches("knot_resolver_upstream_rtt_seconds{").count(),
            10
        );
        assert!(text.contains("knot_resolver_upstream_rtt_samples{address=\"192.0.2.29\"} 14.0"));
        assert!(
            text.contains("knot_resolver_upstream_unanswered_total{address=\"192.0.2.29\"} 15.0")
        );
        assert!(text.contains("knot_resolver_upstream_queries_total{address=\"192.0.2.29\"} 29.0"));
        assert!(
            text.contains("knot_resolver_upstream_error_answers_total{address=\"192.0.2.29\"} 1.0")
        );
        assert!(!text.contains("knot_resolver_upstream_rtt_seconds{address=\"192.0.2.29\"}"));
        assert!(text.contains("knot_resolver_upstream_rtt_seconds{address=\"192.0.2.10\"} 0.0025"));
        assert!(!text.contains("\"192.0.2.9\""), "{text}");
    }
}
