//! The operators' inspection API (service credential): list, timeline, resume, refund,
//! each a thin call of [`Operations`](crate::operations::Operations).

use axum::{extract::State, Json as AxumJson};
use paysaga_common::{
    auth::{allow::OPERATOR, Service},
    extract::{Path, Query},
};
use paysaga_contracts::orchestrator::api::{
    ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use uuid::Uuid;

use crate::{error::Result, routes::state::SagaState};

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
    State(state): State<SagaState>,
    Service(operator): Service<{ OPERATOR }>,
    Query(filter): Query<ListPayments>,
) -> Result<AxumJson<PaymentPage>> {
    Ok(AxumJson(state.operations.list(&filter).await?))
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
    State(state): State<SagaState>,
    _operator: Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<PaymentTimeline>> {
    Ok(AxumJson(state.operations.timeline(id).await?))
}

/// An operator's action on one payment: resume and refund differ only in their path,
/// doc, conflict, the operation they call and the note they leave.
macro_rules! payment_action {
    ($(#[$doc:meta])* $name:ident, $path:literal, $conflict:literal, $done:literal) => {
        $(#[$doc])*
        #[utoipa::path(
            post, path = $path, tag = "operator",
            params(("id" = Uuid, Path, description = "payment id")),
            responses(
                (status = 200, description = "the payment after waiting up to RESPONSE_WAIT_MS", body = PaymentAdmin),
                (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
                (status = 409, description = $conflict, body = paysaga_common::ErrorBody),
            ),
            security(("service" = []))
        )]
        #[tracing::instrument(skip_all, fields(payment_id = %id, operator = %operator))]
        pub async fn $name(
            State(state): State<SagaState>,
            Service(operator): Service<{ OPERATOR }>,
            Path(id): Path<Uuid>,
        ) -> Result<AxumJson<PaymentAdmin>> {
            let note = format!("{} by {operator}", $done);
            let row = state.operations.$name(id, &note).await?;
            Ok(AxumJson(row.to_admin()))
        }
    };
}

payment_action!(
    /// Resume a payment: clears the attention flag and its attempt count and drives it now.
    resume,
    "/v1/payments/{id}/resume",
    "PAYMENT_NOT_RESUMABLE: nothing left to do",
    "resumed"
);

payment_action!(
    /// Refund a COMPLETED payment: cancel the order, then credit the buyer, through the
    /// saga (REFUND_PROCESSING -> REFUNDED). Repeating it returns the refund in progress.
    refund,
    "/v1/payments/{id}/refund",
    "PAYMENT_NOT_REFUNDABLE",
    "refund requested"
);
