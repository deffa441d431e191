//! A minute of chaos on real kresd: 2 workers under a steady UDP load, and every 2 s one fault
//! or change from a seeded schedule (`testbed::chaos`: kills of workers, of the manager
//! process and of the cache GC, a manager-task panic, scaling, policy, refused and live
//! changes, reloads by kresctl and SIGHUP, an in-place upgrade, hostile bodies, a connection
//! burst). The promise holds at the end: no query lost beyond one per killed worker, the root
//! the same process with flat memory and descriptors, no zombie, the last accepted
//! configuration running, a clean stop. `KRES_CHAOS_SEED` replays the schedule of a run.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{DAEMON, KRESCTL};
use testbed::chaos::{self, ChaosSpec, ControlPlane};

#[test]
fn the_resolver_keeps_answering_and_the_root_stays_in_charge_through_a_minute_of_chaos() {
    let seed = std::env::var("KRES_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
    eprintln!("chaos seed {seed} (replay: KRES_CHAOS_SEED={seed})");
    let spec = ChaosSpec {
        control_plane: ControlPlane::Ours,
        daemon: PathBuf::from(DAEMON),
        kresctl: PathBuf::from(KRESCTL),
        build_label_marker: kres_daemon::BUILD_LABEL_MARKER.to_vec(),
        workers: 2,
        scaled_workers: 3,
        rate: 1000,
        duration: Duration::from_secs(60),
        period: Duration::from_secs(2),
        seed,
        // A debug build on a loaded 2-core machine, behind the supervisor's restart backoff:
        // generous, and never a performance assertion.
        effect_timeout: Duration::from_secs(120),
    };
    let report = chaos::run(&spec).expect("the soak starts");
    eprintln!("{report}");
    for c in &report.criteria {
        assert!(c.passed, "{}: {} (seed {seed})\n{report}", c.name, c.detail);
    }
    for (kind, n) in report.counts() {
        assert!(n >= 1, "{kind} never ran (seed {seed})");
    }
}
