//! Metrics: the kresd statistics gathered from every running worker over its control socket,
//! as upstream's JSON (`/metrics/json`) and Prometheus text (`/metrics/prometheus`, upstream's
//! `resolver_*` names and `instance_id` label), plus our supervisor's own series and the
//! standard `process_*` series of the control plane. The same call brings each worker's
//! answer counts (`lua::counts`), which only the Prometheus text shows: the JSON stays
//! upstream's.
//!
//! - `exposition`: the text written family by family, each once (Prometheus refuses
//!   upstream's repeated headers).
//! - `labelled`: the statistics and the answer counts as labelled families with units in
//!   their names (`knot_resolver_dns_*`, `knot_resolver_cache_*`,
//!   `knot_resolver_dnssec_answers_total`), beside upstream's names.
//! - `control_plane`: the manager's own series (`knot_resolver_*`), tallied from the event
//!   log.
//! - `observed`: the query log's counts and the upstream addresses' round-trip times, in a
//!   bounded number of series.
//! - `rpz`: the `knot_resolver_rpz_*` series and the zones of `GET /rpz`, tallied from the
//!   `rpz-*` events, one pure step per record.

mod control_plane;
mod exposition;
mod labelled;
pub mod observed;
pub mod reply;
mod rpz;
pub mod upstreams;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};
use supervisor::Snapshot;

use crate::control::{self, ControlError};
use crate::service::WorkerId;
pub use control_plane::{ControlPlane, Current};
use exposition::{label, sample_line, Exposition, Kind};
use kres_config::MetricsMode;
use kres_lua::counts;
use reply::{ReplyError, Section, Statistics, UpstreamReport, WorkerReply};

/// What the workers told at one scrape: one control-socket round, every worker asked once.
#[derive(Debug, Default)]
pub struct Collected {
    /// Every worker of the scrape, in the order asked, with its reply or why there is none.
    pub workers: Vec<(WorkerId, Result<WorkerReply, ScrapeError>)>,
}

/// Why a worker told nothing at a scrape.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// `monitoring.metrics: manager-only`: the workers are not asked.
    #[error("not asked (monitoring.metrics: manager-only)")]
    NotAsked,
    /// Its control socket failed.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Its reply did not read.
    #[error(transparent)]
    Reply(#[from] ReplyError),
}

/// The Lua expression a worker evaluates at a scrape: its statistics, answer counts and
/// upstreams where its configuration has the counting functions, else the statistics alone (a
/// worker adopted from an older configuration), as upstream's function for `mode` gives them.
fn collect_expression(mode: MetricsMode) -> Option<String> {
    let fallback = match mode {
        MetricsMode::ManagerOnly => return None,
        MetricsMode::Lazy => "collect_lazy_statistics",
        MetricsMode::Always => "collect_statistics",
    };
    let collect = counts::COLLECT_FUNCTION;
    Some(format!(
        "{collect} and {collect}() or {{stats = {fallback}()}}"
    ))
}

/// Ask every worker of `ids`, once each and all at once, for its statistics, answer counts
/// and upstreams. A worker that fails is logged here, once, and kept with its error.
pub async fn collect(rundir: &Path, ids: &[WorkerId], mode: MetricsMode) -> Collected {
    let Some(expr) = collect_expression(mode) else {
        let workers = ids.iter().map(|&id| (id, Err(ScrapeError::NotAsked)));
        return Collected {
            workers: workers.collect(),
        };
    };
    let replies = control::command_all_within(rundir, ids, &expr, reply::MAX_REPLY).await;
    let workers = replies
        .into_iter()
        .map(|(id, result)| {
            let reply = result
                .map_err(ScrapeError::from)
                .and_then(|value| WorkerReply::read(value).map_err(ScrapeError::from));
            if let Err(e) = &reply {
                tracing::warn!(worker = %id, "cannot collect statistics: {}", kres_wire::error_line(e));
            }
            (id, reply)
        })
        .collect();
    Collected { workers }
}

