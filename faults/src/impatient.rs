//! Scenario 7's buyers: they get a reservation like anyone (a pass and a reservation
//! with it, or, told SOLD_OUT, a unit offered to them in the waitlist), then pay with one
//! Idempotency-Key and a random, often too short, timeout; on a timeout they retry the
//! same key at a random moment, sometimes sending two requests with it at once. Every
//! answer they get is kept, to check that one key always names one payment.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use paysaga_common::client::CallError;
use paysaga_contracts::orchestrator::api::Payment;
use paysaga_drop::{
    buyer::{classify, payment_outcome, Step},
    Attempt, Buyer, Driver, Outcome,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use uuid::Uuid;

/// Impatient attempts per buyer before it pays patiently (the harness's back-off).
const IMPATIENT_TRIES: u32 = 6;
/// The longest random timeout; the orchestrator answers 202 after 1.5 s at the latest.
const MAX_TIMEOUT_MS: u64 = 1200;

/// What the impatient clients saw, summed over every buyer.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub requests: AtomicI64,
    pub timeouts: AtomicI64,
    pub duplicates_sent: AtomicI64,
    pub replays: AtomicI64,
    pub in_progress: AtomicI64,
    /// Keys whose answers named more than one payment: must stay 0.
    pub keys_with_two_payments: AtomicI64,
}

impl ClientStats {
    pub fn evidence(&self) -> Vec<(String, i64)> {
        let get = |a: &AtomicI64| a.load(Ordering::Relaxed);
        vec![
            ("client timeouts".into(), get(&self.timeouts)),
            ("payment requests".into(), get(&self.requests)),
            (
                "same key sent twice at once".into(),
                get(&self.duplicates_sent),
            ),
            ("replayed answers".into(), get(&self.replays)),
            ("409 in progress".into(), get(&self.in_progress)),
        ]
    }
}

/// Runs every buyer through the drop impatiently, `concurrency` at a time.
pub async fn run_drop(
    driver: &Driver,
    buyers: &[Buyer],
    product_id: i64,
    concurrency: usize,
    seed: u64,
    stats: Arc<ClientStats>,
) -> Vec<Attempt> {
    futures::stream::iter(buyers.iter().enumerate())
        .map(|(i, b)| {
            let stats = stats.clone();
            async move {
                let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
                buy(driver, b, product_id, &mut rng, &stats).await
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

fn unanswered(step: Step, reason: impl Into<String>) -> Outcome {
    Outcome::Unanswered {
        step,
        reason: reason.into(),
    }
}

async fn buy(
    driver: &Driver,
    buyer: &Buyer,
    product_id: i64,
    rng: &mut StdRng,
    stats: &ClientStats,
) -> Attempt {
    let start = Instant::now();
    let mut a = Attempt::unanswered(&buyer.member);
    a.outcome = buy_steps(driver, buyer, product_id, rng, stats, &mut a).await;
    a.time_to_answer = start.elapsed();
    a
}

/// A payment request's definite refusal or exhausted retries, as the buyer's outcome.
fn refused(e: CallError) -> Outcome {
    classify(Step::Pay, e, unanswered(Step::Pay, "sold out?"))
}

async fn buy_steps(
    driver: &Driver,
    buyer: &Buyer,
    product_id: i64,
    rng: &mut StdRng,
    stats: &ClientStats,
    a: &mut Attempt,
) -> Outcome {
    let reservation = match driver.reservation(buyer, product_id, a).await {
        Ok(id) => id,
        Err(outcome) => return outcome,
    };
    let key = format!("impatient-{reservation}");
    let mut seen: BTreeSet<Uuid> = BTreeSet::new();
    let mut answer: Option<Payment> = None;
    for _ in 0..IMPATIENT_TRIES {
        let timeout = Duration::from_millis(rng.gen_range(5..=MAX_TIMEOUT_MS));
        let twice = rng.gen_bool(0.25);
        let impatient = Driver {
            timeout,
            ..driver.clone()
        };
        let sends = if twice { 2 } else { 1 };
        if twice {
            stats.duplicates_sent.fetch_add(1, Ordering::Relaxed);
        }
        let results = futures::future::join_all(
            (0..sends).map(|_| impatient.post_payment(buyer, reservation, &key)),
        )
        .await;
        for r in results {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(got) => {
                    if got.replayed {
                        stats.replays.fetch_add(1, Ordering::Relaxed);
                    }
                    seen.insert(got.payment.id);
                    answer = Some(got.payment);
                }
                Err(CallError::Rejected { status: 409, body })
                    if body.code == "IDEMPOTENCY_KEY_IN_PROGRESS" =>
                {
                    stats.in_progress.fetch_add(1, Ordering::Relaxed);
                }
                Err(CallError::Unknown { .. }) => {
                    stats.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    if answer.is_none() {
                        return refused(e);
                    }
                }
            }
        }
        if answer.is_some() {
            break;
        }
        a.retries += 1;
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=150))).await;
    }
    if answer.is_none() {
        // Patience at last: the same key, retried with back-off on unknown outcomes and
        // while a cut-off earlier request still holds it (until its lease expires).
        match driver.pay(buyer, reservation, &key, &mut a.retries).await {
            Ok(p) => {
                seen.insert(p.id);
                answer = Some(p);
            }
            Err(e) => return refused(e),
        }
    }
    let Some(first) = answer else {
        return unanswered(Step::Pay, "no answer");
    };
    a.payment_id = Some(first.id);
    let outcome = match driver.follow(buyer, first).await {
        Ok(p) => {
            let o = payment_outcome(&p);
            a.payment = Some(p);
            o
        }
        Err((p, reason)) => {
            a.payment = Some(p);
            return unanswered(Step::Follow, reason);
        }
    };
    // A last, patient replay of the key: it must name the same payment.
    if let Ok(again) = driver.post_payment(buyer, reservation, &key).await {
        stats.requests.fetch_add(1, Ordering::Relaxed);
        if again.replayed {
            stats.replays.fetch_add(1, Ordering::Relaxed);
        }
        seen.insert(again.payment.id);
    }
    if seen.len() > 1 {
        tracing::error!(member = %buyer.member, %key, payments = ?seen, "one Idempotency-Key answered with several payments");
        stats.keys_with_two_payments.fetch_add(1, Ordering::Relaxed);
    }
    outcome
}
