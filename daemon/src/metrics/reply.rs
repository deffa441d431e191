//! One worker's reply to a scrape, typed: the one JSON object its
//! [`COLLECT_FUNCTION`](kres_lua::counts::COLLECT_FUNCTION) returns, with kresd's
//! statistics, the generated Lua's answer counts and its upstreams' samples and tallies
//! (`lua::counts`). A worker is another process: its reply is bounded in size
//! ([`MAX_REPLY`]), and one that does not read is an error naming what was wrong, never a
//! panic. Each part is read on its own, so a part that does not read spoils no other (a
//! worker of an older configuration has the statistics alone).

use std::collections::BTreeMap;

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Largest reply we read from a worker at a scrape: kresd's statistics, a few dozen counts
/// and at most [`MAX_UPSTREAMS`](kres_lua::counts::MAX_UPSTREAMS) tallies make a few
/// tens of KiB.
pub const MAX_REPLY: usize = 4 * 1024 * 1024;

/// The most of a worker's text an error quotes.
const QUOTED: usize = 200;

/// Why a worker's reply did not read.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// Not the object of statistics: a Lua error's text, most often.
    #[error("the worker answered no statistics: {0}")]
    NotStatistics(String),
    /// A part of the object is not what it should be.
    #[error("the worker's {part} do not read")]
    Part {
        /// `stats`, `counts` or `upstreams`.
        part: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// What one worker told at a scrape.
#[derive(Debug)]
pub struct WorkerReply {
    /// kresd's statistics as the worker sent them: `/metrics/json` serves them unchanged, as
    /// upstream does.
    pub raw_stats: Map<String, Value>,
    /// The same statistics, typed (an error makes the worker's metrics "not loaded").
    pub stats: Result<Statistics, ReplyError>,
    /// The answer counts, when the worker's configuration has them.
    pub counts: Option<Result<AnswerCounts, ReplyError>>,
    /// The upstreams' samples and tallies, when the worker's configuration has them.
    pub upstreams: Option<Result<UpstreamReport, ReplyError>>,
}

impl WorkerReply {
    /// A worker's reply, as the control socket gave it.
    pub fn read(reply: Value) -> Result<WorkerReply, ReplyError> {
        let mut reply = match reply {
            Value::Object(reply) => reply,
            Value::String(text) => return Err(ReplyError::NotStatistics(quoted(&text))),
            other => return Err(ReplyError::NotStatistics(quoted(&other.to_string()))),
        };
        let raw_stats = match reply.remove("stats") {
            Some(Value::Object(stats)) => stats,
            Some(other) => {
                let shown = format!("stats = {other}");
                return Err(ReplyError::NotStatistics(quoted(&shown)));
            }
            None => {
                let keys: Vec<&str> = reply.keys().map(String::as_str).collect();
                let shown = format!("an object of {}", keys.join(", "));
                return Err(ReplyError::NotStatistics(quoted(&shown)));
            }
        };
        let stats = Statistics::deserialize(&Value::Object(raw_stats.clone())).map_err(|source| {
            ReplyError::Part {
                part: "stats",
                source,
            }
        });
        Ok(WorkerReply {
            raw_stats,
            stats,
            counts: reply.remove("counts").map(|v| part("counts", v)),
            upstreams: reply.remove("upstreams").map(|v| part("upstreams", v)),
        })
    }
}

/// One part of a reply, typed.
fn part<T: serde::de::DeserializeOwned>(part: &'static str, value: Value) -> Result<T, ReplyError> {
    T::deserialize(value).map_err(|source| ReplyError::Part { part, source })
}

/// At most [`QUOTED`] bytes of `text`, cut on a character boundary.
fn quoted(text: &str) -> String {
    if text.len() <= QUOTED {
        return text.to_owned();
    }
    let mut end = QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// kresd's `stats.list()`: its counters by section, as kresd names them.
#[derive(Debug, Deserialize)]
pub struct Statistics {
    /// Requests by transport and address family (`udp4`, `doh6`, `total`, …).
    pub request: Counters,
    /// Answers by rcode, flag and latency bin (`noerror`, `cached`, `1ms`, `sum_ms`, …).
    pub answer: Counters,
    /// Queries with EDNS and with DO set.
    pub query: Counters,
    /// The `predict` module's, when it is loaded.
    #[serde(default)]
    pub predict: Option<Counters>,
}

/// A section of kresd's statistics that every worker has.
#[derive(Debug, Clone, Copy)]
pub enum Section {
    Request,
    Answer,
    Query,
}

impl Statistics {
    /// The counters of `section`.
    pub fn section(&self, section: Section) -> &Counters {
        match section {
            Section::Request => &self.request,
            Section::Answer => &self.answer,
            Section::Query => &self.query,
        }
    }
}

/// One section of counters, by key; a Lua table, so an empty one may come as `[]`.
#[derive(Debug, Default, PartialEq)]
pub struct Counters(BTreeMap<String, f64>);

impl Counters {
    /// The counter `key`, if the worker sent it.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
}

impl<'de> Deserialize<'de> for Counters {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lua_table(d).map(Counters)
    }
}

/// The generated Lua's answer counts (`lua::counts`).
#[derive(Debug, Deserialize)]
pub struct AnswerCounts {
    /// External queries by qtype number, and `other`.
    pub queries: Counters,
    /// Answers by rcode number, and `other`.
    pub rcodes: Counters,
    /// Answers whose final query came from the cache, and those whose did not.
    pub cache: CacheCounts,
    /// Answers by DNSSEC outcome.
    pub dnssec: DnssecCounts,
    /// The query log's records the worker dropped, when its configuration sends them.
    #[serde(default)]
    pub query_log: Option<QueryLogCounts>,
}

/// Answers by where their final query was answered from.
#[derive(Debug, Deserialize)]
pub struct CacheCounts {
    /// From the cache or local data.
    pub hit: f64,
    /// Not.
    pub miss: f64,
}

/// Answers by DNSSEC outcome.
#[derive(Debug, Deserialize)]
pub struct DnssecCounts {
    pub secure: f64,
    pub insecure: f64,
    pub bogus: f64,
}

/// The worker's side of the query log.
#[derive(Debug, Deserialize)]
pub struct QueryLogCounts {
    /// Records the worker could not send.
    pub dropped: f64,
}

/// A worker's upstreams: kresd's round-trip samples and the generated Lua's tallies.
#[derive(Debug, Default, Deserialize)]
pub struct UpstreamReport {
    /// `stats.upstreams()`: round-trip times in milliseconds, by address (no port).
    #[serde(deserialize_with = "lua_table")]
    pub rtt: BTreeMap<String, Samples>,
    /// Queries sent and answers received, by the address's bytes in hex.
    #[serde(default, deserialize_with = "lua_table")]
    pub tallies: BTreeMap<String, Tally>,
    /// When the worker began counting, Unix seconds.
    #[serde(default)]
    pub since: Option<f64>,
}

/// One address's round-trip samples: a Lua array, which comes as a list, or as an object by
/// index when it has holes.
#[derive(Debug, Default, PartialEq)]
pub struct Samples(pub Vec<f64>);

impl<'de> Deserialize<'de> for Samples {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let by_index: BTreeMap<String, f64> = lua_table(d)?;
        Ok(Samples(by_index.into_values().collect()))
    }
}