impl Collected {
    /// kresd's statistics of every worker as upstream serves them (`/metrics/json`), by
    /// `instance_id`; `null` for a worker that told none.
    pub fn stats_json(&self) -> Map<String, Value> {
        self.workers
            .iter()
            .map(|(id, reply)| {
                let stats = match reply {
                    Ok(reply) => Value::Object(reply.raw_stats.clone()),
                    Err(_) => Value::Null,
                };
                (id.instance_id(), stats)
            })
            .collect()
    }

    /// The workers' typed statistics, for those whose statistics read.
    pub fn statistics(&self) -> impl Iterator<Item = (WorkerId, &Statistics)> {
        self.workers
            .iter()
            .filter_map(|(id, reply)| Some((*id, reply.as_ref().ok()?.stats.as_ref().ok()?)))
    }

    /// The workers' upstream reports, and the workers that told none (their control socket
    /// failed, or their configuration has no upstream tallies).
    fn upstream_reports(&self) -> (Vec<(WorkerId, &UpstreamReport)>, Vec<WorkerId>) {
        let mut told = Vec::new();
        let mut silent = Vec::new();
        for (id, reply) in &self.workers {
            match reply.as_ref().map(|r| r.upstreams.as_ref()) {
                Ok(Some(Ok(report))) => told.push((*id, report)),
                Ok(Some(Err(e))) => {
                    tracing::warn!(worker = %id, "upstreams: {}", kres_wire::error_line(e));
                    silent.push(*id);
                }
                Ok(None) | Err(_) => silent.push(*id),
            }
        }
        (told, silent)
    }

    /// The upstream addresses the workers used recently, merged over them.
    pub fn upstream_addresses(&self) -> Vec<kres_wire::upstreams::UpstreamAddress> {
        upstreams::merge(&self.upstream_reports().0)
    }

    /// `GET /upstreams`' answer, with the configuration's `forwards`.
    pub fn upstreams(
        &self,
        forwards: Vec<kres_wire::upstreams::ForwardTarget>,
    ) -> kres_wire::upstreams::Upstreams {
        let (told, silent) = self.upstream_reports();
        kres_wire::upstreams::Upstreams {
            forwards,
            addresses: upstreams::merge(&told),
            workers_silent: silent.into_iter().map(WorkerId::name).collect(),
            counted_since: upstreams::counted_since(&told),
        }
    }

    /// Each worker's own count of the query log's records it dropped, as its answer counts
    /// tell it (`lua::counts`), by worker number; workers without the count are left out.
    pub fn query_log_dropped(&self) -> BTreeMap<u32, u64> {
        self.workers
            .iter()
            .filter_map(|(id, reply)| {
                let counts = reply.as_ref().ok()?.counts.as_ref()?.as_ref().ok()?;
                let dropped = counts.query_log.as_ref()?.dropped;
                Some((id.0, dropped.max(0.0) as u64))
            })
            .collect()
    }
}

