//! The workers' statistics as Prometheus users expect them, beside upstream's `resolver_*`
//! names (which stay as they are for existing dashboards): one family per thing counted, what
//! upstream puts into the name (the transport, the address family, the rcode) as labels, and
//! the latency histogram named in its unit. Everything here comes from kresd's `stats` module
//! as it is; counts it lacks (qtypes, most rcodes) need counting in the workers.

use serde_json::Value;

use super::exposition::{sample_line, Exposition, Kind};

/// The transports kresd's `stats` counts by address family: (stats key, `protocol` label).
const PROTOCOLS: [(&str, &str); 6] = [
    ("udp", "udp"),
    ("tcp", "tcp"),
    ("dot", "dot"),
    ("doh", "doh"),
    ("doq", "doq"),
    ("xdp", "xdp"),
];

/// The address families: (stats key suffix, `family` label).
const FAMILIES: [(&str, &str); 2] = [("4", "ipv4"), ("6", "ipv6")];

/// The rcodes kresd's `stats` counts: (`rcode` label, the stats keys whose sum it is; NOERROR
/// answers with data and without are counted apart).
const RCODES: [(&str, &[&str]); 3] = [
    ("NOERROR", &["noerror", "nodata"]),
    ("NXDOMAIN", &["nxdomain"]),
    ("SERVFAIL", &["servfail"]),
];

/// kresd's latency bins (not cumulative) and their upper bounds in seconds.
pub const LATENCY_BINS: [(&str, &str); 9] = [
    ("1ms", "0.001"),
    ("10ms", "0.01"),
    ("50ms", "0.05"),
    ("100ms", "0.1"),
    ("250ms", "0.25"),
    ("500ms", "0.5"),
    ("1000ms", "1.0"),
    ("1500ms", "1.5"),
    ("slow", "+Inf"),
];

fn get(stats: &Value, section: &str, key: &str) -> Option<f64> {
    stats.get(section)?.get(key)?.as_f64()
}

/// A histogram's `_bucket`, `_count` and `_sum` lines from kresd's latency bins, each with
/// `id` (the worker's label) first; `None` when a bin is missing.
pub fn latency_lines(name: &str, id: &str, stats: &Value) -> Option<String> {
    let mut out = String::new();
    let mut cumulative = 0.0;
    for (bin, le) in LATENCY_BINS {
        cumulative += get(stats, "answer", bin)?;
        out.push_str(&sample_line(
            &format!("{name}_bucket"),
            &format!("{id},le=\"{le}\""),
            cumulative,
        ));
    }
    let sum = get(stats, "answer", "sum_ms")? / 1000.0;
    out.push_str(&sample_line(&format!("{name}_count"), id, cumulative));
    out.push_str(&sample_line(&format!("{name}_sum"), id, sum));
    Some(out)
}

/// One worker's labelled families into `out`, `id` its `instance_id="…"` label; `None` (and
/// `out` partly written: the caller drops it) when a count is missing.
pub fn write_worker(out: &mut Exposition, id: &str, stats: &Value) -> Option<()> {
    let requests = "knot_resolver_dns_requests_total";
    let mut lines = String::new();
    for (key, protocol) in PROTOCOLS {
        for (suffix, family) in FAMILIES {
            let value = get(stats, "request", &format!("{key}{suffix}"))?;
            lines.push_str(&sample_line(
                requests,
                &format!("{id},protocol=\"{protocol}\",family=\"{family}\""),
                value,
            ));
        }
    }
    out.family(
        requests,
        "external DNS requests received, by transport (udp, tcp, dot, doh, doq, xdp) and address \
         family (ipv4, ipv6)",
        Kind::Counter,
    )
    .push_str(&lines);

    let answers = "knot_resolver_dns_answers_total";
    let mut lines = String::new();
    for (rcode, keys) in RCODES {
        let mut value = 0.0;
        for key in keys {
            value += get(stats, "answer", key)?;
        }
        lines.push_str(&sample_line(
            answers,
            &format!("{id},rcode=\"{rcode}\""),
            value,
        ));
    }
    out.family(
        answers,
        "answers by rcode (NOERROR, NXDOMAIN, SERVFAIL: the rcodes kresd's statistics count)",
        Kind::Counter,
    )
    .push_str(&lines);

    out.sample(
        "knot_resolver_cache_hits_total",
        "answers served from the cache",
        Kind::Counter,
        id,
        get(stats, "answer", "cached")?,
    );

    let latency = "knot_resolver_dns_response_duration_seconds";
    let lines = latency_lines(latency, id, stats)?;
    out.family(
        latency,
        "time to answer a query, in seconds",
        Kind::Histogram,
    )
    .push_str(&lines);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_names_become_labels() {
        let stats: serde_json::Map<String, Value> =
            serde_json::from_str(include_str!("../../tests/data/upstream/metrics.json"))
                .expect("fixture");
        let mut worker = stats["kresd:kresd0"].clone();
        worker["request"]["udp4"] = 7.into();
        worker["request"]["doh6"] = 3.into();
        worker["answer"]["noerror"] = 5.into();
        worker["answer"]["nodata"] = 2.into();
        worker["answer"]["cached"] = 4.into();
        let mut out = Exposition::default();
        write_worker(&mut out, "instance_id=\"w\"", &worker).expect("complete");
        let text = out.render();
        let parsed = super::super::strict::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let value = |name: &str, labels: &[(&str, &str)]| parsed.value(name, labels);
        let requests = "knot_resolver_dns_requests_total";
        assert_eq!(
            value(requests, &[("protocol", "udp"), ("family", "ipv4")]),
            Some(7.0)
        );
        assert_eq!(
            value(requests, &[("protocol", "doh"), ("family", "ipv6")]),
            Some(3.0)
        );
        assert_eq!(parsed.samples(requests).len(), 12);
        assert_eq!(
            value("knot_resolver_dns_answers_total", &[("rcode", "NOERROR")]),
            Some(7.0),
            "answers with data and without"
        );
        assert_eq!(value("knot_resolver_cache_hits_total", &[]), Some(4.0));
        let mut incomplete = worker.clone();
        incomplete["request"]
            .as_object_mut()
            .expect("object")
            .remove("doq6");
        assert!(write_worker(&mut Exposition::default(), "i=\"w\"", &incomplete).is_none());
    }
}
