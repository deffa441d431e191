//! The files watchdog: watches the TLS certificate and key (when `network.tls.watchdog`) and
//! the RPZ files with `watchdog: true` (but those kept by zone transfer, which the
//! secondary renews itself), and renews the configuration when they change, so the
//! workers reload the certificate and the policy-loader re-reads the RPZ; with
//! `--watch-config`, it also watches the configuration files and reloads them when they
//! change. Events are debounced; a deleted file only logs a warning until it comes back.
//!
//! Each watched file's parent directory is watched with inotify, so an atomic replacement
//! (write a temporary file, rename it into place) is seen; upstream misses that case because it
//! only looks at the source of a move. A Kubernetes ConfigMap volume replaces its files by
//! swapping a `..data` symlink in that directory: any `..`-prefixed entry changing there
//! counts as a change of the files it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::events::Origin;
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;
use kres_config::{KresConfig, LoadedConfig};

/// Quiet time after the last change before the renew is sent.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// What a change of a watched file calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OnChange {
    /// Apply the running configuration again (certificates, RPZ files).
    Renew,
    /// Read the configuration files again (`--watch-config`).
    Reload,
}

/// Whether the configuration files themselves are watched (`--watch-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFiles {
    Unwatched,
    Watched(Vec<PathBuf>),
}

/// The files to watch: those the configuration names, and the configuration files when
/// they are watched (a file that is both is reloaded, which renews it too).
pub fn watched_files(cfg: &KresConfig, config_files: &ConfigFiles) -> BTreeMap<PathBuf, OnChange> {
    let mut files = BTreeMap::new();
    let tls = &cfg.network.tls;
    if tls.watchdog {
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            files.insert(cert.clone(), OnChange::Renew);
            files.insert(key.clone(), OnChange::Renew);
        }
    }
    // A zone kept by zone transfer (or a subscribed list) is renewed by its secondary (the
    // lists' task) once stored, not watched.
    for rpz in cfg.local_data.rpz.iter().flatten() {
        if rpz.watchdog && !kres_lua::kept_by_manager(rpz) {
            files.insert(rpz.file.clone(), OnChange::Renew);
        }
    }
    if let ConfigFiles::Watched(config_files) = config_files {
        for file in config_files {
            files.insert(file.clone(), OnChange::Reload);
        }
    }
    files
}

/// What happened to a watched file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileEvent {
    Changed(PathBuf, OnChange),
    Deleted(PathBuf),
}

