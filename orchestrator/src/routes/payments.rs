//! The buyer's endpoints: pay for a reservation (idempotent), read a payment.

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use chrono::Utc;
use paysaga_common::{
    auth::{allow::OPERATOR, Buyer, Caller, MemberId},
    client::CallError,
    extract::{Json, Path},
};
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    answer::AnswerSlot,
    api::{CreatePayment, Payment},
    error::{Breach, Error, Result},
    idempotency::{self, Begin, IdempotencyKey, Scope},
    routes::{json_response, spawn_drive, wait_for_terminal},
    store::{self, NewPayment, PaymentRow},
    AppState,
};
use paysaga_contracts::account::api::AccountKind;
use paysaga_contracts::order::api::ReservationState;

/// The idempotency scope's operation name for payment creation.
pub const CREATE_PAYMENT: &str = "create_payment";

/// Pay for a reservation.
///
/// Requires `Idempotency-Key`. Answers 201 with the payment once it is terminal
/// (COMPLETED, FAILED, REFUNDED), or 202 with its current state after
/// `RESPONSE_WAIT_MS` (then poll `GET /v1/payments/{id}`). A retry with the same key
/// and body gets the stored answer with `Idempotency-Replayed: true`.
#[utoipa::path(
    post, path = "/v1/payments", tag = "payments",
    request_body = CreatePayment,
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$", description = "1-255 visible ASCII characters, unique per payment attempt; reuse it on retries")),
    responses(
        (status = 201, description = "terminal payment", body = Payment),
        (status = 202, description = "still running; poll GET /v1/payments/{id}", body = Payment),
        (status = 400, description = "IDEMPOTENCY_KEY_MISSING, IDEMPOTENCY_KEY_INVALID, MALFORMED_JSON", body = paysaga_common::ErrorBody),
        (status = 404, description = "RESERVATION_NOT_FOUND, ACCOUNT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "IDEMPOTENCY_KEY_IN_PROGRESS (with Retry-After), RESERVATION_NOT_PAYABLE, RESERVATION_ALREADY_PAID", body = paysaga_common::ErrorBody),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED, INVALID_BODY", body = paysaga_common::ErrorBody),
        (status = 429, description = "RATE_LIMITED: too many requests from this member (with Retry-After); nothing was done", body = paysaga_common::ErrorBody),
        (status = 503, description = "UNAVAILABLE: a service needed to accept it did not answer; nothing charged", body = paysaga_common::ErrorBody),
    ),
    security(("buyer" = []))
)]
#[tracing::instrument(skip_all, fields(member = %member, reservation_id = %req.reservation_id))]
pub async fn create(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    headers: HeaderMap,
    Json(req): Json<CreatePayment>,
) -> Result<Response> {
    // First, before the key is read or anything is written: a refused request leaves no
    // idempotency record and no payment behind.
    state.limiter.check(&member)?;
    let key = IdempotencyKey::from_headers(&headers)?;
    let normalised = serde_json::to_string(&req).map_err(|source| Breach::Serialise {
        what: "the payment request",
        source,
    })?;
    let scope = Scope {
        member: member.to_string(),
        operation: CREATE_PAYMENT,
        key,
    };
    let fingerprint = idempotency::fingerprint(scope.operation, &scope.member, &normalised);
    // The rest runs in a task of its own: a buyer who hangs up does not stop it, so the
    // key is completed and the next retry gets the replay instead of waiting out a lease.
    let task = tokio::spawn(run(state, scope, fingerprint, member, req).in_current_span());
    task.await.map_err(Breach::RequestTask)?
}

