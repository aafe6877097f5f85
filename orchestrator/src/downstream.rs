//! The saga's calls to account and order, and the probes that ask them for the truth
//! after an unknown outcome. Each call's answer is classified into a step outcome
//! here; only answers that are definite by contract count as rejections.
//!
//! Every call rides in a batch (`POST /v1/batch`): the calls of concurrent payments
//! that arrive while earlier batches are in flight leave together, one HTTP request
//! and one downstream transaction for all of them, each answered on its own. A lone
//! call leaves at once, so at low load nothing waits. With tracing on, each operation
//! carries its payment's trace context in the batch body (`traceparents`).

use std::time::{Duration, Instant};

use paysaga_common::{
    batch::Coalescer,
    client::{Answer, CallError},
    money::Amount,
    telemetry,
};
use paysaga_contracts::account::{
    api::{
        Account, AccountBatch, AccountCode, AccountOp, CreditRequest, DebitRequest, OperationKey,
        Transaction, TransactionKind, TransactionStatus,
    },
    client::AccountClient,
};
use paysaga_contracts::batch::{Replies, Reply};
use paysaga_contracts::order::{
    api::{hold_key, ErrorCode as OrderCode, OrderBatch, OrderOp, Reservation, ReservationState},
    client::OrderClient,
};
use serde::de::DeserializeOwned;
use tracing::{Instrument, Span};
use uuid::Uuid;
use workflows::{Action, Outcome};

use crate::store::PaymentRow;

/// What one attempt at an action came to.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: Outcome,
    pub status: Option<u16>,
    pub latency: Duration,
    pub error: Option<String>,
    /// The downstream's code for a definite rejection (e.g. `INSUFFICIENT_FUNDS`).
    pub code: Option<String>,
}

impl Attempt {
    fn succeeded(status: u16, latency: Duration) -> Self {
        Attempt {
            outcome: Outcome::Succeeded,
            status: Some(status),
            latency,
            error: None,
            code: None,
        }
    }

    fn unknown(status: Option<u16>, latency: Duration, error: impl Into<String>) -> Self {
        Attempt {
            outcome: Outcome::Unknown,
            status,
            latency,
            error: Some(error.into()),
            code: None,
        }
    }

    /// Classifies a failed call: a rejection whose code, read by `parse` as the
    /// downstream's code type, is one `definite` accepts is final; anything else
    /// (a timeout, a 5xx, an unexpected 4xx such as a refused credential) is
    /// unknown and is retried, then escalated.
    fn from_error<C: Copy>(
        e: CallError,
        latency: Duration,
        parse: fn(&str) -> Option<C>,
        definite: fn(C) -> bool,
        name: fn(C) -> &'static str,
    ) -> Self {
        match e.code().and_then(parse).filter(|c| definite(*c)) {
            Some(code) => Attempt {
                outcome: Outcome::Rejected,
                status: e.status(),
                latency,
                error: Some(e.to_string()),
                code: Some(name(code).to_owned()),
            },
            None => Attempt::unknown(e.status(), latency, e.to_string()),
        }
    }

    fn from_account_error(
        e: CallError,
        latency: Duration,
        definite: fn(AccountCode) -> bool,
    ) -> Self {
        Attempt::from_error(
            e,
            latency,
            AccountCode::parse,
            definite,
            AccountCode::as_str,
        )
    }

    fn from_order_error(e: CallError, latency: Duration, definite: fn(OrderCode) -> bool) -> Self {
        Attempt::from_error(e, latency, OrderCode::parse, definite, OrderCode::as_str)
    }
}

/// The most operations one batch to a downstream carries.
const MAX_BATCH: usize = 256;

/// An operation and the trace context of the payment it belongs to (`None` when
/// tracing is off).
type Traced<O> = (O, Option<String>);

#[derive(Clone, Debug)]
pub struct Downstream {
    account: Coalescer<Traced<AccountOp>, Reply, CallError>,
    order: Coalescer<Traced<OrderOp>, Reply, CallError>,
}

/// A batch's operation answered as if it had been its own call. With tracing on, the
/// operation carries the current span's context, so its span downstream joins the
/// payment's trace whichever payment's task sends the batch.
async fn answer<O, T: DeserializeOwned>(
    batcher: &Coalescer<Traced<O>, Reply, CallError>,
    op: O,
) -> Result<Answer<T>, CallError>
where
    O: Send + 'static,
{
    paysaga_contracts::batch::submit(batcher, (op, telemetry::current_traceparent())).await
}

