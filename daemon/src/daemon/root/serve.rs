//! The serve phase of the root process: keep the manager process running (`keeper`), pass
//! reloads on through the doorbell, probe an upgrade beside the loop (so events keep being
//! handled meanwhile), and announce a stop for the drain period before it.

use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use supervisor::remote::ReexecRefused;
use supervisor::SupervisorHandle;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::recovery::ReloadBell;
use super::handover::ProbeError;
use super::keeper::Keeper;
use super::{Root, RootEvent, Started, Stop};
use crate::service;

/// How serving ended: the manager's keeper decided why, or the root stops it now, or an
/// upgrade begins.
enum Served {
    Ended(Stop),
    StopNow,
    Upgrade,
}

/// Where the drain before a stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// No stop announced yet.
    NotBegun,
    /// Readiness is off; the stop comes at this instant.
    Until(Instant),
}

impl Drain {
    /// Resolves when the drain period is over; never when no drain began.
    async fn over(self) {
        match self {
            Drain::Until(at) => tokio::time::sleep_until(at).await,
            Drain::NotBegun => std::future::pending().await,
        }
    }
}

/// The upgrade probe under way, if any, and the managers' requests waiting for its outcome.
#[derive(Default)]
struct Probing<'a> {
    probe: Option<BoxFuture<'a, Result<(), ProbeError>>>,
    /// The replies owed to `Reexec` calls of the manager.
    waiting: Vec<oneshot::Sender<Result<(), ReexecRefused>>>,
}

impl<'a> Probing<'a> {
    fn is_running(&self) -> bool {
        self.probe.is_some()
    }

    /// Run `probe`, unless one is under way already.
    fn begin(
        &mut self,
        probe: impl std::future::Future<Output = Result<(), ProbeError>> + Send + 'a,
    ) {
        if self.probe.is_none() {
            self.probe = Some(Box::pin(probe));
        }
    }

    /// The probe's outcome; polled only while it runs.
    async fn outcome(&mut self) -> Result<(), ProbeError> {
        match self.probe.as_mut() {
            Some(probe) => probe.await,
            None => std::future::pending().await,
        }
    }

    /// The probe ended: every request waiting is told; `Some` when the upgrade begins.
    fn ended(&mut self, outcome: Result<(), ProbeError>) -> Option<Served> {
        self.probe = None;
        let answer = outcome.map_err(|e| ReexecRefused(e.to_string()));
        for reply in self.waiting.drain(..) {
            let _ = reply.send(answer.clone());
        }
        match answer {
            Ok(()) => Some(Served::Upgrade),
            Err(e) => {
                tracing::error!("upgrade refused: {e}");
                None
            }
        }
    }

    /// A stop (or the manager's end) during the probe cancels the upgrade; the probe process
    /// is stopped with the rest, or here when serving goes on.
    async fn cancel(&mut self, sup: &SupervisorHandle) {
        if self.probe.take().is_none() {
            return;
        }
        tracing::warn!("the upgrade probe is cancelled: the resolver stops");
        for reply in self.waiting.drain(..) {
            let refused = ReexecRefused("cancelled: the resolver stops".to_owned());
            let _ = reply.send(Err(refused));
        }
        let _ = sup.remove(service::UPGRADE_PROBE).await;
    }
}

