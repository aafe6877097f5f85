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

use paysaga_common::error::cause_chain;
use rand::{rngs::StdRng, SeedableRng};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tracing::Instrument;
use uuid::Uuid;
use workflows::{transition, Action, IllegalTransition, Next, Outcome, Position, RetryPolicy};

use crate::{
    answer::AnswerSlot,
    downstream::{Attempt, Downstream},
    error::{Breach, Error, Result},
    failure::FailureCode,
    metrics,
    store::{self, Move, PaymentRow, StepMove, StepRecord},
};

/// Called after a step's downstream call returns and before its result is recorded:
/// a fault-injection point for tests (a hook that never returns is a process that died
/// right there). `None` in production.
pub type AfterCallHook =
    Arc<dyn Fn(Uuid, Action) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Backoffs up to this long are waited out by the driver itself, holding the lease.
const INLINE_RETRY_MAX: Duration = Duration::from_millis(1000);
/// At most this many inline retries per drive; then recovery takes the payment.
const INLINE_RETRIES: u32 = 2;

/// Everything the choice of a driver's next move depends on, so that the choice is a
/// pure function ([`choose`]): no I/O, no clock, no hidden randomness.
#[derive(Debug, Clone, Copy)]
pub struct Situation {
    /// Where the payment is; its pending action is the one just attempted.
    pub at: Position,
    pub outcome: Outcome,
    /// The payment's attempts at the pending action that ended unknown, before this one.
    pub attempts: i32,
    /// Backoffs this drive has already waited out itself.
    pub inline_retries: u32,
    /// The failure code the downstream's code for a definite answer names (e.g.
    /// `INSUFFICIENT_FUNDS`), kept by a move into FAILED.
    pub code: Option<FailureCode>,
    /// Seeds the retry jitter: the same situation always gives the same choice.
    pub jitter_seed: u64,
}

/// Why a payment now waits for an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    /// Unknown outcome after unknown outcome, until the action's policy gave up.
    AttemptsExhausted,
    /// A definite answer with no safe automatic continuation.
    DefiniteRejection,
}

impl Attention {
    /// The label of the attention metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Attention::AttemptsExhausted => "attempts_exhausted",
            Attention::DefiniteRejection => "definite_rejection",
        }
    }
}

/// The driver's next move after an attempt, and what comes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub mv: Move,
    /// Wait this long, lease held, and attempt again in the same drive.
    pub pause: Option<Duration>,
    /// Set when the move leaves the payment to an operator.
    pub attention: Option<Attention>,
}

/// Picks the move that follows an attempt: the saga's transition, plus how the payment
/// is scheduled. A move forward is due at once and keeps the lease while work is left.
/// An unknown outcome stays put and backs off by the action's retry policy; a short
/// backoff is waited out by the driver itself, lease held (it outlasts the pause), so
/// a blip resolves within the buyer's wait instead of at the next recovery tick, and
/// longer ones go back to recovery. Exhausted attempts and a definite answer with no
/// safe continuation flag the payment for an operator.
pub fn choose(s: Situation) -> Result<Choice, IllegalTransition> {
    let Some(action) = s.at.pending() else {
        return Err(IllegalTransition {
            state: s.at.state(),
            pending: None,
            outcome: Some(s.outcome),
        });
    };
    Ok(match transition(s.at, s.outcome)? {
        Next::Move(to) => Choice {
            mv: Move {
                to,
                attempts: 0,
                next_attempt_in: to.pending().map(|_| Duration::ZERO),
                needs_attention: false,
                keep_lease: to.pending().is_some(),
                failure_code: s.code.filter(|_| to.state() == workflows::State::Failed),
            },
            pause: None,
            attention: None,
        },
        Next::Retry => {
            let attempts = s.attempts.saturating_add(1);
            let delay = RetryPolicy::for_action(action).next_delay(
                u32::try_from(attempts).unwrap_or(u32::MAX),
                &mut StdRng::seed_from_u64(s.jitter_seed),
            );
            let pause =
                delay.filter(|d| *d <= INLINE_RETRY_MAX && s.inline_retries < INLINE_RETRIES);
            Choice {
                mv: Move {
                    to: s.at,
                    attempts,
                    next_attempt_in: delay,
                    needs_attention: delay.is_none(),
                    keep_lease: pause.is_some(),
                    failure_code: None,
                },
                pause,
                attention: delay.is_none().then_some(Attention::AttemptsExhausted),
            }
        }
        Next::Escalate => Choice {
            mv: Move {
                to: s.at,
                attempts: s.attempts,
                next_attempt_in: None,
                needs_attention: true,
                keep_lease: false,
                failure_code: None,
            },
            pause: None,
            attention: Some(Attention::DefiniteRejection),
        },
    })
}

