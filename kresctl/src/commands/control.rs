//! `kresctl stop|drain|health|reload|upgrade`: the commands that steer the resolver as a
//! whole.

use serde_json::Value;

use crate::client::{ApiClient, ClientError};
use crate::output;
use crate::request::{Probe, ReloadScope, Request};
use kres_wire::change::ReloadSummary;

/// How long `kresctl upgrade` waits for the upgraded daemon to say how it went.
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `kresctl stop`.
pub async fn stop(client: &ApiClient) -> Result<(), ClientError> {
    client.call(&Request::Stop).await?.ok()?;
    Ok(())
}

/// `kresctl drain`: prints what the resolver answers.
pub async fn drain(client: &ApiClient) -> Result<(), ClientError> {
    let body = client.call(&Request::Drain).await?.ok()?;
    output::print(&String::from_utf8_lossy(&body))?;
    Ok(())
}

/// `kresctl health [--ready]`: prints the probe's answer; an error when it is no success.
pub async fn health(client: &ApiClient, probe: Probe) -> Result<(), ClientError> {
    let body = client.call(&Request::Health(probe)).await?.ok()?;
    output::print(&String::from_utf8_lossy(&body))?;
    Ok(())
}

/// `kresctl reload [--force]`: what the reload did, and a warning naming the changes made
/// through the API that it undid (upstream's manager says neither: nothing is printed).
pub async fn reload(client: &ApiClient, scope: ReloadScope) -> Result<(), ClientError> {
    let body = client.call(&Request::Reload(scope)).await?.ok()?;
    if let Ok(reloaded) = serde_json::from_slice::<ReloadSummary>(&body) {
        output::println(&reloaded.change.to_string())?;
        if !reloaded.discarded.is_empty() {
            // At warning priority in the journal (systemd's ExecReload).
            let journal_stream = client.environment().journal_stream.as_deref();
            let priority = if kres_wire::environment::stderr_is_journal(journal_stream) {
                "<4>"
            } else {
                ""
            };
            eprintln!(
                "{priority}warning: the reload discarded changes made through the API that the \
                 configuration files do not have: {}",
                reloaded.discarded.join(", ")
            );
        }
    }
    Ok(())
}

/// What `GET /upgrade` says: the running version and how the last upgrade ended.
#[derive(Debug, Clone, PartialEq)]
struct UpgradeStatus {
    /// The running version (`?` when the answer does not say).
    version: String,
    /// Upgrades tried so far (0: none yet).
    generation: u64,
    /// How the last one ended, if any did.
    last: Option<LastUpgrade>,
}

/// How the last upgrade ended, as kresctl reports it.
#[derive(Debug, Clone, PartialEq)]
enum LastUpgrade {
    /// It succeeded, from the version named (if the answer names it).
    Upgraded { from: Option<String> },
    /// It failed, for the reason given (if any).
    Failed { error: Option<String> },
}

/// The one place the answer of `GET /upgrade` is read.
fn upgrade_status(status: &Value) -> UpgradeStatus {
    let last = &status["last"];
    let text = |v: &Value| v.as_str().map(str::to_owned);
    UpgradeStatus {
        version: status["version"].as_str().unwrap_or("?").to_owned(),
        generation: last["generation"].as_u64().unwrap_or(0),
        last: match last {
            Value::Null => None,
            _ if last["outcome"] == "upgraded" => Some(LastUpgrade::Upgraded {
                from: text(&last["from"]),
            }),
            _ => Some(LastUpgrade::Failed {
                error: text(&last["error"]),
            }),
        },
    }
}

/// Ask `GET /upgrade`.
async fn ask_upgrade_status(client: &ApiClient) -> Result<UpgradeStatus, ClientError> {
    let response = client.call(&Request::UpgradeStatus).await?;
    if response.status == 404 {
        return Err(ClientError::NotOffered(
            "the server does not offer in-place upgrades (no /upgrade route: upstream's \
             manager?); restart it instead"
                .into(),
        ));
    }
    Ok(upgrade_status(&serde_json::from_slice(&response.ok()?)?))
}

/// `kresctl upgrade`: start an upgrade, wait until the daemon says how it ended.
pub async fn upgrade(client: &ApiClient) -> Result<(), ClientError> {
    let before = ask_upgrade_status(client).await?;
    client.call(&Request::Upgrade).await?.ok()?;
    eprintln!("upgrading from {}…", before.version);
    let deadline = tokio::time::Instant::now() + UPGRADE_TIMEOUT;
    loop {
        // While the manager process is replaced, the request waits in the API socket's
        // backlog; an error here is a moment of it, not the end.
        if let Ok(now) = ask_upgrade_status(client).await {
            if now.generation > before.generation {
                return match now.last {
                    Some(LastUpgrade::Upgraded { from }) => {
                        let from = from.as_deref().unwrap_or(&before.version);
                        output::println(&format!("upgraded: {from} -> {}", now.version))?;
                        Ok(())
                    }
                    Some(LastUpgrade::Failed { error }) => Err(failed(error, &now.version)),
                    None => Err(failed(None, &now.version)),
                };
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ClientError::Timeout(UPGRADE_TIMEOUT));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The error of an upgrade that failed, with the version that runs on.
fn failed(error: Option<String>, version: &str) -> ClientError {
    ClientError::Failed(format!(
        "upgrade failed: {}; {version} runs on",
        error.as_deref().unwrap_or("no reason given")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn upgrade_answers_are_read_leniently() {
        let none = upgrade_status(&json!({"version": "6.1.0", "last": null}));
        assert_eq!(
            none,
            UpgradeStatus {
                version: "6.1.0".into(),
                generation: 0,
                last: None
            }
        );
        let upgraded = upgrade_status(&json!({"version": "6.2.0", "last": {
            "generation": 2, "outcome": "upgraded", "from": "6.1.0", "to": "6.2.0", "at": 1}}));
        assert_eq!(upgraded.generation, 2);
        assert_eq!(
            upgraded.last,
            Some(LastUpgrade::Upgraded {
                from: Some("6.1.0".into())
            })
        );
        let failed = upgrade_status(&json!({"last": {"generation": 1, "outcome": "failed"}}));
        assert_eq!(failed.version, "?");
        assert_eq!(failed.last, Some(LastUpgrade::Failed { error: None }));
        assert_eq!(
            super::failed(None, "6.1.0").to_string(),
            "upgrade failed: no reason given; 6.1.0 runs on"
        );
    }
}
