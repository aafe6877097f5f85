//! A buyer going through a drop over HTTP only, the way a well-behaved client would:
//! ask the gate for a pass, reserve with it, pay with an Idempotency-Key, and follow
//! the payment until it is final. Unknown outcomes (timeouts, 5xx, dropped connections)
//! are retried with the same pass or the same key, never turned into a new attempt.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use paysaga_common::client::{Answer, CallError};
use paysaga_contracts::gate::client::GateClient;
use paysaga_contracts::orchestrator::{
    api::{CreatePayment, Payment},
    client::{OrchestratorClient, PaymentAnswer},
};
use paysaga_contracts::order::{api::Reservation, client::OrderClient};
use uuid::Uuid;

/// Where the services are, as a buyer reaches them.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub member: String,
    pub gate: String,
    pub order: String,
    pub account: String,
    pub orchestrator: String,
}

impl Endpoints {
    /// The URLs of a running set of services (or of a [`crate::Stack`]).
    pub fn from_wiring(w: &crate::Wiring) -> Self {
        use crate::ServiceKind as K;
        Self {
            member: w.url(K::Member),
            gate: w.url(K::Gate),
            order: w.url(K::Order),
            account: w.url(K::Account),
            orchestrator: w.url(K::Orchestrator),
        }
    }
}

/// A member with an account and a buyer token.
#[derive(Debug, Clone)]
pub struct Buyer {
    pub member: String,
    pub account_id: i64,
    /// Opening balance, minor units.
    pub balance: i64,
    pub token: String,
}

/// Which request a buyer was making.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Step {
    Pass,
    Reserve,
    Pay,
    Follow,
}

/// How a buyer's attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Outcome {
    /// The gate said SOLD_OUT: the order service never saw this buyer.
    SoldOutAtGate,
    /// The gate let the buyer through, the order service had no unit left.
    SoldOutAtOrder,
    /// Paid: the payment is COMPLETED.
    Completed,
    /// The payment FAILED (e.g. insufficient funds): no money moved.
    Failed { code: Option<String> },
    /// The payment was REFUNDED (e.g. the reservation expired before the order was confirmed).
    Refunded,
    /// A definite rejection other than sold out (e.g. paying for an expired reservation).
    Rejected {
        step: Step,
        status: u16,
        code: String,
    },
    /// No definite answer within the driver's patience: a bug or an unhealed fault.
    Unanswered { step: Step, reason: String },
}

impl Outcome {
    pub fn is_sold_out(&self) -> bool {
        matches!(self, Outcome::SoldOutAtGate | Outcome::SoldOutAtOrder)
    }
    pub fn is_definite(&self) -> bool {
        !matches!(self, Outcome::Unanswered { .. })
    }
}

/// One buyer's attempt at a drop.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Attempt {
    pub member: String,
    pub outcome: Outcome,
    pub pass_id: Option<Uuid>,
    pub reservation_id: Option<Uuid>,
    pub payment_id: Option<Uuid>,
    /// The payment's final state as the API reported it.
    pub payment: Option<Payment>,
    /// From the first request until the buyer had a definite answer (or gave up).
    pub time_to_answer: Duration,
    /// Requests retried after an unknown outcome.
    pub retries: u32,
}

/// How patient a buyer is.
#[derive(Debug, Clone)]
pub struct Patience {
    /// Retries of one request after an unknown outcome (timeout, 5xx, connection error).
    pub retries: u32,
    /// Pause between retries (doubled each time, at most 2 s).
    pub backoff: Duration,
    /// Interval between polls of a running payment.
    pub poll: Duration,
    /// How long to follow a payment before reporting it unanswered.
    pub follow_for: Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            retries: 20,
            backoff: Duration::from_millis(50),
            poll: Duration::from_millis(50),
            follow_for: Duration::from_secs(60),
        }
    }
}

/// Drives buyers against one system. Cheap to clone; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct Driver {
    pub endpoints: Endpoints,
    pub http: reqwest::Client,
    /// Per-request timeout.
    pub timeout: Duration,
    pub patience: Patience,
}

enum Step1<T> {
    Done(T),
    End(Outcome),
}

impl Driver {
    /// A driver with a per-request timeout of `timeout`.
    pub fn new(endpoints: Endpoints, timeout: Duration) -> Self {
        Self {
            endpoints,
            http: paysaga_common::client::http_client(timeout),
            timeout,
            patience: Patience::default(),
        }
    }

    pub fn with_patience(mut self, patience: Patience) -> Self {
        self.patience = patience;
        self
    }

