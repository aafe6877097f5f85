//! The operators' inspection API (service credential): list, timeline, resume, refund.

use axum::{extract::State, Json as AxumJson};
use paysaga_common::{
    auth::{allow::OPERATOR, Service},
    extract::{Path, Query},
};
use uuid::Uuid;
use workflows::{request_refund, State as SagaState};

use crate::{
    api::{ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline},
    error::{Breach, Error, Result},
    routes::{invalid_query, load_payment, page_limit, spawn_drive, wait_for_terminal},
    store::{self, PaymentRow},
    AppState,
};

/// List payments, newest first, with filters and keyset paging.
#[utoipa::path(
    get, path = "/v1/payments", tag = "operator",
    params(ListPayments),
    responses(
        (status = 200, body = PaymentPage),
        (status = 400, description = "INVALID_QUERY", body = paysaga_common::ErrorBody),
        (status = 403, description = "FORBIDDEN: buyer token", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(operator = %operator))]
pub async fn list(
    State(state): State<AppState>,
    Service(operator): Service<{ OPERATOR }>,
    Query(filter): Query<ListPayments>,
) -> Result<AxumJson<PaymentPage>> {
    Ok(AxumJson(list_payments(&state, &filter).await?))
}

/// One payment with its full step timeline.
#[utoipa::path(
    get, path = "/v1/payments/{id}/steps", tag = "operator",
    params(("id" = Uuid, Path, description = "payment id")),
    responses(
        (status = 200, body = PaymentTimeline),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(payment_id = %id))]
pub async fn steps(
    State(state): State<AppState>,
    _operator: Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<PaymentTimeline>> {
    Ok(AxumJson(timeline(&state, id).await?))
}

/// One payment and its step log.
pub(crate) async fn timeline(state: &AppState, id: Uuid) -> Result<PaymentTimeline> {
    let row = load_payment(&state.pool, id).await?;
    let steps = store::steps(&state.pool, id).await?;
    Ok(PaymentTimeline {
        payment: row.to_admin(),
        steps,
    })
}

/// Resume a payment: clears the attention flag and its attempt count and drives it now.
#[utoipa::path(
    post, path = "/v1/payments/{id}/resume", tag = "operator",
    params(("id" = Uuid, Path, description = "payment id")),
    responses(
        (status = 200, description = "the payment after waiting up to RESPONSE_WAIT_MS", body = PaymentAdmin),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "PAYMENT_NOT_RESUMABLE: nothing left to do", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(payment_id = %id, operator = %operator))]
pub async fn resume(
    State(state): State<AppState>,
    Service(operator): Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<PaymentAdmin>> {
    let row = resume_payment(&state, &format!("resumed by {operator}"), id).await?;
    Ok(AxumJson(row.to_admin()))
}

/// Refund a COMPLETED payment: cancel the order, then credit the buyer, through the
/// saga (REFUND_PROCESSING -> REFUNDED). Repeating it returns the refund in progress.
#[utoipa::path(
    post, path = "/v1/payments/{id}/refund", tag = "operator",
    params(("id" = Uuid, Path, description = "payment id")),
    responses(
        (status = 200, description = "the payment after waiting up to RESPONSE_WAIT_MS", body = PaymentAdmin),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "PAYMENT_NOT_REFUNDABLE", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(payment_id = %id, operator = %operator))]
pub async fn refund(
    State(state): State<AppState>,
    Service(operator): Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<PaymentAdmin>> {
    let row = refund_payment(&state, &format!("refund requested by {operator}"), id).await?;
    Ok(AxumJson(row.to_admin()))
}

/// The operator's list with its checks: what `GET /v1/payments` and the console show.
pub(crate) async fn list_payments(state: &AppState, filter: &ListPayments) -> Result<PaymentPage> {
    let limit = page_limit(filter.limit)?;
    if let Some(s) = &filter.state {
        s.parse::<SagaState>()
            .map_err(|_| invalid_query(format!("unknown state {s:?}")))?;
    }
    for (name, v) in [
        ("min_age_secs", filter.min_age_secs),
        ("max_age_secs", filter.max_age_secs),
    ] {
        if v.is_some_and(|v| !(0..=10 * 365 * 86_400).contains(&v)) {
            return Err(invalid_query(format!("{name} must be 0 to 315360000")));
        }
    }
    let rows = store::list(&state.pool, filter, limit).await?;
    let next_cursor = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(PaymentPage {
        payments: rows.iter().map(store::PaymentRow::to_admin).collect(),
        next_cursor,
    })
}

/// Resume: clear the attention flag and the attempt count, drive the payment now and
/// wait up to `RESPONSE_WAIT_MS` for it to settle. `note` is recorded on the step.
pub(crate) async fn resume_payment(state: &AppState, note: &str, id: Uuid) -> Result<PaymentRow> {
    let row = load_payment(&state.pool, id).await?;
    let pos = row.position()?;
    let Some(action) = pos.pending() else {
        return Err(Error::NotResumable(row.state));
    };
    let handle = match store::operator_move(
        &state.pool,
        &row,
        state.engine.instance,
        state.engine.lease,
        pos,
        action,
        note,
    )
    .await?
    {
        Some(moved) => spawn_drive(&state.engine, &moved, None),
        // Someone holds a live lease: it is being driven already.
        None => None,
    };
    wait_for_terminal(&state.engine, id, handle, state.response_wait).await
}

/// Refund a settled COMPLETED payment through the saga (a refund already under way is
/// returned as it is); waits up to `RESPONSE_WAIT_MS`. `note` is recorded on the step.
pub(crate) async fn refund_payment(state: &AppState, note: &str, id: Uuid) -> Result<PaymentRow> {
    let row = load_payment(&state.pool, id).await?;
    let pos = row.position()?;
    if matches!(
        pos.state(),
        SagaState::RefundProcessing | SagaState::Refunded
    ) {
        return Ok(row);
    }
    let to = request_refund(pos).map_err(|_| Error::NotRefundable(row.state))?;
    let action = to.pending().ok_or(Breach::RefundOwesNothing {
        payment: row.id,
        state: to.state(),
    })?;
    let Some(moved) = store::operator_move(
        &state.pool,
        &row,
        state.engine.instance,
        state.engine.lease,
        to,
        action,
        note,
    )
    .await?
    else {
        let now = load_payment(&state.pool, id).await?;
        if matches!(now.state, SagaState::RefundProcessing | SagaState::Refunded) {
            return Ok(now);
        }
        return Err(Error::NotRefundable(now.state));
    };
    let handle = spawn_drive(&state.engine, &moved, None);
    wait_for_terminal(&state.engine, id, handle, state.response_wait).await
}
