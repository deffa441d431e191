//! `kresctl config diff FILE…` and `kresctl apply [--dry-run] FILE…`: what configuration
//! files would change in the running resolver, before anything changes. Two answers: the
//! differences between the running configuration (`GET /v1/config`) and the files, path by
//! path (a JSON Patch that turns the one into the other), and what the resolver itself says
//! it would do with them (`PUT /v1/config?dry-run=true`: the sections that change, whether
//! workers restart or only the rules are reset, which start or stop, the cache GC). The dry
//! run is sent with the running configuration's ETag, so both answers are of the same
//! version; `apply` sends the files the same way, so a change made meanwhile by someone else
//! is refused (412) rather than overwritten.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::client::{ApiClient, ClientError};
use crate::output::{self, OutputFormat};
use crate::request::{Request, Run};
use kres_config::document_diff::{differences, Difference};
use kres_wire::change::{ChangeSummary, GcAction, WorkersAction};

/// What the resolver says it would do, as lines: the one place its dry-run answer is read,
/// as the change summary the server's [`DryRun`](kres_wire::change::DryRun) carries.
fn plan_lines(plan: &Value) -> Vec<String> {
    match ChangeSummary::deserialize(plan) {
        Ok(change) => summary_lines(&change),
        Err(e) => vec![format!("plan: (the answer is not a dry run's: {e})")],
    }
}

/// The lines of one change summary.
fn summary_lines(change: &ChangeSummary) -> Vec<String> {
    let list = |names: &[String]| -> String {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    let workers = match &change.workers {
        WorkersAction::RulesReset => "workers: kept running; only the rules are reset".to_owned(),
        WorkersAction::Live {
            workers,
            rules_reset,
            ..
        } => format!(
            "workers: kept running; the change reaches them live: {}{}",
            list(workers),
            if *rules_reset {
                "; the rules are reset too"
            } else {
                ""
            }
        ),
        WorkersAction::Restart {
            canary,
            stop,
            restart,
            start,
            ..
        } => format!(
            "workers: restarted: {}; started: {}; stopped: {}{}",
            list(restart),
            list(start),
            list(stop),
            if *canary {
                " (a canary is tried first)"
            } else {
                ""
            }
        ),
    };
    let gc = match change.cache_gc {
        GcAction::Replace => "cache-gc: restarted",
        GcAction::Keep => "cache-gc: kept",
    };
    vec![
        format!("sections changed: {}", list(&change.changed)),
        workers,
        gc.to_owned(),
    ]
}

/// The running configuration and its ETag.
async fn running(client: &ApiClient) -> Result<(Value, Option<String>), ClientError> {
    let response = client.call(&Request::GetConfig { pointer: "" }).await?;
    let etag = response.etag.clone();
    let body = response.ok()?;
    Ok((serde_json::from_slice(&body)?, etag))
}

/// The configuration the files make, deep-merged in order and checked locally (paths are
/// checked by the resolver, where they are used).
fn load(files: &[PathBuf], client: &ApiClient) -> Result<Value, ClientError> {
    kres_config::load_files(
        files,
        kres_config::PathChecks::Lenient,
        super::logtarget_arg(client.environment()),
    )
    .map(|loaded| loaded.raw)
    .map_err(|e| ClientError::Invalid(e.to_string()))
}

/// Whether the server is ours: upstream's manager ignores `?dry-run=true` and would apply
/// the change. `GET /upgrade` is a route only ours has.
pub(super) async fn offers_dry_run(client: &ApiClient) -> Result<bool, ClientError> {
    Ok(client.call(&Request::UpgradeStatus).await?.status != 404)
}

/// `PUT /v1/config`, for real or as a dry run, against the version `etag` names.
async fn put(
    client: &ApiClient,
    config: &Value,
    etag: Option<&str>,
    run: Run,
) -> Result<Vec<u8>, ClientError> {
    let request = Request::ReplaceConfig {
        config,
        if_match: etag,
        run,
    };
    let response = client.call(&request).await?;
    if response.status == 412 {
        return Err(ClientError::Failed(
            "the running configuration changed while kresctl compared it; nothing was \
             changed, run it again"
                .into(),
        ));
    }
    response.ok()
}

/// Whether the files make the running configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    Same,
    Different,
}

/// `config diff` and `apply --dry-run`: print the differences and the resolver's own
/// prediction. Nothing changes.
pub async fn diff(
    client: &ApiClient,
    files: &[PathBuf],
    format: OutputFormat,
) -> Result<Compared, ClientError> {
    let new = load(files, client)?;
    let (old, etag) = running(client).await?;
    let found = differences(&old, &new);
    let plan = if offers_dry_run(client).await? {
        let body = put(client, &new, etag.as_deref(), Run::DryRun).await?;
        Some(serde_json::from_slice::<Value>(&body)?)
    } else {
        None
    };
    output::print(&report(&found, plan.as_ref(), format)?)?;
    let compared = if found.is_empty() {
        Compared::Same
    } else {
        Compared::Different
    };
    match plan {
        Some(_) => Ok(compared),
        None => Err(ClientError::NotOffered(
            "the resolver's management API offers no dry run (it is upstream's manager or an \
             older knot-resolver): the differences are all kresctl can tell; nothing was \
             changed"
                .into(),
        )),
    }
}

