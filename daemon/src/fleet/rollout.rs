//! Staged rollouts of the fleet's document: the waves a change goes to ([`plan`]), and the
//! task that moves a rollout on ([`drive`]) on the node that took the change.
//!
//! The rollout record (`wire::fleet::Rollout`, at `<prefix>/config-rollout`) is written in the
//! transaction that writes the document, and names it by its digest; every node's follower
//! holds the document back until the record admits the node. The node that took the change
//! reads the nodes' records each second while the rollout rolls and [`decide`]s: the next
//! wave once every admitted node runs the document and passed its soak (its SERVFAIL share did
//! not rise by more than allowed), a halt when one refused it, failed its soak or a wave took
//! too long. Every step is a compare-and-swap on the record, so a driver restarted (its
//! manager was) carries on from the record, and a rollback (which deletes the record) wins.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Membership;
use kres_config::Wave;
use kres_wire::fleet::{FleetNode, Rollout, RolloutState};

/// How often a driver reads the nodes' records while its rollout rolls.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The waves of a rollout over `nodes`: `canary` alone, then the others (in name order) in
/// waves of `wave`. `None` when the canary is not among the nodes.
pub fn plan(nodes: &[String], canary: &str, wave: Wave) -> Option<Vec<Vec<String>>> {
    if !nodes.iter().any(|n| n == canary) {
        return None;
    }
    let mut rest: Vec<String> = nodes.iter().filter(|n| *n != canary).cloned().collect();
    rest.sort();
    rest.dedup();
    let mut waves = vec![vec![canary.to_owned()]];
    waves.extend(
        rest.chunks(wave.size(nodes.len()).max(1))
            .map(<[String]>::to_vec),
    );
    Some(waves)
}

/// What the rollout `record` becomes, given the nodes' records and the time (Unix seconds):
/// `None` while it waits. `revision` is the staged document's.
pub fn decide(record: &Rollout, revision: i64, nodes: &[FleetNode], now: f64) -> Option<Rollout> {
    if record.state != RolloutState::Rolling {
        return None;
    }
    let halt = |why: String| {
        Some(Rollout {
            state: RolloutState::Halted,
            halted: Some(why),
            ..record.clone()
        })
    };
    let admitted: Vec<&String> = record
        .waves
        .iter()
        .take(record.admitted)
        .flatten()
        .collect();
    let mut waiting = Vec::new();
    for name in admitted {
        let node = nodes.iter().find(|n| &n.node == name);
        if let Some(refused) = node
            .and_then(|n| n.refused.as_ref())
            .filter(|r| r.revision == revision)
        {
            return halt(format!(
                "node {name} refused revision {revision}: {}",
                refused.reason
            ));
        }
        let soak = node
            .and_then(|n| n.soak.as_ref())
            .filter(|s| s.revision == revision);
        if let Some(soak) = soak.filter(|s| s.passed == Some(false)) {
            return halt(format!(
                "node {name}'s SERVFAIL share rose from {:.1}% to {:.1}% of {} answers over \
                 the soak of revision {revision} (at most {:.1} points allowed)",
                soak.servfail_before * 100.0,
                soak.servfail_after.unwrap_or_default() * 100.0,
                soak.answers_after,
                record.max_servfail_rise * 100.0,
            ));
        }
        let runs = node.is_some_and(|n| n.revision.is_some_and(|r| r >= revision));
        let soaked = record.soak_seconds <= 0.0 || soak.is_some_and(|s| s.passed == Some(true));
        if !(runs && soaked) {
            waiting.push(name.as_str());
        }
    }
    if !waiting.is_empty() {
        if now - record.admitted_at > record.wave_timeout_seconds {
            return halt(format!(
                "wave {} did not apply revision {revision} within {} s: {} still {}",
                record.admitted,
                record.wave_timeout_seconds,
                waiting.join(", "),
                if waiting.len() == 1 {
                    "does not"
                } else {
                    "do not"
                },
            ));
        }
        return None;
    }
    if record.admitted >= record.waves.len() {
        return Some(Rollout {
            state: RolloutState::Done,
            ..record.clone()
        });
    }
    Some(Rollout {
        admitted: record.admitted + 1,
        admitted_at: now,
        ..record.clone()
    })
}

