//! `kresctl rpz`: the RPZ zones kept by zone transfer (`GET /rpz`), one block per zone (its
//! serial, last refresh and success, next refresh and expiry), or the API's JSON. Zones are
//! read in one place, as `wire::rpz::RpzZone`, by `zone_lines`. Then the subscribed lists
//! (`GET /rpz/lists`, `list_lines`); `kresctl rpz refresh [NAME]` fetches them now and
//! `kresctl rpz check NAME` says which list decides a name.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::cli::RpzOp;
use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::Request;
use kres_wire::rpz::{RpzCheck, RpzList, RpzZone};

/// `kresctl rpz`: the zones, as text or JSON.
pub async fn print_zones(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Rpz).await?.ok()?)?;
    match format {
        OutputFormat::Json => output::print(&output::pretty_json(&value)?)?,
        OutputFormat::Yaml | OutputFormat::Text => {
            let zones: Vec<RpzZone> = serde_json::from_value(value)?;
            let now = unix_now();
            let lists = client.call(&Request::RpzLists).await?.ok()?;
            let lists: Vec<RpzList> = serde_json::from_value(output::json_body(&lists)?)?;
            if zones.is_empty() && lists.is_empty() {
                output::println("no RPZ zone is kept by zone transfer, no list is subscribed")?;
            }
            for zone in &zones {
                output::print(&zone_lines(zone, now))?;
            }
            for list in &lists {
                output::print(&list_lines(list, now))?;
            }
        }
    }
    Ok(())
}

/// `kresctl rpz refresh|check`.
pub async fn run(client: &ApiClient, op: RpzOp, format: OutputFormat) -> Result<(), ClientError> {
    let value = match &op {
        RpzOp::Refresh { name } => {
            let request = Request::RpzRefresh {
                name: name.as_deref(),
            };
            output::json_body(&client.call(&request).await?.ok()?)?
        }
        RpzOp::Check { name, client: from } => {
            let request = Request::RpzCheck {
                name,
                client: from.as_deref(),
            };
            output::json_body(&client.call(&request).await?.ok()?)?
        }
    };
    if format == OutputFormat::Json {
        return output::print(&output::pretty_json(&value)?).map_err(Into::into);
    }
    let now = unix_now();
    match op {
        RpzOp::Refresh { name } => {
            let lists: Vec<RpzList> = serde_json::from_value(value)?;
            for list in lists
                .iter()
                .filter(|l| name.as_ref().is_none_or(|n| *n == l.name))
            {
                output::print(&list_lines(list, now))?;
            }
        }
        RpzOp::Check { .. } => {
            let check: RpzCheck = serde_json::from_value(value)?;
            output::print(&check_lines(&check))?;
        }
    }
    Ok(())
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What an operator reads of one subscribed list at `now` (Unix seconds).
fn list_lines(list: &RpzList, now: f64) -> String {
    let kind = match list.action.as_deref() {
        Some("passthru") => "allowlist".to_owned(),
        Some(action) => format!("{} list, every name {action}", list.format),
        None => format!("{} list", list.format),
    };
    let count = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let ago = |t: Option<f64>| {
        t.map_or_else(
            || "-".to_owned(),
            |t| format!("{} ago", span(Some(now - t))),
        )
    };
    let mut out = format!(
        "{}  {kind}
",
        list.name
    );
    out.push_str(&format!(
        "  url:          {}
",
        list.url
    ));
    out.push_str(&format!(
        "  file:         {}
",
        list.file
    ));
    out.push_str(&format!(
        "  entries:      {} ({} lines skipped)
",
        count(list.entries),
        count(list.skipped)
    ));
    let result = match (&list.result, &list.error) {
        (Some(result), Some(error)) => {
            format!("{result}: {error}; the previous version stays in force")
        }
        (Some(result), None) => result.clone(),
        (None, _) => "-".to_owned(),
    };
    out.push_str(&format!(
        "  last fetch:   {}: {result}
",
        ago(list.last_fetch)
    ));
    out.push_str(&format!(
        "  last success: {}
",
        ago(list.last_success)
    ));
    out.push_str(&format!(
        "  next refresh: {}
",
        list.next_refresh
            .map_or_else(|| "-".to_owned(), |t| format!("in {}", span(Some(t - now))))
    ));
    out.push_str(&format!(
        "  etag:         {}
",
        list.etag.as_deref().unwrap_or("-")
    ));
    if list.failures > 0 {
        out.push_str(&format!(
            "  failures:     {}
",
            list.failures
        ));
    }
    out
}

/// What an operator reads of a check.
fn check_lines(check: &RpzCheck) -> String {
    let mut out = check_verdict(check);
    if let Some(client) = &check.client {
        let tags = check.client_tags.as_deref().unwrap_or_default();
        out.push_str(&format!(
            "  for client {client} (tags: {})\n",
            if tags.is_empty() {
                "none".to_owned()
            } else {
                tags.join(", ")
            }
        ));
        if !check.not_for_client.is_empty() {
            out.push_str(&format!(
                "  not consulted (their tags are none of the client's): {}\n",
                check.not_for_client.join(", ")
            ));
        }
    }
    out
}

/// The verdict line(s) of a check.
fn check_verdict(check: &RpzCheck) -> String {
    match (&check.list, &check.entry, &check.action) {
        (Some(list), Some(entry), Some(action)) if action == "passthru" => {
            let mut out = format!(
                "{}: allowed by the allowlist {list} (entry {entry}): it resolves normally
",
                check.name
            );
            if !check.overridden.is_empty() {
                out.push_str(&format!(
                    "  also listed by: {} (overridden)
",
                    check.overridden.join(", ")
                ));
            }
            out
        }
        (Some(list), Some(entry), Some(action)) => {
            format!(
                "{}: {action} by the list {list} (entry {entry})
",
                check.name
            )
        }
        _ => format!(
            "{}: in no subscribed list: it resolves normally
",
            check.name
        ),
    }
}

/// `seconds` as `1h02m03s` (`-` for none).
fn span(seconds: Option<f64>) -> String {
    let Some(s) = seconds.filter(|s| s.is_finite()) else {
        return "-".into();
    };
    let s = s.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, sec) => format!("{h}h{m:02}m{sec:02}s"),
    }
}