/// Watch until `stop`; rebuild the watches whenever the configuration changes.
/// The watches for one set of files: an inotify thread and the channel of its events.
struct Watching {
    files: BTreeMap<PathBuf, OnChange>,
    events: mpsc::Receiver<FileEvent>,
    halt: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watching {
    /// Set up the watches now (synchronously), so no change after this call is missed.
    fn new(cfg: &KresConfig, config_files: &ConfigFiles) -> Watching {
        let files = watched_files(cfg, config_files);
        let (events_tx, events) = mpsc::channel(64);
        let halt = Arc::new(AtomicBool::new(false));
        let thread = if files.is_empty() {
            None
        } else {
            match spawn_watcher(files.clone(), events_tx, halt.clone()) {
                Ok(handle) => {
                    tracing::info!(files = ?files.keys(), "watching files for changes");
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!("cannot watch files: {e}");
                    None
                }
            }
        };
        Watching {
            files,
            events,
            halt,
            thread,
        }
    }

    async fn close(self) {
        self.halt.store(true, Ordering::SeqCst);
        if let Some(handle) = self.thread {
            let _ = tokio::task::spawn_blocking(move || handle.join()).await;
        }
    }
}

/// Start watching: the first watches are in place when this returns (call it before READY);
/// the returned task, for its owner to run (and wait for at its stop), follows configuration
/// changes until `stop`.
pub fn start(
    manager: ManagerHandle,
    config_files: ConfigFiles,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut config = manager.subscribe();
    let first = Watching::new(&config.borrow_and_update().model, &config_files);
    run(config, config_files, manager, stop, first)
}

async fn run(
    mut config: watch::Receiver<Arc<LoadedConfig>>,
    config_files: ConfigFiles,
    manager: ManagerHandle,
    stop: CancellationToken,
    first: Watching,
) {
    let mut watching = first;
    loop {
        let files = watching.files.clone();
        let events = &mut watching.events;
        // When the debounce ends, and what it ends in (a reload covers a renew).
        let mut pending: Option<(tokio::time::Instant, OnChange)> = None;
        let rebuild = loop {
            let sleep = async {
                match pending {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break false,
                changed = config.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    if watched_files(&config.borrow().model, &config_files) != files {
                        break true;
                    }
                }
                Some(event) = events.recv() => match event {
                    FileEvent::Changed(path, on_change) => {
                        tracing::info!(file = %path.display(), "watched file changed");
                        let on_change = pending.map_or(on_change, |(_, p)| p.max(on_change));
                        pending = Some((tokio::time::Instant::now() + DEBOUNCE, on_change));
                    }
                    FileEvent::Deleted(path) => {
                        tracing::warn!(file = %path.display(), "watched file was deleted; waiting for it to come back");
                        pending = None;
                    }
                },
                () = sleep => {
                    if let Some((_, on_change)) = pending.take() {
                        apply(&manager, on_change).await;
                    }
                }
            }
        };
        watching.close().await;
        if !rebuild {
            return;
        }
        watching = Watching::new(&config.borrow_and_update().model, &config_files);
    }
}

/// Renew or reload the configuration; a refusal is logged by the manager.
async fn apply(manager: &ManagerHandle, on_change: OnChange) {
    let done = match on_change {
        OnChange::Renew => manager
            .renew(Restart::WhenNeeded, Origin::WatchedFile)
            .await
            .is_ok(),
        OnChange::Reload => manager
            .reload(Restart::WhenNeeded, Origin::WatchedFile)
            .await
            .is_ok(),
    };
    if done {
        tracing::info!("Reloading watched files has finished");
    }
}

/// What happened to a directory entry, as inotify tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryChange {
    /// Created, written, or moved into place.
    Written,
    /// Deleted or moved away.
    Gone,
}

impl EntryChange {
    /// The change an inotify event's `mask` tells.
    fn of(mask: AddWatchFlags) -> EntryChange {
        if mask.intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM) {
            EntryChange::Gone
        } else {
            EntryChange::Written
        }
    }
}

/// What an inotify event for `path` in `dir` means for the watched files: a change or
/// deletion of that file, or, for a `..` entry (a ConfigMap's `..data` swap), a change of
/// every configuration file in `dir`.
fn file_events(
    files: &BTreeMap<PathBuf, OnChange>,
    dir: &Path,
    path: &Path,
    change: EntryChange,
) -> Vec<FileEvent> {
    if let Some(&on_change) = files.get(path) {
        return vec![match change {
            EntryChange::Gone => FileEvent::Deleted(path.to_path_buf()),
            EntryChange::Written => FileEvent::Changed(path.to_path_buf(), on_change),
        }];
    }
    let swapped = path
        .file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b".."));
    if !swapped || change == EntryChange::Gone {
        return Vec::new();
    }
    files
        .iter()
        .filter(|(f, on)| **on == OnChange::Reload && f.parent() == Some(dir))
        .map(|(f, on)| FileEvent::Changed(f.clone(), *on))
        .collect()
}

