//! `kresctl fleet status`: the fleet this node is in (`GET /fleet`), one line a node, those
//! behind the newest document marked; `kresctl fleet rollback` (`POST /fleet/rollback`).

use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::Request;
use kres_wire::fleet::{FleetNode, FleetStatus, RolledBack, Rollout, RolloutState};

pub async fn status(client: &ApiClient, format: OutputFormat) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::Fleet).await?.ok()?)?;
    if format == OutputFormat::Json {
        print!("{}", output::pretty_json(&value)?);
        return Ok(());
    }
    let status: FleetStatus = serde_json::from_value(value)?;
    print!("{}", table(&status));
    Ok(())
}

/// `config get --explain`: where the running configuration comes from, on standard error
/// (the configuration itself goes to standard output as without it).
pub async fn explain(client: &ApiClient) -> Result<(), ClientError> {
    let response = client.call(&Request::Fleet).await?;
    if response.status == 404 {
        eprintln!("# this node is in no fleet: its configuration is its own files alone");
        return Ok(());
    }
    let status: FleetStatus = serde_json::from_value(output::json_body(&response.ok()?)?)?;
    eprint!("{}", explanation(&status));
    Ok(())
}

/// The lines of `explain`, each a YAML comment.
fn explanation(status: &FleetStatus) -> String {
    let list = |paths: &[String]| {
        if paths.is_empty() {
            " none".to_owned()
        } else {
            paths
                .iter()
                .map(|p| format!("\n#   {}", output::escape_controls(p)))
                .collect()
        }
    };
    let mine = status.nodes.iter().find(|n| n.node == status.node);
    let running = mine
        .and_then(|n| n.revision)
        .map_or_else(|| "none yet".to_owned(), |r| format!("revision {r}"));
    format!(
        "# node {} of fleet {}: it runs the fleet's document ({running}) with its own file laid \
         over it.\n# Where the file sets a value, the file wins (mappings merge key by key); \
         always the node's own: {}.\n# set by this node's file:{}\n# the fleet's values this \
         node does not run:{}\n",
        output::escape_controls(&status.node),
        output::escape_controls(&status.prefix),
        kres_config::overlay::NODE_LOCAL.join(", "),
        list(&status.own),
        list(&status.shadowed),
    )
}

pub async fn rollback(client: &ApiClient) -> Result<(), ClientError> {
    let value = output::json_body(&client.call(&Request::FleetRollback).await?.ok()?)?;
    let done: RolledBack = serde_json::from_value(value)?;
    println!(
        "the fleet's document before revision {} is its own again, as revision {}",
        done.replaced, done.revision
    );
    Ok(())
}

/// The table of `status`, for a person.
fn table(status: &FleetStatus) -> String {
    let revision = |r: Option<i64>| r.map_or_else(|| "-".to_owned(), |r| r.to_string());
    let mut out = format!(
        "fleet {} (seen from {}): newest document {}\n{:<24} {:>9} {:>8}  {:<10} REFUSED\n",
        status.prefix,
        status.node,
        revision(status.newest),
        "NODE",
        "RUNNING",
        "WORKERS",
        "VERSION"
    );
    if let Some(rollout) = &status.rollout {
        out.push_str(&rollout_line(rollout));
    }
    let behind = status.stragglers();
    for node in &status.nodes {
        let mark = if behind.iter().any(|b| b.node == node.node) {
            " (behind)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<24} {:>9} {:>8}  {:<10} {}{mark}\n",
            output::escape_controls(&node.node),
            revision(node.revision),
            format!("{}/{}", node.workers_running, node.workers),
            output::escape_controls(&node.version),
            refused(node)
        ));
    }
    if !behind.is_empty() {
        out.push_str(&format!(
            "{} of {} nodes do not run the newest document\n",
            behind.len(),
            status.nodes.len()
        ));
    }
    out
}

/// Where a staged rollout is, as one line.
fn rollout_line(rollout: &Rollout) -> String {
    let revision = rollout
        .revision
        .map_or_else(|| "being written".to_owned(), |r| r.to_string());
    let canary = rollout
        .waves
        .first()
        .map(|w| output::escape_controls(&w.join(", ")).into_owned())
        .unwrap_or_default();
    let state = match rollout.state {
        RolloutState::Rolling => "rolling".to_owned(),
        RolloutState::Done => "done: every node may run it".to_owned(),
        RolloutState::Halted => format!(
            "HALTED: {} (`kresctl fleet rollback` returns every node to the previous document)",
            output::escape_controls(rollout.halted.as_deref().unwrap_or("-"))
        ),
    };
    format!(
        "staged rollout of revision {revision}: wave {} of {} admitted (canary {canary}), {state}\n",
        rollout.admitted,
        rollout.waves.len()
    )
}

