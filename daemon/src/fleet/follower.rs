//! The node's two tasks in its fleet: [`follow`] the shared document and [`publish`] the
//! node's record. See the module above for the keys and what is kept on disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kres_fleet::{Change, Lease, WatchEvent};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Membership;
use crate::events::Origin;
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use kres_config::kept::{self, Kept};
use kres_wire::fleet::{FleetNode, RefusedRevision, Rollout, RolloutState, Soak};

/// Pauses after the store failed, growing to the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// How often the record's lease is renewed (and the workers counted).
const RENEW_EVERY: Duration = Duration::from_secs(3);

/// How often the nodes' records are counted (the fleet's size this node sees).
const COUNT_EVERY: Duration = Duration::from_secs(15);

/// What the follower knows of the node, for its record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Following {
    /// The revision of the document the node runs.
    pub revision: Option<i64>,
    /// The newest revision refused.
    pub refused: Option<RefusedRevision>,
    /// When a document was last applied.
    pub changed_at: Option<f64>,
    /// Why the store cannot be read, while it cannot.
    pub store_error: Option<String>,
    /// The newest document revision seen.
    pub newest_seen: Option<i64>,
    /// How many nodes' records the store held when the publisher last looked.
    pub nodes_seen: Option<u64>,
    /// The newest document held back until a staged rollout reaches the node.
    pub held: Option<i64>,
    /// How the node's answers fared after it applied a staged document.
    pub soak: Option<Soak>,
}

/// The answers of the node's running workers: all of them, and the SERVFAILs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answers {
    pub total: u64,
    pub servfail: u64,
}

/// Counts the node's answers now (`None`: no worker told).
pub type CountAnswers =
    Box<dyn Fn() -> futures_util::future::BoxFuture<'static, Option<Answers>> + Send + Sync>;

/// Why the fleet's document is refused before the node reloads with it.
#[derive(Debug, thiserror::Error)]
enum DocumentRefused {
    #[error("the document is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the document is not a mapping")]
    NotAMapping,
    /// Composed with the node's own files, it is no valid configuration.
    #[error(transparent)]
    Invalid(#[from] kres_config::ConfigError),
}

/// What [`follow`] needs.
pub struct Follower {
    /// The store, the node's files (each document is composed with them), and what it runs.
    pub membership: Arc<Membership>,
    /// Where the applied document is kept.
    pub kept_path: PathBuf,
    pub manager: ManagerHandle,
    /// The node's answers, for the soak of a staged document.
    pub answers: CountAnswers,
}

/// The newest of the fleet's document and of its rollout the follower has seen.
#[derive(Default)]
struct Seen {
    /// The document's bytes and revision.
    document: Option<(Vec<u8>, i64)>,
    /// The rollout record and its modification revision.
    rollout: Option<(Rollout, i64)>,
}

/// The fewest answers over a soak that its SERVFAIL share is judged by: a share of a
/// handful (a node nobody asks, or one asked a few names while it restarted) says nothing of
/// the change, and two SERVFAILs of two would halt a sound rollout. A soak with fewer passes;
/// the node's record says how many it counted (`answers_after`).
pub const MIN_JUDGED_ANSWERS: u64 = 20;

/// A staged document applied, its answers being watched.
struct Soaking {
    revision: i64,
    until: tokio::time::Instant,
    /// The answers when it was applied.
    at_start: Option<Answers>,
    /// The most the SERVFAIL share may rise.
    max_rise: f64,
    /// How long it soaks (again, when the answers could not be counted).
    period: Duration,
}

/// Follow the fleet's document until `stop`: read it and its rollout, apply it if it is newer
/// than the one the node runs and a staged rollout does not hold it back, then watch both from
/// the revision read on; a compaction, a failed watch or an unreachable store begin again with
/// a read, after a pause.
pub async fn follow(follower: Follower, stop: CancellationToken) {
    let prefix = follower.membership.config_key();
    let mut pause = FIRST_PAUSE;
    let mut soaking: Option<Soaking> = None;
    let running = kept::read_kept(&follower.kept_path)
        .ok()
        .flatten()
        .map(|k| k.revision);
    follower
        .membership
        .following
        .send_modify(|f| f.revision = f.revision.or(running));
    while !stop.is_cancelled() {
        // The document's key is the rollout's prefix: one read gives both at one revision.
        let mut seen = Seen::default();
        let read = tokio::select! {
            () = stop.cancelled() => return,
            read = follower.membership.store.list(&prefix, 4) => read,
        };
        let from = match read {
            Ok(listing) => {
                follower
                    .membership
                    .following
                    .send_modify(|f| f.store_error = None);
                pause = FIRST_PAUSE;
                for (key, entry) in listing.entries {
                    follower.saw(&mut seen, &key, Some(entry.value), entry.mod_revision);
                }
                follower.advance(&seen, &mut soaking).await;
                listing.revision + 1
            }
            Err(e) => {
                tracing::warn!("fleet: cannot read the fleet's document: {e}");
                follower
                    .membership
                    .following
                    .send_modify(|f| f.store_error = Some(e.to_string()));
                wait(&stop, &mut pause).await;
                continue;
            }
        };
        let mut watch = follower.membership.store.watch(&prefix, from);
        loop {
            let soak_until = soaking.as_ref().map(|s| s.until);
            let event = tokio::select! {
                () = stop.cancelled() => return,
                () = sleep_until(soak_until) => {
                    if let Some(done) = soaking.take() {
                        soaking = follower.judge(done).await;
                    }
                    continue;
                }
                event = watch.next() => event,
            };
            match event {
                Ok(WatchEvent::Changed { changes }) => {
                    for change in changes {
                        match change {
                            Change::Put {
                                key,
                                value,
                                mod_revision,
                            } => follower.saw(&mut seen, &key, Some(value), mod_revision),
                            Change::Deleted { key, mod_revision } => {
                                follower.saw(&mut seen, &key, None, mod_revision);
                            }
                        }
                    }
                    follower.advance(&seen, &mut soaking).await;
                }
                Ok(WatchEvent::Compacted { compact_revision }) => {
                    tracing::info!(
                        "fleet: the store compacted its history to revision {compact_revision}; \
                         reading the document again"
                    );
                    break;
                }
                Err(e) => {
                    tracing::warn!("fleet: watching the fleet's document failed: {e}");
                    follower
                        .membership
                        .following
                        .send_modify(|f| f.store_error = Some(e.to_string()));
                    wait(&stop, &mut pause).await;
                    break;
                }
            }
        }
    }
}

/// Sleep until `at`, or for ever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sleep `pause` (or until `stop`), and double it up to the longest.
async fn wait(stop: &CancellationToken, pause: &mut Duration) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(*pause) => {}
    }
    *pause = (*pause * 2).min(LONGEST_PAUSE);
}

