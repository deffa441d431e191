//! What kresctl prints of a change the resolver carried out or only tried: the summary of an
//! applied change, a dry run's plan, or a staged change's waves on a node of a fleet. Shared
//! by `config set/patch/delete` (`commands::config`) and `apply` (`commands::diff`).

use crate::client::ClientError;
use crate::output;
use crate::request::Run;
use kres_wire::change::{ChangeSummary, DryRun};
use kres_wire::fleet::Staged;

/// Print what the resolver answered about a change: its one-line summary, or a body that is
/// none as it is (nothing from upstream's manager).
pub fn print_outcome(body: &[u8], run: Run) -> Result<(), ClientError> {
    if body.is_empty() {
        return Ok(());
    }
    let line = match run {
        Run::ForReal => serde_json::from_slice::<ChangeSummary>(body)
            .ok()
            .map(|s| s.to_string())
            .or_else(|| {
                serde_json::from_slice::<Staged>(body)
                    .ok()
                    .map(|s| staged_line(&s))
            }),
        Run::DryRun => serde_json::from_slice::<DryRun>(body)
            .ok()
            .map(|d| format!("dry run, nothing changed: would have {}", d.change)),
    };
    let line = line.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    Ok(output::println(&line)?)
}

/// What a staged change says: its revision and its waves.
fn staged_line(staged: &Staged) -> String {
    let waves: Vec<String> = staged
        .waves
        .iter()
        .enumerate()
        .map(|(i, nodes)| {
            let nodes: Vec<String> = nodes
                .iter()
                .map(|n| output::escape_controls(n).into_owned())
                .collect();
            let what = if i == 0 { "canary" } else { "wave" };
            format!("{what} {}: {}", i + 1, nodes.join(", "))
        })
        .collect();
    format!(
        "written to the fleet as revision {}, staged: {}; `kresctl fleet status` follows it",
        staged.revision,
        waves.join("; ")
    )
}
