//! Repairs of failed processes: when an essential process (a worker, the cache GC) has used
//! up its automatic restarts, the manager task starts it again, at most [`MAX_FIX_ATTEMPTS`]
//! times within [`FIX_WINDOW`]; one more failure means the resolver is unstable and stops.
//! The decision is pure ([`Instability::repair`], at a given instant); [`Repairs`] carries it
//! out through the supervisor.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use supervisor::SupervisorHandle;

/// The processes that keep failing after the allowed fix attempts: the resolver must stop.
#[derive(Debug, PartialEq, Eq)]
pub struct GaveUp(pub Vec<String>);

/// At most `MAX_FIX_ATTEMPTS` fix attempts within `FIX_WINDOW`; one more failure means the
/// resolver is unstable and stops.
const MAX_FIX_ATTEMPTS: usize = 2;
const FIX_WINDOW: Duration = Duration::from_secs(30 * 60);

/// Bounded fix attempts for failed processes: the attempts made within [`FIX_WINDOW`].
#[derive(Debug, Default)]
struct Instability {
    /// When each attempt still counted was made, oldest first.
    attempts: VecDeque<Instant>,
}

/// What to do about the essential processes that failed.
#[derive(Debug, PartialEq, Eq)]
enum Repair {
    /// Nothing failed.
    Nothing,
    /// Start these again (an attempt, counted).
    StartAgain(Vec<String>),
    /// These keep failing after the allowed attempts: the resolver is unstable.
    GiveUp(Vec<String>),
}

impl Instability {
    /// What to do, at `now`, about the processes `failed`; an attempt allowed is counted.
    fn repair(&mut self, failed: Vec<String>, now: Instant) -> Repair {
        if failed.is_empty() {
            return Repair::Nothing;
        }
        while self
            .attempts
            .front()
            .is_some_and(|t| now.duration_since(*t) > FIX_WINDOW)
        {
            self.attempts.pop_front();
        }
        if self.attempts.len() >= MAX_FIX_ATTEMPTS {
            return Repair::GiveUp(failed);
        }
        self.attempts.push_back(now);
        Repair::StartAgain(failed)
    }
}

/// Starts failed essential processes again, a bounded number of times.
pub struct Repairs {
    /// Where the failed processes are started again.
    supervisor: SupervisorHandle,
    /// The attempts made so far.
    instability: Instability,
}

impl Repairs {
    pub fn new(supervisor: SupervisorHandle) -> Repairs {
        Repairs {
            supervisor,
            instability: Instability::default(),
        }
    }

    /// Start the essential processes `failed` again; an error when the attempts are used up
    /// and the resolver must stop.
    pub async fn fix(&mut self, failed: Vec<String>) -> Result<(), GaveUp> {
        match self.instability.repair(failed, Instant::now()) {
            Repair::Nothing => Ok(()),
            Repair::GiveUp(failed) => {
                tracing::error!(failed = %failed.join(", "), "processes keep failing after {MAX_FIX_ATTEMPTS} fix attempts; stopping the resolver");
                Err(GaveUp(failed))
            }
            Repair::StartAgain(failed) => {
                tracing::warn!(failed = %failed.join(", "), "processes failed; attempting to fix them by starting them again");
                for name in &failed {
                    if let Err(e) = self.supervisor.start(name).await {
                        tracing::warn!(name, "fix attempt failed: {e}");
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_processes_are_started_again_twice_within_half_an_hour_then_the_resolver_gives_up() {
        let start = Instant::now();
        let kresd = || vec!["kresd0".to_owned()];
        let rows = [
            (0, vec![], Repair::Nothing),
            (0, kresd(), Repair::StartAgain(kresd())),
            (60, kresd(), Repair::StartAgain(kresd())),
            (120, kresd(), Repair::GiveUp(kresd())),
            (1800, kresd(), Repair::GiveUp(kresd())),
            // The first attempt is more than half an hour old: it no longer counts.
            (1801, kresd(), Repair::StartAgain(kresd())),
            (1802, kresd(), Repair::GiveUp(kresd())),
            (1802, vec![], Repair::Nothing),
            (1861, kresd(), Repair::StartAgain(kresd())),
        ];
        let mut instability = Instability::default();
        for (at, failed, want) in rows {
            let now = start + Duration::from_secs(at);
            assert_eq!(instability.repair(failed, now), want, "at {at} s");
        }
    }
}
