//! The operators' inspection API: list, timeline (every staff role), resume and refund
//! (operators and admins), each a thin call of
//! [`Operations`](crate::operations::Operations). People call it with their staff
//! session; the operator tools' service credential is still admitted (as an admin).

use axum::{body::Bytes, extract::State, Json as AxumJson};
use paysaga_common::extract::{Path, Query};
use paysaga_contracts::orchestrator::api::{
    ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::ActionReason;
use paysaga_staff::{
    accounts,
    allow::{ADMIN, ANY, OPERATOR},
    PersonOrTool,
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
#[tracing::instrument(skip_all)]
pub async fn list(
    State(state): State<SagaState>,
    _viewer: PersonOrTool<{ ANY }>,
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
    _viewer: PersonOrTool<{ ANY }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<PaymentTimeline>> {
    Ok(AxumJson(state.operations.timeline(id).await?))
}

/// An operator's action on one payment: resume and refund differ only in their path,
/// doc, conflict and the operation they call.
macro_rules! payment_action {
    ($(#[$doc:meta])* $name:ident, $as:ident, $path:literal, $conflict:literal) => {
        $(#[$doc])*
        #[utoipa::path(
            post, path = $path, tag = "operator",
            params(("id" = Uuid, Path, description = "payment id")),
            request_body(content = Option<ActionReason>, description = "why (kept in the audit trail and on the step log); the body may be empty"),
            responses(
                (status = 200, description = "the payment after waiting up to RESPONSE_WAIT_MS", body = PaymentAdmin),
                (status = 403, description = "FORBIDDEN_ROLE; REFUND_ABOVE_LIMIT (an operator's refund above STAFF_OPERATOR_REFUND_LIMIT)", body = paysaga_common::ErrorBody),
                (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
                (status = 409, description = $conflict, body = paysaga_common::ErrorBody),
            ),
            security(("service" = []))
        )]
        #[tracing::instrument(skip_all, fields(payment_id = %id))]
        pub async fn $name(
            State(state): State<SagaState>,
            PersonOrTool(by): PersonOrTool<{ OPERATOR | ADMIN }>,
            Path(id): Path<Uuid>,
            body: Bytes,
        ) -> Result<AxumJson<PaymentAdmin>> {
            let reason = accounts::reason_from_body(&body)?;
            let row = state.operations.$as(&by, id, reason).await?;
            Ok(AxumJson(row.to_admin()))
        }
    };
}

payment_action!(
    /// Resume a payment: clears the attention flag and its attempt count and drives it now.
    resume,
    resume_as,
    "/v1/payments/{id}/resume",
    "PAYMENT_NOT_RESUMABLE: nothing left to do"
);

payment_action!(
    /// Refund a COMPLETED payment: cancel the order, then credit the buyer, through the
    /// saga (REFUND_PROCESSING -> REFUNDED). Repeating it returns the refund in progress.
    refund,
    refund_as,
    "/v1/payments/{id}/refund",
    "PAYMENT_NOT_REFUNDABLE"
);
