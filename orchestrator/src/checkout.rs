//! The buyer's side of the saga: [`Checkout`] owns `POST /v1/payments` from the
//! idempotency key's claim to the answer stored under it, and `GET /v1/payments/{id}`.
//! The routes parse the request and send the answer; everything between is here.

use std::{sync::Arc, time::Duration};

use axum::http::StatusCode;
use chrono::Utc;
use paysaga_common::{
    auth::{Caller, MemberId},
    client::CallError,
};
use paysaga_contracts::{
    account::api::AccountKind,
    orchestrator::api::{CreatePayment, Payment},
    order::api::ReservationState,
};
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    answer::AnswerSlot,
    driver::Engine,
    error::{Breach, Error, Result},
    idempotency::{self, Begin, IdempotencyKey, Scope},
    metrics,
    store::{self, NewPayment, PaymentRow},
};

/// The idempotency scope's operation name for payment creation.
pub const CREATE_PAYMENT: &str = "create_payment";

/// A buyer's payment request, parsed at the edge.
#[derive(Debug)]
pub struct PaymentRequest {
    pub member: MemberId,
    pub key: IdempotencyKey,
    pub body: CreatePayment,
}

/// What a payment request is answered: the status and the body exactly as stored
/// under its key, and whether it is the replay of an earlier answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: StatusCode,
    pub body: String,
    pub replayed: bool,
}

impl Reply {
    fn fresh(status: StatusCode, body: String) -> Self {
        Self {
            status,
            body,
            replayed: false,
        }
    }
}

/// The owner of the checkout request path; cheap to clone.
#[derive(Clone)]
pub struct Checkout {
    engine: Arc<Engine>,
    /// `RESPONSE_WAIT_MS`.
    response_wait: Duration,
    /// `IDEMPOTENCY_RETENTION_HOURS`.
    retention_hours: i64,
}

impl Checkout {
    pub fn new(engine: Arc<Engine>, response_wait: Duration, retention_hours: i64) -> Self {
        Self {
            engine,
            response_wait,
            retention_hours,
        }
    }

    /// Pays for a reservation, once per key: 201 with the payment once terminal, 202
    /// with its state after `RESPONSE_WAIT_MS`, or the stored answer of an earlier
    /// request with the same key and body.
    pub async fn create(&self, request: PaymentRequest) -> Result<Reply> {
        let PaymentRequest { member, key, body } = request;
        let normalised = serde_json::to_string(&body).map_err(|source| Breach::Serialise {
            what: "the payment request",
            source,
        })?;
        let scope = Scope {
            member: member.to_string(),
            operation: CREATE_PAYMENT,
            key,
        };
        let fingerprint = idempotency::fingerprint(scope.operation, &scope.member, &normalised);
        // The rest runs in a task of its own: a buyer who hangs up does not stop it, so
        // the key is completed and the next retry gets the replay instead of waiting out
        // a lease.
        let this = self.clone();
        let task = tokio::spawn(
            async move { this.run(scope, fingerprint, member, body).await }.in_current_span(),
        );
        task.await.map_err(Breach::RequestTask)?
    }

    /// A payment, if `caller` may see it (a buyer only their own: another member's is
    /// reported as missing).
    pub async fn get<const ALLOW: u8>(&self, id: Uuid, caller: &Caller<ALLOW>) -> Result<Payment> {
        let row = store::load(&self.engine.pool, id)
            .await?
            .ok_or(Error::PaymentNotFound)?;
        if !caller.may_access(&row.member_id) {
            return Err(Error::PaymentNotFound);
        }
        Ok(row.to_api())
    }

