//! Per-step retry policy: exponential backoff with jitter and a cap on attempts.
//! Deterministic for a given RNG, so tests seed it.

use std::time::Duration;

use rand::Rng;

use crate::state::{Action, Outcome};

/// Random spread around each delay, as a percentage of it (0..=100): a delay of
/// `d` becomes uniform in `[d - d*p/100, d + d*p/100]`, so instances that failed
/// together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jitter(u8);

impl Jitter {
    pub const fn percent(p: u8) -> Self {
        Jitter(if p > 100 { 100 } else { p })
    }
    pub fn as_percent(self) -> u8 {
        self.0
    }
}

/// How often and how patiently a step with an unknown outcome is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the second attempt.
    pub initial_delay: Duration,
    /// Each further delay is the previous one times this.
    pub multiplier: u32,
    /// No delay (before jitter) exceeds this; jitter may add at most its share on top.
    pub max_delay: Duration,
    pub jitter: Jitter,
    /// Attempts in all, the first included. When they run out the payment needs an operator.
    pub max_attempts: u32,
}

impl RetryPolicy {
    /// The policy of each action. Refunds are the most patient: giving up on one
    /// means money held without an order, so it gets more, slower attempts.
    pub const fn for_action(action: Action) -> Self {
        match action {
            Action::Debit | Action::Confirm => RetryPolicy {
                initial_delay: Duration::from_millis(250),
                multiplier: 2,
                max_delay: Duration::from_secs(30),
                jitter: Jitter::percent(20),
                max_attempts: 12,
            },
            Action::CancelReservation | Action::CancelOrder => RetryPolicy {
                initial_delay: Duration::from_millis(500),
                multiplier: 2,
                max_delay: Duration::from_secs(60),
                jitter: Jitter::percent(20),
                max_attempts: 12,
            },
            Action::Refund => RetryPolicy {
                initial_delay: Duration::from_millis(500),
                multiplier: 2,
                max_delay: Duration::from_secs(60),
                jitter: Jitter::percent(20),
                max_attempts: 20,
            },
            // Local and infallible: nothing to retry.
            Action::Complete => RetryPolicy {
                initial_delay: Duration::ZERO,
                multiplier: 1,
                max_delay: Duration::ZERO,
                jitter: Jitter::percent(0),
                max_attempts: 1,
            },
        }
    }

    /// Whether an outcome is worth another attempt at all (only an unknown one is).
    pub fn retries(&self, outcome: Outcome) -> bool {
        outcome.is_retryable()
    }

    /// The delay before the next attempt, after `attempts_made` attempts (>= 1) ended
    /// unknown; `None` once attempts are exhausted.
    pub fn next_delay(&self, attempts_made: u32, rng: &mut impl Rng) -> Option<Duration> {
        if attempts_made >= self.max_attempts {
            return None;
        }
        let base = self.base_delay(attempts_made.max(1));
        let base_ms = base.as_millis() as u64;
        let spread = base_ms * u64::from(self.jitter.as_percent()) / 100;
        let jittered = base_ms - spread
            + if spread == 0 {
                0
            } else {
                rng.gen_range(0..=2 * spread)
            };
        Some(Duration::from_millis(jittered))
    }

    /// The un-jittered delay after the `n`th attempt: initial * multiplier^(n-1), capped.
    fn base_delay(&self, n: u32) -> Duration {
        let mut d = self.initial_delay;
        for _ in 1..n {
            d = d.saturating_mul(self.multiplier);
            if d >= self.max_delay {
                return self.max_delay;
            }
        }
        d.min(self.max_delay)
    }

    /// The longest a step can spend waiting between attempts before it is flagged
    /// for an operator (every jitter at its upper end). Add `max_attempts` times the
    /// call timeout and the recovery interval for the wall-clock bound.
    pub fn worst_case_wait(&self) -> Duration {
        (1..self.max_attempts)
            .map(|n| {
                let b = self.base_delay(n);
                b + b * u32::from(self.jitter.as_percent()) / 100
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn grows_exponentially_up_to_the_cap() {
        let p = RetryPolicy {
            jitter: Jitter::percent(0),
            ..RetryPolicy::for_action(Action::Debit)
        };
        let mut rng = StdRng::seed_from_u64(1);
        let delays: Vec<u64> = (1..p.max_attempts)
            .map(|n| p.next_delay(n, &mut rng).unwrap().as_millis() as u64)
            .collect();
        assert_eq!(&delays[..5], &[250, 500, 1000, 2000, 4000]);
        assert!(delays.iter().all(|&d| d <= 30_000));
        assert_eq!(*delays.last().unwrap(), 30_000);
        assert_eq!(p.next_delay(p.max_attempts, &mut rng), None);
    }

    #[test]
    fn jitter_stays_in_its_band_and_is_deterministic_per_seed() {
        let p = RetryPolicy::for_action(Action::Refund);
        let a: Vec<_> = (1..p.max_attempts)
            .map(|n| p.next_delay(n, &mut StdRng::seed_from_u64(7)))
            .collect();
        let b: Vec<_> = (1..p.max_attempts)
            .map(|n| p.next_delay(n, &mut StdRng::seed_from_u64(7)))
            .collect();
        assert_eq!(a, b);
        let mut rng = StdRng::seed_from_u64(99);
        for n in 1..p.max_attempts {
            let base = p.base_delay(n).as_millis() as u64;
            let d = p.next_delay(n, &mut rng).unwrap().as_millis() as u64;
            assert!(
                d >= base * 80 / 100 && d <= base * 120 / 100,
                "attempt {n}: {d} vs {base}"
            );
        }
    }

    #[test]
    fn only_unknown_is_retried() {
        let p = RetryPolicy::for_action(Action::Confirm);
        assert!(p.retries(Outcome::Unknown));
        assert!(!p.retries(Outcome::Rejected));
        assert!(!p.retries(Outcome::Succeeded));
    }

    #[test]
    fn worst_case_wait_is_finite_and_published() {
        // docs/orchestrator.md quotes these bounds; keep them in step.
        assert_eq!(
            RetryPolicy::for_action(Action::Debit).worst_case_wait(),
            Duration::from_millis(182_100)
        );
        assert_eq!(
            RetryPolicy::for_action(Action::Refund).worst_case_wait(),
            Duration::from_millis(940_200)
        );
    }
}