/// The action whose call follows `action`'s at once, its record riding with
/// `action`'s: only a debit that succeeded, moving on to the confirm.
fn deferrable(action: Action, attempt: &Attempt, choice: &Choice) -> Option<Action> {
    let next = choice.mv.to.pending()?;
    (action == Action::Debit
        && attempt.outcome == Outcome::Succeeded
        && next == Action::Confirm
        && choice.pause.is_none()
        && choice.attention.is_none())
    .then_some(next)
}

fn step_record(action: Action, row: &PaymentRow, attempt: &Attempt) -> StepRecord {
    StepRecord {
        action,
        operation_key: action.operation_key(row.id),
        outcome: Some(attempt.outcome),
        downstream_status: attempt.status.filter(|_| action.is_remote()),
        latency: attempt.latency,
        error: attempt.error.clone(),
    }
}

/// Everything a driver needs; one per process, shared by the checkout, the operators'
/// actions and recovery (never by a route).
pub struct Engine {
    pub(crate) pool: PgPool,
    /// The group-committed writer every driver and request records through.
    pub(crate) writes: store::Writes,
    pub(crate) downstream: Downstream,
    /// This instance's identity: the lease owner it writes and the `driver` of its steps.
    pub(crate) instance: Uuid,
    pub(crate) lease: Duration,
    /// Cleared when the instance stops: a driver of a stopped instance writes nothing
    /// more, exactly as if the process had died.
    pub(crate) alive: Arc<AtomicBool>,
    after_call: Option<AfterCallHook>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn new(
        pool: PgPool,
        writes: store::Writes,
        downstream: Downstream,
        lease: Duration,
        after_call: Option<AfterCallHook>,
    ) -> Self {
        Self {
            pool,
            writes,
            downstream,
            instance: Uuid::new_v4(),
            lease,
            alive: Arc::new(AtomicBool::new(true)),
            after_call,
        }
    }