    /// A request's whole course. Most keys are new: the reservation and the account are
    /// checked first, then the key is claimed and the payment created in one group
    /// commit. A key seen before goes the long way (replay, conflict, in progress,
    /// takeover), and so does a failed check, which may be the retry of a request that
    /// already succeeded (its reservation is paid now): the key decides.
    async fn run(
        &self,
        scope: Scope,
        fingerprint: String,
        member: MemberId,
        req: CreatePayment,
    ) -> Result<Reply> {
        let begun = match self.check(&member, &req).await {
            Ok(new) => {
                let token = Uuid::new_v4();
                let key = idempotency::NewKey {
                    scope: scope.clone(),
                    fingerprint: fingerprint.clone(),
                    token,
                    lease: self.engine.lease,
                    retention_hours: self.retention_hours,
                };
                match self
                    .engine
                    .writes
                    .open(key, self.linked(new, &scope, token))
                    .await
                {
                    Ok(Some(row)) => {
                        metrics::transition(row.state);
                        return self.finish(scope, token, row).await;
                    }
                    Ok(None) => self.begin(&scope, &fingerprint).await?,
                    Err(e) => {
                        // The key was claimed but no payment made (the reservation has one).
                        self.forget(&scope, token).await;
                        return Err(e);
                    }
                }
            }
            Err(e) if e.defers_to_key() => match self.begin(&scope, &fingerprint).await? {
                Begin::Owned {
                    token,
                    payment_id: None,
                } => {
                    self.forget(&scope, token).await;
                    return Err(e);
                }
                other => other,
            },
            Err(e) => return Err(e),
        };
        let (token, existing) = match begun {
            Begin::Replay { status, body } => {
                let status = StatusCode::from_u16(status).map_err(|_| Breach::StoredStatus {
                    status: status.into(),
                })?;
                return Ok(Reply {
                    status,
                    body,
                    replayed: true,
                });
            }
            Begin::Owned { token, payment_id } => (token, payment_id),
        };
        self.execute(scope, token, existing, member, req).await
    }

    /// The payment to create, linked to the key `token` owns, leased to this instance.
    fn linked(&self, new: NewPayment, scope: &Scope, token: Uuid) -> store::Linked {
        store::Linked {
            new,
            driver: self.engine.instance,
            lease: self.engine.lease,
            scope: scope.clone(),
            token,
        }
    }

    /// The long way for a key: replay, conflict, in progress, takeover, or owned afresh.
    async fn begin(&self, scope: &Scope, fingerprint: &str) -> Result<Begin> {
        idempotency::begin(
            &self.engine.pool,
            scope,
            fingerprint,
            self.engine.lease,
            self.retention_hours,
        )
        .await
    }

    /// Forgets a key under which nothing was created, so a retry executes afresh.
    async fn forget(&self, scope: &Scope, token: Uuid) {
        if let Err(e) = idempotency::release(&self.engine.pool, scope, token).await {
            tracing::warn!(error = %paysaga_common::error::cause_chain(&e), "could not release idempotency key; it expires with its lease");
        }
    }

    /// Executes an owned request: accepts (or resumes) the payment, drives it for up to
    /// `RESPONSE_WAIT_MS`, and stores the answer under the key.
    async fn execute(
        &self,
        scope: Scope,
        token: Uuid,
        existing: Option<Uuid>,
        member: MemberId,
        req: CreatePayment,
    ) -> Result<Reply> {
        let row = match existing {
            Some(id) => store::load(&self.engine.pool, id)
                .await?
                .ok_or(Breach::KeyNamesMissingPayment { payment: id })?,
            None => match self.accept(&scope, token, &member, &req).await {
                Ok(row) => row,
                Err(e) => {
                    // Nothing was created: forget the key so a retry executes afresh.
                    self.forget(&scope, token).await;
                    return Err(e);
                }
            },
        };
        self.finish(scope, token, row).await
    }

    /// Drives the payment for up to `RESPONSE_WAIT_MS` and stores the answer under the
    /// key: with the move that settles it when the drive started here gets there in
    /// time (one write fewer), else afterwards.
    async fn finish(&self, scope: Scope, token: Uuid, row: PaymentRow) -> Result<Reply> {
        let engine = &self.engine;
        let id = row.id;
        let slot = AnswerSlot::new(scope.clone(), token);
        let handle = match engine.spawn_drive(row, Some(slot.clone())) {
            Some(h) => Some(h),
            // A taken-over request: drive it here if nobody else is.
            None => {
                match store::claim_one(&engine.pool, id, engine.instance, engine.lease).await? {
                    Some(claimed) => engine.spawn_drive(claimed, Some(slot.clone())),
                    None => None,
                }
            }
        };
        let waited = engine
            .wait_for_terminal(id, handle, self.response_wait)
            .await;
        // From here on the driver stores nothing for this request; if it already has,
        // that is the answer, committed with the move.
        let stored = slot.close().await;
        let row = waited?;
        if let Some(body) = stored {
            return Ok(Reply::fresh(StatusCode::CREATED, body));
        }
        if !engine.is_alive() {
            // This instance is stopping: its answer is not stored; a retry gets a live one.
            return Err(Error::Stopping);
        }
        let status = if row.is_terminal() {
            StatusCode::CREATED
        } else {
            StatusCode::ACCEPTED
        };
        let body = serde_json::to_string(&row.to_api()).map_err(|source| Breach::Serialise {
            what: "the payment",
            source,
        })?;
        let answered = idempotency::Answered {
            scope,
            token,
            status: status.as_u16(),
            body: body.clone(),
        };
        if !engine.writes.complete(answered).await? {
            tracing::warn!(payment_id = %row.id, "idempotency key taken over meanwhile; the new owner's answer is the one stored");
        }
        Ok(Reply::fresh(status, body))
    }