/// The SHA-256 of `document`'s bytes, in hex: what a rollout names its document by.
pub fn document_digest(document: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, document)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Follower {
    /// Note a key of the fleet's (`value` `None`: deleted) at `revision`.
    fn saw(&self, seen: &mut Seen, key: &[u8], value: Option<Vec<u8>>, revision: i64) {
        if key == self.membership.config_key().as_slice() {
            seen.document = value.map(|v| (v, revision));
        } else if key == self.membership.rollout_key().as_slice() {
            seen.rollout = value.and_then(|v| match serde_json::from_slice::<Rollout>(&v) {
                Ok(rollout) => Some((rollout, revision)),
                Err(e) => {
                    tracing::warn!("fleet: the rollout record is not one ({e}); no rollout");
                    None
                }
            });
            self.membership.rollout.send_replace(seen.rollout.clone());
        }
    }

    /// Apply the newest document seen, unless the node runs it or a newer one, refused it,
    /// or a staged rollout has not reached the node yet (then it is held). A staged document
    /// applied is watched for its soak time.
    async fn advance(&self, seen: &Seen, soaking: &mut Option<Soaking>) {
        let Some((value, revision)) = &seen.document else {
            return;
        };
        let staged = seen
            .rollout
            .as_ref()
            .map(|(r, _)| r)
            .filter(|r| r.document == document_digest(value));
        if staged.is_some_and(|r| !r.admits(&self.membership.node)) {
            let running = self.membership.following.borrow().revision;
            if running.is_none_or(|r| r < *revision) {
                self.membership.following.send_modify(|f| {
                    f.newest_seen = f.newest_seen.max(Some(*revision));
                    f.held = Some(*revision);
                });
                return;
            }
        }
        self.membership
            .following
            .send_if_modified(|f| f.held.take().is_some());
        if !self.consider(value.clone(), *revision).await {
            return;
        }
        let Some(rollout) = staged.filter(|r| r.state == RolloutState::Rolling) else {
            return;
        };
        let at_start = (self.answers)().await;
        let before = at_start.map_or(0.0, |a| share(a.servfail, a.total));
        self.membership.following.send_modify(|f| {
            f.soak = Some(Soak {
                revision: *revision,
                servfail_before: before,
                servfail_after: None,
                answers_after: 0,
                passed: None,
            });
        });
        let period = Duration::from_secs_f64(rollout.soak_seconds.clamp(0.0, 3600.0));
        let soak = Soaking {
            revision: *revision,
            until: tokio::time::Instant::now() + period,
            at_start,
            max_rise: rollout.max_servfail_rise,
            period,
        };
        *soaking = if period.is_zero() {
            self.judge(soak).await
        } else {
            Some(soak)
        };
    }

    /// The end of a soak: the share of SERVFAIL answers since the document was applied,
    /// against the share before it (of the answers since the workers started). When the
    /// workers' answers could not be counted at either end (a worker still starting), it soaks
    /// again from the first count it has: the soak returned.
    async fn judge(&self, soak: Soaking) -> Option<Soaking> {
        let now = (self.answers)().await;
        if now.is_none() || soak.at_start.is_none() {
            let again = soak.period.max(Duration::from_secs(1));
            return Some(Soaking {
                until: tokio::time::Instant::now() + again,
                at_start: soak.at_start.or(now),
                ..soak
            });
        }
        let before = soak.at_start.map_or(0.0, |a| share(a.servfail, a.total));
        // A worker restarted by the change counts from nought again.
        let since = match (soak.at_start, now) {
            (Some(start), Some(now)) if now.total >= start.total => Answers {
                total: now.total - start.total,
                servfail: now.servfail.saturating_sub(start.servfail),
            },
            (_, now) => now.unwrap_or_default(),
        };
        let after = share(since.servfail, since.total);
        let passed = soak_passed(before, since, soak.max_rise);
        if since.total < MIN_JUDGED_ANSWERS {
            tracing::info!(
                "fleet: {} answers over the soak of revision {}, too few to judge a SERVFAIL share by; passed",
                since.total,
                soak.revision
            );
        } else if !passed {
            tracing::warn!(
                "fleet: SERVFAIL share rose from {:.1}% to {:.1}% over the soak of revision {}",
                before * 100.0,
                after * 100.0,
                soak.revision
            );
        }
        self.membership.following.send_modify(|f| {
            f.soak = Some(Soak {
                revision: soak.revision,
                servfail_before: before,
                servfail_after: Some(after),
                answers_after: since.total,
                passed: Some(passed),
            });
        });
        None
    }

    /// The document `value` at `revision`: applied when newer than what the node runs and
    /// valid under the node's own files, else refused (and said in the node's record); `true`
    /// when it was applied now. The node's files are composed with it again at every reload
    /// and start: it is kept on disk before the reload and taken back when the reload refuses
    /// it.
    async fn consider(&self, value: Vec<u8>, revision: i64) -> bool {
        self.membership
            .following
            .send_modify(|f| f.newest_seen = f.newest_seen.max(Some(revision)));
        let (running, refused) = {
            let f = self.membership.following.borrow();
            (f.revision, f.refused.as_ref().map(|r| r.revision))
        };
        if running.is_some_and(|r| r >= revision) || refused == Some(revision) {
            return false;
        }
        let source = self.membership.source.clone();
        let checked = crate::manager::off_thread(move || -> Result<Value, DocumentRefused> {
            let document: Value =
                serde_json::from_slice(&value).map_err(DocumentRefused::NotJson)?;
            if !document.is_object() {
                return Err(DocumentRefused::NotAMapping);
            }
            source.load_with(Some(&document))?;
            Ok(document)
        })
        .await;
        let document = match checked {
            Ok(document) => document,
            Err(reason) => {
                self.refuse(revision, reason.to_string());
                return false;
            }
        };
        let previous = kept::read_kept(&self.kept_path).ok().flatten();
        let kept = Kept { revision, document };
        if let Err(e) = kept::write_kept(&self.kept_path, &kept) {
            self.refuse(revision, e.to_string());
            return false;
        }
        match self
            .manager
            .reload(Restart::WhenNeeded, Origin::Fleet)
            .await
        {
            Ok(_) => {
                tracing::info!("fleet: running the fleet's document of revision {revision}");
                self.membership.following.send_modify(|f| {
                    f.revision = Some(revision);
                    f.changed_at = Some(now());
                    if f.refused.as_ref().is_some_and(|r| r.revision < revision) {
                        f.refused = None;
                    }
                });
                true
            }
            Err(e) => {
                let restored = match &previous {
                    Some(previous) => kept::write_kept(&self.kept_path, previous),
                    None => std::fs::remove_file(&self.kept_path).map_err(|source| {
                        kept::KeptError::Io {
                            path: self.kept_path.clone(),
                            source,
                        }
                    }),
                };
                if let Err(e) = restored {
                    tracing::error!("fleet: {e}");
                }
                self.refuse(revision, e.to_string());
                false
            }
        }
    }

    /// Refuse `revision` for `reason`: the node keeps running what it runs.
    fn refuse(&self, revision: i64, reason: String) {
        tracing::warn!("fleet: the fleet's document of revision {revision} is refused: {reason}");
        self.membership.following.send_modify(|f| {
            f.refused = Some(RefusedRevision { revision, reason });
        });
    }
}

