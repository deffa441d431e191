//! What a configuration change does, told to clients: the one summary the planner makes
//! (`manager::plan::ChangePlan::summary`), carried by the answer of a dry run (`?dry-run=true`
//! on `/v1/config`, [`DryRun`]) and by the event of an applied change (`config-applied` on
//! `/events`). A dry run reports the plan as far as it was proven; an applied change also
//! reports what happened on the way (the workers restarted instead of taking a change live).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What one configuration change does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ChangeSummary {
    /// The sections the change touches, in the schema's order (`sections` in the events of
    /// earlier versions, still read).
    #[serde(alias = "sections")]
    pub changed: Vec<String>,
    /// What the workers go through.
    pub workers: WorkersAction,
    /// Whether the cache garbage collector is replaced.
    pub cache_gc: GcAction,
}

/// What a change does to the workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum WorkersAction {
    /// The workers keep running; their rules are reloaded.
    RulesReset,
    /// The change reaches the running workers through their control sockets (a `logging`
    /// change): no worker restarts.
    Live {
        /// The workers told, by name.
        workers: Vec<String>,
        /// Of an applied change only: the workers that did not take it and were restarted
        /// instead (absent from a dry run's answer: nothing was tried yet).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restarted: Option<Vec<String>>,
        /// Whether their rules are reloaded too.
        #[serde(rename = "rules-reset")]
        rules_reset: bool,
    },
    /// A rolling restart.
    Restart {
        /// Whether a canary worker proved the configuration first: always for an applied
        /// change; a dry run skips it when shared memory is unlinked (the canary could not
        /// open the files the running workers hold).
        #[serde(default)]
        canary: bool,
        /// Workers stopped (scale-down), by name.
        stop: Vec<String>,
        /// Workers restarted, one at a time, by name.
        restart: Vec<String>,
        /// Workers started (scale-up), by name.
        start: Vec<String>,
        /// Shared-memory files removed first.
        #[serde(default)]
        unlink: Vec<String>,
    },
}

/// What a change does to the cache garbage collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GcAction {
    /// It keeps running (or keeps not running).
    Keep,
    /// Any running one is stopped and, if enabled, one with the new arguments started.
    Replace,
}

/// What a dry run answers: what the change would do, and the ETag the result would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct DryRun {
    /// Always `true`.
    pub dry_run: bool,
    /// What the change would do.
    #[serde(flatten)]
    pub change: ChangeSummary,
    /// The ETag the configuration would have.
    pub etag: String,
}

impl DryRun {
    /// The answer for a change that would do `change` and make a configuration tagged `etag`.
    pub fn new(change: ChangeSummary, etag: String) -> DryRun {
        DryRun {
            dry_run: true,
            change,
            etag,
        }
    }
}

/// What a reload answers when the client asks for JSON: what it did, and which changes made
/// through the API since the files were last applied it undid (the files say otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ReloadSummary {
    /// What the reload did.
    #[serde(flatten)]
    pub change: ChangeSummary,
    /// JSON pointers of the changes made through the API that the reload undid.
    #[serde(default)]
    pub discarded: Vec<String>,
}

impl fmt::Display for ChangeSummary {
    /// What changed and what the processes did, for an operator's line: `changed logging;
    /// applied live to 2 workers; cache GC replaced`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changed.is_empty() {
            f.write_str("no section changed")?;
        } else {
            write!(f, "changed {}", self.changed.join(", "))?;
        }
        write!(f, "{}", self.workers)?;
        if self.cache_gc == GcAction::Replace {
            f.write_str("; cache GC replaced")?;
        }
        Ok(())
    }
}

