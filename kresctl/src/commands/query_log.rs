//! `kresctl top` and `kresctl querylog`: the query log (`GET /top/{kind}`, `GET /query-log`,
//! `GET /query-log/stream`) as tables an operator reads in an incident, or the API's JSON;
//! and `kresctl upstreams` (`GET /upstreams`).
//! The filters and windows are checked by the resolver, which names what it refuses.

use clap::{ArgAction, Args, ValueHint};

use super::events::EventStream;
use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::Request;
use kres_wire::query_log::TopKind;
use kres_wire::query_log::{LoggedAnswer, TopList};
use kres_wire::upstreams::Upstreams;

/// Whether `querylog` prints the answers kept or follows new ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Kept,
    Follow,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Which list.
    #[arg(value_enum)]
    pub kind: TopKind,
    /// Only answers sent within this long (30s, 5m, 1h); default: every answer kept.
    #[arg(long, value_name = "DUR", value_hint = ValueHint::Other)]
    pub window: Option<String>,
    /// At most this many lines.
    #[arg(long, value_name = "N", default_value_t = 10, value_hint = ValueHint::Other)]
    pub limit: usize,
    /// Print the API's JSON.
    #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
          value_parser = crate::flags::flag(OutputFormat::Json, OutputFormat::Text))]
    pub format: OutputFormat,
}

#[derive(Debug, Args)]
pub struct QuerylogArgs {
    /// Keep printing answers as they come.
    #[arg(id = "follow", long = "follow", action = ArgAction::SetTrue,
          value_parser = crate::flags::flag(Mode::Follow, Mode::Kept))]
    pub mode: Mode,
    /// Only clients in this network (192.0.2.0/24) or with this address.
    #[arg(long, value_name = "CIDR", value_hint = ValueHint::Other)]
    pub client: Option<String>,
    /// Only names at or below this one.
    #[arg(long, value_name = "SUFFIX", value_hint = ValueHint::Hostname)]
    pub name: Option<String>,
    /// Only this type (A, AAAA, …).
    #[arg(long, value_name = "T", value_hint = ValueHint::Other)]
    pub qtype: Option<String>,
    /// Only this rcode (NOERROR, SERVFAIL, NXDOMAIN, …).
    #[arg(long, value_name = "R", value_hint = ValueHint::Other)]
    pub rcode: Option<String>,
    /// The newest this many answers kept (without --follow).
    #[arg(long, value_name = "N", default_value_t = 50, value_hint = ValueHint::Other)]
    pub limit: usize,
    /// Print each answer as its JSON (one per line with --follow; an array without).
    #[arg(id = "json", long = "json", action = ArgAction::SetTrue,
          value_parser = crate::flags::flag(OutputFormat::Json, OutputFormat::Text))]
    pub format: OutputFormat,
}

/// `key=value` pairs as a query string, values percent-encoded.
fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `kresctl top KIND`.
pub async fn top(client: &ApiClient, args: TopArgs) -> Result<(), ClientError> {
    let query = query_string(&[
        ("window", args.window),
        ("limit", Some(args.limit.to_string())),
    ]);
    let request = Request::Top {
        kind: args.kind.as_str(),
        query: &query,
    };
    let value = output::json_body(&client.call(&request).await?.ok()?)?;
    match args.format {
        OutputFormat::Json => print!("{}", output::pretty_json(&value)?),
        OutputFormat::Yaml | OutputFormat::Text => {
            let list: TopList = serde_json::from_value(value)?;
            print!("{}", top_table(&list));
        }
    }
    Ok(())
}

/// A top list as a table: count, share of the answers counted, key.
fn top_table(list: &TopList) -> String {
    let window = list.window.map_or_else(
        || "every answer kept".to_owned(),
        |w| format!("the last {w} s"),
    );
    let mut out = format!("top {} of {} answers ({window})\n", list.kind, list.counted);
    for e in &list.entries {
        let share = if list.counted == 0 {
            0.0
        } else {
            e.count as f64 * 100.0 / list.counted as f64
        };
        out.push_str(&format!("{:>10} {share:>6.1}%  {}\n", e.count, e.key));
    }
    out
}

