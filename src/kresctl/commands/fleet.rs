//! `kresctl fleet status`: the fleet this node is in (`GET /fleet`), one line a node, those
//! behind the newest document marked; `kresctl fleet rollback` (`POST /fleet/rollback`).

use crate::kresctl::client::{ApiClient, ClientError};
use crate::kresctl::output::{self, OutputFormat};
use crate::kresctl::request::Request;
use crate::wire::fleet::{FleetNode, FleetStatus, RolledBack};

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

/// A node's refusal, or why it cannot read the store, or `-`.
fn refused(node: &FleetNode) -> String {
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
    use crate::wire::fleet::RefusedRevision;

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
}
