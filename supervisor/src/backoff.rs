//! Restart delays: exponential growth with a cap and jitter, plus a floor between two spawns
//! from a streak's second failure on, so that a crash loop can never become a restart storm,
//! while the first failure of a streak (a process that ran stably, or its first run) is
//! restarted at once.

use std::time::Duration;

/// A validated restart delay policy. It crosses process boundaries (`remote`) as its fields
/// and is validated again on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "BackoffFields")]
pub struct Backoff {
    /// Delay before the second consecutive restart; it doubles from there.
    base: Duration,
    /// Largest delay.
    cap: Duration,
    /// Minimum time between two spawns of the same service.
    floor: Duration,
    /// Jitter as a fraction of the delay, in per mille (0–1000).
    jitter_per_mille: u32,
    /// Ready this long and the failure streak is forgiven.
    stable_after: Duration,
}

/// A backoff policy that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackoffError {
    #[error("backoff base must not exceed its cap")]
    BaseAboveCap,
    #[error("jitter must be at most 1000 per mille")]
    JitterTooLarge,
}

/// The fields of a [`Backoff`] as they arrive, before validation.
#[derive(serde::Deserialize)]
struct BackoffFields {
    base: Duration,
    cap: Duration,
    floor: Duration,
    jitter_per_mille: u32,
    stable_after: Duration,
}

impl TryFrom<BackoffFields> for Backoff {
    type Error = BackoffError;

    fn try_from(f: BackoffFields) -> Result<Self, Self::Error> {
        Backoff::try_new(f.base, f.cap, f.floor, f.jitter_per_mille, f.stable_after)
    }
}

impl Backoff {
    pub fn try_new(
        base: Duration,
        cap: Duration,
        floor: Duration,
        jitter_per_mille: u32,
        stable_after: Duration,
    ) -> Result<Self, BackoffError> {
        if base > cap {
            return Err(BackoffError::BaseAboveCap);
        }
        if jitter_per_mille > 1000 {
            return Err(BackoffError::JitterTooLarge);
        }
        Ok(Backoff {
            base,
            cap,
            floor,
            jitter_per_mille,
            stable_after,
        })
    }

    /// How long a process must have been ready for its failure streak to reset.
    pub fn stable_after(&self) -> Duration {
        self.stable_after
    }

    /// Minimum time between two spawns.
    pub fn floor(&self) -> Duration {
        self.floor
    }

    /// The delay before restart number `streak` of a failure streak (1 = first failure):
    /// none for the first, then `base`, doubling up to `cap`. `entropy` is any random
    /// number; it picks the jitter, so tests can pass a fixed one.
    pub fn delay(&self, streak: u32, entropy: u64) -> Duration {
        if streak <= 1 {
            return Duration::ZERO;
        }
        let doublings = (streak - 2).min(32);
        let raw = self
            .base
            .checked_mul(1u32 << doublings.min(31))
            .unwrap_or(self.cap)
            .min(self.cap);
        if self.jitter_per_mille == 0 || raw.is_zero() {
            return raw;
        }
        // Spread the delay over [raw - j, raw + j] where j = raw * jitter.
        let span = raw.as_nanos() * u128::from(self.jitter_per_mille) / 1000;
        if span == 0 {
            return raw;
        }
        let offset = u128::from(entropy) % (2 * span + 1);
        let nanos = raw.as_nanos() + offset - span;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).min(self.cap)
    }
}

impl Default for Backoff {
    /// 0, 200 ms, 400 ms … up to 30 s, ±10 % jitter, at least 1 s between spawns of a
    /// crash-looping process, and a streak reset after 10 s of readiness.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(30),
            floor: Duration::from_secs(1),
            jitter_per_mille: 100,
            stable_after: Duration::from_secs(10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> Backoff {
        Backoff::try_new(
            Duration::from_millis(100),
            Duration::from_secs(1),
            Duration::from_millis(500),
            0,
            Duration::from_secs(10),
        )
        .expect("valid backoff")
    }

    #[test]
    fn delay_grows_exponentially_to_the_cap() {
        let b = no_jitter();
        let got: Vec<u64> = (1..=7).map(|n| b.delay(n, 0).as_millis() as u64).collect();
        assert_eq!(got, vec![0, 100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let b = Backoff::try_new(
            Duration::from_millis(100),
            Duration::from_secs(10),
            Duration::ZERO,
            100,
            Duration::from_secs(1),
        )
        .expect("valid backoff");
        let delays: Vec<Duration> = (0..50u64).map(|e| b.delay(3, e * 7919)).collect();
        assert!(delays
            .iter()
            .all(|d| *d >= Duration::from_millis(180) && *d <= Duration::from_millis(220)));
        assert!(delays.iter().any(|d| *d != delays[0]));
    }

    #[test]
    fn huge_streaks_do_not_overflow() {
        assert_eq!(
            no_jitter().delay(u32::MAX, u64::MAX),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn invalid_policies_are_refused() {
        let z = Duration::ZERO;
        assert_eq!(
            Backoff::try_new(Duration::from_secs(2), Duration::from_secs(1), z, 0, z),
            Err(BackoffError::BaseAboveCap)
        );
        assert_eq!(
            Backoff::try_new(z, z, z, 1001, z),
            Err(BackoffError::JitterTooLarge)
        );
    }
}