/// A downstream's batcher: each flush sent by `send` in a span of its own (see
/// [`untrace`]), its replies in the order of its operations.
fn batcher<O, F, Fut>(
    target: &'static str,
    in_flight: usize,
    send: F,
) -> Coalescer<Traced<O>, Reply, CallError>
where
    O: Send + 'static,
    F: Fn(Vec<O>, Vec<Option<String>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Answer<Replies>, CallError>> + Send + 'static,
{
    Coalescer::new(target, MAX_BATCH, in_flight, move |traced| {
        let (ops, traceparents, span) = untrace(traced, target);
        let sent = send(ops, traceparents);
        async move { sent.await.map(|a| a.body.results) }.instrument(span)
    })
}

/// Splits traced operations into the operations and their contexts (an empty list
/// when none has one, so an untraced batch is sent exactly as before), and the span
/// the batch request is sent in: with tracing on, a span of its own linked to each
/// payment's context, since the batch belongs to no one payment; otherwise none.
fn untrace<O>(traced: Vec<Traced<O>>, target: &'static str) -> (Vec<O>, Vec<Option<String>>, Span) {
    let (ops, traceparents): (Vec<O>, Vec<Option<String>>) = traced.into_iter().unzip();
    if traceparents.iter().all(Option::is_none) {
        return (ops, Vec::new(), Span::none());
    }
    let span = tracing::info_span!(
        parent: None,
        "downstream batch",
        otel.name = %format_args!("batch to {target}"),
        otel.kind = "client",
        ops = ops.len(),
    );
    for tp in traceparents.iter().flatten() {
        telemetry::link(&span, tp);
    }
    (ops, traceparents, span)
}

/// A confirm's or cancel's attempt: succeeded once the reservation is in a state
/// `reached` accepts, unknown in any other, and a rejection only for the codes `ends`
/// names.
fn reservation_attempt(
    answer: Result<Answer<Reservation>, CallError>,
    start: Instant,
    call: &str,
    reached: fn(ReservationState) -> bool,
    ends: fn(OrderCode) -> bool,
) -> Attempt {
    match answer {
        Ok(a) if reached(a.body.state) => Attempt::succeeded(a.status, a.latency),
        Ok(a) => Attempt::unknown(
            Some(a.status),
            a.latency,
            format!("{call} answered {}", a.body.state),
        ),
        Err(e) => Attempt::from_order_error(e, start.elapsed(), ends),
    }
}

fn op_key(action: Action, p: &PaymentRow) -> Result<OperationKey, String> {
    OperationKey::parse(action.operation_key(p.id)).map_err(str::to_owned)
}

/// The key of the hold the payment's debit captures: its reservation's.
fn hold_of(p: &PaymentRow) -> Result<OperationKey, String> {
    OperationKey::parse(hold_key(p.reservation_id)).map_err(str::to_owned)
}

/// A debit declined on record: a definite rejection, with the reason it was declined
/// for (short of funds, or its hold released, expired, missing or not its own).
fn declined(t: &Transaction, status: u16, latency: Duration, what: &str) -> Attempt {
    let code = t.declined_for.unwrap_or(AccountCode::InsufficientFunds);
    Attempt {
        outcome: Outcome::Rejected,
        status: Some(status),
        latency,
        error: Some(format!("{what}: {code}")),
        code: Some(code.as_str().to_owned()),
    }
}

impl Downstream {
    /// The batchers to account and order, with at most `in_flight`
    /// batches to each downstream at once.
    pub fn new(account: AccountClient, order: OrderClient, in_flight: usize) -> Self {
        let account = batcher("account", in_flight, move |ops, traceparents| {
            let client = account.clone();
            async move { client.batch(&AccountBatch { ops, traceparents }).await }
        });
        let order = batcher("order", in_flight, move |ops, traceparents| {
            let client = order.clone();
            async move { client.batch(&OrderBatch { ops, traceparents }).await }
        });
        Self { account, order }
    }

    /// The reservation, as the order service sees it now.
    pub async fn reservation(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        answer(&self.order, OrderOp::Reservation { reservation_id: id }).await
    }

    /// The account (without its recent transactions).
    pub async fn account(&self, id: i64) -> Result<Answer<Account>, CallError> {
        answer(&self.account, AccountOp::Account { account_id: id }).await
    }

    async fn debit(&self, req: DebitRequest) -> Result<Answer<Transaction>, CallError> {
        answer(&self.account, AccountOp::Debit(req)).await
    }

    async fn credit(&self, req: CreditRequest) -> Result<Answer<Transaction>, CallError> {
        answer(&self.account, AccountOp::Credit(req)).await
    }

    async fn transaction_by_key(&self, key: &str) -> Result<Answer<Transaction>, CallError> {
        let op = AccountOp::Transaction {
            operation_key: key.to_owned(),
        };
        answer(&self.account, op).await
    }

    async fn confirm(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        answer(&self.order, OrderOp::Confirm { reservation_id: id }).await
    }

    async fn cancel(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        answer(&self.order, OrderOp::Cancel { reservation_id: id }).await
    }

    /// Carries out `action` for `p` once. Never fails: an error is an outcome.
    pub async fn perform(&self, action: Action, p: &PaymentRow) -> Attempt {
        let start = Instant::now();
        let amount = match Amount::new(p.amount) {
            Ok(a) => a,
            Err(e) => {
                return Attempt::unknown(
                    None,
                    Duration::ZERO,
                    format!("stored amount {}: {e}", p.amount),
                )
            }
        };
        match action {
            Action::Debit => {
                let (key, hold) = match (op_key(Action::Debit, p), hold_of(p)) {
                    (Ok(k), Ok(h)) => (k, h),
                    (Err(e), _) | (_, Err(e)) => return Attempt::unknown(None, Duration::ZERO, e),
                };
                // The debit captures the reservation's hold: the price set aside when the
                // unit was reserved, under a key derived from the reservation.
                let req = DebitRequest {
                    operation_key: key,
                    account_id: p.account_id,
                    amount,
                    hold_key: Some(hold),
                };
                match self.debit(req).await {
                    Ok(a) => match a.body.status {
                        TransactionStatus::Applied => Attempt::succeeded(a.status, a.latency),
                        TransactionStatus::Declined => {
                            declined(&a.body, a.status, a.latency, "debit declined")
                        }
                    },
                    Err(e) => {
                        Attempt::from_account_error(e, start.elapsed(), AccountCode::ends_debit)
                    }
                }
            }
            Action::Confirm => reservation_attempt(
                self.confirm(p.reservation_id).await,
                start,
                "confirm",
                |state| state == ReservationState::Confirmed,
                |code| {
                    matches!(
                        code,
                        OrderCode::ReservationExpired
                            | OrderCode::ReservationCancelled
                            | OrderCode::ReservationNotFound
                    )
                },
            ),
            Action::CancelReservation | Action::CancelOrder => reservation_attempt(
                self.cancel(p.reservation_id).await,
                start,
                "cancel",
                |state| {
                    matches!(
                        state,
                        ReservationState::Cancelled | ReservationState::Expired
                    )
                },
                |code| {
                    matches!(
                        code,
                        OrderCode::ReservationNotFound | OrderCode::ReservationConfirmed
                    )
                },
            ),
            Action::Refund => {
                let (key, refund_of) = match (op_key(Action::Refund, p), op_key(Action::Debit, p)) {
                    (Ok(k), Ok(d)) => (k, d),
                    (Err(e), _) | (_, Err(e)) => return Attempt::unknown(None, Duration::ZERO, e),
                };
                let req = CreditRequest {
                    operation_key: key,
                    account_id: p.account_id,
                    amount,
                    refund_of,
                };
                match self.credit(req).await {
                    Ok(a) => Attempt::succeeded(a.status, a.latency),
                    Err(e) => {
                        Attempt::from_account_error(e, start.elapsed(), AccountCode::ends_refund)
                    }
                }
            }
            Action::Complete => Attempt::succeeded(0, Duration::ZERO),
        }
    }

    /// After an unknown outcome: asks the downstream what really happened under this
    /// payment's operation key (or to its reservation). `Some` only for a definite fact;
    /// `None` when the truth is still open (e.g. the call may still be in flight), and
    /// then the same operation is simply issued again later under the same key.
    pub async fn probe(&self, action: Action, p: &PaymentRow) -> Option<Attempt> {
        let start = Instant::now();
        match action {
            Action::Debit | Action::Refund => {
                let key = action.operation_key(p.id);
                let a = self.transaction_by_key(&key).await.ok()?;
                let t = &a.body;
                let expected_kind = if action == Action::Debit {
                    TransactionKind::Debit
                } else {
                    TransactionKind::Credit
                };
                if t.kind != expected_kind || t.account_id != p.account_id || t.amount != p.amount {
                    tracing::error!(payment_id = %p.id, %key, "transaction under our operation key does not match the payment");
                    return None;
                }
                Some(match t.status {
                    TransactionStatus::Applied => Attempt::succeeded(a.status, start.elapsed()),
                    TransactionStatus::Declined => {
                        declined(t, a.status, start.elapsed(), "probe: debit declined")
                    }
                })
            }
            Action::Confirm => {
                let a = self.reservation(p.reservation_id).await.ok()?;
                match a.body.state {
                    ReservationState::Confirmed => {
                        Some(Attempt::succeeded(a.status, start.elapsed()))
                    }
                    // Confirm can no longer succeed: a definite rejection.
                    s @ (ReservationState::Cancelled | ReservationState::Expired) => {
                        Some(Attempt {
                            outcome: Outcome::Rejected,
                            status: Some(a.status),
                            latency: start.elapsed(),
                            error: Some(format!("probe: reservation {s}")),
                            code: Some(s.as_str().to_owned()),
                        })
                    }
                    ReservationState::Reserved => None,
                }
            }
            Action::CancelReservation | Action::CancelOrder => {
                let a = self.reservation(p.reservation_id).await.ok()?;
                matches!(
                    a.body.state,
                    ReservationState::Cancelled | ReservationState::Expired
                )
                .then(|| Attempt::succeeded(a.status, start.elapsed()))
            }
            Action::Complete => None,
        }
    }
}
