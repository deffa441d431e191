//! A node of a fleet (`fleet` in its own file): it follows the fleet's shared document in
//! etcd and runs it under its own file (`config::overlay`), and publishes what it runs for
//! `kresctl fleet status`. The store is never in DNS's path: the document a node applied is
//! kept on disk (`config::kept`) and every start and reload composes the files with it, so a
//! node starts, serves and reloads with etcd gone; only new documents wait for it.
//!
//! In etcd, under the fleet's prefix: `config`, the shared document (JSON); `config-rollout`,
//! the staged rollout of it, if it was staged (`rollout`); and `nodes/<node>`, each node's
//! [`FleetNode`] under a lease of its own. Changes made through a node's API are written to
//! `config` by `api::config` ([`Membership::write`]).
//!
//! Three tasks, owned by the manager process's serving tracker and stopped by its token:
//! [`follower::follow`] (read the document, watch it, apply each new revision or refuse it,
//! hold it back until a staged rollout admits the node), [`follower::publish`] (keep the
//! node's record and its lease) and [`rollout::drive`] (move on the rollouts this node took).

pub mod follower;
pub mod rollout;

use std::sync::Arc;
use std::time::Duration;

use kres_fleet::{Credentials, Store, StoreOptions, TlsOptions};

use kres_config::FleetSchema;
use kres_wire::fleet::{FleetNode, FleetStatus, Rollout};

/// The most nodes `GET /fleet` lists.
pub const MAX_NODES: usize = 4096;

/// How long a node's record outlives its last renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// A node's place in its fleet: the store, the keys, the node's own files, and what it runs.
pub struct Membership {
    pub store: Store,
    /// `fleet.node`.
    pub node: String,
    /// `fleet.etcd.prefix`.
    pub prefix: String,
    /// The node's own files, which every document is composed with.
    pub source: kres_config::ConfigSource,
    /// What the node runs of the fleet's documents (the follower tells).
    pub following: tokio::sync::watch::Sender<follower::Following>,
    /// The fleet's rollout record as the follower last read it, with its modification
    /// revision (the driver of a rollout moves it on from there).
    pub rollout: tokio::sync::watch::Sender<Option<(Rollout, i64)>>,
}

/// Why a node cannot take its place in the fleet its configuration names.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("/fleet/etcd/password-file {}: {source}", .path.display())]
    PasswordFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("/fleet/etcd: {0}")]
    Store(#[from] kres_fleet::ConfigError),
}

/// Why a change of the fleet's document through this node did not reach it.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the fleet's store: {0}")]
    Store(#[from] kres_fleet::Error),
    #[error("the fleet's document in the store is not a JSON mapping: {0}")]
    Malformed(String),
    #[error("written to the fleet as revision {revision}, but this node refused it: {reason}")]
    Refused { revision: i64, reason: String },
    #[error("written to the fleet as revision {revision}; this node did not apply it within {} s", .within.as_secs())]
    NotApplied { revision: i64, within: Duration },
}

impl Membership {
    /// The membership `fleet` describes (its password file read), of a node whose own files
    /// `source` reads.
    pub fn of(
        fleet: &FleetSchema,
        source: kres_config::ConfigSource,
    ) -> Result<Arc<Membership>, MembershipError> {
        let etcd = &fleet.etcd;
        let mut options = StoreOptions::new(
            etcd.endpoints
                .iter()
                .map(|e| e.as_str().to_owned())
                .collect(),
        );
        options.timeout = etcd.timeout.duration();
        if let (Some(username), Some(file)) = (&etcd.username, &etcd.password_file) {
            let password =
                std::fs::read_to_string(file).map_err(|source| MembershipError::PasswordFile {
                    path: file.clone(),
                    source,
                })?;
            options.auth = Some(Credentials {
                username: username.clone(),
                password: password.trim_end_matches(['\r', '\n']).to_owned(),
            });
        }
        if let Some(ca_file) = &etcd.ca_file {
            options.tls = Some(TlsOptions {
                ca_file: ca_file.clone(),
                client_cert: match (&etcd.cert_file, &etcd.key_file) {
                    (Some(cert_file), Some(key_file)) => Some(kres_fleet::ClientCert {
                        cert_file: cert_file.clone(),
                        key_file: key_file.clone(),
                    }),
                    _ => None,
                },
                server_name: None,
            });
        }
        let store = Store::new(&options)?;
        Ok(Arc::new(Membership {
            store,
            node: fleet.node.clone(),
            prefix: etcd.prefix.clone(),
            source,
            following: tokio::sync::watch::Sender::new(follower::Following::default()),
            rollout: tokio::sync::watch::Sender::new(None),
        }))
    }

