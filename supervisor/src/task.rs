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

/// Run `make(incarnation)` until it returns `Ok(())` or `cancel` fires. A panic or an `Err`
/// restarts it after a backoff; `max_failures` consecutive failures give up.
pub async fn supervise_task<F, Fut, E>(
    name: &str,
    backoff: Backoff,
    max_failures: u32,
    cancel: CancellationToken,
    mut make: F,
) -> Result<(), TaskGaveUp>
where
    F: FnMut(Incarnation) -> Fut,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
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
                return Ok(());
            }
        };
        match outcome {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => tracing::error!(task = name, error = %e, "task failed; restarting it"),
            Err(join) if join.is_panic() => {
                tracing::error!(task = name, "task panicked; restarting it")
            }
            Err(_) => return Ok(()),
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
            () = cancel.cancelled() => return Ok(()),
        }
    }
}