/// (name, help, section, key) of every counter upstream exports, in upstream's order.
const COUNTERS: &[(&str, &str, Section, &str)] = &[
    (
        "resolver_request_total",
        "total number of DNS requests (including internal client requests)",
        Section::Request,
        "total",
    ),
    (
        "resolver_request_total4",
        "total number of IPv4 DNS requests",
        Section::Request,
        "total4",
    ),
    (
        "resolver_request_total6",
        "total number of IPv6 DNS requests",
        Section::Request,
        "total6",
    ),
    (
        "resolver_request_internal",
        "number of internal requests generated by Knot Resolver (e.g. DNSSEC trust anchor updates)",
        Section::Request,
        "internal",
    ),
    (
        "resolver_request_udp",
        "number of external requests received over plain UDP (RFC 1035)",
        Section::Request,
        "udp",
    ),
    (
        "resolver_request_udp4",
        "number of external requests received over IPv4 plain UDP (RFC 1035)",
        Section::Request,
        "udp4",
    ),
    (
        "resolver_request_udp6",
        "number of external requests received over IPv6 plain UDP (RFC 1035)",
        Section::Request,
        "udp6",
    ),
    (
        "resolver_request_tcp",
        "number of external requests received over plain TCP (RFC 1035)",
        Section::Request,
        "tcp",
    ),
    (
        "resolver_request_tcp4",
        "number of external requests received over IPv4 plain TCP (RFC 1035)",
        Section::Request,
        "tcp4",
    ),
    (
        "resolver_request_tcp6",
        "number of external requests received over IPv6 plain TCP (RFC 1035)",
        Section::Request,
        "tcp6",
    ),
    (
        "resolver_request_dot",
        "number of external requests received over DNS-over-TLS (RFC 7858)",
        Section::Request,
        "dot",
    ),
    (
        "resolver_request_dot4",
        "number of external requests received over IPv4 DNS-over-TLS (RFC 7858)",
        Section::Request,
        "dot4",
    ),
    (
        "resolver_request_dot6",
        "number of external requests received over IPv6 DNS-over-TLS (RFC 7858)",
        Section::Request,
        "dot6",
    ),
    (
        "resolver_request_doh",
        "number of external requests received over DNS-over-HTTP (RFC 8484)",
        Section::Request,
        "doh",
    ),
    (
        "resolver_request_doh4",
        "number of external requests received over IPv4 DNS-over-HTTP (RFC 8484)",
        Section::Request,
        "doh4",
    ),
    (
        "resolver_request_doh6",
        "number of external requests received over IPv6 DNS-over-HTTP (RFC 8484)",
        Section::Request,
        "doh6",
    ),
    (
        "resolver_request_xdp",
        "number of external requests received over plain UDP via an AF_XDP socket",
        Section::Request,
        "xdp",
    ),
    (
        "resolver_request_xdp4",
        "number of external requests received over IPv4 plain UDP via an AF_XDP socket",
        Section::Request,
        "xdp4",
    ),
    (
        "resolver_request_xdp6",
        "number of external requests received over IPv6 plain UDP via an AF_XDP socket",
        Section::Request,
        "xdp6",
    ),
    (
        "resolver_request_doq",
        "number of external requests received over DNS-over-QUIC (RFC 9250)",
        Section::Request,
        "doq",
    ),
    (
        "resolver_request_doq4",
        "number of external requests received over IPv4 DNS-over-QUIC (RFC 9250)",
        Section::Request,
        "doq4",
    ),
    (
        "resolver_request_doq6",
        "number of external requests received over IPv6 DNS-over-QUIC (RF 9250)",
        Section::Request,
        "doq6",
    ),
    (
        "resolver_answer_total",
        "total number of answered queries",
        Section::Answer,
        "total",
    ),
    (
        "resolver_answer_cached",
        "number of queries answered from cache",
        Section::Answer,
        "cached",
    ),
    (
        "resolver_answer_stale",
        "number of queries that utilized stale data",
        Section::Answer,
        "stale",
    ),
    (
        "resolver_answer_rcode_noerror",
        "number of NOERROR answers",
        Section::Answer,
        "noerror",
    ),
    (
        "resolver_answer_rcode_nodata",
        "number of NOERROR answers without any data",
        Section::Answer,
        "nodata",
    ),
    (
        "resolver_answer_rcode_nxdomain",
        "number of NXDOMAIN answers",
        Section::Answer,
        "nxdomain",
    ),
    (
        "resolver_answer_rcode_servfail",
        "number of SERVFAIL answers",
        Section::Answer,
        "servfail",
    ),
    (
        "resolver_answer_flag_aa",
        "number of authoritative answers",
        Section::Answer,
        "aa",
    ),
    (
        "resolver_answer_flag_tc",
        "number of truncated answers",
        Section::Answer,
        "tc",
    ),
    (
        "resolver_answer_flag_ra",
        "number of answers with recursion available flag",
        Section::Answer,
        "ra",
    ),
    (
        "resolver_answer_flag_rd",
        "number of recursion desired (in answer!)",
        Section::Answer,
        "rd",
    ),
    (
        "resolver_answer_flag_ad",
        "number of authentic data (DNSSEC) answers",
        Section::Answer,
        "ad",
    ),
    (
        "resolver_answer_flag_cd",
        "number of checking disabled (DNSSEC) answers",
        Section::Answer,
        "cd",
    ),
    (
        "resolver_answer_flag_do",
        "number of DNSSEC answer OK",
        Section::Answer,
        "do",
    ),
    (
        "resolver_answer_flag_edns0",
        "number of answers with EDNS0 present",
        Section::Answer,
        "edns0",
    ),
    (
        "resolver_query_edns",
        "number of queries with EDNS present",
        Section::Query,
        "edns",
    ),
    (
        "resolver_query_dnssec",
        "number of queries with DNSSEC DO=1",
        Section::Query,
        "dnssec",
    ),
];

