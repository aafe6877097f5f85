//! Refusals, paced. A member refused a pass for a product (not eligible for it, or sold
//! out) is told when to ask again (`Retry-After`), and the refusal stands until then:
//! the same member asking for the same product sooner is held until that moment, and
//! only then judged again (a unit that came back meanwhile is theirs to take). A client
//! that waits as told is never held. A script that asks again at once gets one answer
//! per pace however fast it asks, so a thousand such members cost the gate, and
//! everything sharing its cores, about a thousand requests a second rather than as many
//! as they can send (a held request is a timer, not work).
//!
//! Requests held at once are bounded (`REFUSAL_HOLD_MAX`): past the bound, a request
//! that came too soon is answered 429 `RATE_LIMITED` at once, with `Retry-After`, so
//! the holds can never take the concurrency budget from the buyers.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use paysaga_common::limits::RateLimited;
use tokio::sync::Semaphore;

/// Expired refusals are forgotten once a pace (at least this often apart), so memory
/// holds the members refused within about two paces: a drop's crowd of losers, told
/// `SOLD_OUT` over seconds, never accumulates whole in the map, and the room it took is
/// reused by the next drop's crowd instead of growing the process with every drop.
const MIN_PRUNE_EVERY: Duration = Duration::from_millis(100);

/// The standing refusals of one gate instance.
#[derive(Debug)]
pub struct Pacer {
    pace: Duration,
    /// Until when each member's last refusal stands, by product.
    until: Mutex<Standing>,
    held: Semaphore,
}

#[derive(Debug)]
struct Standing {
    by_product: HashMap<i64, HashMap<String, Instant>>,
    pruned_at: Instant,
}

/// What [`Pacer::wait_turn`] did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// No refusal stands: judged at once.
    Now,
    /// Held until the member's last refusal ran out.
    Held,
}

impl Pacer {
    /// Refusals standing for `pace` (zero: no pacing), at most `max_held` requests held
    /// at once.
    pub fn new(pace: Duration, max_held: usize) -> Self {
        Self {
            pace,
            until: Mutex::new(Standing {
                by_product: HashMap::new(),
                pruned_at: Instant::now(),
            }),
            held: Semaphore::new(max_held),
        }
    }

    /// `Retry-After` of a refusal, in whole seconds (at least 1); `None` without pacing.
    pub fn retry_after_secs(&self) -> Option<u64> {
        (!self.pace.is_zero()).then(|| whole_secs(self.pace))
    }

    /// Waits until `member`'s last refusal for `product_id` has run out, if it still
    /// stands. `Err`: it stands and the hold is full, answer 429 now.
    pub async fn wait_turn(&self, product_id: i64, member: &str) -> Result<Turn, RateLimited> {
        if self.pace.is_zero() {
            return Ok(Turn::Now);
        }
        let now = Instant::now();
        let standing = self
            .lock()
            .by_product
            .get(&product_id)
            .and_then(|m| m.get(member).copied())
            .filter(|until| *until > now);
        let Some(until) = standing else {
            return Ok(Turn::Now);
        };
        let Ok(_permit) = self.held.try_acquire() else {
            metrics::counter!("gate_paced_requests_total", "outcome" => "refused_429").increment(1);
            return Err(RateLimited {
                retry_after_secs: whole_secs(until - now),
            });
        };
        metrics::counter!("gate_paced_requests_total", "outcome" => "held").increment(1);
        tokio::time::sleep_until(until.into()).await;
        Ok(Turn::Held)
    }

    /// Records a refusal of `member` for `product_id`: it stands for one pace from now.
    pub fn refused(&self, product_id: i64, member: &str) {
        if self.pace.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut s = self.lock();
        if now.duration_since(s.pruned_at) >= self.pace.max(MIN_PRUNE_EVERY) {
            s.by_product.retain(|_, members| {
                members.retain(|_, until| *until > now);
                // The room a crowd needed is given back once it has gone.
                members.shrink_to(2 * members.len());
                !members.is_empty()
            });
            s.pruned_at = now;
        }
        let members = s.by_product.entry(product_id).or_default();
        match members.get_mut(member) {
            Some(until) => *until = now + self.pace,
            None => {
                members.insert(member.to_owned(), now + self.pace);
            }
        }
    }

    /// Members with a refusal on record (expired ones until the next prune).
    #[cfg(test)]
    fn recorded(&self) -> usize {
        self.lock().by_product.values().map(HashMap::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Standing> {
        self.until.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `d` in whole seconds, rounded up, at least 1.
fn whole_secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_repeat_within_the_pace_is_held_until_it_runs_out() {
        let p = Pacer::new(Duration::from_millis(200), 8);
        assert!(matches!(p.wait_turn(1, "m").await, Ok(Turn::Now)));
        p.refused(1, "m");
        let start = Instant::now();
        assert!(matches!(p.wait_turn(1, "m").await, Ok(Turn::Held)));
        assert!(start.elapsed() >= Duration::from_millis(199));
        // Run out: judged at once.
        assert!(matches!(p.wait_turn(1, "m").await, Ok(Turn::Now)));
        // Another product, another member: not held.
        p.refused(1, "m");
        assert!(matches!(p.wait_turn(2, "m").await, Ok(Turn::Now)));
        assert!(matches!(p.wait_turn(1, "n").await, Ok(Turn::Now)));
        assert_eq!(p.retry_after_secs(), Some(1));
    }

    #[tokio::test]
    async fn a_full_hold_answers_at_once() {
        let p = std::sync::Arc::new(Pacer::new(Duration::from_secs(30), 1));
        p.refused(1, "a");
        p.refused(1, "b");
        let first = tokio::spawn({
            let p = p.clone();
            async move { p.wait_turn(1, "a").await }
        });
        // The first request takes the only place in the hold.
        while p.held.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let second = p.wait_turn(1, "b").await;
        assert!(matches!(second, Err(RateLimited { retry_after_secs }) if retry_after_secs >= 29));
        first.abort();
    }

    #[test]
    fn a_crowd_is_forgotten_one_pace_after_its_refusals() {
        let p = Pacer::new(Duration::from_millis(500), 8);
        for i in 0..1_000 {
            p.refused(1, &format!("loser-{i}"));
        }
        assert_eq!(p.recorded(), 1_000);
        std::thread::sleep(Duration::from_millis(600));
        // The next drop's first refusal finds the last crowd's refusals run out.
        p.refused(2, "next");
        assert_eq!(p.recorded(), 1);
        assert!(!p.lock().by_product.contains_key(&1));
    }

    #[test]
    fn no_pace_no_record() {
        let p = Pacer::new(Duration::ZERO, 8);
        p.refused(1, "m");
        assert_eq!(p.recorded(), 0);
        assert_eq!(p.retry_after_secs(), None);
        assert_eq!(whole_secs(Duration::from_millis(1001)), 2);
        assert_eq!(whole_secs(Duration::from_millis(10)), 1);
    }
}