/// One address's tallies.
#[derive(Debug, Default, Deserialize, PartialEq)]
pub struct Tally {
    /// Queries sent (each retry counts).
    #[serde(default)]
    pub sent: f64,
    /// Answers received.
    #[serde(default)]
    pub answered: f64,
    /// Answers with an rcode other than NOERROR and NXDOMAIN.
    #[serde(default)]
    pub errors: f64,
}

/// A Lua table of `T` by key: an object, or a list (a table with keys 1…n, or an empty one,
/// which kresd's encoder writes as `[]`), whose members are keyed by their index from 1.
fn lua_table<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Table<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Table<T> {
        type Value = BTreeMap<String, T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a Lua table (an object or a list)")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, T>()? {
                out.insert(key, value);
            }
            Ok(out)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            let mut index = 0u64;
            while let Some(value) = seq.next_element::<T>()? {
                index += 1;
                out.insert(format!("{index:020}"), value);
            }
            Ok(out)
        }
    }
    d.deserialize_any(Table(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A worker's statistics as upstream's fixture has them.
    fn upstream_stats() -> Value {
        let stats: Map<String, Value> =
            serde_json::from_str(include_str!("../../../tests/data/upstream/metrics.json"))
                .expect("fixture");
        stats["kresd:kresd0"].clone()
    }

    #[test]
    fn a_reply_of_our_configuration_reads_in_every_part() {
        let counts: Value =
            serde_json::from_str(include_str!("../../../tests/data/answer-counts.json"))
                .expect("fixture");
        let reply = WorkerReply::read(json!({
            "stats": upstream_stats(),
            "counts": counts,
            "upstreams": {"rtt": {"127.0.0.1": [2, 4], "::1": {"1": 6, "3": 8}, "::2": []},
                          "tallies": {"7f000001": {"sent": 3, "answered": 2.0, "errors": 1}},
                          "since": 1700000000}
        }))
        .expect("reads");
        assert_eq!(
            reply.raw_stats,
            *upstream_stats().as_object().expect("object")
        );
        let stats = reply.stats.expect("typed statistics");
        assert_eq!(stats.request.get("udp4"), Some(0.0));
        assert_eq!(stats.answer.get("sum_ms"), Some(0.0));
        assert!(stats.predict.is_none());
        assert!(matches!(reply.counts, Some(Ok(_))));
        let upstreams = reply.upstreams.expect("present").expect("reads");
        assert_eq!(upstreams.rtt["127.0.0.1"], Samples(vec![2.0, 4.0]));
        assert_eq!(upstreams.rtt["::1"], Samples(vec![6.0, 8.0]));
        assert_eq!(upstreams.rtt["::2"], Samples(vec![]));
        assert_eq!(
            upstreams.tallies["7f000001"],
            Tally {
                sent: 3.0,
                answered: 2.0,
                errors: 1.0
            }
        );
        assert_eq!(upstreams.since, Some(1_700_000_000.0));
    }

    /// A worker of an older configuration: the statistics alone; an empty section as Lua's
    /// encoder writes an empty table.
    #[test]
    fn statistics_alone_read_and_an_empty_table_is_an_empty_section() {
        let mut stats = upstream_stats();
        stats["predict"] = json!([]);
        let reply = WorkerReply::read(json!({ "stats": stats })).expect("reads");
        let stats = reply.stats.expect("typed");
        assert_eq!(stats.predict, Some(Counters::default()));
        assert!(reply.counts.is_none() && reply.upstreams.is_none());
    }

    /// What a worker may send instead: each case an error that says what, none a panic.
    #[test]
    fn bad_replies_are_errors_that_say_what_was_wrong() {
        let long_error = format!("[string]:1: {}", "x".repeat(1000));
        for (reply, expected) in [
            (
                json!("[string]:1: attempt to call a nil value"),
                "the worker answered no statistics: [string]:1: attempt to call a nil value",
            ),
            (
                json!(long_error),
                "the worker answered no statistics: [string]:1: xxx",
            ),
            (json!([1, 2]), "the worker answered no statistics: [1,2]"),
            (
                json!({"stats": []}),
                "the worker answered no statistics: stats = []",
            ),
            (
                json!({"counts": {}, "rtt": {}}),
                "the worker answered no statistics: an object of counts, rtt",
            ),
        ] {
            let error = WorkerReply::read(reply).expect_err("refused").to_string();
            assert!(error.starts_with(expected), "{error}");
            assert!(error.len() <= expected.len().max(QUOTED + 60), "{error}");
        }
        // Parts that do not read: errors of their own, the rest read.
        let mut stats = upstream_stats();
        stats["answer"]["total"] = json!("many");
        let reply = WorkerReply::read(json!({
            "stats": stats,
            "counts": {"queries": {}, "rcodes": {}, "cache": {"hit": 1}},
            "upstreams": {"rtt": {"127.0.0.1": ["slow"]}},
        }))
        .expect("the object reads");
        let error = |e: &ReplyError| {
            let source = std::error::Error::source(e).map(ToString::to_string);
            format!("{e}: {}", source.unwrap_or_default())
        };
        let stats = reply.stats.expect_err("a counter that is no number");
        assert!(
            error(&stats)
                .starts_with("the worker's stats do not read: invalid type: string \"many\""),
            "{}",
            error(&stats)
        );
        let counts = reply.counts.expect("present").expect_err("no miss");
        assert!(
            error(&counts).contains("missing field `miss`"),
            "{}",
            error(&counts)
        );
        let upstreams = reply
            .upstreams
            .expect("present")
            .expect_err("a sample that is no number");
        assert!(
            error(&upstreams).starts_with("the worker's upstreams do not read"),
            "{}",
            error(&upstreams)
        );
        // The statistics as sent are kept for `/metrics/json` all the same.
        assert_eq!(reply.raw_stats["answer"]["total"], json!("many"));
    }
}