const PREDICT: &[(&str, &str, &str)] = &[
    (
        "resolver_predict_epoch",
        "current prediction epoch (based on time of day and sampling window)",
        "epoch",
    ),
    (
        "resolver_predict_queue",
        "number of queued queries in current window",
        "queue",
    ),
    (
        "resolver_predict_learned",
        "number of learned queries in current window",
        "learned",
    ),
];

/// prometheus_client's sample name of a counter: `_total` appended unless already there.
fn counter_name(name: &str) -> String {
    if name.ends_with("_total") {
        name.to_owned()
    } else {
        format!("{name}_total")
    }
}

/// One worker's `resolver_*` samples and labelled families (with its answer `counts`, if it
/// has them), by family; `None` when a statistic is missing (the loaded gauge is 0 and none of
/// its samples is written).
fn worker_families(
    sid: &str,
    stats: &Statistics,
    counts: Option<&reply::AnswerCounts>,
) -> Option<Exposition> {
    let mut out = Exposition::default();
    let id = format!("instance_id=\"{}\"", label(sid));
    let hist = labelled::latency_lines("resolver_response_latency", &id, stats)?;
    out.family(
        "resolver_response_latency",
        "Time it takes to respond to queries in seconds",
        Kind::Histogram,
    )
    .push_str(&hist);
    for (name, help, section, key) in COUNTERS {
        let value = stats.section(*section).get(key)?;
        out.sample(&counter_name(name), help, Kind::Counter, &id, value);
    }
    if let Some(predict) = &stats.predict {
        for (name, help, key) in PREDICT {
            if *key == "epoch" && predict.get("epoch").is_none() {
                continue;
            }
            let value = predict.get(key)?;
            out.sample(&counter_name(name), help, Kind::Counter, &id, value);
        }
    }
    labelled::write_worker(&mut out, &id, stats, counts)?;
    Some(out)
}

/// Prometheus text: the workers' statistics, our supervisor's series, the control plane's
/// and the standard ones of our own process.
pub fn render_prometheus(
    collected: &Collected,
    control_plane: &ControlPlane,
    now: &Current<'_>,
) -> String {
    let mut out = Exposition::default();
    write_workers(&mut out, collected);
    write_supervisor(&mut out, now.snapshot);
    control_plane.write(&mut out, now);
    if let Some(status) = now.query_log {
        observed::write_query_log(&mut out, status);
    }
    observed::write_upstreams(&mut out, now.upstreams);
    if let Some(node) = now.fleet {
        observed::write_fleet(&mut out, node);
    }
    write_process(&mut out);
    out.render()
}