/// `apply`: send the files as the new configuration, against the running version.
pub async fn apply(client: &ApiClient, files: &[PathBuf]) -> Result<(), ClientError> {
    let new = load(files, client)?;
    let (_, etag) = running(client).await?;
    let body = put(client, &new, etag.as_deref(), Run::ForReal).await?;
    super::outcome::print_outcome(&body, Run::ForReal)?;
    Ok(())
}

/// What `diff` prints: the differences and the plan, as JSON or as lines.
fn report(
    found: &[Difference],
    plan: Option<&Value>,
    format: OutputFormat,
) -> Result<String, ClientError> {
    if format == OutputFormat::Json {
        let mut out = Map::new();
        out.insert(
            "differences".into(),
            Value::Array(found.iter().map(Difference::to_json).collect()),
        );
        out.insert("plan".into(), plan.cloned().unwrap_or(Value::Null));
        return output::pretty_json(&Value::Object(out));
    }
    let mut out = String::new();
    if found.is_empty() {
        out.push_str("no differences to the running configuration\n");
    }
    let lines = found.iter().map(Difference::line);
    for line in lines.chain(plan.into_iter().flat_map(plan_lines)) {
        out.push_str(&line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn differences_are_a_patch_from_the_running_configuration() {
        let old = json!({"workers": 2, "cache": {"size-max": "100M"}, "a/b": {"x~": 1},
                         "listen": [1, 2], "gone": {"deep": true}});
        let new = json!({"workers": 3, "cache": {"size-max": "100M", "ttl-max": "2d"},
                         "a/b": {"x~": 2}, "listen": [1, 2, 3], "gone": null});
        assert_eq!(
            differences(&old, &new),
            vec![
                Difference::Replace {
                    path: "/a~1b/x~0".into(),
                    old: json!(1),
                    value: json!(2)
                },
                Difference::Add {
                    path: "/cache/ttl-max".into(),
                    value: json!("2d")
                },
                Difference::Replace {
                    path: "/gone".into(),
                    old: json!({"deep": true}),
                    value: Value::Null
                },
                Difference::Replace {
                    path: "/listen".into(),
                    old: json!([1, 2]),
                    value: json!([1, 2, 3])
                },
                Difference::Replace {
                    path: "/workers".into(),
                    old: json!(2),
                    value: json!(3)
                },
            ]
        );
        assert!(differences(&old, &old).is_empty());
        let removed = differences(&json!({"x": {"y": 1}}), &json!({}));
        assert_eq!(removed[0].line(), r#"- /x: {"y":1}"#);
        assert_eq!(
            removed[0].to_json(),
            json!({"op": "remove", "path": "/x", "old": {"y": 1}})
        );
    }

    #[test]
    fn reports_as_lines_or_json() {
        let found = differences(&json!({"workers": 2}), &json!({"workers": 3}));
        let plan = json!({"changed": ["workers"], "workers": {"action": "rules-reset"},
                          "cache-gc": "keep"});
        assert_eq!(
            report(&found, Some(&plan), OutputFormat::Text).expect("text"),
            "~ /workers: 2 -> 3\nsections changed: workers\n\
             workers: kept running; only the rules are reset\ncache-gc: kept\n"
        );
        assert_eq!(
            report(&[], None, OutputFormat::Text).expect("text"),
            "no differences to the running configuration\n"
        );
        let json: Value =
            serde_json::from_str(&report(&found, None, OutputFormat::Json).expect("json"))
                .expect("valid JSON");
        assert_eq!(
            json,
            json!({"differences": [{"op": "replace", "path": "/workers", "old": 2, "value": 3}],
                   "plan": null})
        );
    }

    #[test]
    fn plans_read_as_lines() {
        let plan = json!({"dry-run": true, "changed": ["workers", "cache"],
            "workers": {"action": "restart", "canary": true, "restart": ["kresd1", "kresd2"],
                        "start": ["kresd3"], "stop": [], "unlink": []},
            "cache-gc": "keep", "etag": "\"x\""});
        assert_eq!(
            plan_lines(&plan),
            vec![
                "sections changed: workers, cache",
                "workers: restarted: kresd1, kresd2; started: kresd3; stopped: none (a canary is tried first)",
                "cache-gc: kept",
            ]
        );
        let reset = json!({"changed": ["local-data"], "workers": {"action": "rules-reset"},
                           "cache-gc": "keep"});
        assert_eq!(
            plan_lines(&reset)[1],
            "workers: kept running; only the rules are reset"
        );
        let live = json!({"changed": ["logging"], "cache-gc": "replace",
            "workers": {"action": "live", "workers": ["kresd0", "kresd1"], "rules-reset": false}});
        assert_eq!(
            plan_lines(&live)[1..],
            [
                "workers: kept running; the change reaches them live: kresd0, kresd1",
                "cache-gc: restarted"
            ]
        );
    }
}
