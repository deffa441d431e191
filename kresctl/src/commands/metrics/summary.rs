//! `kresctl metrics --summary`: what the resolver did between two scrapes of its Prometheus
//! text, for a person at a terminal: queries per second by transport, rcode and qtype,
//! latency quantiles, the cache hit ratio, and what runs (version, workers, configuration
//! generation).
//!
//! Pure: [`Scrape::parse`] reads the subset of the text format our exposition uses (samples,
//! comments skipped), [`Summary::between`] computes rates from two scrapes as Prometheus's
//! `rate` would (a counter that went down was reset: its new value is the increase; a series
//! new in the second scrape counts from 0), and [`Summary::render`] writes the text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Why a scrape could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("line {line}: {what}")]
pub struct ParseError {
    /// The line (1-based).
    line: usize,
    /// What is wrong with it.
    what: &'static str,
}

/// One sample of a scrape.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    /// Its metric name (with a histogram's `_bucket`, `_count` or `_sum`).
    name: String,
    /// Its labels, by name.
    labels: BTreeMap<String, String>,
    /// Its value.
    value: f64,
}

/// Every sample of one scrape of `/metrics/prometheus`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    /// In the order read.
    samples: Vec<Sample>,
}

impl Scrape {
    /// Read `text` (Prometheus text format 0.0.4): `# …` lines and blank lines are skipped.
    pub fn parse(text: &str) -> Result<Scrape, ParseError> {
        let mut samples = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let sample = sample(line).map_err(|what| ParseError { line: n + 1, what })?;
            samples.push(sample);
        }
        Ok(Scrape { samples })
    }

    /// The samples named `name`.
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The sum of the samples named `name`; `None` when there is none.
    fn total(&self, name: &str) -> Option<f64> {
        self.named(name).map(|s| s.value).reduce(|a, b| a + b)
    }
}

/// `name{labels} value [timestamp]`.
fn sample(line: &str) -> Result<Sample, &'static str> {
    let end = line.find(['{', ' ']).ok_or("a sample without a value")?;
    let (name, mut rest) = line.split_at(end);
    let mut labels = BTreeMap::new();
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            inner = inner.trim_start_matches(',');
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = inner.split_once("=\"").ok_or("a label without a value")?;
            let (value, after) = quoted(after)?;
            labels.insert(label.to_owned(), value);
            inner = after;
        }
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("a sample without a value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().map_err(|_| "a value that is not a number")?,
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A label value after its opening quote, unescaped, and the text after its closing quote.
fn quoted(text: &str) -> Result<(String, &str), &'static str> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, c)) => value.push(c),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("an unterminated label value")
}

/// How much every series of `name` grew from `before` to `after`, summed by the values of
/// the labels `by` (joined with `/`).
fn increase_by(before: &Scrape, after: &Scrape, name: &str, by: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in after.named(name) {
        let earlier = before
            .named(name)
            .find(|b| b.labels == s.labels)
            .map_or(0.0, |b| b.value);
        // A counter that went down was reset (its process restarted): it counted from 0.
        let grew = if s.value >= earlier {
            s.value - earlier
        } else {
            s.value
        };
        let key: Vec<&str> = by
            .iter()
            .map(|l| s.labels.get(*l).map_or("", String::as_str))
            .collect();
        *out.entry(key.join("/")).or_insert(0.0) += grew;
    }
    out
}

/// A latency quantile, as a histogram tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Quantile {
    /// About this many seconds (linear within its bucket, as `histogram_quantile`).
    About(f64),
    /// Above the largest finite bucket bound, these seconds.
    Above(f64),
}

/// The quantile `q` of cumulative `buckets` (upper bound, count), sorted by bound, the last
/// `+Inf`; `None` without observations.
fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<Quantile> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(Quantile::Above(lower));
            }
            let within = if count > below {
                (rank - below) / (count - below)
            } else {
                1.0
            };
            return Some(Quantile::About(lower + (bound - lower) * within));
        }
        (lower, below) = (bound, count);
    }
    Some(Quantile::Above(lower))
}

/// The quantiles shown.
const QUANTILES: [(f64, &str); 3] = [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")];

/// The cache's share of answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cache {
    /// Hits per second.
    hits: f64,
    /// Misses per second.
    misses: f64,
}