/// `part` of `whole` (nought of nothing).
/// Whether a soak of `since` passes: its SERVFAIL share rose by at most `max_rise` over the
/// share `before`, or it counted too few answers to judge by ([`MIN_JUDGED_ANSWERS`]).
fn soak_passed(before: f64, since: Answers, max_rise: f64) -> bool {
    since.total < MIN_JUDGED_ANSWERS || share(since.servfail, since.total) <= before + max_rise
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Unix seconds now.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What [`publish`] needs.
pub struct Publisher {
    pub membership: Arc<Membership>,
    pub following: watch::Receiver<Following>,
    /// The workers running, and configured, now.
    pub workers: Box<dyn Fn() -> (u64, u64) + Send + Sync>,
}

/// Keep the node's record in the store until `stop`: put again whenever what it says
/// changes, and at least every [`RENEW_EVERY`] with its lease renewed; a lease lost (the
/// store was out of reach for longer than its time to live) is granted anew.
pub async fn publish(mut publisher: Publisher, stop: CancellationToken) {
    let key = publisher.membership.node_key();
    let store = publisher.membership.store.clone();
    let mut pause = FIRST_PAUSE;
    while !stop.is_cancelled() {
        let lease: Lease = tokio::select! {
            () = stop.cancelled() => return,
            lease = store.grant_lease(super::LEASE_TTL) => match lease {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::debug!("fleet: no lease for the node's record: {e}");
                    wait(&stop, &mut pause).await;
                    continue;
                }
            },
        };
        let mut last: Option<FleetNode> = None;
        let mut counted: Option<tokio::time::Instant> = None;
        loop {
            if counted.is_none_or(|at| at.elapsed() >= COUNT_EVERY) {
                let prefix = publisher.membership.nodes_prefix();
                if let Ok(listing) = store.list(&prefix, super::MAX_NODES).await {
                    let n = listing.entries.len() as u64;
                    publisher
                        .membership
                        .following
                        .send_if_modified(|f| f.nodes_seen.replace(n) != Some(n));
                }
                counted = Some(tokio::time::Instant::now());
            }
            let record = publisher.record();
            let result = if last.as_ref() == Some(&record) {
                store.keep_alive(lease.id).await.map(|_| 0)
            } else {
                let value = serde_json::to_vec(&record).unwrap_or_default();
                store.put_with_lease(&key, &value, lease.id).await
            };
            if let Err(e) = result {
                tracing::debug!("fleet: the node's record was not renewed: {e}");
                break;
            }
            last = Some(record);
            pause = FIRST_PAUSE;
            tokio::select! {
                () = stop.cancelled() => {
                    let _ = store.revoke_lease(lease.id).await;
                    return;
                }
                _ = publisher.following.changed() => {}
                () = tokio::time::sleep(RENEW_EVERY) => {}
            }
        }
        wait(&stop, &mut pause).await;
    }
}

impl Publisher {
    fn record(&self) -> FleetNode {
        let (workers_running, workers) = (self.workers)();
        self.membership.record(workers_running, workers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soak_is_judged_by_its_share_from_enough_answers_only() {
        let answers = |total, servfail| Answers { total, servfail };
        // Two SERVFAILs of two answers say nothing of the change.
        assert!(soak_passed(0.0, answers(2, 2), 0.05));
        assert!(soak_passed(0.0, answers(MIN_JUDGED_ANSWERS - 1, 19), 0.05));
        // From the minimum on, the share rules.
        assert!(!soak_passed(0.0, answers(MIN_JUDGED_ANSWERS, 2), 0.05));
        assert!(soak_passed(0.0, answers(MIN_JUDGED_ANSWERS, 1), 0.05));
        assert!(soak_passed(0.10, answers(200, 30), 0.05));
        assert!(!soak_passed(0.10, answers(200, 31), 0.05));
    }
}