/// What an operator reads of one zone at `now` (Unix seconds).
fn zone_lines(zone: &RpzZone, now: f64) -> String {
    let serial = zone
        .serial
        .map_or_else(|| "none yet".to_owned(), |s| s.to_string());
    let expired = if zone.expired {
        " (EXPIRED: no refresh within the SOA expire time; the stored policy is served)"
    } else {
        ""
    };
    let mut out = format!("{}  serial {serial}{expired}\n", zone.zone);
    if let Some(reason) = &zone.broken {
        out.push_str(&format!(
            "  BROKEN:       kresd cannot load the stored zone ({reason}); it is left out, the rest of the policy is in force, and it is transferred whole again\n"
        ));
    }
    out.push_str(&format!("  file:         {}\n", zone.file));
    out.push_str(&format!("  primaries:    {}\n", zone.primaries.join(", ")));
    let last = match &zone.last_transfer {
        None => "-".to_owned(),
        Some(t) => {
            let mut line = format!(
                "{} from {}, {} ago: {}",
                t.kind,
                t.primary,
                span(Some(now - t.time)),
                t.result
            );
            if let (Some(d), Some(b), Some(r)) = (t.duration, t.bytes, t.records) {
                line.push_str(&format!(" ({r} records, {b} bytes in {d:.3}s)"));
            }
            if let Some(e) = &t.error {
                line.push_str(&format!(": {e}"));
            }
            line
        }
    };
    out.push_str(&format!("  last refresh: {last}\n"));
    out.push_str(&format!(
        "  last success: {}\n",
        zone.last_success.map_or_else(
            || "-".to_owned(),
            |t| format!("{} ago", span(Some(now - t)))
        )
    ));
    out.push_str(&format!(
        "  next refresh: {}\n",
        zone.next_refresh
            .map_or_else(|| "-".to_owned(), |t| format!("in {}", span(Some(t - now))))
    ));
    out.push_str(&format!(
        "  expires:      {}\n",
        zone.expires.map_or_else(
            || "-".to_owned(),
            |t| if t >= now {
                format!("in {}", span(Some(t - now)))
            } else {
                format!("{} ago", span(Some(now - t)))
            }
        )
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_wire::rpz::RpzTransfer;

    #[test]
    fn a_zone_reads_as_its_serial_last_refresh_next_one_and_expiry() {
        let zone = RpzZone {
            zone: "block.rpz.".into(),
            file: "/var/rpz/block.rpz".into(),
            primaries: vec!["192.0.2.53:53".into(), "[2001:db8::53]:5353".into()],
            serial: Some(42),
            last_transfer: Some(RpzTransfer {
                kind: "ixfr".into(),
                primary: "192.0.2.53:53".into(),
                time: 1000.0,
                duration: Some(0.25),
                bytes: Some(900),
                records: Some(12),
                result: "success".into(),
                error: None,
            }),
            last_success: Some(1000.0),
            next_refresh: Some(4600.0),
            expires: Some(1000.0 + 86_400.0),
            expired: false,
            broken: None,
        };
        assert_eq!(
            zone_lines(&zone, 1065.0),
            "block.rpz.  serial 42\n\
             \x20 file:         /var/rpz/block.rpz\n\
             \x20 primaries:    192.0.2.53:53, [2001:db8::53]:5353\n\
             \x20 last refresh: ixfr from 192.0.2.53:53, 1m05s ago: success (12 records, 900 bytes in 0.250s)\n\
             \x20 last success: 1m05s ago\n\
             \x20 next refresh: in 58m55s\n\
             \x20 expires:      in 23h58m55s\n"
        );
        let expired = RpzZone {
            expired: true,
            expires: Some(1000.0),
            ..zone.clone()
        };
        let text = zone_lines(&expired, 4665.0);
        assert!(
            text.starts_with("block.rpz.  serial 42 (EXPIRED: "),
            "{text}"
        );
        assert!(text.ends_with("  expires:      1h01m05s ago\n"), "{text}");
        let unknown = RpzZone {
            expires: None,
            ..zone.clone()
        };
        assert!(
            zone_lines(&unknown, 1065.0).ends_with("  expires:      -\n"),
            "none while no SOA is known"
        );
        let broken = RpzZone {
            broken: Some("line 3: invalid domain name character".into()),
            last_transfer: None,
            ..zone
        };
        let text = zone_lines(&broken, 1065.0);
        assert!(
            text.starts_with(
                "block.rpz.  serial 42\n\
                 \x20 BROKEN:       kresd cannot load the stored zone (line 3: invalid domain name \
                 character); it is left out"
            ),
            "{text}"
        );
    }
}
