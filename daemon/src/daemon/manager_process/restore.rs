//! The restore phase of the manager process: meet the root on the link and take back what
//! the incarnation before kept in the root's fd store (the running configuration, the API
//! socket, the workers' listening sockets, the records of upgrades and failures, the reload
//! doorbell). Nothing is started here.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use supervisor::remote::{Link, Parent};

use super::super::{recovery, upgrade, STORED_API, STORED_CONFIG};
use crate::manager::listen::STORED_PREFIX;
use kres_config::{LoadedConfig, ValidationContext};

/// The largest stored configuration read back.
const MAX_STORED_CONFIG: u64 = 512 << 20;

/// Whether this incarnation starts the resolver or takes over from one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incarnation {
    /// The first: nothing runs yet, and a failure here stops the resolver.
    First,
    /// A later one: it adopts the running workers.
    Successor,
}

/// Why a stored configuration could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("cannot read the stored configuration: {0}")]
    Read(#[source] std::io::Error),
    #[error("the stored configuration has {0} bytes")]
    TooLarge(u64),
    #[error("the stored configuration is not text: {0}")]
    NotText(#[source] std::string::FromUtf8Error),
    #[error("the stored configuration is damaged: {0}")]
    Damaged(#[source] serde_json::Error),
    #[error(transparent)]
    Invalid(#[from] kres_config::ValidationErrors),
}

/// What the manager process takes back at its start.
pub struct Restored {
    /// The root, at the other end of the link.
    pub parent: Parent,
    pub incarnation: Incarnation,
    /// The configuration to run: the one stored, else the files'.
    pub loaded: LoadedConfig,
    /// The API's listening socket, which the root bound and keeps.
    pub api_socket: Option<OwnedFd>,
    /// How the last upgrade ended, if one was tried.
    pub upgrade: Option<Arc<kres_wire::upgrade::UpgradeRecord>>,
    /// The record of this process's failures before us.
    pub process_failures: Option<Arc<kres_wire::failures::ProcessFailureRecord>>,
    /// The read end of the root's reload doorbell.
    pub reload_bell: Option<OwnedFd>,
    /// The version of kresd an earlier manager process learned (`kresd --version`).
    pub kresd_version: Option<String>,
    /// The workers' listening sockets, by stored name.
    pub sockets: Vec<(String, OwnedFd)>,
}

/// Meet the root at the other end of `link`: its welcome, and what it keeps for us.
pub async fn connect(link: OwnedFd) -> std::io::Result<Parent> {
    Parent::connect(Link::from_fd(link)?).await
}

/// No configuration could be read: the root, and why.
pub struct NotRestored {
    pub parent: Parent,
    pub error: kres_config::ConfigError,
}

impl Restored {
    /// Take back what the root keeps for us; the configuration from its store, or from
    /// `source`'s files when none is stored (or the stored one cannot be read).
    pub fn take(
        mut parent: Parent,
        source: &kres_config::ConfigSource,
    ) -> Result<Restored, Box<NotRestored>> {
        let mut stored: BTreeMap<String, OwnedFd> =
            std::mem::take(&mut parent.stored).into_iter().collect();
        let loaded = match stored
            .remove(STORED_CONFIG)
            .map(|fd| restore_config(fd, source))
        {
            Some(Ok(loaded)) => Ok(loaded),
            Some(Err(e)) => {
                // Never seen; the files are the next best thing to adopt the workers with.
                eprintln!("knot-resolver: {e}; adopting the workers with the configuration files");
                source.load()
            }
            None => source.load(),
        };
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(error) => return Err(Box::new(NotRestored { parent, error })),
        };
        Ok(Restored {
            incarnation: Incarnation::of(&parent),
            loaded,
            api_socket: stored.remove(STORED_API),
            upgrade: stored
                .remove(upgrade::STORED_UPGRADE)
                .and_then(|fd| read_record(fd, kres_wire::upgrade::MAX_RECORD))
                .and_then(|bytes| kres_wire::upgrade::UpgradeRecord::parse(&bytes))
                .map(Arc::new),
            process_failures: stored
                .remove(recovery::STORED_FAILURES)
                .and_then(|fd| read_record(fd, kres_wire::failures::MAX_RECORD))
                .and_then(|bytes| kres_wire::failures::ProcessFailureRecord::parse(&bytes))
                .map(Arc::new),
            reload_bell: stored.remove(recovery::STORED_RELOAD),
            kresd_version: stored
                .remove(recovery::STORED_KRESD_VERSION)
                .and_then(|fd| read_record(fd, 256))
                .and_then(|bytes| {
                    crate::manager::executables::version_of(&String::from_utf8_lossy(&bytes))
                }),
            sockets: stored
                .into_iter()
                .filter(|(name, _)| name.starts_with(STORED_PREFIX))
                .collect(),
            parent,
        })
    }
}

impl Incarnation {
    /// Which incarnation the root says we are.
    pub fn of(parent: &Parent) -> Incarnation {
        if parent.incarnation > 1 {
            Incarnation::Successor
        } else {
            Incarnation::First
        }
    }
}

/// Read the configuration a previous incarnation stored; it was valid then, so paths are not
/// checked again (a file that vanished meanwhile must not stop the adoption).
fn restore_config(
    fd: OwnedFd,
    source: &kres_config::ConfigSource,
) -> Result<LoadedConfig, RestoreError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd);
    let len = file.metadata().map_err(RestoreError::Read)?.len();
    if len > MAX_STORED_CONFIG {
        return Err(RestoreError::TooLarge(len));
    }
    let size = usize::try_from(len).map_err(|_| RestoreError::TooLarge(len))?;
    // Read at explicit offsets: the file position is shared with every copy of the descriptor.
    let mut bytes = vec![0u8; size];
    file.read_exact_at(&mut bytes, 0)
        .map_err(RestoreError::Read)?;
    let text = String::from_utf8(bytes).map_err(RestoreError::NotText)?;
    let raw: serde_json::Value = serde_json::from_str(&text).map_err(RestoreError::Damaged)?;
    let ctx = ValidationContext {
        checks: kres_config::PathChecks::Lenient,
        ..source.context()
    };
    let model = kres_config::validate(&raw, &ctx)?;
    Ok(LoadedConfig { raw, model })
}

/// The bytes of a record the root stored (at most `max`); `None` when it cannot be read.
fn read_record(fd: OwnedFd, max: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::from(fd);
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if len > max {
        return None;
    }
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0).ok()?;
    Some(bytes)
}
