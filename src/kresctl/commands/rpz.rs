//! `kresctl rpz`: the RPZ zones kept by zone transfer (`GET /rpz`), one block per zone (its
//! serial, last refresh and success, next refresh and expiry), or the API's JSON. Zones are
//! read in one place, as `wire::rpz::RpzZone`, by `zone_lines`.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::kresctl::client::{ApiClient, ClientError};
use crate::kresctl::output::{self, OutputFormat};
use crate::kresctl::request::Request;
use crate::wire::rpz::RpzZone;

/// `kresctl rpz`: the zones, as text or JSON.
pub async fn print_zones(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Rpz).await?.ok()?)?;
    match format {
        OutputFormat::Json => output::print(&output::pretty_json(&value)?)?,
        OutputFormat::Yaml | OutputFormat::Text => {
            let zones: Vec<RpzZone> = serde_json::from_value(value)?;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            if zones.is_empty() {
                output::println("no RPZ zone is kept by zone transfer")?;
            }
            for zone in &zones {
                output::print(&zone_lines(zone, now))?;
            }
        }
    }
    Ok(())
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
    use crate::wire::rpz::RpzTransfer;

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
