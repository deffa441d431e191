//! Our metrics as Prometheus itself takes them, against real kresd workers answering real
//! queries: Debian's `promtool` lints a live scrape and checks and unit-tests the alerting
//! rules of `dist/prometheus/`; a real Prometheus (from the test bed, loopback only, its own
//! storage) scrapes the API over TCP with the read-only bearer token — a scrape without it
//! is refused — and its HTTP API returns the qtype series, evaluates every query of the
//! Grafana dashboard of `dist/grafana/` and loads the rules. Every metric name the dashboard
//! and the rules use is in a live scrape (a change through the API among them, so that it is
//! counted and timed); `kresctl metrics --summary` reads a live resolver.

mod common;
mod exposition;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use common::{Setup, DNS_TIMEOUT};
use serde_json::{json, Value};
use testbed::{dns, Bed, TestDir};

/// Local data with records of several types, so that queries of each are answered.
const RECORDS: &str = "local-data:\n  records: |\n    m.test. 300 A 192.0.2.5\n    m.test. 300 AAAA 2001:db8::5\n    m.test. 300 TXT \"metrics\"\n";

/// Bound on what a real Prometheus takes to start, scrape (every second) and answer; never
/// a performance assertion.
const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(90);

const DASHBOARD: &str = include_str!("../dist/grafana/knot-resolver.json");
const RULES: &str = include_str!("../dist/prometheus/knot-resolver-alerts.yml");
const RULE_TESTS: &str = include_str!("../dist/prometheus/knot-resolver-alerts.test.yml");

/// `n` queries of each of A, AAAA and TXT for `m.test.`, every one answered.
fn ask(r: &common::Resolver, n: usize) {
    for _ in 0..n {
        for qtype in [dns::TYPE_A, dns::TYPE_AAAA, dns::TYPE_TXT] {
            let resp = dns::query_udp(r.dns(), "m.test.", qtype, DNS_TIMEOUT).expect("answer");
            assert_eq!(resp.rcode, dns::RCODE_NOERROR, "qtype {qtype}");
        }
    }
}

/// Run `command` (a shell command line) in the bed; its exit status and everything it
/// printed.
fn in_bed(bed: &Bed, command: &str) -> (bool, String) {
    let out = bed
        .run_installed("/bin/sh", &["-c", command])
        .expect("runs in the bed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The PromQL expressions of the dashboard: every `expr` of its panels' targets.
fn dashboard_queries() -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", Value::String(e)) => out.push(e.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let mut out = Vec::new();
    walk(&dashboard, &mut out);
    out
}

/// The `expr` of every alerting rule.
fn rule_queries() -> Vec<String> {
    let docs = yaml_rust2::YamlLoader::load_from_str(RULES).expect("the rules are YAML");
    let groups = docs[0]["groups"].as_vec().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_vec().expect("rules").iter())
        .map(|r| r["expr"].as_str().expect("expr").to_owned())
        .collect()
}

/// Words of PromQL that are not metric names and take no parenthesised arguments.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "sum", "count", "avg", "min", "max", "group", "topk",
    "bottomk", "quantile", "stddev", "stdvar",
];

/// Words of PromQL whose parenthesised list that follows names labels, not metrics.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expr` selects: its identifiers outside label matchers (`{…}`), ranges
/// (`[…]`), strings and label lists (`by (…)`), that are neither functions (followed by
/// `(`) nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        let closing = match c {
            '{' => Some('}'),
            '[' => Some(']'),
            '"' => Some('"'),
            '(' if skip_list => Some(')'),
            _ => None,
        };
        if let Some(close) = closing {
            skip_list = false;
            i += chars[i + 1..]
                .iter()
                .position(|&x| x == close)
                .expect("closed")
                + 2;
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`0.9`, `1e3`, `5m`).
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        if LABEL_LISTS.contains(&word.as_str()) {
            skip_list = true;
        } else if next != Some(&'(') && !KEYWORDS.contains(&word.as_str()) {
            names.insert(word);
        }
    }
    names
}

