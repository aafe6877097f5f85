//! A buyer going through a drop over HTTP only, the way a well-behaved client would:
//! ask the gate for a pass, reserve with it, pay with an Idempotency-Key, and follow
//! the payment until it is final. Unknown outcomes (timeouts, 5xx, dropped connections)
//! are retried with the same pass or the same key, never turned into a new attempt.
//!
//! With a [`WaitlistPolicy`] (off by default) a buyer told SOLD_OUT joins the product's
//! waitlist, reads its entry until a unit is offered, takes the offer and pays for it
//! like any reservation; it leaves the line when no unit is held any more (none can
//! come back) or its patience runs out, and is then sold out. An offer it could not
//! take in time sends it back to the sale (and, sold out, to the back of the line); an
//! offer it cannot pay for (refused for funds) it gives up at once, leaving the line so
//! the unit passes to the next in line instead of waiting out the offer's deadline.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use paysaga_common::client::{Answer, CallError};
use paysaga_contracts::gate::client::GateClient;
use paysaga_contracts::orchestrator::{
    api::{CreatePayment, Payment},
    client::{OrchestratorClient, PaymentAnswer},
};
use paysaga_contracts::order::{
    api::{codes, Reservation, WaitlistEntry, WaitlistState},
    client::OrderClient,
};
use rand::Rng;
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
    /// The URLs of the services `w` wires (as buyers and operators reach them: never
    /// through a fault proxy, through HAProxy when there are several instances).
    pub fn from_wiring(w: &paysaga_supervisor::Wiring) -> Self {
        use paysaga_supervisor::ServiceKind as K;
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
    /// Joining, reading or leaving the waitlist.
    Wait,
    /// Taking an offered unit as a reservation.
    Take,
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
    /// The buyer's time in the waitlist, if a SOLD_OUT sent it there (only for a driver
    /// with a [`WaitlistPolicy`]).
    pub waitlist: Option<Waitlisted>,
}

impl Attempt {
    /// `member`'s attempt before its first request: no answer yet, nothing held.
    pub fn unanswered(member: &str) -> Attempt {
        Attempt {
            member: member.to_owned(),
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
            waitlist: None,
        }
    }
}

impl Attempt {
    /// Whether the buyer went to the waitlist and took an offered unit (whatever the
    /// payment for it then did).
    pub fn took_offer(&self) -> bool {
        self.waitlist
            .as_ref()
            .is_some_and(|w| w.end == WaitEnd::Taken)
    }

    /// Paid (COMPLETED) for a unit offered through the waitlist.
    pub fn via_waitlist(&self) -> bool {
        self.outcome == Outcome::Completed && self.took_offer()
    }
}

/// Waiting in a product's line after SOLD_OUT, for a driver built with
/// [`Driver::with_waitlist`].
#[derive(Debug, Clone)]
pub struct WaitlistPolicy {
    /// Interval between reads of the buyer's entry near the head of the line. A buyer
    /// further back reads less often (up to four times less), since several units must
    /// come back before its turn; every interval is jittered by ±25 % so a crowd that
    /// joined together does not poll in step.
    pub poll: Duration,
    /// The longest a buyer waits, from its first SOLD_OUT, before it leaves the line.
    pub wait_for: Duration,
}

impl Default for WaitlistPolicy {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(250),
            wait_for: Duration::from_secs(60),
        }
    }
}

/// Positions per step of the slower polling of a buyer far back in the line.
const LINE_STRIDE: u32 = 50;

impl WaitlistPolicy {
    /// How long to wait before reading the entry again, at `position` in the line.
    fn interval(&self, position: Option<i64>) -> Duration {
        let behind = u32::try_from(position.unwrap_or(1).max(1)).unwrap_or(u32::MAX);
        let base = self.poll * (1 + (behind - 1) / LINE_STRIDE).min(4);
        base.mul_f64(rand::thread_rng().gen_range(0.75..=1.25))
    }
}

