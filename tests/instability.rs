//! A resolver whose workers keep crashing is never a restart storm: the supervisor backs off
//! and fails the worker at its start limit, the manager makes bounded fix attempts, then stops
//! the resolver in a controlled way with a non-zero exit.

mod common;

use std::time::Duration;

use common::Setup;

#[test]
fn crashing_workers_lead_to_bounded_fix_attempts_then_a_controlled_stop() {
    // kresd becomes ready, then its own Lua kills it shortly after, every time.
    let setup = Setup::new("unstable")
        .extra("lua:\n  script: |\n    event.after(200, function() os.exit(3) end)\n");
    let mut r = common::start(&setup).expect("starts (the first READY comes before the crash)");
    let status = r
        .launched
        .wait(Duration::from_secs(180))
        .expect("the resolver stops by itself");
    let log = r.launched.output.text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("attempting to fix them"), "{log}");
    assert!(log.contains("keep failing after 2 fix attempts"), "{log}");
    // Bounded: the first start, then up to 5 automatic restarts per round, in 3 rounds.
    let spawns = log
        .lines()
        .filter(|l| l.contains("process spawned") && l.contains("name=\"kresd0\""))
        .count();
    assert!(
        (6..=1 + 3 * 6).contains(&spawns),
        "{spawns} spawns of kresd0:\n{log}"
    );
    assert!(
        r.launched.tree().is_empty(),
        "left: {:?}",
        r.launched.tree()
    );
    r.notify
        .wait_for("STOPPING=1", Duration::from_secs(1))
        .expect("STOPPING=1 sent");
}