/// The workers' `resolver_*` families: every worker's samples under one header per family,
/// then whether each worker's statistics were loaded.
fn write_workers(out: &mut Exposition, collected: &Collected) {
    let mut loaded = Vec::new();
    for (id, reply) in &collected.workers {
        let sid = id.instance_id();
        let families = match reply {
            Err(_) => None,
            Ok(reply) => worker_reply_families(&sid, reply),
        };
        loaded.push((sid, families.is_some()));
        if let Some(families) = families {
            out.merge(families);
        }
    }
    let samples = out.family(
        "resolver_metrics_loaded",
        "0 if metrics from resolver instance were not loaded, otherwise 1",
        Kind::Gauge,
    );
    for (sid, ok) in loaded {
        samples.push_str(&sample_line(
            "resolver_metrics_loaded",
            &format!("instance_id=\"{}\"", label(&sid)),
            f64::from(u8::from(ok)),
        ));
    }
}

/// The families of a worker that replied; `None` (logged) when its statistics do not read
/// or lack a counter.
fn worker_reply_families(sid: &str, reply: &WorkerReply) -> Option<Exposition> {
    let stats = match &reply.stats {
        Ok(stats) => stats,
        Err(e) => {
            tracing::warn!(worker = %sid, "{}; metrics not loaded", kres_wire::error_line(e));
            return None;
        }
    };
    let counts = match &reply.counts {
        Some(Ok(counts)) => Some(counts),
        Some(Err(e)) => {
            tracing::warn!(worker = %sid, "{}; answer counts left out", kres_wire::error_line(e));
            None
        }
        None => None,
    };
    let families = worker_families(sid, stats, counts);
    if families.is_none() {
        tracing::warn!(worker = %sid, "statistics incomplete; metrics not loaded");
    }
    families
}

/// (name, help, type, value of one process) of a supervisor series.
type SupervisorFamily = (
    &'static str,
    &'static str,
    Kind,
    fn(&supervisor::ProcessSnapshot) -> f64,
);

/// Our supervisor's series, one sample per process of its table.
fn write_supervisor(out: &mut Exposition, snapshot: &Snapshot) {
    let families: [SupervisorFamily; 3] = [
        (
            "kres_supervisor_process_up",
            "1 if the supervised process is alive, otherwise 0",
            Kind::Gauge,
            |p| f64::from(u8::from(p.pid.is_some())),
        ),
        (
            "kres_supervisor_process_ready",
            "1 if the supervised process is running and ready, otherwise 0",
            Kind::Gauge,
            |p| f64::from(u8::from(p.state == supervisor::ProcessState::Running)),
        ),
        (
            "kres_supervisor_process_restarts_total",
            "automatic restarts of the supervised process",
            Kind::Counter,
            |p| f64::from(p.restarts),
        ),
    ];
    for (name, help, kind, value) in families {
        let samples = out.family(name, help, kind);
        for p in &snapshot.processes {
            let labels = format!("name=\"{}\",kind=\"{}\"", label(&p.name), label(&p.kind));
            samples.push_str(&sample_line(name, &labels, value(p)));
        }
    }
}

/// The standard `process_*` series for our own process, from /proc/self.
fn write_process(out: &mut Exposition) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|k| k * 1024.0)
    };
    if let Some(rss) = kib("VmRSS:") {
        out.sample(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            Kind::Gauge,
            "",
            rss,
        );
    }
    if let Some(vm) = kib("VmSize:") {
        out.sample(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            Kind::Gauge,
            "",
            vm,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let n = fds.count() as f64;
        out.sample(
            "process_open_fds",
            "Number of open file descriptors.",
            Kind::Gauge,
            "",
            n,
        );
    }
    if let Some(cpu) = cpu_seconds() {
        out.sample(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            Kind::Counter,
            "",
            cpu,
        );
    }
}

/// User and system CPU time of this process, from /proc/self/stat.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name: utime and stime are 14 and 15 (1-based) of the line.
    let rest = stat.rfind(')').and_then(|i| stat.get(i + 2..))?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let u = fields.get(11)?.parse::<f64>().ok()?;
    let s = fields.get(12)?.parse::<f64>().ok()?;
    Some((u + s) / ticks)
}

/// The strict reader of the text format the end-to-end tests use too.
#[cfg(test)]
#[path = "../../../tests/exposition/mod.rs"]
mod strict;