    /// Checks the reservation and the account with their owners, then creates the
    /// payment and links it to the idempotency record in one statement.
    async fn accept(
        &self,
        scope: &Scope,
        token: Uuid,
        member: &MemberId,
        req: &CreatePayment,
    ) -> Result<PaymentRow> {
        let new = self.check(member, req).await?;
        let row = match self
            .engine
            .writes
            .insert(self.linked(new, scope, token))
            .await?
        {
            Some(row) => row,
            // Our lease on the key expired and another request took it over: it creates
            // the payment.
            None => {
                return Err(Error::IdempotencyInProgress {
                    retry_after_secs: 1,
                })
            }
        };
        metrics::transition(row.state);
        Ok(row)
    }

    /// The payment a request asks for, once its reservation is checked with the order
    /// service (the buyer's own, payable) and the account against the one its price is
    /// held on (a member account of theirs).
    async fn check(&self, member: &MemberId, req: &CreatePayment) -> Result<NewPayment> {
        let reservation = self.engine.downstream.reservation(req.reservation_id).await;
        let reservation = match reservation {
            Ok(a) => a.body,
            Err(e) if e.is_not_found() => return Err(Error::ReservationNotFound),
            Err(source) => {
                return Err(Error::Downstream {
                    service: "order",
                    source,
                })
            }
        };
        // Another member's reservation is reported as missing, so ids cannot be probed.
        if reservation.member_id != *member {
            return Err(Error::ReservationNotFound);
        }
        if reservation.state != ReservationState::Reserved {
            return Err(Error::ReservationNotPayable(reservation.state));
        }
        if reservation.expires_at <= Utc::now() {
            // Past its deadline, though the order service has not swept it yet.
            return Err(Error::ReservationNotPayable(ReservationState::Expired));
        }
        match reservation.account_id {
            // The price is held on the member's own member account, which the hold
            // found: the payment must come from it, and nothing more need be asked.
            Some(held_on) if held_on == req.account_id => {}
            Some(_) => return Err(Error::AccountNotFound),
            // A reservation made before holds: the account service says whose it is.
            None => self.check_account(member, req.account_id).await?,
        }
        if reservation.price <= 0 {
            return Err(Breach::NonPositivePrice {
                reservation: reservation.id,
                price: reservation.price,
            }
            .into());
        }

        Ok(NewPayment {
            id: Uuid::now_v7(),
            member_id: member.to_string(),
            account_id: req.account_id,
            reservation_id: reservation.id,
            amount: reservation.price,
            product_id: Some(reservation.product_id),
            // The request's span: recovery, should this process die, continues under it.
            traceparent: paysaga_common::telemetry::current_traceparent(),
        })
    }

    /// Whether `account_id` is a member account of `member`'s, asked of its owner.
    async fn check_account(&self, member: &MemberId, account_id: i64) -> Result<()> {
        let account = match self.engine.downstream.account(account_id).await {
            Ok(a) => a.body,
            Err(CallError::Rejected { status: 404, .. }) => return Err(Error::AccountNotFound),
            Err(source) => {
                return Err(Error::Downstream {
                    service: "account",
                    source,
                })
            }
        };
        if account.member_id != member.as_str() || account.kind != AccountKind::Member {
            return Err(Error::AccountNotFound);
        }
        Ok(())
    }
}