/// `kresctl querylog`.
pub async fn querylog(client: &ApiClient, args: QuerylogArgs) -> Result<(), ClientError> {
    let mut filters = vec![
        ("client", args.client),
        ("name", args.name),
        ("qtype", args.qtype),
        ("rcode", args.rcode),
    ];
    match args.mode {
        Mode::Kept => {
            filters.push(("limit", Some(args.limit.to_string())));
            let query = query_string(&filters);
            let answer = client.call(&Request::QueryLog { query: &query }).await?;
            if let Some(n) = answer.truncated {
                eprintln!(
                    "{n} older answers left out: a list is at most 8 MiB (narrow the filters \
                     or lower --limit)"
                );
            }
            let value = output::json_body(&answer.ok()?)?;
            match args.format {
                OutputFormat::Json => print!("{}", output::pretty_json(&value)?),
                OutputFormat::Yaml | OutputFormat::Text => {
                    let answers: Vec<LoggedAnswer> = serde_json::from_value(value)?;
                    println!("{}", header());
                    for a in &answers {
                        println!("{}", line(a));
                    }
                }
            }
        }
        Mode::Follow => {
            let query = query_string(&filters);
            let request = Request::QueryLogStream { query: &query };
            let mut stream = EventStream::open_request(client, &request).await?;
            if args.format == OutputFormat::Text {
                println!("{}", header());
            }
            while let Some(message) = stream.next().await? {
                match (message.event.as_deref(), args.format) {
                    (Some("answer"), OutputFormat::Json) => println!("{}", message.data),
                    (Some("answer"), _) => {
                        if let Ok(a) = serde_json::from_str::<LoggedAnswer>(&message.data) {
                            println!("{}", line(&a));
                        }
                    }
                    (Some("lagged"), _) => eprintln!("fell behind: {}", message.data),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// `kresctl upstreams`.
pub async fn upstreams(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Upstreams).await?.ok()?)?;
    match format {
        OutputFormat::Json => print!("{}", output::pretty_json(&value)?),
        OutputFormat::Yaml | OutputFormat::Text => {
            let u: Upstreams = serde_json::from_value(value)?;
            for f in &u.forwards {
                println!(
                    "forward {} -> {}",
                    f.subtrees.join(", "),
                    f.servers.join(", ")
                );
            }
            println!(
                "{:<39} {:>8} {:>9} {:>9} {:>9} {:>8} {:>10} {:>6}  WORKERS",
                "UPSTREAM",
                "SAMPLES",
                "AVG ms",
                "MIN ms",
                "MAX ms",
                "QUERIES",
                "UNANSWERED",
                "ERRORS"
            );
            let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}"));
            for a in &u.addresses {
                println!(
                    "{:<39} {:>8} {:>9} {:>9} {:>9} {:>8} {:>10} {:>6}  {}",
                    a.address,
                    a.samples,
                    ms(a.rtt_avg_ms),
                    ms(a.rtt_min_ms),
                    ms(a.rtt_max_ms),
                    a.queries,
                    a.unanswered,
                    a.error_answers,
                    a.workers.join(",")
                );
            }
            if !u.workers_silent.is_empty() {
                println!("not answering: {}", u.workers_silent.join(", "));
            }
            if let Some(since) = u.counted_since {
                println!("{}", counted_since(since, now_seconds()));
            }
        }
    }
    Ok(())
}

/// Seconds since the epoch, now.
fn now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Since when the tallies count (`since`, Unix seconds), at `now`: a tally of the last
/// minutes says nothing of an incident an hour ago.
fn counted_since(since: f64, now: f64) -> String {
    let ago = (now - since).max(0.0) as u64;
    let day = since.max(0.0) % 86_400.0;
    format!(
        "QUERIES, UNANSWERED and ERRORS counted since {:02}:{:02}:{:02} UTC ({} ago; from the \
         start with monitoring.metrics: always)",
        (day / 3600.0) as u64,
        (day / 60.0 % 60.0) as u64,
        (day % 60.0) as u64,
        ago_text(ago)
    )
}

/// `42 s`, `5 min 3 s`, `2 h 7 min`, `3 d 4 h`.
fn ago_text(s: u64) -> String {
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

fn header() -> String {
    format!(
        "{:<15} {:<39} {:<5} {:<8} {:<9} {:>10} {:>3} {:<5}  {}",
        "TIME", "CLIENT", "PROTO", "TYPE", "RCODE", "LATENCY", "AN", "CACHE", "NAME"
    )
}

/// One answer as a line of the table.
fn line(a: &LoggedAnswer) -> String {
    let secs = a.time.max(0.0);
    let day = secs % 86_400.0;
    let time = format!(
        "{:02}:{:02}:{:06.3}",
        (day / 3600.0) as u64,
        (day / 60.0 % 60.0) as u64,
        day % 60.0
    );
    let latency = a
        .latency_ms
        .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.3}ms"));
    let cache = match a.cached {
        Some(true) => "hit",
        Some(false) => "miss",
        None => "-",
    };
    format!(
        "{time:<15} {:<39} {:<5} {:<8} {:<9} {latency:>10} {:>3} {cache:<5}  {}",
        a.client, a.transport, a.qtype, a.rcode, a.answers, a.name
    )
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_tallies_say_since_when_they_count() {
        // 2026-12-06 10:20:30 UTC, read 5 min 3 s later.
        let since = 1_796_552_430.0;
        assert_eq!(
            counted_since(since, since + 303.0),
            "QUERIES, UNANSWERED and ERRORS counted since 10:20:30 UTC (5 min 3 s ago; from the \
             start with monitoring.metrics: always)"
        );
        assert_eq!(ago_text(0), "0 s");
        assert_eq!(ago_text(3600 * 2 + 7 * 60), "2 h 7 min");
        assert_eq!(ago_text(86_400 * 3 + 3600 * 4 + 5), "3 d 4 h");
    }

    use super::*;

    #[test]
    fn query_strings_are_encoded() {
        assert_eq!(
            query_string(&[
                ("client", Some("2001:db8::/56".into())),
                ("name", None),
                ("rcode", Some("a&b c".into())),
            ]),
            "client=2001:db8::/56&rcode=a%26b%20c"
        );
    }

    #[test]
    fn answers_read_as_lines() {
        let a = LoggedAnswer {
            time: 3661.5,
            client: "127.0.0.2".into(),
            transport: "udp".into(),
            name: "a.test.".into(),
            qtype: "A".into(),
            rcode: "NOERROR".into(),
            latency_ms: Some(0.25),
            answers: 1,
            ede: None,
            worker: None,
            cached: Some(true),
        };
        let l = line(&a);
        assert!(l.starts_with("01:01:01.500"), "{l}");
        assert!(l.ends_with("1 hit    a.test."), "{l}");
        assert!(l.contains("0.250ms"), "{l}");
    }
}
