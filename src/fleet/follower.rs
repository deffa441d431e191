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
use crate::config::kept::{self, Kept};
use crate::events::Origin;
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use crate::wire::fleet::{FleetNode, RefusedRevision};

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
}

/// What [`follow`] needs.
pub struct Follower {
    /// The store, the node's files (each document is composed with them), and what it runs.
    pub membership: Arc<Membership>,
    /// Where the applied document is kept.
    pub kept_path: PathBuf,
    pub manager: ManagerHandle,
}

/// Follow the fleet's document until `stop`: read it, apply it if it is newer than the one
/// the node runs, then watch it from the revision read on; a compaction, a failed watch or an
/// unreachable store begin again with a read, after a pause.
pub async fn follow(follower: Follower, stop: CancellationToken) {
    let key = follower.membership.config_key();
    let mut pause = FIRST_PAUSE;
    let running = kept::read_kept(&follower.kept_path)
        .ok()
        .flatten()
        .map(|k| k.revision);
    follower
        .membership
        .following
        .send_modify(|f| f.revision = f.revision.or(running));
    while !stop.is_cancelled() {
        let read = tokio::select! {
            () = stop.cancelled() => return,
            read = follower.membership.store.get(&key) => read,
        };
        let from = match read {
            Ok(read) => {
                follower
                    .membership
                    .following
                    .send_modify(|f| f.store_error = None);
                pause = FIRST_PAUSE;
                if let Some(entry) = read.entry {
                    follower.consider(entry.value, entry.mod_revision).await;
                }
                read.revision + 1
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
        let mut watch = follower.membership.store.watch(&key, from);
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                event = watch.next() => event,
            };
            match event {
                Ok(WatchEvent::Changed { changes }) => {
                    let newest = changes.into_iter().rev().find_map(|c| match c {
                        Change::Put {
                            value,
                            mod_revision,
                            ..
                        } => Some((value, mod_revision)),
                        Change::Deleted { .. } => None,
                    });
                    if let Some((value, revision)) = newest {
                        follower.consider(value, revision).await;
                    }
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

/// Sleep `pause` (or until `stop`), and double it up to the longest.
async fn wait(stop: &CancellationToken, pause: &mut Duration) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(*pause) => {}
    }
    *pause = (*pause * 2).min(LONGEST_PAUSE);
}

impl Follower {
    /// The document `value` at `revision`: applied when newer than what the node runs and
    /// valid under the node's own files, else refused (and said in the node's record). The
    /// node's files are composed with it again at every reload and start: it is kept on disk
    /// before the reload and taken back when the reload refuses it.
    async fn consider(&self, value: Vec<u8>, revision: i64) {
        self.membership
            .following
            .send_modify(|f| f.newest_seen = f.newest_seen.max(Some(revision)));
        let (running, refused) = {
            let f = self.membership.following.borrow();
            (f.revision, f.refused.as_ref().map(|r| r.revision))
        };
        if running.is_some_and(|r| r >= revision) || refused == Some(revision) {
            return;
        }
        let source = self.membership.source.clone();
        let checked = crate::manager::off_thread(move || -> Result<Value, String> {
            let document: Value = serde_json::from_slice(&value)
                .map_err(|e| format!("the document is not JSON: {e}"))?;
            if !document.is_object() {
                return Err("the document is not a mapping".into());
            }
            source
                .load_with(Some(&document))
                .map_err(|e| e.to_string())?;
            Ok(document)
        })
        .await;
        let document = match checked {
            Ok(document) => document,
            Err(reason) => return self.refuse(revision, reason),
        };
        let previous = kept::read_kept(&self.kept_path).ok().flatten();
        let kept = Kept { revision, document };
        if let Err(e) = kept::write_kept(&self.kept_path, &kept) {
            return self.refuse(revision, e.to_string());
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

/// Unix seconds now.
fn now() -> f64 {
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