    fn gate(&self, buyer: &Buyer) -> GateClient {
        GateClient::with_http(self.http.clone(), &self.endpoints.gate, &buyer.token)
    }

    fn order(&self, buyer: &Buyer) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.endpoints.order, &buyer.token)
    }

    async fn pause(&self, attempt: u32) {
        let factor = 1u32 << attempt.min(6);
        tokio::time::sleep((self.patience.backoff * factor).min(Duration::from_secs(2))).await;
    }

    /// `POST gate /v1/passes`, retried on unknown outcomes.
    pub async fn pass(
        &self,
        buyer: &Buyer,
        product_id: i64,
        retries: &mut u32,
    ) -> Result<paysaga_contracts::gate::api::PassIssued, CallError> {
        let client = self.gate(buyer);
        let mut n = 0;
        loop {
            match client.issue_pass(product_id).await {
                Ok(a) => return Ok(a.body),
                Err(e @ CallError::Unknown { .. }) if n < self.patience.retries => {
                    tracing::debug!(member = %buyer.member, error = %e, "pass: unknown outcome, retrying");
                }
                Err(e) => return Err(e),
            }
            n += 1;
            *retries += 1;
            self.pause(n).await;
        }
    }

    /// `POST order /v1/reservations` with `pass`, retried with the same pass on unknown
    /// outcomes (the order service answers a replay with the same reservation).
    pub async fn reserve(
        &self,
        buyer: &Buyer,
        product_id: i64,
        pass: &str,
        retries: &mut u32,
    ) -> Result<Reservation, CallError> {
        let client = self.order(buyer);
        let mut n = 0;
        loop {
            match client.reserve(product_id, pass).await {
                Ok(a) => return Ok(a.body),
                Err(CallError::Unknown { .. }) if n < self.patience.retries => {}
                Err(e) => return Err(e),
            }
            n += 1;
            *retries += 1;
            self.pause(n).await;
        }
    }

    fn orchestrator(&self, buyer: &Buyer) -> OrchestratorClient {
        OrchestratorClient::new(&self.endpoints.orchestrator, &buyer.token, self.timeout)
    }

    /// One `POST orchestrator /v1/payments` with `idempotency_key` (no retry).
    pub async fn post_payment(
        &self,
        buyer: &Buyer,
        reservation_id: Uuid,
        idempotency_key: &str,
    ) -> Result<PaymentAnswer, CallError> {
        let body = CreatePayment {
            reservation_id,
            account_id: buyer.account_id,
        };
        self.orchestrator(buyer).pay(idempotency_key, &body).await
    }

    /// `GET orchestrator /v1/payments/{id}` as the buyer (no retry).
    pub async fn get_payment(
        &self,
        buyer: &Buyer,
        payment_id: Uuid,
    ) -> Result<Answer<Payment>, CallError> {
        self.orchestrator(buyer).payment(payment_id).await
    }

    /// Pays for a reservation with one Idempotency-Key, retrying the same key on unknown
    /// outcomes and while the first request is still in progress.
    pub async fn pay(
        &self,
        buyer: &Buyer,
        reservation_id: Uuid,
        idempotency_key: &str,
        retries: &mut u32,
    ) -> Result<Payment, CallError> {
        // One client (one connection pool) for every retry of this payment.
        let client = self.orchestrator(buyer);
        let body = CreatePayment {
            reservation_id,
            account_id: buyer.account_id,
        };
        let mut n = 0;
        loop {
            match client.pay(idempotency_key, &body).await {
                Ok(a) => return Ok(a.payment),
                Err(CallError::Rejected {
                    status: 409,
                    ref body,
                }) if body.code == "IDEMPOTENCY_KEY_IN_PROGRESS" && n < self.patience.retries => {}
                Err(CallError::Unknown { .. }) if n < self.patience.retries => {}
                Err(e) => return Err(e),
            }
            n += 1;
            *retries += 1;
            self.pause(n).await;
        }
    }

    /// Polls a payment until it is terminal, or `patience.follow_for` passes.
    pub async fn follow(
        &self,
        buyer: &Buyer,
        payment: Payment,
    ) -> Result<Payment, (Payment, String)> {
        let deadline = Instant::now() + self.patience.follow_for;
        let mut current = payment;
        let mut last_error = String::new();
        // One client for every poll, so polls reuse a connection.
        let client = self.orchestrator(buyer);
        while !current.terminal {
            if Instant::now() >= deadline {
                return Err((
                    current,
                    format!(
                        "not terminal after {:?} ({last_error})",
                        self.patience.follow_for
                    ),
                ));
            }
            tokio::time::sleep(self.patience.poll).await;
            match client.payment(current.id).await {
                Ok(a) => current = a.body,
                Err(e) => last_error = e.to_string(),
            }
        }
        Ok(current)
    }

    /// One buyer's whole attempt: pass, reserve, pay, follow.
    pub async fn buy(&self, buyer: &Buyer, product_id: i64) -> Attempt {
        let start = Instant::now();
        let mut attempt = Attempt {
            member: buyer.member.clone(),
            outcome: Outcome::Unanswered {
                step: Step::Pass,
                reason: String::new(),
            },
            pass_id: None,
            reservation_id: None,
            payment_id: None,
            payment: None,
            time_to_answer: Duration::ZERO,
            retries: 0,
        };
        attempt.outcome = match self.buy_steps(buyer, product_id, &mut attempt).await {
            Step1::Done(outcome) | Step1::End(outcome) => outcome,
        };
        attempt.time_to_answer = start.elapsed();
        attempt
    }

    async fn buy_steps(&self, buyer: &Buyer, product_id: i64, a: &mut Attempt) -> Step1<Outcome> {
        let pass = match self.pass(buyer, product_id, &mut a.retries).await {
            Ok(p) => p,
            Err(e) => return Step1::End(classify(Step::Pass, e, Outcome::SoldOutAtGate)),
        };
        a.pass_id = Some(pass.pass_id);
        let reservation = match self
            .reserve(buyer, product_id, &pass.pass, &mut a.retries)
            .await
        {
            Ok(r) => r,
            Err(e) => return Step1::End(classify(Step::Reserve, e, Outcome::SoldOutAtOrder)),
        };
        a.reservation_id = Some(reservation.id);
        // One key per payment attempt, reused on every retry of it.
        let key = format!("buy-{}", reservation.id);
        let payment = match self.pay(buyer, reservation.id, &key, &mut a.retries).await {
            Ok(p) => p,
            Err(e) => {
                return Step1::End(classify(
                    Step::Pay,
                    e,
                    Outcome::Unanswered {
                        step: Step::Pay,
                        reason: "sold out?".into(),
                    },
                ))
            }
        };
        a.payment_id = Some(payment.id);
        match self.follow(buyer, payment).await {
            Ok(p) => {
                let outcome = payment_outcome(&p);
                a.payment = Some(p);
                Step1::Done(outcome)
            }
            Err((p, reason)) => {
                a.payment = Some(p);
                Step1::End(Outcome::Unanswered {
                    step: Step::Follow,
                    reason,
                })
            }
        }
    }

    /// Runs every buyer through the drop, `concurrency` at a time (all at once if 0),
    /// calling `on_done` as each finishes (e.g. a progress bar).
    pub async fn run_drop(
        &self,
        buyers: &[Buyer],
        product_id: i64,
        concurrency: usize,
        on_done: impl Fn(&Attempt) + Send + Sync,
    ) -> Vec<Attempt> {
        let limit = if concurrency == 0 {
            buyers.len().max(1)
        } else {
            concurrency
        };
        let on_done = Arc::new(on_done);
        // Owned buyers and a cloned driver per attempt keep the stream free of borrowed
        // closure arguments, so a drop can run inside `tokio::spawn`.
        futures::stream::iter(buyers.to_vec())
            .map(move |b| {
                let on_done = on_done.clone();
                let driver = self.clone();
                async move {
                    let a = driver.buy(&b, product_id).await;
                    on_done(&a);
                    a
                }
            })
            .buffer_unordered(limit)
            .collect()
            .await
    }
}

/// The outcome a terminal payment means for its buyer.
pub fn payment_outcome(p: &Payment) -> Outcome {
    match p.state.as_str() {
        "COMPLETED" => Outcome::Completed,
        "FAILED" => Outcome::Failed {
            code: p.failure_code.clone(),
        },
        "REFUNDED" => Outcome::Refunded,
        other => Outcome::Unanswered {
            step: Step::Follow,
            reason: format!("state {other}"),
        },
    }
}

/// A failed call as an outcome: SOLD_OUT becomes `sold_out`, other 4xx a rejection,
/// anything else (retries exhausted on unknown outcomes) unanswered.
fn classify(step: Step, e: CallError, sold_out: Outcome) -> Outcome {
    match e {
        CallError::Rejected { body, .. } if body.code == "SOLD_OUT" => sold_out,
        CallError::Rejected { status, body } => Outcome::Rejected {
            step,
            status,
            code: body.code,
        },
        CallError::Unknown { reason, .. } => Outcome::Unanswered { step, reason },
    }
}