    /// The fleet's document now (an empty mapping before any was written) and its revision.
    pub async fn document(&self) -> Result<(serde_json::Value, Option<i64>), WriteError> {
        let read = self.store.get(&self.config_key()).await?;
        let Some(entry) = read.entry else {
            return Ok((serde_json::json!({}), None));
        };
        let document: serde_json::Value = serde_json::from_slice(&entry.value)
            .map_err(|e| WriteError::Malformed(e.to_string()))?;
        if !document.is_object() {
            return Err(WriteError::Malformed("not a mapping".into()));
        }
        Ok((document, Some(entry.mod_revision)))
    }

    /// Write `document` as the fleet's, if the one in the store is still at `revision`
    /// (`None`: none yet), with its staged `rollout` in the same transaction (none: the
    /// rollout record is deleted, and every node takes the document); the new revision, or
    /// `Conflict`.
    pub async fn write(
        &self,
        document: &serde_json::Value,
        revision: Option<i64>,
        rollout: Option<&Rollout>,
    ) -> Result<i64, WriteError> {
        let expect = match revision {
            Some(r) => kres_fleet::Expect::ModRevision(r),
            None => kres_fleet::Expect::Absent,
        };
        let value =
            serde_json::to_vec(document).map_err(|e| WriteError::Malformed(e.to_string()))?;
        let rollout_key = self.rollout_key();
        let record = match rollout {
            Some(rollout) => {
                let digest = follower::document_digest(&value);
                let record = Rollout {
                    document: digest,
                    ..rollout.clone()
                };
                Some(
                    serde_json::to_vec(&record)
                        .map_err(|e| WriteError::Malformed(e.to_string()))?,
                )
            }
            None => None,
        };
        let also = match &record {
            Some(record) => kres_fleet::Also::Put(&rollout_key, record),
            None => kres_fleet::Also::Delete(&rollout_key),
        };
        Ok(self
            .store
            .put_if_with(&self.config_key(), &value, expect, &[also])
            .await?)
    }

    /// The fleet's document before the current one (the key's previous version, from the
    /// store's history) and the current one's revision, for a rollback: `None` when there is
    /// no earlier document.
    pub async fn previous_document(&self) -> Result<Option<(serde_json::Value, i64)>, WriteError> {
        let key = self.config_key();
        let Some(current) = self.store.get(&key).await?.entry else {
            return Ok(None);
        };
        if current.mod_revision <= 1 {
            return Ok(None);
        }
        let Some(previous) = self.store.get_at(&key, current.mod_revision - 1).await? else {
            return Ok(None);
        };
        let document: serde_json::Value = serde_json::from_slice(&previous.value)
            .map_err(|e| WriteError::Malformed(e.to_string()))?;
        if !document.is_object() {
            return Err(WriteError::Malformed("not a mapping".into()));
        }
        Ok(Some((document, current.mod_revision)))
    }

    /// Wait until this node runs `revision` (or a later one), at most `within`.
    pub async fn applied(&self, revision: i64, within: Duration) -> Result<(), WriteError> {
        let mut following = self.following.subscribe();
        let waited = tokio::time::timeout(
            within,
            following.wait_for(|f| {
                f.revision.is_some_and(|r| r >= revision)
                    || f.refused.as_ref().is_some_and(|r| r.revision >= revision)
            }),
        )
        .await;
        match waited {
            Err(_) | Ok(Err(_)) => Err(WriteError::NotApplied { revision, within }),
            Ok(Ok(f)) => match &f.refused {
                Some(r)
                    if r.revision >= revision && f.revision.is_none_or(|run| run < revision) =>
                {
                    Err(WriteError::Refused {
                        revision,
                        reason: r.reason.clone(),
                    })
                }
                _ => Ok(()),
            },
        }
    }

    /// This node's record: what it runs of the fleet's documents, with its workers running
    /// and configured.
    pub fn record(&self, workers_running: u64, workers: u64) -> FleetNode {
        let following = self.following.borrow().clone();
        FleetNode {
            node: self.node.clone(),
            revision: following.revision,
            refused: following.refused,
            workers_running,
            workers,
            version: crate::build_version(),
            changed_at: following.changed_at,
            store_error: following.store_error,
            newest_seen: following.newest_seen,
            nodes_seen: following.nodes_seen,
            held: following.held,
            soak: following.soak,
        }
    }

