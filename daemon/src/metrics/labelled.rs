//! The workers' statistics as Prometheus users expect them, beside upstream's `resolver_*`
//! names (which stay as they are for existing dashboards): one family per thing counted, what
//! upstream puts into the name (the transport, the address family, the rcode) as labels, and
//! the latency histogram named in its unit. Requests and latency come from kresd's `stats`
//! module as it is; what it lacks (qtypes, most rcodes, cache misses, DNSSEC outcomes) the
//! workers' generated Lua counts (`lua::counts`), and answers and cache hits come from those
//! counts too, so that every family counts the same answers (external queries only).

use super::exposition::{sample_line, Exposition, Kind};
use super::reply::{AnswerCounts, Statistics};
use kres_lua::counts::{HIGHEST_NUMBERED_RCODE, NAMED_QTYPES};

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
const STATS_RCODES: [(&str, &[&str]); 3] = [
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

/// A histogram's `_bucket`, `_count` and `_sum` lines from kresd's latency bins, each with
/// `id` (the worker's label) first; `None` when a bin is missing.
pub fn latency_lines(name: &str, id: &str, stats: &Statistics) -> Option<String> {
    let mut out = String::new();
    let mut cumulative = 0.0;
    for (bin, le) in LATENCY_BINS {
        cumulative += stats.answer.get(bin)?;
        out.push_str(&sample_line(
            &format!("{name}_bucket"),
            &format!("{id},le=\"{le}\""),
            cumulative,
        ));
    }
    let sum = stats.answer.get("sum_ms")? / 1000.0;
    out.push_str(&sample_line(&format!("{name}_count"), id, cumulative));
    out.push_str(&sample_line(&format!("{name}_sum"), id, sum));
    Some(out)
}

/// The rcodes named in the `rcode` label, (number, name); every other rcode is `other`.
const RCODE_NAMES: [(u16, &str); 12] = [
    (0, "NOERROR"),
    (1, "FORMERR"),
    (2, "SERVFAIL"),
    (3, "NXDOMAIN"),
    (4, "NOTIMP"),
    (5, "REFUSED"),
    (6, "YXDOMAIN"),
    (7, "YXRRSET"),
    (8, "NXRRSET"),
    (9, "NOTAUTH"),
    (10, "NOTZONE"),
    (16, "BADVERS"),
];

const QUERIES: &str = "knot_resolver_dns_queries_total";
const QUERIES_HELP: &str = "external queries by the type they ask (qtype): A, AAAA, CNAME, MX, \
    NS, PTR, SOA, SRV, TXT, DS, DNSKEY, HTTPS, SVCB, CAA, NAPTR and ANY by name, every other type \
    as other (counted by the workers' generated Lua)";
const ANSWERS: &str = "knot_resolver_dns_answers_total";
const ANSWERS_HELP: &str = "answers to external queries by rcode: NOERROR, FORMERR, SERVFAIL, \
    NXDOMAIN, NOTIMP, REFUSED, YXDOMAIN, YXRRSET, NXRRSET, NOTAUTH, NOTZONE, BADVERS (the \
    extended rcode of EDNS), every other as other (a dropped query has no answer); a worker \
    running a configuration without the counting reports kresd's NOERROR, NXDOMAIN and SERVFAIL";
const HITS: &str = "knot_resolver_cache_hits_total";
const HITS_HELP: &str = "answers to external queries whose final query kresd answered from its \
    cache or its local data";
const MISSES: &str = "knot_resolver_cache_misses_total";
const MISSES_HELP: &str = "answers to external queries whose final query kresd did not answer \
    from its cache or local data: resolved with upstream servers, failed or ended by a policy";
const DNSSEC: &str = "knot_resolver_dnssec_answers_total";
const DNSSEC_HELP: &str = "answers to external queries by DNSSEC outcome: secure = kresd \
    authenticated the whole answer (validated, or its own local data: what it flags AD when \
    asked), bogus = a SERVFAIL because DNSSEC validation failed (a query kresd flagged bogus, \
    or an extended DNS error of RFC 8914 codes 6 to 12 or 25), insecure = every other answer \
    (unsigned zones, negative trust anchors, DNSSEC off, CD set, nothing to authenticate)";

/// One worker's answer counts (`lua::counts`), as labelled samples: (label value, count).
#[derive(Debug, PartialEq)]
struct Counts {
    /// By qtype name, `other` last.
    queries: Vec<(&'static str, f64)>,
    /// By rcode name, `other` last.
    rcodes: Vec<(&'static str, f64)>,
    /// Answers whose final query came from the cache.
    hits: f64,
    /// Answers whose final query did not.
    misses: f64,
    /// By DNSSEC outcome.
    dnssec: [(&'static str, f64); 3],
}

impl Counts {
    /// The counts a worker's Lua reported; `None` when a qtype or an rcode is missing.
    fn read(counts: &AnswerCounts) -> Option<Counts> {
        let mut queries = Vec::with_capacity(NAMED_QTYPES.len() + 1);
        for (number, name) in NAMED_QTYPES {
            queries.push((name, counts.queries.get(&number.to_string())?));
        }
        queries.push(("other", counts.queries.get("other")?));
        let mut rcodes = Vec::with_capacity(RCODE_NAMES.len() + 1);
        let mut other = counts.rcodes.get("other")?;
        for number in 0..=HIGHEST_NUMBERED_RCODE {
            let value = counts.rcodes.get(&number.to_string())?;
            match RCODE_NAMES.iter().find(|(n, _)| *n == number) {
                Some((_, name)) => rcodes.push((*name, value)),
                None => other += value,
            }
        }
        rcodes.push(("other", other));
        Some(Counts {
            queries,
            rcodes,
            hits: counts.cache.hit,
            misses: counts.cache.miss,
            dnssec: [
                ("secure", counts.dnssec.secure),
                ("insecure", counts.dnssec.insecure),
                ("bogus", counts.dnssec.bogus),
            ],
        })
    }

    /// The families into `out`, `id` the worker's label.
    fn write(&self, out: &mut Exposition, id: &str) {
        write_labelled(out, (QUERIES, QUERIES_HELP), id, "qtype", &self.queries);
        write_labelled(out, (ANSWERS, ANSWERS_HELP), id, "rcode", &self.rcodes);
        out.sample(HITS, HITS_HELP, Kind::Counter, id, self.hits);
        out.sample(MISSES, MISSES_HELP, Kind::Counter, id, self.misses);
        write_labelled(out, (DNSSEC, DNSSEC_HELP), id, "result", &self.dnssec);
    }
}

/// Counter family `name` (with `help`): one sample per value of `label`, after `id`.
fn write_labelled(
    out: &mut Exposition,
    (name, help): (&str, &str),
    id: &str,
    label: &str,
    values: &[(&str, f64)],
) {
    let samples = out.family(name, help, Kind::Counter);
    for (value_label, value) in values {
        samples.push_str(&sample_line(
            name,
            &format!("{id},{label}=\"{value_label}\""),
            *value,
        ));
    }
}

/// One worker's labelled families into `out`, `id` its `instance_id="…"` label, with its
/// answer `counts` where it has them (else the answers by rcode and the cache hits kresd's
/// statistics have); `None` (and `out` partly written: the caller drops it) when a statistic
/// is missing.
pub fn write_worker(
    out: &mut Exposition,
    id: &str,
    stats: &Statistics,
    counts: Option<&AnswerCounts>,
) -> Option<()> {
    write_requests(out, id, stats)?;
    let counts = counts.and_then(|c| {
        let read = Counts::read(c);
        if read.is_none() {
            tracing::warn!(worker = %id, "incomplete answer counts; left out");
        }
        read
    });
    match counts {
        Some(counts) => counts.write(out, id),
        None => write_stats_answers(out, id, stats)?,
    }
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

/// Requests by transport and address family, from kresd's statistics.
fn write_requests(out: &mut Exposition, id: &str, stats: &Statistics) -> Option<()> {
    let requests = "knot_resolver_dns_requests_total";
    let mut lines = String::new();
    for (key, protocol) in PROTOCOLS {
        for (suffix, family) in FAMILIES {
            let value = stats.request.get(&format!("{key}{suffix}"))?;
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
    Some(())
}

/// Answers by rcode and cache hits as kresd's statistics count them, for a worker without
/// answer counts.
fn write_stats_answers(out: &mut Exposition, id: &str, stats: &Statistics) -> Option<()> {
    let mut rcodes = Vec::with_capacity(STATS_RCODES.len());
    for (rcode, keys) in STATS_RCODES {
        let mut value = 0.0;
        for key in keys {
            value += stats.answer.get(key)?;
        }
        rcodes.push((rcode, value));
    }
    let hits = stats.answer.get("cached")?;
    write_labelled(out, (ANSWERS, ANSWERS_HELP), id, "rcode", &rcodes);
    out.sample(HITS, HITS_HELP, Kind::Counter, id, hits);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// `value` as the typed part of a reply it stands for.
    fn typed<T: serde::de::DeserializeOwned>(value: &Value) -> T {
        serde_json::from_value(value.clone()).expect("typed")
    }

    /// One worker's statistics as upstream's fixture has them.
    fn upstream_worker() -> Value {
        let stats: serde_json::Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture");
        stats["kresd:kresd0"].clone()
    }

    #[test]
    fn upstreams_names_become_labels() {
        let mut worker = upstream_worker();
        worker["request"]["udp4"] = 7.into();
        worker["request"]["doh6"] = 3.into();
        worker["answer"]["noerror"] = 5.into();
        worker["answer"]["nodata"] = 2.into();
        worker["answer"]["cached"] = 4.into();
        let mut out = Exposition::default();
        write_worker(&mut out, "instance_id=\"w\"", &typed(&worker), None).expect("complete");
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
        assert!(write_worker(
            &mut Exposition::default(),
            "i=\"w\"",
            &typed(&incomplete),
            None
        )
        .is_none());
    }

    /// A worker's counts as kresd reported them (a real reply), with rarer rcodes added.
    fn counts() -> Value {
        let mut counts: Value =
            serde_json::from_str(include_str!("../../../tests/data/answer-counts.json"))
                .expect("fixture");
        counts["rcodes"]["11"] = 2.into();
        counts["rcodes"]["15"] = 1.into();
        counts["rcodes"]["other"] = 4.into();
        counts["rcodes"]["16"] = 3.into();
        counts
    }

    #[test]
    fn the_workers_counts_give_every_rcode_qtype_and_outcome() {
        let mut worker = upstream_worker();
        worker["answer"]["cached"] = 99.into();
        worker["answer"]["noerror"] = 99.into();
        let mut out = Exposition::default();
        write_worker(
            &mut out,
            "instance_id=\"w\"",
            &typed(&worker),
            Some(&typed(&counts())),
        )
        .expect("complete");
        let text = out.render();
        let parsed = super::super::strict::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let value = |name: &str, label: &str, v: &str| parsed.value(name, &[(label, v)]);
        let answers = "knot_resolver_dns_answers_total";
        for (rcode, expected) in [
            ("NOERROR", 6.0),
            ("SERVFAIL", 1.0),
            ("NXDOMAIN", 1.0),
            ("REFUSED", 1.0),
            ("NOTZONE", 0.0),
            ("BADVERS", 3.0),
            ("other", 7.0),
        ] {
            assert_eq!(value(answers, "rcode", rcode), Some(expected), "{rcode}");
        }
        assert_eq!(parsed.samples(answers).len(), 13, "12 names and other");
        let queries = "knot_resolver_dns_queries_total";
        assert_eq!(value(queries, "qtype", "A"), Some(6.0));
        assert_eq!(value(queries, "qtype", "TXT"), Some(1.0));
        assert_eq!(value(queries, "qtype", "other"), Some(1.0));
        assert_eq!(value(queries, "qtype", "HTTPS"), Some(0.0));
        assert_eq!(parsed.samples(queries).len(), 17, "16 names and other");
        let families = &parsed.families;
        assert_eq!(
            families["knot_resolver_cache_hits_total"].samples[0].value, 7.0,
            "the counts' hits, not kresd's statistics'"
        );
        assert_eq!(
            families["knot_resolver_cache_misses_total"].samples[0].value,
            2.0
        );
        let dnssec = "knot_resolver_dnssec_answers_total";
        assert_eq!(value(dnssec, "result", "secure"), Some(7.0));
        assert_eq!(value(dnssec, "result", "bogus"), Some(1.0));
        assert_eq!(value(dnssec, "result", "insecure"), Some(1.0));
        for family in [answers, queries, dnssec, "knot_resolver_cache_misses_total"] {
            assert_eq!(
                families[family].kind.as_deref(),
                Some("counter"),
                "{family}"
            );
        }
    }

    #[test]
    fn incomplete_counts_leave_kresds_answers_and_hits() {
        let mut worker = upstream_worker();
        worker["answer"]["nxdomain"] = 5.into();
        worker["answer"]["cached"] = 4.into();
        let mut counts = counts();
        counts["rcodes"]
            .as_object_mut()
            .expect("object")
            .remove("9");
        let counts: AnswerCounts = typed(&counts);
        for counts in [None, Some(&counts)] {
            let mut out = Exposition::default();
            write_worker(&mut out, "instance_id=\"w\"", &typed(&worker), counts).expect("complete");
            let text = out.render();
            let parsed =
                super::super::strict::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let answers = parsed.samples("knot_resolver_dns_answers_total");
            let rcodes: Vec<_> = answers.iter().filter_map(|s| s.label("rcode")).collect();
            assert_eq!(rcodes, ["NOERROR", "NXDOMAIN", "SERVFAIL"], "{text}");
            assert_eq!(
                parsed.value("knot_resolver_dns_answers_total", &[("rcode", "NXDOMAIN")]),
                Some(5.0)
            );
            assert_eq!(
                parsed.value("knot_resolver_cache_hits_total", &[]),
                Some(4.0)
            );
            for absent in [
                "knot_resolver_dns_queries_total",
                "knot_resolver_cache_misses_total",
                "knot_resolver_dnssec_answers_total",
            ] {
                assert!(parsed.samples(absent).is_empty(), "{absent}: {text}");
            }
        }
    }
}
