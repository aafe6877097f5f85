//! Driving a payment: carry out the owed action outside any transaction, learn the
//! truth when the outcome is unknown, then record the move with one compare-and-set.
//! A driver holds the payment's lease; losing it (another instance took over after
//! it expired) stops the driver without a write.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use sqlx::PgPool;
use uuid::Uuid;
use workflows::{transition, Action, Next, Outcome, RetryPolicy};

use crate::{
    downstream::{Attempt, Downstream},
    error::{Error, Result},
    metrics,
    store::{self, Move, PaymentRow, StepRecord},
};

/// Called after a step's downstream call returns and before its result is recorded:
/// a fault-injection point for tests (a hook that never returns is a process that died
/// right there). `None` in production.
pub type AfterCallHook =
    Arc<dyn Fn(Uuid, Action) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// How the error of a step starts when its call's outcome was unknown and the probe that
/// followed settled it: the step records the probe's outcome, and this keeps the fact
/// that the call itself went unanswered (the fault suite counts on it).
pub const PROBED_CALL_PREFIX: &str = "call: ";

/// Backoffs up to this long are waited out by the driver itself, holding the lease.
const INLINE_RETRY_MAX: Duration = Duration::from_millis(1000);
/// At most this many inline retries per drive; then recovery takes the payment.
const INLINE_RETRIES: u32 = 2;

