//! Supervised tasks: an async task (the manager) restarted with backoff when it panics or
//! returns an error, while the processes it manages keep running. Each incarnation gets an
//! `Incarnation` telling it how many came before, so it knows to adopt what exists.
//!
//! Supervision never gives up: a crash loop backs off up to the backoff's cap, and an
//! incarnation that ran for the backoff's stable period before it failed has the failures
//! before it forgiven. Whoever must stop on failures (a start that never completed) watches
//! the [`TaskHealth`] published on every change and decides.

use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;

/// Handed to each run of a supervised task.
#[derive(Debug, Clone, Copy)]
pub struct Incarnation {
    /// 0 for the first run, then one more per restart.
    pub number: u32,
}

/// How a supervised task fares, as its supervision publishes it on every failure and restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskHealth {
    /// Failures (panics, errors) not yet forgiven by a run of the backoff's stable period:
    /// what the restart delay grows with.
    pub failures: u32,
    /// Failures since supervision began, forgiven or not.
    pub total_failures: u32,
    /// When the first of the unforgiven failures happened (wall clock, for display).
    pub streak_since: Option<SystemTime>,
    /// While the task waits in its backoff: when the next incarnation starts (wall clock).
    /// `None` while an incarnation runs.
    pub next_attempt: Option<SystemTime>,
    /// How the last failure ended the task, as logged.
    pub last_failure: Option<String>,
}

impl TaskHealth {
    /// How long the unforgiven failures have been going on, as of now.
    pub fn streak_age(&self) -> Duration {
        self.streak_since
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or_default()
    }
}

