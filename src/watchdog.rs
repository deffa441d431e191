//! The files watchdog: watches the TLS certificate and key (when `network.tls.watchdog`) and
//! the RPZ files with `watchdog: true`, and renews the configuration when they change, so the
//! workers reload the certificate and the policy-loader re-reads the RPZ. Events are debounced;
//! a deleted file only logs a warning until it comes back.
//!
//! Each watched file's parent directory is watched with inotify, so an atomic replacement
//! (write a temporary file, rename it into place) is seen; upstream misses that case because it
//! only looks at the source of a move.

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{KresConfig, LoadedConfig};
use crate::manager::plan::Restart;
use crate::manager::ManagerHandle;

/// Quiet time after the last change before the renew is sent.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// The files the configuration asks us to watch.
pub fn watched_files(cfg: &KresConfig) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    let tls = &cfg.network.tls;
    if tls.watchdog {
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            files.insert(cert.clone());
            files.insert(key.clone());
        }
    }
    for rpz in cfg.local_data.rpz.iter().flatten() {
        if rpz.watchdog {
            files.insert(rpz.file.clone());
        }
    }
    files
}

/// What happened to a watched file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FileEvent {
    Changed(PathBuf),
    Deleted(PathBuf),
}

/// Watch until `stop`; rebuild the watches whenever the configuration changes.
/// The watches for one set of files: an inotify thread and the channel of its events.
struct Watching {
    files: BTreeSet<PathBuf>,
    events: mpsc::Receiver<FileEvent>,
    halt: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watching {
    /// Set up the watches now (synchronously), so no change after this call is missed.
    fn new(cfg: &KresConfig) -> Watching {
        let files = watched_files(cfg);
        let (events_tx, events) = mpsc::channel(64);
        let halt = Arc::new(AtomicBool::new(false));
        let thread = if files.is_empty() {
            None
        } else {
            match spawn_watcher(files.clone(), events_tx, halt.clone()) {
                Ok(handle) => {
                    tracing::info!(files = ?files, "watching files for changes");
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
/// the returned task follows configuration changes until `stop`.
pub fn start(manager: ManagerHandle, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let mut config = manager.subscribe();
    let first = Watching::new(&config.borrow_and_update().model);
    tokio::spawn(run(config, manager, stop, first))
}

async fn run(
    mut config: watch::Receiver<Arc<LoadedConfig>>,
    manager: ManagerHandle,
    stop: CancellationToken,
    first: Watching,
) {
    let mut watching = first;
    loop {
        let files = watching.files.clone();
        let events = &mut watching.events;
        let mut pending: Option<tokio::time::Instant> = None;
        let rebuild = loop {
            let sleep = async {
                match pending {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break false,
                changed = config.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    if watched_files(&config.borrow().model) != files {
                        break true;
                    }
                }
                Some(event) = events.recv() => match event {
                    FileEvent::Changed(path) => {
                        tracing::info!(file = %path.display(), "watched file changed");
                        pending = Some(tokio::time::Instant::now() + DEBOUNCE);
                    }
                    FileEvent::Deleted(path) => {
                        tracing::warn!(file = %path.display(), "watched file was deleted; waiting for it to come back");
                        pending = None;
                    }
                },
                () = sleep => {
                    pending = None;
                    renew(&manager).await;
                }
            }
        };
        watching.close().await;
        if !rebuild {
            return;
        }
        watching = Watching::new(&config.borrow_and_update().model);
    }
}

/// Renew the configuration; a refusal is logged by the manager.
async fn renew(manager: &ManagerHandle) {
    if manager.renew(Restart::WhenNeeded).await.is_ok() {
        tracing::info!("Reloading watched files has finished");
    }
}

/// A thread that reads inotify events for the parent directories of `files` and forwards the
/// ones about `files` until `halt` is set.
fn spawn_watcher(
    files: BTreeSet<PathBuf>,
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
        .iter()
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
                    if !files.contains(&path) {
                        continue;
                    }
                    let gone = ev
                        .mask
                        .intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM);
                    let event = if gone {
                        FileEvent::Deleted(path)
                    } else {
                        FileEvent::Changed(path)
                    };
                    if events.blocking_send(event).is_err() {
                        return;
                    }
                }
            }
        })
}