/// Everything a driver needs; one per process, shared by handlers and recovery.
pub struct Engine {
    pub pool: PgPool,
    pub downstream: Downstream,
    /// This instance's identity: the lease owner it writes and the `driver` of its steps.
    pub instance: Uuid,
    pub lease: Duration,
    /// Cleared when the instance stops: a driver of a stopped instance writes nothing
    /// more, exactly as if the process had died.
    pub alive: Arc<AtomicBool>,
    pub after_call: Option<AfterCallHook>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Engine {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Appends the local steps a move leads to (ORDER_CONFIRMED -> COMPLETED), so they
    /// commit with it: one transaction fewer per payment, and no extra window.
    fn chain_local_steps(
        &self,
        payment_id: Uuid,
        steps: &mut Vec<(StepRecord, Move)>,
    ) -> Result<()> {
        while let Some(action) = steps
            .last()
            .and_then(|(_, mv)| mv.to.pending())
            .filter(|a| !a.is_remote())
        {
            let from = steps
                .last()
                .map(|(_, mv)| mv.to)
                .ok_or_else(|| Error::Invariant("no step to chain".into()))?;
            let Next::Move(to) = transition(from, Outcome::Succeeded)
                .map_err(|e| Error::Invariant(e.to_string()))?
            else {
                return Err(Error::Invariant(format!(
                    "local step {action} did not move"
                )));
            };
            metrics::step(action, Outcome::Succeeded, Duration::ZERO);
            let step = StepRecord {
                action,
                operation_key: action.operation_key(payment_id),
                outcome: Some(Outcome::Succeeded),
                downstream_status: None,
                latency: Duration::ZERO,
                error: None,
            };
            let mv = Move {
                to,
                attempts: 0,
                next_attempt_in: to.pending().map(|_| Duration::ZERO),
                needs_attention: false,
                keep_lease: to.pending().is_some(),
                failure_code: None,
            };
            steps.push((step, mv));
        }
        Ok(())
    }

    /// Drives a payment this instance holds the lease on until it settles, waits for a
    /// retry, needs an operator, or the lease is lost. Returns the last row it saw.
    #[tracing::instrument(skip_all, fields(payment_id = %row.id))]
    pub async fn drive(&self, mut row: PaymentRow) -> Result<PaymentRow> {
        let mut inline_retries = 0;
        let mut pause = None;
        loop {
            if let Some(delay) = pause.take() {
                tokio::time::sleep(delay).await;
            }
            if row.lease_owner != Some(self.instance) || row.needs_attention {
                return Ok(row);
            }
            let pos = row.position()?;
            let Some(action) = pos.pending() else {
                store::release(&self.pool, row.id, self.instance).await?;
                return Ok(row);
            };
            let mut attempt = self.downstream.perform(action, &row).await;
            if attempt.outcome == Outcome::Unknown {
                metrics::unknown_outcome(action);
                if let Some(truth) = self.downstream.probe(action, &row).await {
                    let call_error = attempt.error.take().unwrap_or_default();
                    attempt = Attempt {
                        error: Some(format!(
                            "{PROBED_CALL_PREFIX}{call_error}; probe: {}",
                            truth.error.as_deref().unwrap_or("found it done")
                        )),
                        latency: attempt.latency + truth.latency,
                        ..truth
                    };
                }
            }
            metrics::step(action, attempt.outcome, attempt.latency);
            if let Some(hook) = &self.after_call {
                hook(row.id, action).await;
            }
            if !self.alive() {
                return Ok(row);
            }

            let step = StepRecord {
                action,
                operation_key: action.operation_key(row.id),
                outcome: Some(attempt.outcome),
                downstream_status: attempt.status.filter(|_| action.is_remote()),
                latency: attempt.latency,
                error: attempt.error.clone(),
            };
            let next = transition(pos, attempt.outcome)
                .map_err(|e| crate::error::Error::Invariant(e.to_string()))?;
            let mv = match next {
                Next::Move(to) => Move {
                    to,
                    attempts: 0,
                    next_attempt_in: to.pending().map(|_| Duration::ZERO),
                    needs_attention: false,
                    keep_lease: to.pending().is_some(),
                    failure_code: attempt
                        .code
                        .clone()
                        .filter(|_| to.state() == workflows::State::Failed),
                },
                Next::Retry => {
                    let attempts = row.attempts.saturating_add(1);
                    let policy = RetryPolicy::for_action(action);
                    let delay = policy.next_delay(
                        u32::try_from(attempts).unwrap_or(u32::MAX),
                        &mut rand::thread_rng(),
                    );
                    if delay.is_none() {
                        metrics::attention("attempts_exhausted");
                        tracing::warn!(payment_id = %row.id, %action, attempts, "attempts exhausted; payment needs an operator");
                    }
                    // A short backoff is waited out here, lease held (it outlasts the
                    // pause), so a blip resolves within the buyer's wait instead of at the
                    // next recovery tick; longer ones go back to recovery.
                    let inline =
                        delay.filter(|d| *d <= INLINE_RETRY_MAX && inline_retries < INLINE_RETRIES);
                    if inline.is_some() {
                        inline_retries += 1;
                        pause = inline;
                    }
                    Move {
                        to: pos,
                        attempts,
                        next_attempt_in: delay,
                        needs_attention: delay.is_none(),
                        keep_lease: inline.is_some(),
                        failure_code: None,
                    }
                }
                Next::Escalate => {
                    metrics::attention("definite_rejection");
                    tracing::error!(payment_id = %row.id, %action, error = ?attempt.error, "no safe automatic move; payment needs an operator");
                    Move {
                        to: pos,
                        attempts: row.attempts,
                        next_attempt_in: None,
                        needs_attention: true,
                        keep_lease: false,
                        failure_code: None,
                    }
                }
            };
            let mut steps = vec![(step, mv)];
            self.chain_local_steps(row.id, &mut steps)?;
            match store::record_steps(&self.pool, &row, self.instance, self.lease, &steps).await? {
                Some(moved) => {
                    let mut from = row.state.as_str();
                    for (_, mv) in &steps {
                        if mv.to.state().as_str() != from {
                            metrics::transition(mv.to.state().as_str());
                        }
                        from = mv.to.state().as_str();
                    }
                    row = moved;
                }
                None => {
                    metrics::lease_lost();
                    tracing::warn!(payment_id = %row.id, "payment moved by another driver; stopping without a write");
                    return store::load(&self.pool, row.id)
                        .await
                        .map(|r| r.unwrap_or(row));
                }
            }
        }
    }
}