#[cfg(test)]
mod tests {
    use super::strict;

    /// Our text for `stats` (with no answer counts), with no control-plane event and table
    /// `snapshot`.
    fn render(stats: &Map<String, Value>, snapshot: &Snapshot) -> String {
        let now = Current {
            snapshot,
            etag: "\"tag\"",
            workers: 2,
            kresd_version: None,
            query_log: None,
            upstreams: &[],
            fleet: None,
        };
        render_prometheus(&collected(stats), &ControlPlane::default(), &now)
    }

    /// What workers replying `stats` (by `instance_id`) with their statistics alone make.
    fn collected(stats: &Map<String, Value>) -> Collected {
        let workers = stats.iter().map(|(sid, stats)| {
            let id = sid
                .strip_prefix("kresd:")
                .and_then(WorkerId::from_name)
                .expect("a worker's instance_id");
            let reply = WorkerReply::read(serde_json::json!({ "stats": stats }));
            (id, reply.map_err(ScrapeError::from))
        });
        Collected {
            workers: workers.collect(),
        }
    }
    use super::*;

    /// Upstream's own output repeats every family's header for each worker, which
    /// Prometheus refuses; ours has each family once, with both workers' samples under it.
    #[test]
    fn the_exposition_is_strictly_valid_where_upstreams_is_not() {
        let upstream_text = include_str!("../../../tests/data/upstream/metrics-prometheus.txt");
        let refused = strict::parse(upstream_text).expect_err("upstream's output is refused");
        assert!(refused.contains("resolver_response_latency"), "{refused}");
        let stats: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture JSON");
        let snapshot: Snapshot = serde_json::from_value(serde_json::json!({
            "processes": [
                {"name": "kresd0", "kind": "kresd", "pid": 10, "state": "running", "since": null,
                 "ready_at": null, "restarts": 0, "last_exit": null, "failure": null,
                 "status_text": null},
                {"name": "kresd1", "kind": "kresd", "pid": null, "state": "backoff", "since": null,
                 "ready_at": null, "restarts": 2, "last_exit": null, "failure": null,
                 "status_text": null}
            ],
            "shutting_down": false
        }))
        .expect("snapshot");
        let ours = render(&stats, &snapshot);
        let parsed = strict::parse(&ours).unwrap_or_else(|e| panic!("{e}\n{ours}"));
        let latency = &parsed.families["resolver_response_latency"];
        assert_eq!(
            latency.samples.len(),
            2 * 11,
            "both workers' buckets, count and sum"
        );
        assert_eq!(
            parsed.value(
                "kres_supervisor_process_restarts_total",
                &[("name", "kresd1")]
            ),
            Some(2.0)
        );
    }