/// A request's whole course. Most keys are new: the reservation and the account are
/// checked first, then the key is claimed and the payment created in one group commit.
/// A key seen before goes the long way (replay, conflict, in progress, takeover), and
/// so does a failed check, which may be the retry of a request that already succeeded
/// (its reservation is paid now): the key decides.
async fn run(
    state: AppState,
    scope: Scope,
    fingerprint: String,
    member: MemberId,
    req: CreatePayment,
) -> Result<Response> {
    let begun = match check(&state, &member, &req).await {
        Ok(new) => {
            let token = Uuid::new_v4();
            let opened = state
                .engine
                .writes
                .open(
                    idempotency::NewKey {
                        scope: scope.clone(),
                        fingerprint: fingerprint.clone(),
                        token,
                        lease: state.engine.lease,
                        retention_hours: state.retention_hours,
                    },
                    store::Linked {
                        new,
                        driver: state.engine.instance,
                        lease: state.engine.lease,
                        scope: scope.clone(),
                        token,
                    },
                )
                .await;
            match opened {
                Ok(Some(row)) => {
                    crate::metrics::transition(row.state);
                    return finish(state, scope, token, row).await;
                }
                Ok(None) => begin(&state, &scope, &fingerprint).await?,
                Err(e) => {
                    // The key was claimed but no payment made (the reservation has one).
                    forget(&state, &scope, token).await;
                    return Err(e);
                }
            }
        }
        Err(e) if e.defers_to_key() => match begin(&state, &scope, &fingerprint).await? {
            Begin::Owned {
                token,
                payment_id: None,
            } => {
                forget(&state, &scope, token).await;
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
            let mut response = json_response(status, body);
            response.headers_mut().insert(
                idempotency::REPLAYED_HEADER,
                HeaderValue::from_static("true"),
            );
            return Ok(response);
        }
        Begin::Owned { token, payment_id } => (token, payment_id),
    };
    execute(state, scope, token, existing, member, req).await
}

/// The long way for a key: replay, conflict, in progress, takeover, or owned afresh.
async fn begin(state: &AppState, scope: &Scope, fingerprint: &str) -> Result<Begin> {
    idempotency::begin(
        &state.pool,
        scope,
        fingerprint,
        state.engine.lease,
        state.retention_hours,
    )
    .await
}

/// Forgets a key under which nothing was created, so a retry executes afresh.
async fn forget(state: &AppState, scope: &Scope, token: Uuid) {
    if let Err(release) = idempotency::release(&state.pool, scope, token).await {
        tracing::warn!(error = %release, "could not release idempotency key; it expires with its lease");
    }
}

/// Executes an owned request: accepts (or resumes) the payment, drives it for up to
/// `RESPONSE_WAIT_MS`, and stores the answer under the key.
async fn execute(
    state: AppState,
    scope: Scope,
    token: Uuid,
    existing: Option<Uuid>,
    member: MemberId,
    req: CreatePayment,
) -> Result<Response> {
    let row = match existing {
        Some(id) => store::load(&state.pool, id)
            .await?
            .ok_or(Breach::KeyNamesMissingPayment { payment: id })?,
        None => match accept(&state, &scope, token, &member, &req).await {
            Ok(row) => row,
            Err(e) => {
                // Nothing was created: forget the key so a retry executes afresh.
                forget(&state, &scope, token).await;
                return Err(e);
            }
        },
    };
    finish(state, scope, token, row).await
}

/// Drives the payment for up to `RESPONSE_WAIT_MS` and stores the answer under the key:
/// with the move that settles it when the drive started here gets there in time (one
/// write fewer), else afterwards.
async fn finish(state: AppState, scope: Scope, token: Uuid, row: PaymentRow) -> Result<Response> {
    let slot = AnswerSlot::new(scope.clone(), token);
    let handle = match spawn_drive(&state.engine, &row, Some(slot.clone())) {
        Some(h) => Some(h),
        // A taken-over request: drive it here if nobody else is.
        None => match store::claim_one(
            &state.pool,
            row.id,
            state.engine.instance,
            state.engine.lease,
        )
        .await?
        {
            Some(claimed) => spawn_drive(&state.engine, &claimed, Some(slot.clone())),
            None => None,
        },
    };
    let waited = wait_for_terminal(&state.engine, row.id, handle, state.response_wait).await;
    // From here on the driver stores nothing for this request; if it already has,
    // that is the answer, committed with the move.
    let stored = slot.close().await;
    let row = waited?;
    if let Some(body) = stored {
        return Ok(json_response(StatusCode::CREATED, body));
    }
    if !state
        .engine
        .alive
        .load(std::sync::atomic::Ordering::Acquire)
    {
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
    if !state.engine.writes.complete(answered).await? {
        tracing::warn!(payment_id = %row.id, "idempotency key taken over meanwhile; the new owner's answer is the one stored");
    }
    Ok(json_response(status, body))
}

/// Checks the reservation and the account with their owners, then creates the payment
/// and links it to the idempotency record in one statement.
async fn accept(
    state: &AppState,
    scope: &Scope,
    token: Uuid,
    member: &MemberId,
    req: &CreatePayment,
) -> Result<PaymentRow> {
    let new = check(state, member, req).await?;
    let inserted = state
        .engine
        .writes
        .insert(store::Linked {
            new,
            driver: state.engine.instance,
            lease: state.engine.lease,
            scope: scope.clone(),
            token,
        })
        .await;
    let row = match inserted {
        Ok(Some(row)) => row,
        // Our lease on the key expired and another request took it over: it creates the payment.
        Ok(None) => {
            return Err(Error::IdempotencyInProgress {
                retry_after_secs: 1,
            })
        }
        Err(e) => return Err(e),
    };
    crate::metrics::transition(row.state);
    Ok(row)
}

/// The payment a request asks for, once its reservation and account are checked with
/// their owners: the buyer's own, payable, and a member account of theirs.
async fn check(state: &AppState, member: &MemberId, req: &CreatePayment) -> Result<NewPayment> {
    let ds = &state.engine.downstream;
    // Both lookups at once: they ride in different batches to different services.
    let (reservation, account) = tokio::join!(
        ds.reservation(req.reservation_id),
        ds.account(req.account_id)
    );
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
        return Err(Error::ReservationNotPayable(reservation.state.to_string()));
    }
    if reservation.expires_at <= Utc::now() {
        return Err(Error::ReservationNotPayable("EXPIRED".into()));
    }
    let account = match account {
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
        account_id: account.id,
        reservation_id: reservation.id,
        amount: reservation.price,
        product_id: Some(reservation.product_id),
        // The request's span: recovery, should this process die, continues under it.
        traceparent: paysaga_common::telemetry::current_traceparent(),
    })
}

/// A payment (buyers: their own only).
#[utoipa::path(
    get, path = "/v1/payments/{id}", tag = "payments",
    params(("id" = Uuid, Path, description = "payment id")),
    responses(
        (status = 200, body = Payment),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 429, description = "RATE_LIMITED: too many requests from this member (with Retry-After)", body = paysaga_common::ErrorBody),
    ),
    security(("buyer" = []), ("service" = []))
)]
#[tracing::instrument(skip_all, fields(payment_id = %id))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Payment>> {
    // Buyers poll this; services (operators, tools) are not members and not limited.
    if let Caller::Buyer(member) = &caller {
        state.limiter.check(member)?;
    }
    let row = store::load(&state.pool, id)
        .await?
        .ok_or(Error::PaymentNotFound)?;
    if !caller.may_access(&row.member_id) {
        return Err(Error::PaymentNotFound);
    }
    Ok(axum::Json(row.to_api()))
}