impl Root {
    /// Keep the manager process running until it asks to stop, cannot be kept, or `events`
    /// says stop; reloads go to the manager. A stop is first announced for the drain period
    /// (the supervisor's snapshot says `draining`, which turns `/readyz` off) when there is
    /// one; `kresctl drain` announces it through the manager. A second stop event during the
    /// drain stops at once.
    pub(super) async fn serve(
        &self,
        started: &mut Started,
        events: &mut (impl Stream<Item = RootEvent> + Unpin),
    ) -> Stop {
        let watchdog = started.upward.spawn_watchdog();
        let stop = CancellationToken::new();
        let mut snapshots = started.sup.subscribe();
        let sup = started.sup.clone();
        let upward = started.upward.clone();
        let (reexec_tx, mut reexec_rx) = tokio::sync::mpsc::unbounded_channel();
        let reload_bell = started.reload_bell.as_ref();
        let keeper = self.keep_manager(
            Keeper {
                sup: &started.sup,
                store: &mut started.store,
                upward: &started.upward,
                incarnations: &mut started.incarnations,
                reexec: &reexec_tx,
            },
            stop.clone(),
        );
        tokio::pin!(keeper);
        let mut drain = Drain::NotBegun;
        let mut probing = Probing::default();
        let served = loop {
            tokio::select! {
                why = &mut keeper => break Served::Ended(why),
                outcome = probing.outcome(), if probing.is_running() => {
                    if let Some(served) = probing.ended(outcome) {
                        break served;
                    }
                }
                Some(request) = reexec_rx.recv() => {
                    probing.waiting.push(request.reply);
                    probing.begin(self.probe(&sup));
                }
                Some(event) = events.next() => {
                    let answer = self.on_event(event, &sup, reload_bell, &mut probing, drain);
                    if let Some(served) = answer.await {
                        break served;
                    }
                }
                changed = snapshots.changed(), if drain == Drain::NotBegun => {
                    if changed.is_err() {
                        break Served::StopNow;
                    }
                    if !snapshots.borrow_and_update().draining {
                        continue;
                    }
                    match self.begin_drain(&upward) {
                        Some(until) => drain = until,
                        None => break Served::StopNow,
                    }
                }
                () = drain.over() => {
                    tracing::info!("drain period over; stopping");
                    break Served::StopNow;
                }
            }
        };
        probing.cancel(&sup).await;
        let why = match served {
            Served::Ended(why) => why,
            Served::StopNow | Served::Upgrade => {
                stop.cancel();
                // The keeper returns at once; its answer is ours anyway.
                let _ = (&mut keeper).await;
                match served {
                    Served::Upgrade => Stop::Upgrade,
                    _ => Stop::Signal,
                }
            }
        };
        if let Some(w) = watchdog {
            w.abort();
        }
        why
    }

    /// What an event from outside does while serving; `Some` when serving ends.
    async fn on_event<'a>(
        &'a self,
        event: RootEvent,
        sup: &'a SupervisorHandle,
        reload_bell: Option<&ReloadBell>,
        probing: &mut Probing<'a>,
        drain: Drain,
    ) -> Option<Served> {
        match event {
            RootEvent::Reload => match reload_bell {
                Some(bell) => {
                    tracing::info!("SIGHUP received; the manager reloads the configuration files (now, or once it is back)");
                    bell.ring();
                }
                None => tracing::error!("SIGHUP received; no way to pass it on to the manager"),
            },
            RootEvent::Upgrade if probing.is_running() => {
                tracing::info!("SIGUSR2 received; an upgrade is being probed already");
            }
            RootEvent::Upgrade => {
                tracing::info!("SIGUSR2 received; upgrading in place");
                probing.begin(self.probe(sup));
            }
            RootEvent::Stop if self.drain_period.is_zero() || drain != Drain::NotBegun => {
                return Some(Served::StopNow);
            }
            RootEvent::Stop => {
                // Seen as the snapshot's `draining`, like a drain from the API.
                if let Err(e) = sup.drain().await {
                    tracing::error!("cannot drain: {e}");
                    return Some(Served::StopNow);
                }
            }
        }
        None
    }

    /// The process table says `draining`: announce the stop for the drain period, readiness
    /// off; `None` when there is no drain period (stop now).
    fn begin_drain(&self, upward: &supervisor::upward::UpwardNotifier) -> Option<Drain> {
        if self.drain_period.is_zero() {
            return None;
        }
        let secs = self.drain_period.as_secs();
        tracing::info!("draining: not ready any more, answering for {secs} s, then stopping");
        upward.stopping(&format!("Draining: answering for {secs} s, then stopping"));
        Some(Drain::Until(Instant::now() + self.drain_period))
    }
}