/// Run `make(incarnation)` until it returns `Ok(value)` (its deliberate end) or `cancel`
/// fires (then `None`). A panic or an `Err` restarts it after a backoff that grows with the
/// unforgiven failures; an incarnation that ran for `backoff.stable_after()` before failing
/// starts a new streak. `health` is told of every failure and restart.
pub async fn supervise_task<F, Fut, T, E>(
    name: &str,
    backoff: Backoff,
    health: watch::Sender<TaskHealth>,
    cancel: CancellationToken,
    mut make: F,
) -> Option<T>
where
    F: FnMut(Incarnation) -> Fut,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut number = 0u32;
    loop {
        let began = Instant::now();
        // Owned here: awaited whatever happens; aborted and awaited on cancel, and aborted
        // when this supervision is dropped (a set of one).
        let mut running = JoinSet::new();
        running.spawn(make(Incarnation { number }));
        let outcome = tokio::select! {
            r = running.join_next() => r,
            () = cancel.cancelled() => {
                running.shutdown().await;
                return None;
            }
        };
        let failure = match outcome {
            Some(Ok(Ok(value))) => return Some(value),
            Some(Ok(Err(e))) => format!("failed: {e}"),
            Some(Err(join)) if join.is_panic() => "panicked".to_owned(),
            Some(Err(_)) | None => return None,
        };
        let stable = began.elapsed() >= backoff.stable_after();
        let mut failures = 0;
        health.send_modify(|h| {
            if stable {
                h.failures = 0;
                h.streak_since = None;
            }
            h.failures = h.failures.saturating_add(1);
            h.total_failures = h.total_failures.saturating_add(1);
            h.streak_since.get_or_insert_with(SystemTime::now);
            h.last_failure = Some(failure.clone());
            failures = h.failures;
        });
        number = number.wrapping_add(1);
        let delay = backoff.delay(failures, u64::from(number).wrapping_mul(0x9e37_79b9));
        let within = health.borrow().streak_age();
        tracing::error!(
            task = name,
            "task {failure} ({failures} failures within {} s); restarting it in {} ms",
            within.as_secs(),
            delay.as_millis()
        );
        health.send_modify(|h| h.next_attempt = Some(SystemTime::now() + delay));
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = cancel.cancelled() => return None,
        }
        health.send_modify(|h| h.next_attempt = None);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn quick() -> Backoff {
        Backoff::try_new(
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::ZERO,
            0,
            Duration::from_secs(3600),
        )
        .expect("valid backoff")
    }

    #[tokio::test]
    async fn panics_and_errors_restart_with_a_new_incarnation() {
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let (health, seen) = watch::channel(TaskHealth::default());
        let out = supervise_task("t", quick(), health, CancellationToken::new(), move |inc| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                match inc.number {
                    0 => panic!("first run panics"),
                    1 => Err("second run fails".to_owned()),
                    n => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(out, Some(2));
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let h = seen.borrow().clone();
        assert_eq!((h.failures, h.total_failures), (2, 2), "{h:?}");
        assert_eq!(
            h.last_failure.as_deref(),
            Some("failed: second run fails"),
            "{h:?}"
        );
        assert!(
            h.streak_since.is_some() && h.next_attempt.is_none(),
            "{h:?}"
        );
    }

    /// Many more failures than any give-up threshold the supervision once had: it keeps
    /// restarting, each delay from the backoff's table (capped), until the task succeeds.
    #[tokio::test(start_paused = true)]
    async fn a_crash_loop_backs_off_to_the_cap_and_never_gives_up() {
        let backoff = Backoff::try_new(
            Duration::from_millis(100),
            Duration::from_secs(2),
            Duration::ZERO,
            0,
            Duration::from_secs(3600),
        )
        .expect("valid backoff");
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = starts.clone();
        let (health, seen) = watch::channel(TaskHealth::default());
        let out = supervise_task("t", backoff, health, CancellationToken::new(), move |inc| {
            s.lock().expect("lock").push(Instant::now());
            async move {
                if inc.number < 20 {
                    Err("still broken")
                } else {
                    Ok(inc.number)
                }
            }
        })
        .await;
        assert_eq!(out, Some(20));
        let starts = starts.lock().expect("lock").clone();
        let gaps: Vec<u128> = starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        let mut expected = vec![0, 100, 200, 400, 800, 1600];
        expected.resize(20, 2000);
        assert_eq!(gaps, expected);
        assert_eq!(seen.borrow().failures, 20);
    }

    /// An incarnation that ran for the stable period before failing is restarted at once:
    /// the failures before it are forgiven, the total keeps them.
    #[tokio::test(start_paused = true)]
    async fn a_stable_run_forgives_the_failures_before_it() {
        let backoff = Backoff::try_new(
            Duration::from_millis(100),
            Duration::from_secs(2),
            Duration::ZERO,
            0,
            Duration::from_secs(60),
        )
        .expect("valid backoff");
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = starts.clone();
        let (health, seen) = watch::channel(TaskHealth::default());
        let out = supervise_task("t", backoff, health, CancellationToken::new(), move |inc| {
            s.lock().expect("lock").push(Instant::now());
            async move {
                match inc.number {
                    // Three quick failures, then a long healthy run that fails.
                    0..=2 => Err("quick"),
                    3 => {
                        tokio::time::sleep(Duration::from_secs(61)).await;
                        Err("after a stable run")
                    }
                    _ => Ok(()),
                }
            }
        })
        .await;
        assert_eq!(out, Some(()));
        let starts = starts.lock().expect("lock").clone();
        let gaps: Vec<u128> = starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_millis())
            .collect();
        // 0, 100, 200 ms; then 61 s of running and a restart with no delay.
        assert_eq!(gaps, vec![0, 100, 200, 61_000]);
        let h = seen.borrow().clone();
        assert_eq!((h.failures, h.total_failures), (1, 4), "{h:?}");
        assert_eq!(
            h.last_failure.as_deref(),
            Some("failed: after a stable run")
        );
    }

    #[tokio::test]
    async fn cancellation_ends_supervision_and_the_running_incarnation_with_it() {
        /// Says when the incarnation's future is dropped.
        struct Dropped(Arc<AtomicU32>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let dropped = Arc::new(AtomicU32::new(0));
        let d = dropped.clone();
        let (health, _seen) = watch::channel(TaskHealth::default());
        let out: Option<()> = supervise_task("t", quick(), health, cancel, move |_| {
            let guard = Dropped(d.clone());
            let c = c.clone();
            async move {
                let _guard = guard;
                c.cancel();
                std::future::pending::<Result<(), String>>().await
            }
        })
        .await;
        assert!(out.is_none());
        // The incarnation is gone when supervision returns, not at some later poll.
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    /// Whoever drops the supervision (its owner's task aborted, a `select!` lost) drops the
    /// running incarnation with it: nothing runs on detached.
    #[tokio::test]
    async fn dropping_the_supervision_drops_the_running_incarnation() {
        /// Tells when the incarnation's future is dropped.
        struct Dropped(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let (running_tx, running) = tokio::sync::oneshot::channel::<()>();
        let (dropped_tx, dropped) = tokio::sync::oneshot::channel::<()>();
        let mut hooks = Some((running_tx, dropped_tx));
        let (health, _seen) = watch::channel(TaskHealth::default());
        let supervision =
            supervise_task("t", quick(), health, CancellationToken::new(), move |_| {
                let hooks = hooks.take();
                async move {
                    let Some((running, dropped)) = hooks else {
                        return Err("a second incarnation".to_owned());
                    };
                    let _guard = Dropped(Some(dropped));
                    let _ = running.send(());
                    std::future::pending::<Result<(), String>>().await
                }
            });
        tokio::select! {
            _ = supervision => panic!("the incarnation never ends by itself"),
            started = running => started.expect("the incarnation runs"),
        }
        tokio::time::timeout(Duration::from_secs(10), dropped)
            .await
            .expect("the incarnation is dropped with its supervision")
            .expect("dropped, not leaked");
    }
}