/// What the waitlist did for one buyer told SOLD_OUT.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Waitlisted {
    /// The SOLD_OUT that sent the buyer to the line (at the gate or the order service);
    /// the attempt's outcome when the wait brings no unit.
    pub told: Outcome,
    /// The buyer's entry, once a join was accepted.
    pub entry_id: Option<Uuid>,
    /// The unit offered to the buyer, if one was.
    pub offer_id: Option<Uuid>,
    /// Times the product showed units on sale when the buyer, refused NOT_SOLD_OUT
    /// before, was told SOLD_OUT again (passes not used yet, a return the gate had not
    /// counted yet): it went back to the sale instead of joining again.
    pub on_sale_seen: u32,
    /// Joins refused with NOT_SOLD_OUT (units on sale after all): the buyer went back
    /// to the sale.
    pub not_sold_out: u32,
    /// Reads of the entry after the join.
    pub polls: u32,
    /// Offers that lapsed before the buyer took them (a fault kept it away past the
    /// deadline; the unit went to the next in line): each time, with patience left, it
    /// went back to the sale and, told SOLD_OUT, joined the line again.
    pub lapsed: u32,
    /// From the first SOLD_OUT until the wait ended.
    pub waited: Duration,
    pub end: WaitEnd,
}

/// How a buyer's wait ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum WaitEnd {
    /// Not ended: the attempt stopped without a definite answer.
    Waiting,
    /// The offer became the buyer's reservation; the attempt's outcome is its payment's.
    Taken,
    /// Sent back to the sale (units on sale, or NOT_SOLD_OUT), the buyer reserved a
    /// unit there.
    ReservedOnSale,
    /// A definite refusal to join: `NOT_SOLD_OUT` (units still on sale when the buyer's
    /// patience ran out), `MEMBER_LIMIT_REACHED`.
    Refused { code: String },
    /// A definite refusal to take the offer (`INSUFFICIENT_FUNDS`, `NO_ACCOUNT`,
    /// `MEMBER_LIMIT_REACHED`): the buyer left the line, its offer passing to the next
    /// in line; the attempt's outcome is that refusal.
    TakeRefused { code: String },
    /// Left while WAITING once no unit was held by a reservation or an offer: none
    /// could come back.
    NothingHeld,
    /// Left while WAITING, or gave up while units stayed on sale, when
    /// [`WaitlistPolicy::wait_for`] ran out.
    OutOfPatience,
    /// The entry or its offer ended without a unit for the buyer: the entry's state
    /// (`EXPIRED`, `SKIPPED`, `LEFT`) or the refusal of the take (`OFFER_EXPIRED`,
    /// `OFFER_RELEASED`). A lapsed offer (`EXPIRED`, `OFFER_EXPIRED`) ends the wait only
    /// once the buyer's patience is out; before, the buyer goes back to the sale
    /// ([`Waitlisted::lapsed`]) and this records how its next try ends.
    Ended { state: String },
}

impl Waitlisted {
    fn new(told: Outcome) -> Self {
        Self {
            told,
            entry_id: None,
            offer_id: None,
            on_sale_seen: 0,
            not_sold_out: 0,
            polls: 0,
            lapsed: 0,
            waited: Duration::ZERO,
            end: WaitEnd::Waiting,
        }
    }
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
    /// Whether (and how) a buyer told SOLD_OUT waits in the product's waitlist; `None`
    /// (the default): SOLD_OUT is the buyer's answer.
    pub waitlist: Option<WaitlistPolicy>,
    /// When each unknown outcome (timeout, 5xx, dropped connection) happened, across
    /// every clone of this driver: the drop's error rate over time.
    pub errors: ErrorLog,
}

/// When requests ended in an unknown outcome. Cheap to clone; clones share the log.
#[derive(Debug, Clone, Default)]
pub struct ErrorLog(Arc<Mutex<Vec<Instant>>>);

impl ErrorLog {
    fn note(&self) {
        if let Ok(mut v) = self.0.lock() {
            v.push(Instant::now());
        }
    }

    /// Every unknown outcome so far, in the order they happened.
    pub fn times(&self) -> Vec<Instant> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The last unknown outcome so far, if any.
    pub fn last(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|v| v.last().copied())
    }
}