    /// The key of the shared document.
    pub fn config_key(&self) -> Vec<u8> {
        format!("{}/config", self.prefix).into_bytes()
    }

    /// The key of the staged rollout of the shared document: the document's key is its
    /// prefix, so the follower reads and watches both as one.
    pub fn rollout_key(&self) -> Vec<u8> {
        format!("{}/config-rollout", self.prefix).into_bytes()
    }

    /// The prefix of the nodes' records.
    pub fn nodes_prefix(&self) -> Vec<u8> {
        format!("{}/nodes/", self.prefix).into_bytes()
    }

    /// This node's record's key.
    pub fn node_key(&self) -> Vec<u8> {
        format!("{}/nodes/{}", self.prefix, self.node).into_bytes()
    }

    /// The fleet as the store says now: the newest document's revision and every node's
    /// record (records that do not parse are left out).
    pub async fn status(&self) -> Result<FleetStatus, kres_fleet::Error> {
        let newest = self
            .store
            .get(&self.config_key())
            .await?
            .entry
            .map(|e| e.mod_revision);
        let listing = self.store.list(&self.nodes_prefix(), MAX_NODES).await?;
        let nodes = listing
            .entries
            .iter()
            .filter_map(|(_, entry)| serde_json::from_slice::<FleetNode>(&entry.value).ok())
            .collect();
        let rollout = self
            .store
            .get(&self.rollout_key())
            .await?
            .entry
            .and_then(|e| serde_json::from_slice(&e.value).ok());
        Ok(FleetStatus {
            node: self.node.clone(),
            prefix: self.prefix.clone(),
            newest,
            nodes,
            rollout,
            own: Vec::new(),
            shadowed: Vec::new(),
        })
    }
}

/// The fleet's tasks of a node that runs `config` (nothing when it has no `fleet`), on
/// `tracker` until `stop`: following the document (composed with the files of `source`, kept
/// beside the cache) and publishing the node's record.
pub fn start(
    membership: Option<Arc<Membership>>,
    manager: crate::manager::ManagerHandle,
    supervisor: supervisor::SupervisorHandle,
    tracker: &tokio_util::task::TaskTracker,
    stop: &tokio_util::sync::CancellationToken,
) {
    let Some(membership) = membership else {
        return;
    };
    let config = manager.config();
    let Some(kept_path) =
        kres_config::kept::kept_path(&config.raw, &membership.source.context().resolve_root)
    else {
        return;
    };
    let workers = {
        let (manager, supervisor) = (manager.clone(), supervisor.clone());
        move || {
            let running = crate::service::running_workers(&supervisor.snapshot()).len() as u64;
            (running, u64::from(manager.config().model.workers))
        }
    };
    let answers: follower::CountAnswers = {
        let manager = manager.clone();
        Box::new(move || {
            let rundir = manager.config().model.rundir.clone();
            let ids = crate::service::running_workers(&supervisor.snapshot());
            Box::pin(async move { count_answers(&rundir, &ids).await })
        })
    };
    tracker.spawn(rollout::drive(membership.clone(), stop.child_token()));
    tracker.spawn(follower::publish(
        follower::Publisher {
            membership: membership.clone(),
            following: membership.following.subscribe(),
            workers: Box::new(workers),
        },
        stop.child_token(),
    ));
    tracker.spawn(follower::follow(
        follower::Follower {
            membership,
            kept_path,
            manager,
            answers,
        },
        stop.child_token(),
    ));
}

/// The answers of the workers `ids`, and their SERVFAILs, from kresd's own statistics as
/// the metrics read them (`None` when no worker told).
async fn count_answers(
    rundir: &std::path::Path,
    ids: &[crate::service::WorkerId],
) -> Option<follower::Answers> {
    let collected = crate::metrics::collect(rundir, ids, kres_config::MetricsMode::Lazy).await;
    let mut sum: Option<follower::Answers> = None;
    for (_, stats) in collected.statistics() {
        let count = |key: &str| stats.answer.get(key).map(|n| n.max(0.0) as u64);
        if let (Some(total), Some(servfail)) = (count("total"), count("servfail")) {
            let sum = sum.get_or_insert_with(Default::default);
            sum.total = sum.total.saturating_add(total);
            sum.servfail = sum.servfail.saturating_add(servfail);
        }
    }
    sum
}