/// A node's refusal, or why it cannot read the store, or the staged document it waits for,
/// or `-`.
fn refused(node: &FleetNode) -> String {
    if let (None, None, Some(held)) = (&node.refused, &node.store_error, node.held) {
        return format!("{held}: held until its wave");
    }
    if let Some(soak) = node.soak.as_ref().filter(|s| s.passed == Some(false)) {
        return format!(
            "{}: SERVFAIL share rose from {:.1}% to {:.1}%",
            soak.revision,
            soak.servfail_before * 100.0,
            soak.servfail_after.unwrap_or_default() * 100.0
        );
    }
    match (&node.refused, &node.store_error) {
        (Some(r), _) => format!(
            "{}: {}",
            r.revision,
            output::escape_controls(&r.reason.replace('\n', " "))
        ),
        (None, Some(e)) => format!("store: {}", output::escape_controls(e)),
        (None, None) => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kres_wire::fleet::RefusedRevision;

    fn node(name: &str, revision: Option<i64>, refused: Option<(i64, &str)>) -> FleetNode {
        FleetNode {
            node: name.into(),
            revision,
            refused: refused.map(|(revision, reason)| RefusedRevision {
                revision,
                reason: reason.into(),
            }),
            workers_running: 2,
            workers: 2,
            version: "0.1.0".into(),
            changed_at: None,
            store_error: None,
            newest_seen: None,
            nodes_seen: None,
            held: None,
            soak: None,
        }
    }

    #[test]
    fn nodes_behind_the_newest_document_are_marked_with_their_refusal() {
        let status = FleetStatus {
            node: "a".into(),
            prefix: "/knot-resolver/lab".into(),
            newest: Some(12),
            nodes: vec![
                node("a", Some(12), None),
                node("b", Some(9), Some((12, "the canary\nfailed"))),
            ],
            rollout: None,
            own: Vec::new(),
            shadowed: Vec::new(),
        };
        let text = table(&status);
        assert!(text.starts_with("fleet /knot-resolver/lab (seen from a): newest document 12\n"));
        assert!(
            text.contains("\na                               12      2/2  0.1.0      -\n"),
            "{text}"
        );
        assert!(
            text.contains("b                                9      2/2  0.1.0      12: the canary failed (behind)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("1 of 2 nodes do not run the newest document\n"),
            "{text}"
        );
    }

    #[test]
    fn the_explanation_names_the_rule_and_the_paths() {
        let status = FleetStatus {
            node: "a".into(),
            prefix: "/knot-resolver/lab".into(),
            newest: Some(12),
            nodes: vec![node("a", Some(11), None)],
            rollout: None,
            own: vec!["/workers".into(), "/cache/storage".into()],
            shadowed: vec!["/workers".into()],
        };
        let text = explanation(&status);
        assert!(
            text.starts_with(
                "# node a of fleet /knot-resolver/lab: it runs the fleet's document (revision 11)"
            ),
            "{text}"
        );
        assert!(text.contains("always the node's own: /rundir, "), "{text}");
        assert!(
            text.contains("# set by this node's file:\n#   /workers\n#   /cache/storage\n"),
            "{text}"
        );
        assert!(text.ends_with("does not run:\n#   /workers\n"), "{text}");
        assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
    }

    #[test]
    fn a_staged_rollout_and_the_nodes_it_holds_back_are_said() {
        let mut held = node("c", Some(11), None);
        held.held = Some(12);
        let status = FleetStatus {
            node: "a".into(),
            prefix: "/knot-resolver/lab".into(),
            newest: Some(12),
            nodes: vec![node("a", Some(12), None), held],
            rollout: Some(Rollout {
                document: "d".into(),
                revision: Some(12),
                previous: Some(11),
                driver: "a".into(),
                waves: vec![vec!["a".into()], vec!["c".into()]],
                admitted: 1,
                admitted_at: 0.0,
                state: RolloutState::Halted,
                halted: Some("node a's SERVFAIL share rose".into()),
                soak_seconds: 30.0,
                max_servfail_rise: 0.05,
                wave_timeout_seconds: 300.0,
            }),
            own: Vec::new(),
            shadowed: Vec::new(),
        };
        let text = table(&status);
        assert!(
            text.contains("staged rollout of revision 12: wave 1 of 2 admitted (canary a), HALTED: node a's SERVFAIL share rose"),
            "{text}"
        );
        assert!(
            text.contains("12: held until its wave (behind)\n"),
            "{text}"
        );
    }
}