/// A thread that reads inotify events for the parent directories of `files` and forwards the
/// ones about `files` until `halt` is set.
fn spawn_watcher(
    files: BTreeMap<PathBuf, OnChange>,
    events: mpsc::Sender<FileEvent>,
    halt: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
    let mask = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE;
    let mut dirs: Vec<(nix::sys::inotify::WatchDescriptor, PathBuf)> = Vec::new();
    let parents: BTreeSet<PathBuf> = files
        .keys()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect();
    for dir in parents {
        match inotify.add_watch(&dir, mask) {
            Ok(wd) => dirs.push((wd, dir)),
            Err(e) => tracing::warn!(dir = %dir.display(), "cannot watch directory: {e}"),
        }
    }
    std::thread::Builder::new()
        .name("files-watchdog".into())
        .spawn(move || {
            while !halt.load(Ordering::SeqCst) {
                let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(200u16)) {
                    Ok(0) => continue,
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!("files watchdog stopped: {e}");
                        return;
                    }
                }
                let Ok(read) = inotify.read_events() else {
                    continue;
                };
                for ev in read {
                    let Some(dir) = dirs.iter().find(|(wd, _)| *wd == ev.wd).map(|(_, d)| d) else {
                        continue;
                    };
                    let Some(name) = ev.name.as_ref() else {
                        continue;
                    };
                    let path = dir.join(name);
                    let change = EntryChange::of(ev.mask);
                    for event in file_events(&files, dir, &path, change) {
                        if events.blocking_send(event).is_err() {
                            return;
                        }
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_change_is_an_event_of_the_watched_files_it_touches() {
        let files = BTreeMap::from([
            (
                PathBuf::from("/etc/knot-resolver/config.yaml"),
                OnChange::Reload,
            ),
            (
                PathBuf::from("/etc/knot-resolver/server.crt"),
                OnChange::Renew,
            ),
            (PathBuf::from("/srv/rpz/block.rpz"), OnChange::Renew),
        ]);
        let dir = Path::new("/etc/knot-resolver");
        let config = || PathBuf::from("/etc/knot-resolver/config.yaml");
        let cert = || PathBuf::from("/etc/knot-resolver/server.crt");
        let rows = [
            (
                "config.yaml",
                EntryChange::Written,
                vec![FileEvent::Changed(config(), OnChange::Reload)],
            ),
            (
                "config.yaml",
                EntryChange::Gone,
                vec![FileEvent::Deleted(config())],
            ),
            (
                "server.crt",
                EntryChange::Written,
                vec![FileEvent::Changed(cert(), OnChange::Renew)],
            ),
            (
                "server.crt",
                EntryChange::Gone,
                vec![FileEvent::Deleted(cert())],
            ),
            // A ConfigMap's swap changes the configuration files of its directory only.
            (
                "..data",
                EntryChange::Written,
                vec![FileEvent::Changed(config(), OnChange::Reload)],
            ),
            ("..data", EntryChange::Gone, vec![]),
            ("other.yaml", EntryChange::Written, vec![]),
        ];
        for (name, change, want) in rows {
            assert_eq!(
                file_events(&files, dir, &dir.join(name), change),
                want,
                "{name} {change:?}"
            );
        }
    }

    #[test]
    fn a_zone_kept_by_zone_transfer_is_not_watched() {
        let raw = serde_json::json!({"local-data": {"rpz": [
            {"file": "/srv/rpz/file.rpz", "watchdog": true},
            {"file": "/srv/rpz/transferred.rpz", "watchdog": true,
             "transfer": {"zone": "transferred.rpz.", "primaries": ["192.0.2.53"]}},
        ]}});
        let ctx = kres_config::ValidationContext {
            resolve_root: PathBuf::from("/etc/knot-resolver"),
            checks: kres_config::PathChecks::Lenient,
            logtarget_arg: Default::default(),
        };
        let cfg = kres_config::validate(&raw, &ctx).expect("valid");
        let watched: Vec<PathBuf> = watched_files(&cfg, &ConfigFiles::Unwatched)
            .into_keys()
            .collect();
        assert_eq!(watched, [PathBuf::from("/srv/rpz/file.rpz")]);
    }

    #[test]
    fn a_deletion_or_a_move_away_is_an_entry_gone() {
        let rows = [
            (AddWatchFlags::IN_CLOSE_WRITE, EntryChange::Written),
            (AddWatchFlags::IN_MODIFY, EntryChange::Written),
            (AddWatchFlags::IN_CREATE, EntryChange::Written),
            (AddWatchFlags::IN_MOVED_TO, EntryChange::Written),
            (AddWatchFlags::IN_MOVED_FROM, EntryChange::Gone),
            (AddWatchFlags::IN_DELETE, EntryChange::Gone),
        ];
        for (mask, want) in rows {
            assert_eq!(EntryChange::of(mask), want, "{mask:?}");
        }
    }
}