    /// Our names for a worker's statistics equal upstream's, taken from a real upstream scrape.
    #[test]
    fn resolver_series_names_match_upstream() {
        let upstream_text = include_str!("../../../tests/data/upstream/metrics-prometheus.txt");
        let upstream_json: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture JSON");
        let ours = render(&upstream_json, &Snapshot::default());
        let names = |text: &str| -> std::collections::BTreeSet<String> {
            text.lines()
                .filter(|l| l.starts_with("resolver"))
                .map(|l| l.split(' ').next().unwrap_or("").to_owned())
                .collect()
        };
        assert_eq!(names(&ours), names(upstream_text));
        let help = |text: &str| -> std::collections::BTreeSet<String> {
            text.lines()
                .filter(|l| l.starts_with("# HELP resolver") || l.starts_with("# TYPE resolver"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(help(&ours), help(upstream_text));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let stats: Statistics = serde_json::from_value(serde_json::json!({
            "answer": {"1ms": 1, "10ms": 2, "50ms": 0, "100ms": 0, "250ms": 0, "500ms": 0, "1000ms": 0, "1500ms": 0, "slow": 3, "sum_ms": 2500},
            "request": {}, "query": []
        }))
        .expect("typed");
        let families = worker_families("w", &stats, None);
        assert!(
            families.is_none(),
            "missing counters make the worker not loaded"
        );
        let mut full = serde_json::from_str::<Map<String, Value>>(include_str!(
            "../../../tests/data/upstream/metrics.json"
        ))
        .expect("fixture");
        let w = full.get_mut("kresd:kresd0").expect("worker");
        w["answer"]["1ms"] = 1.into();
        w["answer"]["10ms"] = 2.into();
        w["answer"]["slow"] = 3.into();
        w["answer"]["sum_ms"] = 2500.into();
        let text = render(&full, &Snapshot::default());
        assert!(
            text.contains(
                "resolver_response_latency_bucket{instance_id=\"kresd:kresd0\",le=\"0.01\"} 3.0"
            ),
            "{text}"
        );
        assert!(text.contains(
            "resolver_response_latency_bucket{instance_id=\"kresd:kresd0\",le=\"+Inf\"} 6.0"
        ));
        assert!(text.contains("resolver_response_latency_sum{instance_id=\"kresd:kresd0\"} 2.5"));
        assert!(text.contains("resolver_metrics_loaded{instance_id=\"kresd:kresd0\"} 1.0"));
    }

    /// A worker of our configuration answers everything; one of an older configuration
    /// (adopted by this manager) the statistics alone, as upstream's function gives them.
    #[test]
    fn one_expression_asks_for_everything() {
        assert_eq!(
            collect_expression(MetricsMode::Lazy).as_deref(),
            Some(
                "collect_labelled_statistics and collect_labelled_statistics() or \
                 {stats = collect_lazy_statistics()}"
            )
        );
        assert!(collect_expression(MetricsMode::Always)
            .is_some_and(|e| e.ends_with("{stats = collect_statistics()}")));
        assert_eq!(collect_expression(MetricsMode::ManagerOnly), None);
    }

    /// The JSON serves what the workers sent, `null` for a worker that sent nothing that
    /// reads; the Prometheus text has it not loaded.
    #[test]
    fn a_worker_without_statistics_is_null_and_not_loaded() {
        let stats: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture JSON");
        let mut collected = collected(&stats);
        let error = WorkerReply::read(Value::from("[string]:1: attempt to call a nil value"));
        collected
            .workers
            .push((WorkerId(2), error.map_err(ScrapeError::from)));
        collected
            .workers
            .push((WorkerId(3), Err(ScrapeError::NotAsked)));
        let json = collected.stats_json();
        assert_eq!(json["kresd:kresd0"], stats["kresd:kresd0"]);
        assert_eq!(
            (&json["kresd:kresd2"], &json["kresd:kresd3"]),
            (&Value::Null, &Value::Null)
        );
        let text = render_prometheus(
            &collected,
            &ControlPlane::default(),
            &Current {
                snapshot: &Snapshot::default(),
                etag: "\"tag\"",
                workers: 4,
                kresd_version: None,
                query_log: None,
                upstreams: &[],
                fleet: None,
            },
        );
        for (worker, loaded) in [(0, "1.0"), (2, "0.0"), (3, "0.0")] {
            let line =
                format!("resolver_metrics_loaded{{instance_id=\"kresd:kresd{worker}\"}} {loaded}");
            assert!(text.contains(&line), "{line}\n{text}");
        }
        let (told, silent) = collected.upstream_reports();
        assert!(told.is_empty());
        assert_eq!(silent, [WorkerId(0), WorkerId(1), WorkerId(2), WorkerId(3)]);
    }

    /// A fake worker's control socket on `listener`: for every connection, the prompt, then,
    /// once the two lines (`__json` and the command) are read, `reply` as kresd frames it
    /// (`length` in place of its own length when given). Counts its connections.
    async fn fake_worker(
        listener: tokio::net::UnixListener,
        reply: Vec<u8>,
        length: Option<u32>,
        connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut stream = BufReader::new(stream);
            let _ = stream.get_mut().write_all(b"> ").await;
            let mut line = String::new();
            for _ in 0..2 {
                line.clear();
                let _ = stream.read_line(&mut line).await;
            }
            let len = length.unwrap_or(reply.len() as u32);
            let _ = stream.get_mut().write_all(&len.to_be_bytes()).await;
            let _ = stream.get_mut().write_all(&reply).await;
        }
    }

    /// One collection connects to each worker once; a worker that is not there, one whose
    /// reply is oversize and one that answers a Lua error each get an error of their own,
    /// and the one that answers well is read.
    #[tokio::test]
    async fn a_collection_asks_each_worker_once_and_keeps_each_failure_apart() {
        let rundir = std::env::temp_dir().join(format!("kres-collect-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&rundir);
        std::fs::create_dir_all(rundir.join("control")).expect("dir");
        let stats: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture JSON");
        let good = serde_json::json!({"stats": stats["kresd:kresd0"],
            "upstreams": {"rtt": {"192.0.2.1": [3]}, "tallies": [], "since": 5}});
        let lua_error = b"[string]:1: attempt to call a nil value".to_vec();
        let oversize = (reply::MAX_REPLY + 1) as u32;
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let workers = [
            (0, good.to_string().into_bytes(), None),
            (1, lua_error, None),
            (2, b"{}".to_vec(), Some(oversize)),
        ];
        for (n, reply, length) in workers {
            let path = WorkerId(n).control_socket(&rundir);
            let listener = tokio::net::UnixListener::bind(&path).expect("bind");
            tokio::spawn(fake_worker(listener, reply, length, connections.clone()));
        }
        let ids = [WorkerId(0), WorkerId(1), WorkerId(2), WorkerId(3)];
        let collected = collect(&rundir, &ids, MetricsMode::Lazy).await;
        assert_eq!(
            connections.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "one connection to each worker that listens"
        );
        let errors: Vec<String> = collected
            .workers
            .iter()
            .map(|(_, r)| {
                r.as_ref()
                    .err()
                    .map(|e| kres_wire::error_line(e))
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(errors[0], "");
        assert_eq!(
            errors[1],
            "the worker answered no statistics: [string]:1: attempt to call a nil value"
        );
        assert!(
            errors[2].ends_with(&format!("sent an oversize reply ({oversize} bytes)")),
            "{}",
            errors[2]
        );
        assert!(errors[3].starts_with("cannot talk to "), "{}", errors[3]);
        let upstreams = collected.upstreams(Vec::new());
        assert_eq!(upstreams.addresses.len(), 1);
        assert_eq!(upstreams.workers_silent, ["kresd1", "kresd2", "kresd3"]);
        assert_eq!(upstreams.counted_since, Some(5.0));
        assert_eq!(
            collected.stats_json()["kresd:kresd0"],
            stats["kresd:kresd0"]
        );
        let _ = std::fs::remove_dir_all(&rundir);
    }

    #[test]
    fn dropped_counts_come_from_the_answer_counts() {
        let mut counts: Value =
            serde_json::from_str(include_str!("../../../tests/data/answer-counts.json"))
                .expect("fixture");
        counts["query_log"] = serde_json::json!({"dropped": 12.0});
        let stats: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture JSON");
        let reply = |counts: Value| {
            let reply = serde_json::json!({"stats": stats["kresd:kresd0"], "counts": counts});
            WorkerReply::read(reply).map_err(ScrapeError::from)
        };
        let without = {
            let mut c = counts.clone();
            c.as_object_mut().expect("object").remove("query_log");
            c
        };
        let collected = Collected {
            workers: vec![
                (WorkerId(0), reply(counts)),
                (WorkerId(1), reply(without)),
                (WorkerId(2), reply(serde_json::json!({"cache": {}}))),
            ],
        };
        assert_eq!(collected.query_log_dropped(), BTreeMap::from([(0, 12)]));
    }
}