    /// This instance has not stopped.
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Starts driving `row` in a task of its own (it outlives the request, which only
    /// waits for it a while) if this instance holds its lease. With a `slot`, the move
    /// that settles the payment stores the waiting request's answer too.
    pub(crate) fn spawn_drive(
        self: &Arc<Self>,
        row: PaymentRow,
        slot: Option<AnswerSlot>,
    ) -> Option<JoinHandle<Result<PaymentRow>>> {
        if row.lease_owner != Some(self.instance) || row.pending_action.is_none() {
            return None;
        }
        let engine = self.clone();
        // In the caller's span: the drive is part of the request that started it.
        Some(tokio::spawn(
            async move { engine.drive_answering(row, slot).await }.in_current_span(),
        ))
    }

    /// Waits up to `wait` for the payment to reach a terminal state: on the driver the
    /// caller started, or by re-reading the row when someone else drives it.
    pub(crate) async fn wait_for_terminal(
        &self,
        id: Uuid,
        handle: Option<JoinHandle<Result<PaymentRow>>>,
        wait: Duration,
    ) -> Result<PaymentRow> {
        let deadline = tokio::time::Instant::now() + wait;
        if let Some(mut handle) = handle {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(Ok(Ok(row))) if row.is_terminal() => return Ok(row),
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(payment_id = %id, error = %cause_chain(&e), "driver stopped; recovery resumes the payment")
                }
                Ok(Err(e)) => {
                    tracing::warn!(payment_id = %id, error = %e, "driver task failed; recovery resumes the payment")
                }
                // Still running: it carries on after the answer.
                Err(_) => {}
            }
        }
        // Someone else (recovery, another instance, a retry) is driving it: re-read with
        // a growing pause, so thousands of waiting buyers do not hammer the database.
        let mut pause = Duration::from_millis(20);
        loop {
            let row = store::load(&self.pool, id)
                .await?
                .ok_or(Error::PaymentNotFound)?;
            let now = tokio::time::Instant::now();
            if row.is_terminal() || now >= deadline {
                return Ok(row);
            }
            tokio::time::sleep_until(deadline.min(now + pause)).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// Appends the local steps a move leads to (ORDER_CONFIRMED -> COMPLETED), so they
    /// commit with it: one transaction fewer per payment, and no extra window.
    fn chain_local_steps(&self, payment_id: Uuid, steps: &mut Vec<StepMove>) -> Result<()> {
        while let Some(action) = steps
            .last()
            .and_then(|s| s.mv.to.pending())
            .filter(|a| !a.is_remote())
        {
            let from = steps
                .last()
                .map(|s| s.mv.to)
                .ok_or(Breach::MoveWithoutStep {
                    payment: payment_id,
                })?;
            let choice = choose(Situation {
                at: from,
                outcome: Outcome::Succeeded,
                attempts: 0,
                inline_retries: 0,
                code: None,
                jitter_seed: 0,
            })
            .map_err(|refused| Breach::IllegalMove {
                payment: payment_id,
                refused,
            })?;
            if choice.mv.to == from {
                return Err(Breach::LocalStepStuck {
                    payment: payment_id,
                    action,
                    state: from.state(),
                }
                .into());
            }
            metrics::step(action, Outcome::Succeeded, Duration::ZERO);
            let step = StepRecord {
                action,
                operation_key: action.operation_key(payment_id),
                outcome: Some(Outcome::Succeeded),
                downstream_status: None,
                latency: Duration::ZERO,
                error: None,
            };
            steps.push(StepMove {
                step,
                settled_by_query: false,
                mv: choice.mv,
            });
        }
        Ok(())
    }

    /// Carries out `action` once and, when its outcome is unknown, asks for the truth.
    /// `None` when the instance stopped meanwhile (it then writes nothing).
    async fn attempt(&self, action: Action, row: &PaymentRow) -> Option<(Attempt, bool)> {
        let mut attempt = self.downstream.perform(action, row).await;
        let mut settled_by_query = false;
        if attempt.outcome == Outcome::Unknown {
            metrics::unknown_outcome(action);
            if let Some(truth) = self.downstream.probe(action, row).await {
                settled_by_query = truth.outcome != Outcome::Unknown;
                let call_error = attempt.error.take().unwrap_or_default();
                attempt = Attempt {
                    error: Some(format!(
                        "call: {call_error}; probe: {}",
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
        self.is_alive().then_some((attempt, settled_by_query))
    }

    /// [`choose`] for an attempt, with the attention it calls for logged.
    fn choose_after(
        &self,
        row: &PaymentRow,
        at: Position,
        action: Action,
        attempt: &Attempt,
        attempts: i32,
        inline_retries: u32,
    ) -> Result<Choice> {
        let choice = choose(Situation {
            at,
            outcome: attempt.outcome,
            attempts,
            inline_retries,
            code: attempt.code.as_deref().and_then(FailureCode::parse),
            jitter_seed: rand::random(),
        })
        .map_err(|refused| Breach::IllegalMove {
            payment: row.id,
            refused,
        })?;
        match choice.attention {
            Some(Attention::AttemptsExhausted) => {
                metrics::attention(Attention::AttemptsExhausted.as_str());
                tracing::warn!(payment_id = %row.id, %action, attempts = choice.mv.attempts, "attempts exhausted; payment needs an operator");
            }
            Some(Attention::DefiniteRejection) => {
                metrics::attention(Attention::DefiniteRejection.as_str());
                tracing::error!(payment_id = %row.id, %action, error = ?attempt.error, "no safe automatic move; payment needs an operator");
            }
            None => {}
        }
        Ok(choice)
    }

    /// Drives a payment this instance holds the lease on until it settles, waits for a
    /// retry, needs an operator, or the lease is lost. Returns the last row it saw.
    pub async fn drive(&self, row: PaymentRow) -> Result<PaymentRow> {
        self.drive_answering(row, None).await
    }

    /// [`Self::drive`] for a request that waits on it: the move that settles the payment
    /// also stores the request's answer under its key, if the slot is still open then.
    #[tracing::instrument(name = "drive", skip_all, fields(payment_id = %row.id, trace_id = tracing::field::Empty))]
    pub async fn drive_answering(
        &self,
        mut row: PaymentRow,
        slot: Option<AnswerSlot>,
    ) -> Result<PaymentRow> {
        paysaga_common::telemetry::record_trace_id(&tracing::Span::current());
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
            let Some((attempt, settled_by_query)) = self.attempt(action, &row).await else {
                return Ok(row);
            };
            let choice =
                self.choose_after(&row, pos, action, &attempt, row.attempts, inline_retries)?;
            if choice.pause.is_some() {
                inline_retries += 1;
                pause = choice.pause;
            }
            let carry_on = deferrable(action, &attempt, &choice);
            let mut steps = vec![StepMove {
                step: step_record(action, &row, &attempt),
                settled_by_query,
                mv: choice.mv,
            }];
            // A debit that succeeded is not recorded on its own: the confirm follows at
            // once and both steps commit in one record. Safe because both calls are
            // keyed: a crash in between leaves the payment at the debit, and the rerun
            // gets the same answers (the debit replayed, the confirm repeated).
            if let Some(next) = carry_on {
                let at = steps[0].mv.to;
                let Some((attempt, settled_by_query)) = self.attempt(next, &row).await else {
                    return Ok(row);
                };
                let choice = self.choose_after(&row, at, next, &attempt, 0, inline_retries)?;
                if choice.pause.is_some() {
                    inline_retries += 1;
                    pause = choice.pause;
                }
                steps.push(StepMove {
                    step: step_record(next, &row, &attempt),
                    settled_by_query,
                    mv: choice.mv,
                });
            }
            self.chain_local_steps(row.id, &mut steps)?;
            let mut recording =
                store::Recording::new(&row, self.instance, self.lease, steps.clone());
            let settles = steps
                .last()
                .is_some_and(|s| s.mv.to.pending().is_none() && s.mv.to.state().is_terminal());
            let mut writing = None;
            if let Some((slot, w)) = slot
                .as_ref()
                .filter(|_| settles)
                .and_then(|s| Some((s, s.take()?)))
            {
                recording = recording.answering(&row, slot)?;
                writing = Some(w);
            }
            match self.writes.record(recording).await? {
                Some(store::Recorded {
                    row: moved,
                    answered,
                }) => {
                    if let (Some(w), Some(body)) = (writing, answered) {
                        w.stored(body);
                    }
                    let mut from = row.state;
                    for s in &steps {
                        if s.mv.to.state() != from {
                            metrics::transition(s.mv.to.state());
                        }
                        from = s.mv.to.state();
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use workflows::State;

    use super::*;

    fn at(state: State, pending: Option<Action>) -> Position {
        Position::new(state, pending).expect("reachable")
    }

    fn situation(at: Position, outcome: Outcome) -> Situation {
        Situation {
            at,
            outcome,
            attempts: 0,
            inline_retries: 0,
            code: None,
            jitter_seed: 7,
        }
    }

    /// A move forward: due at once while work is left, lease kept exactly then.
    fn forward(to: Position) -> Choice {
        Choice {
            mv: Move {
                to,
                attempts: 0,
                next_attempt_in: to.pending().map(|_| Duration::ZERO),
                needs_attention: false,
                keep_lease: to.pending().is_some(),
                failure_code: None,
            },
            pause: None,
            attention: None,
        }
    }

    #[test]
    fn every_definite_outcome_of_every_position() {
        use Action as A;
        use Outcome::{Rejected as R, Succeeded as S};
        use State as St;
        let cases = [
            (
                at(St::Processing, Some(A::Debit)),
                S,
                Some(forward(at(St::AccountDebited, Some(A::Confirm)))),
            ),
            (
                at(St::Processing, Some(A::Debit)),
                R,
                Some(forward(at(St::Failed, Some(A::CancelReservation)))),
            ),
            (
                at(St::AccountDebited, Some(A::Confirm)),
                S,
                Some(forward(at(St::OrderConfirmed, Some(A::Complete)))),
            ),
            (
                at(St::AccountDebited, Some(A::Confirm)),
                R,
                Some(forward(at(St::RefundProcessing, Some(A::Refund)))),
            ),
            (
                at(St::OrderConfirmed, Some(A::Complete)),
                S,
                Some(forward(at(St::Completed, None))),
            ),
            (at(St::OrderConfirmed, Some(A::Complete)), R, None),
            (
                at(St::Failed, Some(A::CancelReservation)),
                S,
                Some(forward(at(St::Failed, None))),
            ),
            (
                at(St::Failed, Some(A::CancelReservation)),
                R,
                Some(forward(at(St::Failed, None))),
            ),
            (
                at(St::RefundProcessing, Some(A::CancelOrder)),
                S,
                Some(forward(at(St::RefundProcessing, Some(A::Refund)))),
            ),
            (
                at(St::RefundProcessing, Some(A::CancelOrder)),
                R,
                Some(forward(at(St::Completed, None))),
            ),
            (
                at(St::RefundProcessing, Some(A::Refund)),
                S,
                Some(forward(at(St::Refunded, None))),
            ),
        ];
        for (from, outcome, expected) in cases {
            assert_eq!(
                choose(situation(from, outcome)).ok(),
                expected,
                "{from:?} {outcome}"
            );
        }
        let refund = at(St::RefundProcessing, Some(A::Refund));
        let mut s = situation(refund, R);
        s.attempts = 3;
        assert_eq!(
            choose(s).expect("legal"),
            Choice {
                mv: Move {
                    to: refund,
                    attempts: 3,
                    next_attempt_in: None,
                    needs_attention: true,
                    keep_lease: false,
                    failure_code: None,
                },
                pause: None,
                attention: Some(Attention::DefiniteRejection),
            }
        );
    }

    #[test]
    fn settled_positions_and_odd_local_outcomes_are_refused() {
        for from in Position::REACHABLE.into_iter().filter(|p| p.is_settled()) {
            for outcome in Outcome::ALL {
                assert!(
                    choose(situation(from, outcome)).is_err(),
                    "{from:?} {outcome}"
                );
            }
        }
        let completing = at(State::OrderConfirmed, Some(Action::Complete));
        assert!(choose(situation(completing, Outcome::Unknown)).is_err());
    }

    #[test]
    fn only_a_move_into_failed_keeps_the_downstream_code() {
        let mut s = situation(Position::start(), Outcome::Rejected);
        s.code = Some(FailureCode::InsufficientFunds);
        assert_eq!(
            choose(s).expect("legal").mv.failure_code,
            Some(FailureCode::InsufficientFunds)
        );
        let mut s = situation(
            at(State::AccountDebited, Some(Action::Confirm)),
            Outcome::Rejected,
        );
        s.code = Some(FailureCode::ReservationNotFound);
        assert_eq!(choose(s).expect("legal").mv.failure_code, None);
    }

    #[test]
    fn unknown_outcomes_back_off_inline_then_through_recovery_then_to_an_operator() {
        let remote = Position::REACHABLE
            .into_iter()
            .filter(|p| p.pending().is_some_and(Action::is_remote));
        for from in remote {
            let policy = RetryPolicy::for_action(from.pending().expect("pending"));
            // The first backoff of every remote action is short: waited out, lease held.
            let first = choose(situation(from, Outcome::Unknown)).expect("legal");
            assert_eq!((first.mv.to, first.mv.attempts), (from, 1), "{from:?}");
            assert!(first.pause.is_some_and(|p| p <= INLINE_RETRY_MAX));
            assert_eq!(first.pause, first.mv.next_attempt_in);
            assert!(first.mv.keep_lease && !first.mv.needs_attention);
            assert_eq!(first.attention, None);

            // The drive's inline budget spent: recovery takes it, lease let go.
            let mut s = situation(from, Outcome::Unknown);
            s.inline_retries = INLINE_RETRIES;
            let spent = choose(s).expect("legal");
            assert_eq!(spent.pause, None);
            assert!(spent.mv.next_attempt_in.is_some() && !spent.mv.keep_lease);

            // A long backoff is never waited out inline.
            let mut s = situation(from, Outcome::Unknown);
            s.attempts = 5;
            let long = choose(s).expect("legal");
            assert!(long
                .mv
                .next_attempt_in
                .is_some_and(|d| d > INLINE_RETRY_MAX));
            assert_eq!((long.pause, long.mv.keep_lease), (None, false));

            // The last attempt: no more scheduling, an operator is needed.
            let mut s = situation(from, Outcome::Unknown);
            s.attempts = i32::try_from(policy.max_attempts).expect("small") - 1;
            let last = choose(s).expect("legal");
            assert_eq!(last.mv.attempts, s.attempts + 1);
            assert_eq!(last.mv.next_attempt_in, None);
            assert!(last.mv.needs_attention && !last.mv.keep_lease);
            assert_eq!(last.attention, Some(Attention::AttemptsExhausted));
        }
    }

    proptest! {
        #[test]
        fn choices_are_deterministic_and_consistent(
            from in prop::sample::select(Position::REACHABLE.to_vec()),
            outcome in prop::sample::select(Outcome::ALL.to_vec()),
            attempts in 0i32..40,
            inline_retries in 0u32..4,
            jitter_seed in any::<u64>(),
        ) {
            let s = Situation { at: from, outcome, attempts, inline_retries, code: Some(FailureCode::AccountNotMember), jitter_seed };
            let choice = choose(s);
            prop_assert_eq!(&choice, &choose(s));
            prop_assert_eq!(choice.is_ok(), transition(from, outcome).is_ok());
            if let Ok(c) = choice {
                prop_assert_eq!(c.mv.needs_attention, c.attention.is_some());
                prop_assert!(!c.mv.keep_lease || (c.mv.to.pending().is_some() && !c.mv.needs_attention));
                prop_assert!(c.pause.is_none() || (c.mv.keep_lease && c.pause == c.mv.next_attempt_in));
                prop_assert!(c.pause.is_none_or(|p| p <= INLINE_RETRY_MAX));
                prop_assert!(c.pause.is_none() || inline_retries < INLINE_RETRIES);
                prop_assert!(c.mv.failure_code.is_none() || c.mv.to.state() == State::Failed);
                prop_assert!(c.mv.next_attempt_in.is_none() || !c.mv.needs_attention);
            }
        }
    }
}