/// Move on, until `stop`, every rollout this node drives: each second, [`decide`] over the
/// nodes' records and write the record's next state if the one read is still the store's.
pub async fn drive(membership: Arc<Membership>, stop: CancellationToken) {
    let mut rollouts = membership.rollout.subscribe();
    let node = membership.node.clone();
    loop {
        let driven = |r: &Option<(Rollout, i64)>| {
            r.as_ref()
                .is_some_and(|(r, _)| r.state == RolloutState::Rolling && r.driver == node)
        };
        tokio::select! {
            () = stop.cancelled() => return,
            waited = rollouts.wait_for(driven) => if waited.is_err() { return },
        }
        let current = rollouts.borrow().clone();
        if let Some((record, mod_revision)) = current {
            step(&membership, &record, mod_revision).await;
        }
        tokio::select! {
            () = stop.cancelled() => return,
            _ = rollouts.changed() => {}
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// One look at the fleet for the rollout `record` (at `mod_revision`) and its next state
/// written, if it has one.
async fn step(membership: &Membership, record: &Rollout, mod_revision: i64) {
    let status = match membership.status().await {
        Ok(status) => status,
        Err(e) => {
            tracing::debug!("fleet: the rollout cannot see the fleet: {e}");
            return;
        }
    };
    // The record is written with its document: its first revision is the document's.
    let Some(revision) = record
        .revision
        .or(status.newest.filter(|n| *n == mod_revision))
    else {
        return;
    };
    let next = match decide(record, revision, &status.nodes, super::follower::now()) {
        Some(next) => next,
        None if record.revision.is_none() => record.clone(),
        None => return,
    };
    let next = Rollout {
        revision: Some(revision),
        ..next
    };
    match next.state {
        RolloutState::Halted => tracing::warn!(
            "fleet: the rollout of revision {revision} halted: {}",
            next.halted.as_deref().unwrap_or_default()
        ),
        RolloutState::Done => {
            tracing::info!("fleet: the rollout of revision {revision} reached every node");
        }
        RolloutState::Rolling if next.admitted > record.admitted => tracing::info!(
            "fleet: the rollout of revision {revision} admits wave {} of {}",
            next.admitted,
            next.waves.len()
        ),
        RolloutState::Rolling => {}
    }
    let Ok(value) = serde_json::to_vec(&next) else {
        return;
    };
    let written = membership
        .store
        .put_if(
            &membership.rollout_key(),
            &value,
            kres_fleet::Expect::ModRevision(mod_revision),
        )
        .await;
    if let Err(e) = written {
        // A conflict: somebody else moved it (a rollback); the follower reads it anew.
        tracing::debug!("fleet: the rollout record was not moved on: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_wire::fleet::{RefusedRevision, Soak};

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn record(waves: &[&[&str]], admitted: usize) -> Rollout {
        Rollout {
            document: "d".into(),
            revision: Some(7),
            previous: Some(5),
            driver: "a".into(),
            waves: waves.iter().map(|w| names(w)).collect(),
            admitted,
            admitted_at: 100.0,
            state: RolloutState::Rolling,
            halted: None,
            soak_seconds: 10.0,
            max_servfail_rise: 0.05,
            wave_timeout_seconds: 60.0,
        }
    }

    fn node(name: &str, revision: i64, passed: Option<bool>) -> FleetNode {
        FleetNode {
            node: name.into(),
            revision: Some(revision),
            refused: None,
            workers_running: 1,
            workers: 1,
            version: "v".into(),
            changed_at: None,
            store_error: None,
            newest_seen: Some(revision),
            nodes_seen: None,
            held: None,
            soak: passed.map(|p| Soak {
                revision,
                servfail_before: 0.01,
                servfail_after: Some(if p { 0.01 } else { 0.5 }),
                answers_after: 200,
                passed: Some(p),
            }),
        }
    }

    #[test]
    fn waves_are_the_canary_then_the_others_in_order() {
        let nodes = names(&["e", "b", "a", "d", "c"]);
        assert_eq!(
            plan(&nodes, "c", Wave::Nodes(2)),
            Some(vec![names(&["c"]), names(&["a", "b"]), names(&["d", "e"])])
        );
        // 25% of 5 nodes: two a wave (rounded up).
        assert_eq!(
            plan(&nodes, "a", Wave::Share(0.25)).map(|w| w.len()),
            Some(3)
        );
        assert_eq!(
            plan(&nodes, "a", Wave::Share(1.0)),
            Some(vec![names(&["a"]), names(&["b", "c", "d", "e"])])
        );
        assert_eq!(plan(&nodes, "z", Wave::Nodes(1)), None, "no such canary");
    }

    #[test]
    fn a_wave_that_ran_and_soaked_admits_the_next_and_the_last_ends_it() {
        let r = record(&[&["a"], &["b", "c"]], 1);
        // The canary still soaks: wait.
        assert_eq!(decide(&r, 7, &[node("a", 7, None)], 110.0), None);
        let next = decide(&r, 7, &[node("a", 7, Some(true))], 111.0).expect("moved on");
        assert_eq!((next.admitted, next.admitted_at), (2, 111.0));
        assert!(next.admits("b") && next.admits("c") && !r.admits("b"));
        // One of the second wave has not applied it: wait; then both have: done.
        let both = [
            node("a", 7, Some(true)),
            node("b", 7, Some(true)),
            node("c", 5, None),
        ];
        assert_eq!(decide(&next, 7, &both, 112.0), None);
        let all = [
            node("a", 7, Some(true)),
            node("b", 7, Some(true)),
            node("c", 7, Some(true)),
        ];
        let done = decide(&next, 7, &all, 113.0).expect("done");
        assert_eq!(done.state, RolloutState::Done);
        assert!(
            done.admits("joined-later"),
            "a done rollout admits everybody"
        );
        assert_eq!(
            decide(&done, 7, &all, 114.0),
            None,
            "a done rollout stays done"
        );
    }

    #[test]
    fn a_refusal_a_servfail_rise_or_a_slow_wave_halts_it() {
        let r = record(&[&["a"], &["b"]], 1);
        let mut refused = node("a", 5, None);
        refused.refused = Some(RefusedRevision {
            revision: 7,
            reason: "the canary failed".into(),
        });
        let halted = decide(&r, 7, &[refused], 101.0).expect("halted");
        assert_eq!(halted.state, RolloutState::Halted);
        assert_eq!(halted.admitted, 1, "no further wave");
        let why = halted.halted.clone().unwrap_or_default();
        assert!(
            why.contains("node a refused revision 7: the canary failed"),
            "{why}"
        );
        assert_eq!(decide(&halted, 7, &[node("a", 7, Some(true))], 102.0), None);

        let rose = decide(&r, 7, &[node("a", 7, Some(false))], 101.0).expect("halted");
        let why = rose.halted.unwrap_or_default();
        assert!(
            why.contains("rose from 1.0% to 50.0% of 200 answers"),
            "{why}"
        );

        // A refusal of an older revision is not this rollout's.
        let mut old = node("a", 5, None);
        old.refused = Some(RefusedRevision {
            revision: 6,
            reason: "older".into(),
        });
        assert_eq!(decide(&r, 7, &[old], 101.0), None);
        // Nobody ran it within the wave's time.
        let slow = decide(&r, 7, &[node("a", 5, None)], 161.0).expect("halted");
        let why = slow.halted.unwrap_or_default();
        assert!(
            why.contains("wave 1 did not apply revision 7 within 60 s: a still does not"),
            "{why}"
        );
    }

    #[test]
    fn without_a_soak_running_it_is_enough() {
        let mut r = record(&[&["a"], &["b"]], 1);
        r.soak_seconds = 0.0;
        assert_eq!(
            decide(&r, 7, &[node("a", 7, None)], 101.0).map(|n| n.admitted),
            Some(2)
        );
    }
}
