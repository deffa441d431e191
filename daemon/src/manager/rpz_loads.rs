//! What the policy-loader's runs say of the RPZ zones kept by zone transfer: which stored
//! zones kresd could not load. Such a zone is a failed zone, not a failed resolver: the
//! policy-loader's generated Lua checks each one with kresd's own zone reader, leaves out one
//! it cannot read (the rest of the policy loads), and lists it in a report file in the rundir
//! (`lua::RPZ_REPORT`), which the manager reads after a successful run ([`read_report`]).
//!
//! The outcome is published as a `watch` of [`RpzLoads`] that outlives the manager task's
//! incarnations: the RPZ secondary transfers a broken zone whole, and the status line names
//! it; and told as events (`rpz-zone-broken`, `rpz-zone-loaded`), whence `/metrics` and
//! `GET /rpz`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use kres_config::KresConfig;

/// The longest report read: a line per zone kept by zone transfer, each a short reason.
const MAX_REPORT: u64 = 1 << 20;

/// What the policy-loader's last run said of the zones kept by zone transfer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RpzLoads {
    /// How many runs reported so far: every run is a new value, so a zone broken again after
    /// a transfer is told again.
    pub runs: u64,
    /// The zones kresd could not load in the last run, by name (absolute, lower case).
    pub broken: BTreeMap<String, BrokenZone>,
}

/// A zone kresd could not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenZone {
    /// Its stored file.
    pub file: PathBuf,
    /// Why, as kresd's zone reader said it (in one line).
    pub reason: String,
}

/// Why the report of a run could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file is missing or unreadable.
    #[error("cannot read {}", path.display())]
    Read {
        /// The report's path.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `INDEX REASON` of an entry kept by zone transfer.
    #[error("{}: line {line} names no RPZ entry kept by zone transfer", path.display())]
    Line {
        /// The report's path.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
    },
}

/// Whether the policy-loader of `cfg` loads zones kept by zone transfer (and so writes a
/// report).
pub fn reports(cfg: &KresConfig) -> bool {
    !cfg.lua.policy_script_only
        && cfg
            .local_data
            .rpz
            .iter()
            .flatten()
            .any(kres_lua::kept_by_manager)
}

/// The zones the report at `path` lists as broken, named after `cfg`'s entries. Read
/// without following a link, at most [`MAX_REPORT`] bytes.
pub fn read_report(
    path: &Path,
    cfg: &KresConfig,
) -> Result<BTreeMap<String, BrokenZone>, ReportError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read = |source| ReportError::Read {
        path: path.to_owned(),
        source,
    };
    let mut text = Vec::new();
    std::fs::File::options()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(read)?
        .take(MAX_REPORT)
        .read_to_end(&mut text)
        .map_err(read)?;
    parse_report(&String::from_utf8_lossy(&text), cfg).map_err(|line| ReportError::Line {
        path: path.to_owned(),
        line,
    })
}

/// The zones `text` lists, or the number of the first line that names no entry of `cfg`
/// kept by zone transfer.
fn parse_report(text: &str, cfg: &KresConfig) -> Result<BTreeMap<String, BrokenZone>, usize> {
    let entries = cfg.local_data.rpz.as_deref().unwrap_or_default();
    let mut broken = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let (index, reason) = line.split_once(' ').unwrap_or((line, ""));
        let entry = index
            .parse::<usize>()
            .ok()
            .and_then(|index| entries.get(index));
        let Some(rpz) = entry.filter(|rpz| kres_lua::kept_by_manager(rpz)) else {
            return Err(i + 1);
        };
        // a subscribed list by its file, a transferred zone by its name
        let zone = match &rpz.transfer {
            Some(transfer) => {
                let written = transfer.zone.as_str();
                kres_config::xfr::zone_name(written).unwrap_or_else(|_| written.to_owned())
            }
            None => rpz.file.display().to_string(),
        };
        let reason = crate::events::bounded_reason(reason.trim());
        broken.insert(
            zone,
            BrokenZone {
                file: rpz.file.clone(),
                reason,
            },
        );
    }
    Ok(broken)
}

/// What systemd's status line adds for broken zones (empty when none).
pub fn status_suffix(loads: &RpzLoads) -> String {
    const NAMED: usize = 3;
    match loads.broken.len() {
        0 => String::new(),
        n => {
            let names: Vec<&str> = loads
                .broken
                .keys()
                .take(NAMED)
                .map(String::as_str)
                .collect();
            let more = match n.saturating_sub(NAMED) {
                0 => String::new(),
                more => format!(" and {more} more"),
            };
            let plural = if n == 1 { "zone" } else { "zones" };
            let list = names.join(", ");
            format!("; RPZ {plural} {list}{more} cannot be loaded, see `kresctl rpz`")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_config::{validate, PathChecks, ValidationContext};

    fn cfg() -> KresConfig {
        let raw = serde_json::json!({"local-data": {"rpz": [
            {"file": "/var/rpz/plain.rpz"},
            {"file": "/var/rpz/block.rpz", "transfer": {"zone": "Block.RPZ", "primaries": ["192.0.2.53"]}},
            {"file": "/var/rpz/other.rpz", "transfer": {"zone": "other.rpz.", "primaries": ["192.0.2.53"]}},
        ]}});
        let ctx = ValidationContext {
            resolve_root: PathBuf::from("/etc/knot-resolver"),
            checks: PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        validate(&raw, &ctx).expect("valid")
    }

    #[test]
    fn a_report_names_its_zones_by_entry() {
        let cfg = cfg();
        assert!(reports(&cfg));
        assert_eq!(parse_report("", &cfg), Ok(BTreeMap::new()));
        let broken = parse_report("1 line 3: invalid domain name character\n", &cfg).unwrap();
        assert_eq!(
            broken.into_iter().collect::<Vec<_>>(),
            [(
                "block.rpz.".to_owned(),
                BrokenZone {
                    file: PathBuf::from("/var/rpz/block.rpz"),
                    reason: "line 3: invalid domain name character".to_owned(),
                }
            )]
        );
        assert_eq!(parse_report("2 a\n0 not kept by transfer\n", &cfg), Err(2));
        assert_eq!(parse_report("7 no such entry", &cfg), Err(1));
        assert_eq!(parse_report("x y", &cfg), Err(1));
    }

    #[test]
    fn the_status_line_names_broken_zones() {
        let zone = |reason: &str| BrokenZone {
            file: PathBuf::from("/f"),
            reason: reason.to_owned(),
        };
        let mut loads = RpzLoads::default();
        assert_eq!(status_suffix(&loads), "");
        loads.broken.insert("b.rpz.".into(), zone("x"));
        assert_eq!(
            status_suffix(&loads),
            "; RPZ zone b.rpz. cannot be loaded, see `kresctl rpz`"
        );
        for name in ["a.rpz.", "c.rpz.", "d.rpz.", "e.rpz."] {
            loads.broken.insert(name.into(), zone("x"));
        }
        assert_eq!(
            status_suffix(&loads),
            "; RPZ zones a.rpz., b.rpz., c.rpz. and 2 more cannot be loaded, see `kresctl rpz`"
        );
    }
}
