//! Supervised tasks: an async task (the manager) restarted with backoff when it panics or
//! returns an error, while the processes it manages keep running. Each incarnation gets an
//! `Incarnation` telling it how many came before, so it knows to adopt what exists.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;

/// Handed to each run of a supervised task.
#[derive(Debug, Clone, Copy)]
pub struct Incarnation {
    /// 0 for the first run, then one more per restart.
    pub number: u32,
}

/// How a supervised task ended for good.
#[derive(Debug, thiserror::Error)]
pub enum TaskGaveUp {
    #[error("task {name} failed {failures} times in a row; giving up")]
    TooManyFailures { name: String, failures: u32 },
}

/// Run `make(incarnation)` until it returns `Ok(value)` (its deliberate end) or `cancel`
/// fires (then `None`). A panic or an `Err` restarts it after a backoff; `max_failures`
/// consecutive failures give up.
pub async fn supervise_task<F, Fut, T, E>(
    name: &str,
    backoff: Backoff,
    max_failures: u32,
    cancel: CancellationToken,
    mut make: F,
) -> Result<Option<T>, TaskGaveUp>
where
    F: FnMut(Incarnation) -> Fut,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut failures = 0u32;
    let mut number = 0u32;
    loop {
        let handle = tokio::spawn(make(Incarnation { number }));
        let abort = handle.abort_handle();
        let outcome = tokio::select! {
            r = handle => r,
            () = cancel.cancelled() => {
                abort.abort();
                return Ok(None);
            }
        };
        match outcome {
            Ok(Ok(value)) => return Ok(Some(value)),
            Ok(Err(e)) => tracing::error!(task = name, error = %e, "task failed; restarting it"),
            Err(join) if join.is_panic() => {
                tracing::error!(task = name, "task panicked; restarting it")
            }
            Err(_) => return Ok(None),
        }
        failures += 1;
        number += 1;
        if failures >= max_failures {
            return Err(TaskGaveUp::TooManyFailures {
                name: name.to_owned(),
                failures,
            });
        }
        let delay = backoff.delay(failures, u64::from(failures).wrapping_mul(0x9e37_79b9));
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = cancel.cancelled() => return Ok(None),
        }
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
            Duration::ZERO,
        )
        .expect("valid backoff")
    }

    #[tokio::test]
    async fn panics_and_errors_restart_with_a_new_incarnation() {
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let out = supervise_task("t", quick(), 5, CancellationToken::new(), move |inc| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                match inc.number {
                    0 => panic!("first run panics"),
                    1 => Err("second run fails".to_owned()),
                    n => Ok(n),
                }
            }
        })
        .await
        .expect("does not give up");
        assert_eq!(out, Some(2));
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn gives_up_after_consecutive_failures() {
        let out: Result<Option<()>, _> =
            supervise_task("t", quick(), 3, CancellationToken::new(), |_| async {
                Err::<(), _>("always")
            })
            .await;
        assert!(matches!(
            out,
            Err(TaskGaveUp::TooManyFailures { failures: 3, .. })
        ));
    }

    #[tokio::test]
    async fn cancellation_ends_supervision() {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let out: Result<Option<()>, TaskGaveUp> =
            supervise_task("t", quick(), 3, cancel, move |_| {
                c.cancel();
                async { std::future::pending::<Result<(), String>>().await }
            })
            .await;
        assert!(matches!(out, Ok(None)));
    }
}