/// Whether `name` is a series of `scrape`: a family of it, or a histogram's `_bucket`,
/// `_count` or `_sum`.
fn in_scrape(scrape: &exposition::Parsed, name: &str) -> bool {
    scrape.families.contains_key(name)
        || ["_bucket", "_count", "_sum"].iter().any(|suffix| {
            name.strip_suffix(suffix).is_some_and(|base| {
                scrape
                    .families
                    .get(base)
                    .is_some_and(|f| f.kind.as_deref() == Some("histogram"))
            })
        })
}

#[test]
fn metric_names_are_read_from_queries() {
    let names = metric_names(
        "histogram_quantile(0.9, sum by (le, cause) (rate(a_bucket{instance=~\"$i\",x=\"{\"}[$__range]))) / on(instance) group_left(etag) b > 0.05 and c offset 5m",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec!["a_bucket", "b", "c"]
    );
}

/// A scrape after real queries, linted by promtool and read strictly; the dashboard's and
/// the rules' series are all in it; the rules pass promtool's check and their unit tests;
/// `kresctl metrics --summary` reads the live resolver.
#[test]
fn promtool_takes_a_live_scrape_and_the_rules_and_the_dashboard_uses_only_live_series() {
    // A forward to an upstream that refuses everything, for the upstreams' series.
    let (refusing, refuser) = dns::refusing_upstream("127.0.0.3:0").expect("refusing upstream");
    let r = common::start(&Setup::new("promtool").workers(2).extra(&format!(
        "{RECORDS}forward:\n  - subtree: up.test\n    servers: ['127.0.0.3@{}']\n    options: {{dnssec: false}}\n",
        refusing.port()
    )))
    .expect("resolver starts");
    // With `metrics: lazy`, the first scrape loads the workers' statistics.
    let first = r.http("GET", "/metrics/prometheus", b"").expect("scrape");
    assert_eq!(first.status, 200, "{}", first.text());
    ask(&r, 10);
    let refused = dns::query_udp(
        r.dns(),
        "stop.up.test.",
        dns::TYPE_A,
        Duration::from_secs(15),
    )
    .expect("an answer through the refusing upstream");
    assert_ne!(refused.rcode, dns::RCODE_NOERROR);
    assert!(refuser.join().expect("refuser") >= 1);
    // A change through the API: counted and timed (the series follow the event log on their
    // own task, so the scrape is read again until they show it).
    let resp = r.put_json("/local-data/addresses", json!({"n.test": "192.0.2.6"}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let api = [("cause", "api")];
    let (text, scrape) = testbed::wait_for("the API change timed", PROMETHEUS_TIMEOUT, || {
        let resp = r.http("GET", "/metrics/prometheus", b"")?;
        anyhow::ensure!(resp.status == 200, "{}", resp.text());
        let text = resp.text();
        let scrape = exposition::parse(&text).map_err(|e| anyhow::anyhow!("{e}\n{text}"))?;
        let timed = scrape.value("knot_resolver_config_change_duration_seconds_count", &api);
        Ok((timed == Some(1.0)).then_some((text, scrape)))
    })
    .expect("scrape");
    assert_eq!(
        scrape.value(
            "knot_resolver_config_changes_total",
            &[("cause", "api"), ("result", "rules_reset")]
        ),
        Some(1.0)
    );

    let files = r.bed.test_dir("promtool-files").expect("dir");
    testbed::write(&files.host("scrape.txt"), &text).expect("write");
    let (ok, said) = in_bed(
        r.bed,
        &format!(
            "promtool check metrics < {}",
            files.bed("scrape.txt").display()
        ),
    );
    assert!(ok && said.is_empty(), "promtool check metrics:\n{said}");

    rules_pass_promtool(r.bed, &files);

    for (what, queries) in [
        ("the dashboard", dashboard_queries()),
        ("the rules", rule_queries()),
    ] {
        assert!(!queries.is_empty(), "{what} has queries");
        let used: BTreeSet<String> = queries.iter().flat_map(|e| metric_names(e)).collect();
        assert!(used.len() > 5, "{what} uses {used:?}");
        let missing: Vec<&String> = used
            .iter()
            .filter(|name| *name != "up" && !in_scrape(&scrape, name))
            .collect();
        assert!(
            missing.is_empty(),
            "{what} uses {missing:?}, which the scrape lacks"
        );
    }

    // Queries during the summary's interval: it shows them.
    let asker = common::Asker::start(&r, "m.test.");
    let out = r
        .kresctl(&["metrics", "--summary", "--interval", "0.5"])
        .expect("kresctl");
    let (answered, failed) = asker.finish();
    assert!(
        answered > 0 && failed == 0,
        "{answered} answered, {failed} failed"
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        summary.starts_with(&format!(
            "knot-resolver {}, configuration generation 2 (",
            env!("CARGO_PKG_VERSION")
        )),
        "{summary}"
    );
    assert!(summary.contains("workers ready 2/2\n"), "{summary}");
    assert!(
        summary.contains("\nlatency                 p50 "),
        "{summary}"
    );
    assert!(summary.contains("\n    udp/ipv4 "), "{summary}");
    assert!(summary.contains("\n    NOERROR "), "{summary}");
    assert!(summary.contains("  by qtype:\n    A "), "{summary}");
    r.stop();
}

/// `promtool check rules` and `promtool test rules` on the files of `dist/prometheus/`,
/// copied into `files`.
fn rules_pass_promtool(bed: &Bed, files: &TestDir) {
    testbed::write(&files.host("knot-resolver-alerts.yml"), RULES).expect("write");
    testbed::write(&files.host("knot-resolver-alerts.test.yml"), RULE_TESTS).expect("write");
    let rules = files.bed("knot-resolver-alerts.yml");
    let (ok, said) = in_bed(bed, &format!("promtool check rules {}", rules.display()));
    assert!(ok, "promtool check rules:\n{said}");
    assert!(
        said.contains(&format!(
            "SUCCESS: {} rules found",
            RULES.matches("- alert: ").count()
        )),
        "{said}"
    );
    let tests = files.bed("knot-resolver-alerts.test.yml");
    let (ok, said) = in_bed(bed, &format!("promtool test rules {}", tests.display()));
    assert!(ok, "promtool test rules:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

/// One HTTP/1.0 `GET` of `path` on 127.0.0.1:`port` (so the answer is not chunked), with
/// `headers`; the status and the body.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes())?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// `text` as a URL query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A running Prometheus of the bed.
struct Prometheus {
    /// Its process tree (killed when dropped).
    launched: testbed::Launched,
    /// Its HTTP port on 127.0.0.1.
    port: u16,
}

impl Prometheus {
    /// Start one that scrapes `target` every second with the token in `token_file` (a bed
    /// path), loads `rules` (a bed path) and keeps its storage in `dir`.
    fn start(bed: &Bed, dir: &TestDir, target: u16, token_file: &Path, rules: &Path) -> Self {
        let port = testbed::free_port().expect("port");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [{rules}]\nscrape_configs:\n  - job_name: knot-resolver\n    metrics_path: /metrics/prometheus\n    authorization: {{credentials_file: {token}}}\n    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n",
            rules = rules.display(),
            token = token_file.display(),
        );
        testbed::write(&dir.host("prometheus.yml"), &config).expect("config");
        let args = [
            format!("--config.file={}", dir.bed("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.bed("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        let launched = bed
            .launch_installed(Path::new("/usr/bin/prometheus"), &args, &[])
            .expect("prometheus starts");
        Prometheus { launched, port }
    }

    /// `/api/v1/query` of `expr`: its `data.result`, once Prometheus answers.
    fn query(&self, expr: &str) -> anyhow::Result<Vec<Value>> {
        let (status, body) = get(
            self.port,
            &format!("/api/v1/query?query={}", encode(expr)),
            &[],
        )?;
        let reply: Value =
            serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("{status} {e}: {body}"))?;
        anyhow::ensure!(reply["status"] == "success", "{expr}: {status} {reply}");
        Ok(reply["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Poll `expr` until its result satisfies `ready`; that result.
    fn wait_for(&self, expr: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        testbed::wait_for(expr, PROMETHEUS_TIMEOUT, || {
            Ok(self.query(expr).ok().filter(|result| ready(result)))
        })
        .unwrap_or_else(|e| panic!("{e:#}\nprometheus:\n{}", self.launched.output.text()))
    }
}

/// The value of an instant vector's sample, as a number.
fn sample_value(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// A real Prometheus scrapes our TCP endpoint with the read-only token; its API returns the
/// qtype series and evaluates every query of the dashboard; it loads the rules.
#[test]
fn a_real_prometheus_scrapes_the_api_with_its_token_and_returns_the_qtypes() {
    let bed = Bed::get().expect("bed");
    let dir = bed.test_dir("prometheus-files").expect("dir");
    testbed::write(&dir.host("admin"), "admin-token-of-prometheus\n").expect("token");
    testbed::write(&dir.host("reader"), "reader-token-of-prometheus\n").expect("token");
    testbed::write(&dir.host("knot-resolver-alerts.yml"), RULES).expect("rules");
    let api = testbed::free_port().expect("port");
    let r = common::start(
        &Setup::new("prometheus")
            .workers(2)
            .extra(RECORDS)
            .management(&format!("  interface: 127.0.0.1@{api}\n"))
            .env(
                "KRES_API_TOKEN_FILE",
                dir.bed("admin").to_str().expect("UTF-8"),
            )
            .env(
                "KRES_API_READ_ONLY_TOKEN_FILE",
                dir.bed("reader").to_str().expect("UTF-8"),
            ),
    )
    .expect("resolver starts");
    let path = "/metrics/prometheus";
    let (status, _) = get(api, path, &[]).expect("GET");
    assert_eq!(status, 401, "a scrape without the token is refused");
    let (status, _) = get(api, path, &[("Authorization", "Bearer guessed")]).expect("GET");
    assert_eq!(status, 401, "a scrape with another token is refused");

    let prometheus = Prometheus::start(
        bed,
        &dir,
        api,
        &dir.bed("reader"),
        &dir.bed("knot-resolver-alerts.yml"),
    );
    // Scraped with the token: up, and the workers' statistics loaded (lazily, by the scrape).
    prometheus.wait_for("min(resolver_metrics_loaded)", |result| {
        result.first().map(sample_value) == Some(1.0)
    });
    let up = prometheus.query("up{job=\"knot-resolver\"}").expect("up");
    assert_eq!(up.iter().map(sample_value).collect::<Vec<_>>(), vec![1.0]);
    const QUERIES: usize = 10;
    ask(&r, QUERIES);
    let qtypes = prometheus.wait_for(
        "sum by (qtype) (knot_resolver_dns_queries_total{qtype=\"TXT\"})",
        |result| result.first().map(sample_value) >= Some(QUERIES as f64),
    );
    assert_eq!(qtypes[0]["metric"]["qtype"], "TXT", "{qtypes:?}");
    let a = prometheus
        .query("sum(knot_resolver_dns_queries_total{qtype=\"A\"})")
        .expect("A");
    assert!(a.first().map(sample_value) >= Some(QUERIES as f64), "{a:?}");

    for expr in dashboard_queries() {
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$instance", ".*");
        if let Err(e) = prometheus.query(&expr) {
            panic!("the dashboard's query is refused: {e:#}");
        }
    }
    // The rules load and evaluate on live series without error.
    let rules = testbed::wait_for("the rules evaluated", PROMETHEUS_TIMEOUT, || {
        let (_, body) = get(prometheus.port, "/api/v1/rules", &[])?;
        let loaded: Value = serde_json::from_str(&body)?;
        let rules = loaded["data"]["groups"][0]["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(rules
            .iter()
            .all(|rule| rule["health"] == "ok")
            .then_some(rules))
    })
    .expect("rules");
    let shipped = RULES.matches("- alert: ").count();
    assert_eq!(shipped, 10);
    assert_eq!(rules.len(), shipped, "{rules:?}");
    drop(prometheus);
    r.stop();
}