impl fmt::Display for WorkersAction {
    /// The workers' part of [`ChangeSummary`]'s line, from its `; `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkersAction::RulesReset => f.write_str("; workers reset their rules"),
            WorkersAction::Live {
                workers,
                restarted,
                rules_reset,
            } => {
                write!(f, "; applied live to {} workers", workers.len())?;
                if let Some(restarted) = restarted.as_ref().filter(|r| !r.is_empty()) {
                    write!(f, ", restarted {} instead", restarted.join(","))?;
                }
                if *rules_reset {
                    f.write_str("; workers reset their rules")?;
                }
                Ok(())
            }
            WorkersAction::Restart {
                stop,
                restart,
                start,
                unlink,
                ..
            } => {
                f.write_str("; workers")?;
                for (what, names) in [
                    ("removed", stop),
                    ("restarted", restart),
                    ("started", start),
                ] {
                    if !names.is_empty() {
                        write!(f, " {what} {}", names.join(","))?;
                    }
                }
                if !unlink.is_empty() {
                    write!(f, " on new shared memory ({})", unlink.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// Owned names, as summaries hold them.
    pub(crate) fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_dry_run_answer_keeps_its_shape() {
        let answer = DryRun::new(
            ChangeSummary {
                changed: names(&["workers", "cache"]),
                workers: WorkersAction::Restart {
                    canary: true,
                    stop: vec![],
                    restart: names(&["kresd0", "kresd1"]),
                    start: names(&["kresd2"]),
                    unlink: names(&["defer"]),
                },
                cache_gc: GcAction::Keep,
            },
            "\"x\"".into(),
        );
        let json = serde_json::to_value(&answer).expect("JSON");
        assert_eq!(
            json,
            json!({"dry-run": true, "changed": ["workers", "cache"],
                   "workers": {"action": "restart", "canary": true, "stop": [],
                               "restart": ["kresd0", "kresd1"], "start": ["kresd2"],
                               "unlink": ["defer"]},
                   "cache-gc": "keep", "etag": "\"x\""})
        );
        assert_eq!(serde_json::from_value::<DryRun>(json).ok(), Some(answer));
        let live = WorkersAction::Live {
            workers: names(&["kresd0"]),
            restarted: None,
            rules_reset: false,
        };
        assert_eq!(
            serde_json::to_value(&live).expect("JSON"),
            json!({"action": "live", "workers": ["kresd0"], "rules-reset": false}),
            "a plan has no outcome"
        );
    }

    #[test]
    fn summaries_read_as_one_line() {
        let summary = |workers, cache_gc| ChangeSummary {
            changed: names(&["logging"]),
            workers,
            cache_gc,
        };
        for (summary, line) in [
            (
                summary(WorkersAction::RulesReset, GcAction::Keep),
                "changed logging; workers reset their rules",
            ),
            (
                summary(
                    WorkersAction::Live {
                        workers: names(&["kresd0", "kresd1"]),
                        restarted: Some(names(&["kresd1"])),
                        rules_reset: true,
                    },
                    GcAction::Replace,
                ),
                "changed logging; applied live to 2 workers, restarted kresd1 instead; \
                 workers reset their rules; cache GC replaced",
            ),
            (
                ChangeSummary {
                    changed: vec![],
                    workers: WorkersAction::Restart {
                        canary: true,
                        stop: names(&["kresd2"]),
                        restart: names(&["kresd0", "kresd1"]),
                        start: vec![],
                        unlink: vec![],
                    },
                    cache_gc: GcAction::Keep,
                },
                "no section changed; workers removed kresd2 restarted kresd0,kresd1",
            ),
            (
                ChangeSummary {
                    changed: names(&["cache"]),
                    workers: WorkersAction::Restart {
                        canary: true,
                        stop: vec![],
                        restart: names(&["kresd0", "kresd1"]),
                        start: vec![],
                        unlink: names(&["cache/top"]),
                    },
                    cache_gc: GcAction::Replace,
                },
                "changed cache; workers restarted kresd0,kresd1 on new shared memory \
                 (cache/top); cache GC replaced",
            ),
        ] {
            assert_eq!(summary.to_string(), line);
        }
    }
}