/// How the sale part of an attempt (pass, reservation) ended.
enum Sale {
    Reserved(Uuid),
    SoldOut(Outcome),
    End(Outcome),
}

impl Sale {
    fn ended(outcome: Outcome) -> Self {
        if outcome.is_sold_out() {
            Sale::SoldOut(outcome)
        } else {
            Sale::End(outcome)
        }
    }
}

/// How a wait in the line ended.
enum Line {
    /// The buyer's reservation made from its offer: pay for it.
    Reservation(Uuid),
    /// Refused with NOT_SOLD_OUT with patience left: units are on sale, buy one.
    OnSale,
    /// The attempt's final outcome.
    Done(Outcome),
}

impl Driver {
    /// A driver with a per-request timeout of `timeout`.
    pub fn new(endpoints: Endpoints, timeout: Duration) -> Self {
        Self {
            endpoints,
            http: paysaga_common::client::http_client(timeout),
            timeout,
            patience: Patience::default(),
            waitlist: None,
            errors: ErrorLog::default(),
        }
    }

    /// Buyers told SOLD_OUT wait in the product's waitlist under `policy`.
    pub fn with_waitlist(mut self, policy: WaitlistPolicy) -> Self {
        self.waitlist = Some(policy);
        self
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
        let client = &self.gate(buyer);
        self.retrying(
            retries,
            move || async move { client.issue_pass(product_id).await.map(|a| a.body) },
            |e| {
                let again = self.unknown_noted(e);
                if again {
                    tracing::debug!(member = %buyer.member, error = %e, "pass: unknown outcome, retrying");
                }
                again
            },
        )
        .await
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
        self.retried(retries, || client.reserve(product_id, pass))
            .await
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
        let client = &client;
        let body = &CreatePayment {
            reservation_id,
            account_id: buyer.account_id,
        };
        self.retrying(
            retries,
            move || async move { client.pay(idempotency_key, body).await.map(|a| a.payment) },
            |e| match e {
                CallError::Rejected { status: 409, body } => {
                    body.code == "IDEMPOTENCY_KEY_IN_PROGRESS"
                }
                _ => self.unknown_noted(e),
            },
        )
        .await
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
                Err(e) => {
                    self.unknown_noted(&e);
                    last_error = e.to_string();
                }
            }
        }
        Ok(current)
    }

    /// One buyer's whole attempt: pass, reserve, pay, follow (and, with a waitlist
    /// policy, wait in line after SOLD_OUT).
    pub async fn buy(&self, buyer: &Buyer, product_id: i64) -> Attempt {
        let start = Instant::now();
        let mut attempt = Attempt::unanswered(&buyer.member);
        attempt.outcome = self.buy_steps(buyer, product_id, &mut attempt).await;
        attempt.time_to_answer = start.elapsed();
        attempt
    }

    async fn buy_steps(&self, buyer: &Buyer, product_id: i64, a: &mut Attempt) -> Outcome {
        match self.reservation(buyer, product_id, a).await {
            Ok(id) => self.pay_for(buyer, id, a).await,
            Err(outcome) => outcome,
        }
    }

    /// The buyer's reservation, recorded in `a`: made with a pass, or, with a waitlist
    /// policy, after SOLD_OUT, taken from the unit offered to the buyer in the product's
    /// line. `Err`: the attempt's outcome without one (sold out, refused, unanswered).
    pub async fn reservation(
        &self,
        buyer: &Buyer,
        product_id: i64,
        a: &mut Attempt,
    ) -> Result<Uuid, Outcome> {
        let id = self.reservation_steps(buyer, product_id, a).await?;
        a.reservation_id = Some(id);
        Ok(id)
    }

    async fn reservation_steps(
        &self,
        buyer: &Buyer,
        product_id: i64,
        a: &mut Attempt,
    ) -> Result<Uuid, Outcome> {
        let mut first_sold_out: Option<Instant> = None;
        loop {
            let told = match self.sale(buyer, product_id, a).await {
                Sale::Reserved(id) => {
                    if let (Some(w), Some(since)) = (a.waitlist.as_mut(), first_sold_out) {
                        w.end = WaitEnd::ReservedOnSale;
                        w.waited = since.elapsed();
                    }
                    return Ok(id);
                }
                Sale::End(outcome) => return Err(outcome),
                Sale::SoldOut(told) => told,
            };
            let Some(policy) = self.waitlist.clone() else {
                return Err(told);
            };
            let since = *first_sold_out.get_or_insert_with(Instant::now);
            a.waitlist
                .get_or_insert_with(|| Waitlisted::new(told.clone()))
                .told = told.clone();
            let line = self
                .wait_in_line(buyer, product_id, &policy, since + policy.wait_for, a)
                .await;
            if let Some(w) = a.waitlist.as_mut() {
                w.waited = since.elapsed();
            }
            match line {
                Line::Reservation(id) => return Ok(id),
                Line::Done(outcome) => return Err(outcome),
                Line::OnSale => tokio::time::sleep(policy.interval(None)).await,
            }
        }
    }

    /// A pass, then a reservation with it.
    async fn sale(&self, buyer: &Buyer, product_id: i64, a: &mut Attempt) -> Sale {
        let pass = match self.pass(buyer, product_id, &mut a.retries).await {
            Ok(p) => p,
            Err(e) => return Sale::ended(classify(Step::Pass, e, Outcome::SoldOutAtGate)),
        };
        a.pass_id = Some(pass.pass_id);
        match self
            .reserve(buyer, product_id, &pass.pass, &mut a.retries)
            .await
        {
            Ok(r) => Sale::Reserved(r.id),
            Err(e) => Sale::ended(classify(Step::Reserve, e, Outcome::SoldOutAtOrder)),
        }
    }

    /// Pays for the reservation and follows the payment to its end.
    async fn pay_for(&self, buyer: &Buyer, reservation_id: Uuid, a: &mut Attempt) -> Outcome {
        a.reservation_id = Some(reservation_id);
        // One key per payment attempt, reused on every retry of it.
        let key = format!("buy-{reservation_id}");
        let payment = match self.pay(buyer, reservation_id, &key, &mut a.retries).await {
            Ok(p) => p,
            Err(e) => {
                return classify(
                    Step::Pay,
                    e,
                    Outcome::Unanswered {
                        step: Step::Pay,
                        reason: "sold out?".into(),
                    },
                )
            }
        };
        a.payment_id = Some(payment.id);
        match self.follow(buyer, payment).await {
            Ok(p) => {
                let outcome = payment_outcome(&p);
                a.payment = Some(p);
                outcome
            }
            Err((p, reason)) => {
                a.payment = Some(p);
                Outcome::Unanswered {
                    step: Step::Follow,
                    reason,
                }
            }
        }
    }

    /// One order-service call, asked again with the same arguments while its outcome is
    /// unknown (every waitlist call is idempotent: a join finds the live entry, a take
    /// the reservation it made, a second leave finds no live entry).
    async fn retried<T, F, Fut>(&self, retries: &mut u32, mut call: F) -> Result<T, CallError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Answer<T>, CallError>>,
    {
        self.retrying(
            retries,
            || {
                let answer = call();
                async move { answer.await.map(|a| a.body) }
            },
            |e| self.unknown_noted(e),
        )
        .await
    }

    /// Calls `call` again, after a growing pause, while `again` takes its error for one
    /// worth asking again about and the buyer's patience lasts; counts each retry.
    async fn retrying<T, F, Fut>(
        &self,
        retries: &mut u32,
        mut call: F,
        mut again: impl FnMut(&CallError) -> bool,
    ) -> Result<T, CallError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let mut n = 0;
        loop {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) if n < self.patience.retries && again(&e) => {}
                Err(e) => return Err(e),
            }
            n += 1;
            *retries += 1;
            self.pause(n).await;
        }
    }

    /// Whether `e` is an unknown outcome (worth asking again), noted in the error log.
    fn unknown_noted(&self, e: &CallError) -> bool {
        let unknown = matches!(e, CallError::Unknown { .. });
        if unknown {
            self.errors.note();
        }
        unknown
    }

    /// Joins the product's waitlist and waits until a unit is offered and taken, the
    /// entry ends without one, or the buyer gives up (nothing held, or `deadline`).
    async fn wait_in_line(
        &self,
        buyer: &Buyer,
        product_id: i64,
        policy: &WaitlistPolicy,
        deadline: Instant,
        a: &mut Attempt,
    ) -> Line {
        let order = self.order(buyer);
        let Some(told) = a.waitlist.as_ref().map(|w| w.told.clone()) else {
            return Line::Done(Outcome::Unanswered {
                step: Step::Wait,
                reason: "waiting without a record".into(),
            });
        };
        // Once refused NOT_SOLD_OUT, join again only when no unit is on sale any more
        // (passes used, returns counted by the gate): every join takes the product's
        // waitlist lock, this read none. Until then, the sale again.
        let refused_before = a.waitlist.as_ref().is_some_and(|w| w.not_sold_out > 0);
        let read = if refused_before {
            order.product(product_id).await.ok()
        } else {
            None
        };
        if let Some(p) = read {
            if p.body.available > 0 {
                if let Some(w) = a.waitlist.as_mut() {
                    w.on_sale_seen += 1;
                }
                if Instant::now() < deadline {
                    return Line::OnSale;
                }
                return end_wait(a, WaitEnd::OutOfPatience, Line::Done(told));
            }
        }
        let joined = self
            .retried(&mut a.retries, || order.join_waitlist(product_id))
            .await;
        let mut entry = match joined {
            Ok(e) => e,
            Err(CallError::Rejected { status: 409, body }) => {
                let on_sale = body.code == codes::NOT_SOLD_OUT;
                if let Some(w) = a.waitlist.as_mut() {
                    if on_sale {
                        w.not_sold_out += 1;
                    }
                    w.end = WaitEnd::Refused { code: body.code };
                }
                return if on_sale && Instant::now() < deadline {
                    Line::OnSale
                } else {
                    Line::Done(told)
                };
            }
            Err(e) => return Line::Done(classify(Step::Wait, e, told)),
        };
        if let Some(w) = a.waitlist.as_mut() {
            w.entry_id = Some(entry.id);
            w.end = WaitEnd::Waiting;
        }
        loop {
            match entry.state {
                WaitlistState::Offered => {
                    let Some(offer) = entry.offer.as_ref().map(|o| o.offer_id) else {
                        return Line::Done(Outcome::Unanswered {
                            step: Step::Wait,
                            reason: "an OFFERED entry without its offer".into(),
                        });
                    };
                    if let Some(w) = a.waitlist.as_mut() {
                        w.offer_id = Some(offer);
                    }
                    let taken = self
                        .retried(&mut a.retries, || order.take_offer(offer))
                        .await;
                    return match taken {
                        Ok(r) => end_wait(a, WaitEnd::Taken, Line::Reservation(r.id)),
                        Err(CallError::Rejected { status: 409, body })
                            if body.code == codes::OFFER_EXPIRED =>
                        {
                            lapsed(a, deadline, body.code, told)
                        }
                        Err(CallError::Rejected { status: 409, body })
                            if body.code == codes::OFFER_RELEASED =>
                        {
                            let end = WaitEnd::Ended { state: body.code };
                            end_wait(a, end, Line::Done(told))
                        }
                        // Refused for good (funds, account, the member's limit): the
                        // offer would stay this buyer's until its deadline, holding the
                        // unit from everyone behind; leaving hands it on now.
                        Err(CallError::Rejected { status, body }) => {
                            let refused = Outcome::Rejected {
                                step: Step::Take,
                                status,
                                code: body.code.clone(),
                            };
                            let why = WaitEnd::TakeRefused { code: body.code };
                            self.leave(&order, product_id, why, refused, a).await
                        }
                        Err(e) => Line::Done(classify(Step::Take, e, told)),
                    };
                }
                WaitlistState::Taken => {
                    // A take whose answer was lost: the reservation it made.
                    return match entry.offer.as_ref().and_then(|o| o.reservation_id) {
                        Some(id) => end_wait(a, WaitEnd::Taken, Line::Reservation(id)),
                        None => Line::Done(Outcome::Unanswered {
                            step: Step::Wait,
                            reason: "a TAKEN entry without its reservation".into(),
                        }),
                    };
                }
                WaitlistState::Expired => {
                    return lapsed(a, deadline, entry.state.as_str().to_owned(), told);
                }
                WaitlistState::Skipped | WaitlistState::Left => {
                    let end = WaitEnd::Ended {
                        state: entry.state.as_str().to_owned(),
                    };
                    return end_wait(a, end, Line::Done(told));
                }
                WaitlistState::Waiting => {
                    if Instant::now() >= deadline {
                        return self
                            .leave(&order, product_id, WaitEnd::OutOfPatience, told, a)
                            .await;
                    }
                    // Read after the entry: an offer made to this buyer in between
                    // shows here as a unit held, so the buyer never leaves with one.
                    // A unit on sale while the buyer waits is promised to a pass in
                    // flight (or about to be offered): it may still come back.
                    if let Ok(p) = order.product(product_id).await {
                        if p.body.reserved + p.body.offered + p.body.available == 0 {
                            return self
                                .leave(&order, product_id, WaitEnd::NothingHeld, told, a)
                                .await;
                        }
                    }
                    tokio::time::sleep(policy.interval(entry.position)).await;
                }
            }
            entry = match self.read_entry(&order, product_id, deadline).await {
                Ok(e) => e,
                Err(e) => return Line::Done(classify(Step::Wait, e, told)),
            };
            if let Some(w) = a.waitlist.as_mut() {
                w.polls += 1;
            }
        }
    }

    /// The buyer's entry, read again while the answer is unknown until a while past
    /// `deadline` (the buyer still has to leave the line then).
    async fn read_entry(
        &self,
        order: &OrderClient,
        product_id: i64,
        deadline: Instant,
    ) -> Result<WaitlistEntry, CallError> {
        let give_up = deadline + self.patience.follow_for;
        let mut n = 0;
        loop {
            match order.waitlist_entry(product_id).await {
                Ok(a) => return Ok(a.body),
                Err(e @ CallError::Unknown { .. }) if Instant::now() >= give_up => return Err(e),
                Err(CallError::Unknown { .. }) => {}
                Err(e) => return Err(e),
            }
            n += 1;
            self.pause(n).await;
        }
    }

    /// Leaves the line (an offer made in the meantime passes to the next in line).
    async fn leave(
        &self,
        order: &OrderClient,
        product_id: i64,
        why: WaitEnd,
        told: Outcome,
        a: &mut Attempt,
    ) -> Line {
        let left = self
            .retried(&mut a.retries, || order.leave_waitlist(product_id))
            .await;
        match left {
            Ok(_) => end_wait(a, why, Line::Done(told)),
            // No live entry any more: it ended on its own (an offer expired, a skip).
            Err(CallError::Rejected { status: 404, body })
                if body.code == codes::NOT_ON_WAITLIST =>
            {
                let state = match order.waitlist_entry(product_id).await {
                    Ok(e) => e.body.state.as_str().to_owned(),
                    Err(_) => body.code,
                };
                end_wait(a, WaitEnd::Ended { state }, Line::Done(told))
            }
            Err(e) => Line::Done(classify(Step::Wait, e, told)),
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

/// An offer that lapsed before the buyer took it: back to the sale while patience
/// lasts (sold out there, the buyer joins the line again, at its back), else `told`.
fn lapsed(a: &mut Attempt, deadline: Instant, state: String, told: Outcome) -> Line {
    let again = Instant::now() < deadline;
    if let Some(w) = a.waitlist.as_mut() {
        w.end = WaitEnd::Ended { state };
        w.lapsed += u32::from(again);
    }
    if again {
        Line::OnSale
    } else {
        Line::Done(told)
    }
}

/// Records how the buyer's wait ended and passes `line` on.
fn end_wait(a: &mut Attempt, end: WaitEnd, line: Line) -> Line {
    if let Some(w) = a.waitlist.as_mut() {
        w.end = end;
    }
    line
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
pub fn classify(step: Step, e: CallError, sold_out: Outcome) -> Outcome {
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