/// What the resolver did between two scrapes, and what runs at the second.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Seconds between the scrapes.
    seconds: f64,
    /// `knot_resolver_build_info`'s version.
    version: Option<String>,
    /// `knot_resolver_config_generation`.
    generation: Option<f64>,
    /// The running configuration's ETag.
    etag: Option<String>,
    /// Workers ready and configured.
    workers: (Option<f64>, Option<f64>),
    /// Requests per second by `protocol/family`.
    requests: BTreeMap<String, f64>,
    /// Answers per second by rcode.
    rcodes: BTreeMap<String, f64>,
    /// Queries per second by qtype; `None` when the resolver does not count them.
    qtypes: Option<BTreeMap<String, f64>>,
    /// p50, p90, p99 of the answers between the scrapes; `None` without answers.
    latency: Option<[Quantile; 3]>,
    /// Cache hits and misses per second; `None` when the resolver does not count misses.
    cache: Option<Cache>,
}

/// The series the summary reads.
mod series {
    pub const REQUESTS: &str = "knot_resolver_dns_requests_total";
    pub const ANSWERS: &str = "knot_resolver_dns_answers_total";
    pub const QUERIES: &str = "knot_resolver_dns_queries_total";
    pub const LATENCY: &str = "knot_resolver_dns_response_duration_seconds_bucket";
    pub const HITS: &str = "knot_resolver_cache_hits_total";
    pub const MISSES: &str = "knot_resolver_cache_misses_total";
    pub const BUILD: &str = "knot_resolver_build_info";
    pub const GENERATION: &str = "knot_resolver_config_generation";
    pub const CONFIG: &str = "knot_resolver_config_info";
    pub const READY: &str = "knot_resolver_workers_ready";
    pub const CONFIGURED: &str = "knot_resolver_workers_configured";
}

impl Summary {
    /// The summary of `before` and `after`, taken `seconds` apart (more than 0).
    pub fn between(before: &Scrape, after: &Scrape, seconds: f64) -> Summary {
        let per_second = |m: BTreeMap<String, f64>| -> BTreeMap<String, f64> {
            m.into_iter().map(|(k, v)| (k, v / seconds)).collect()
        };
        let rate = |name, by: &[&str]| per_second(increase_by(before, after, name, by));
        let label =
            |name, label: &str| after.named(name).find_map(|s| s.labels.get(label).cloned());
        let mut buckets: Vec<(f64, f64)> = increase_by(before, after, series::LATENCY, &["le"])
            .into_iter()
            .filter_map(|(le, n)| Some((le.parse::<f64>().ok()?, n)))
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let latency = QUANTILES
            .iter()
            .map(|(q, _)| quantile(*q, &buckets))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| <[Quantile; 3]>::try_from(v).ok());
        let cache = after.total(series::MISSES).map(|_| Cache {
            hits: rate(series::HITS, &[]).values().sum(),
            misses: rate(series::MISSES, &[]).values().sum(),
        });
        Summary {
            seconds,
            version: label(series::BUILD, "version"),
            generation: after.total(series::GENERATION),
            etag: label(series::CONFIG, "etag"),
            workers: (after.total(series::READY), after.total(series::CONFIGURED)),
            requests: rate(series::REQUESTS, &["protocol", "family"]),
            rcodes: rate(series::ANSWERS, &["rcode"]),
            qtypes: after
                .total(series::QUERIES)
                .map(|_| rate(series::QUERIES, &["qtype"])),
            latency,
            cache,
        }
    }

    /// The text, with at most `top` rows per table (the busiest first).
    pub fn render(&self, top: usize) -> String {
        let mut out = String::new();
        let or_unknown = |v: Option<f64>| v.map_or("?".to_owned(), |v| format!("{v}"));
        let _ = writeln!(
            out,
            "knot-resolver {}, configuration generation {} ({}), workers ready {}/{}",
            self.version.as_deref().unwrap_or("?"),
            or_unknown(self.generation),
            self.etag.as_deref().unwrap_or("?"),
            or_unknown(self.workers.0),
            or_unknown(self.workers.1),
        );
        let _ = writeln!(out, "over the last {:.1} s:", self.seconds);
        let total: f64 = self.requests.values().sum();
        let _ = writeln!(out, "{:<24}{:>10.1} q/s", "queries", total);
        table(&mut out, "by transport", &self.requests, top, total);
        let answers: f64 = self.rcodes.values().sum();
        let _ = writeln!(out, "{:<24}{:>10.1} /s", "answers", answers);
        table(&mut out, "by rcode", &self.rcodes, top, answers);
        match &self.qtypes {
            Some(qtypes) => {
                let all = qtypes.values().sum();
                table(&mut out, "by qtype", qtypes, top, all);
            }
            None => out.push_str("  by qtype: not counted by this resolver\n"),
        }
        out.push_str(&self.latency_line());
        out.push_str(&self.cache_line());
        out
    }

    /// `latency  p50 … p90 … p99 …`.
    fn latency_line(&self) -> String {
        let Some(latency) = &self.latency else {
            return format!("{:<24}no answers\n", "latency");
        };
        let parts: Vec<String> = QUANTILES
            .iter()
            .zip(latency)
            .map(|((_, name), q)| match q {
                Quantile::About(s) => format!("{name} {}", duration(*s)),
                Quantile::Above(s) => format!("{name} > {}", duration(*s)),
            })
            .collect();
        format!("{:<24}{}\n", "latency", parts.join("  "))
    }

    /// `cache hit ratio …`.
    fn cache_line(&self) -> String {
        let name = "cache hit ratio";
        match self.cache {
            None => format!("{name:<24}misses not counted by this resolver\n"),
            Some(Cache { hits, misses }) if hits + misses > 0.0 => format!(
                "{name:<24}{:>9.1}% ({hits:.1} hits/s, {misses:.1} misses/s)\n",
                100.0 * hits / (hits + misses)
            ),
            Some(_) => format!("{name:<24}no lookups\n"),
        }
    }
}

/// Rows `  key  rate/s  share%` of `rates`, the busiest `top` first (then by key), under
/// `title`; rows of 0 left out.
fn table(out: &mut String, title: &str, rates: &BTreeMap<String, f64>, top: usize, all: f64) {
    let mut rows: Vec<(&String, f64)> = rates
        .iter()
        .map(|(k, v)| (k, *v))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let _ = writeln!(out, "  {title}:");
    if rows.is_empty() {
        out.push_str("    none\n");
    }
    let shown = rows.len().min(top);
    for (key, rate) in &rows[..shown] {
        let share = if all > 0.0 { 100.0 * rate / all } else { 0.0 };
        let _ = writeln!(out, "    {key:<20}{rate:>10.1} /s {share:>6.1}%");
    }
    if rows.len() > shown {
        let rest: f64 = rows[shown..].iter().map(|(_, v)| v).sum();
        let _ = writeln!(
            out,
            "    {:<20}{rest:>10.1} /s",
            format!("({} more)", rows.len() - shown)
        );
    }
}

/// Seconds as a person reads them: `0.4 ms`, `12.0 ms`, `1.50 s`.
fn duration(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.1} ms", seconds * 1000.0)
    } else {
        format!("{seconds:.2} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(text: &str) -> Scrape {
        Scrape::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Two fixed scrapes of two workers, ten seconds apart: the rates, quantiles and ratio
    /// as a person reads them.
    #[test]
    fn two_scrapes_make_a_readable_summary() {
        let before = scrape(include_str!(
            "../../../../tests/data/kresctl-metrics/before.txt"
        ));
        let after = scrape(include_str!(
            "../../../../tests/data/kresctl-metrics/after.txt"
        ));
        let summary = Summary::between(&before, &after, 10.0);
        assert_eq!(
            summary.render(3),
            include_str!("../../../../tests/data/kresctl-metrics/summary.txt")
        );
    }

    #[test]
    fn quantiles_interpolate_within_their_bucket_as_prometheus_does() {
        let buckets = [
            (0.001, 50.0),
            (0.01, 90.0),
            (0.1, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(quantile(0.5, &buckets), Some(Quantile::About(0.001)));
        let Some(Quantile::About(p70)) = quantile(0.7, &buckets) else {
            panic!("a finite bucket")
        };
        assert!((p70 - 0.0055).abs() < 1e-9, "{p70}");
        let above = [(0.001, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(quantile(0.99, &above), Some(Quantile::Above(0.001)));
        assert_eq!(quantile(0.5, &[(f64::INFINITY, 0.0)]), None);
    }

    /// A counter that went down was reset: its value is what it counted since.
    #[test]
    fn a_reset_counter_counts_from_zero() {
        let before = scrape("a{w=\"1\"} 100\na{w=\"2\"} 10\n");
        let after = scrape("a{w=\"1\"} 4\na{w=\"2\"} 15\na{w=\"3\"} 1\n");
        assert_eq!(
            increase_by(&before, &after, "a", &[]),
            BTreeMap::from([(String::new(), 10.0)])
        );
    }

    #[test]
    fn labels_are_unescaped_and_bad_lines_named() {
        let s = scrape("# HELP x y\nx{a=\"q\\\"u\\\\o\\nte\",b=\"\"} 1.5e3 1700000000\n");
        assert_eq!(s.samples[0].labels["a"], "q\"u\\o\nte");
        assert_eq!(s.samples[0].value, 1500.0);
        assert_eq!(
            Scrape::parse("x 1\ny{a=\"b} 2\n"),
            Err(ParseError {
                line: 2,
                what: "an unterminated label value"
            })
        );
        assert!(Scrape::parse("z one\n").is_err());
    }
}
