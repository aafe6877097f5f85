//! The operators' inspection API: list, timeline (every staff role), resume and refund
//! (operators and admins), each a thin call of
//! [`Operations`](crate::operations::Operations). People call it with their staff
//! session; the operator tools' service credential is still admitted (as an admin).
//! Refunds above `STAFF_FOUR_EYES_ABOVE` and top-ups (admins, people only) above
//! `STAFF_TOP_UP_FOUR_EYES_ABOVE` wait for a second person: the approvals are listed
//! (every staff role) and approved or rejected (admins, people only: four eyes means two
//! people, so the operator tools' credential is not admitted).

use axum::{
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    Json as AxumJson,
};
use paysaga_common::extract::{Json, Path, Query};
use paysaga_console::Decision;
use paysaga_contracts::orchestrator::api::{
    ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::{
    ActionReason, Approval, ApprovalDecided, ApprovalPage, ListApprovals, TopUp,
};
use paysaga_staff::{
    accounts,
    allow::{ADMIN, ANY, OPERATOR},
    Person, PersonOrTool,
};
use uuid::Uuid;

use crate::{
    error::Result,
    operations::{Refund, TopUpDone},
    routes::state::SagaState,
    store::PaymentRow,
};

/// An operator action's answer: the payment (200), or a refund's pending approval (202).
trait Answered {
    fn answer(self) -> Response;
}

impl Answered for PaymentRow {
    fn answer(self) -> Response {
        AxumJson(self.to_admin()).into_response()
    }
}

impl Answered for Refund {
    fn answer(self) -> Response {
        match self {
            Refund::Done(row) => row.answer(),
            Refund::AwaitingApproval(a) => {
                (StatusCode::ACCEPTED, AxumJson(a.to_api())).into_response()
            }
        }
    }
}

impl Answered for TopUpDone {
    fn answer(self) -> Response {
        let status = match &self {
            TopUpDone::Deposited { created: true, .. } => StatusCode::CREATED,
            TopUpDone::Deposited { created: false, .. } => StatusCode::OK,
            TopUpDone::AwaitingApproval(_) => StatusCode::ACCEPTED,
        };
        (status, AxumJson(self.to_api())).into_response()
    }
}

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
/// doc, conflict, further answers and the operation they call.
macro_rules! payment_action {
    ($(#[$doc:meta])* $name:ident, $as:ident, $path:literal, $conflict:literal, [$($more:tt)*]) => {
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
                $($more)*
            ),
            security(("service" = []))
        )]
        #[tracing::instrument(skip_all, fields(payment_id = %id))]
        pub async fn $name(
            State(state): State<SagaState>,
            PersonOrTool(by): PersonOrTool<{ OPERATOR | ADMIN }>,
            Path(id): Path<Uuid>,
            body: Bytes,
        ) -> Result<Response> {
            let reason = accounts::reason_from_body(&body)?;
            Ok(state.operations.$as(&by, id, reason).await?.answer())
        }
    };
}

payment_action!(
    /// Resume a payment: clears the attention flag and its attempt count and drives it now.
    resume,
    resume_as,
    "/v1/payments/{id}/resume",
    "PAYMENT_NOT_RESUMABLE: nothing left to do",
    []
);

payment_action!(
    /// Refund a COMPLETED payment: cancel the order, then credit the buyer, through the
    /// saga (REFUND_PROCESSING -> REFUNDED). Repeating it returns the refund in progress.
    /// A payment above STAFF_FOUR_EYES_ABOVE is not refunded yet: the answer is 202 with
    /// the refund approval an admin other than the one asking must give (the same
    /// approval while it is pending).
    refund,
    refund_as,
    "/v1/payments/{id}/refund",
    "PAYMENT_NOT_REFUNDABLE",
    [(status = 202, description = "above STAFF_FOUR_EYES_ABOVE: the pending approval (nothing refunded yet)", body = Approval),]
);

/// Top up a member's account (admins, people only): at or below
/// STAFF_TOP_UP_FOUR_EYES_ABOVE deposited at once; above, it waits for an admin other
/// than the one asking (202 with the approval; the same one for the same key). The
/// deposit carries an authorization this service signs naming who asked (and who
/// approved), which the account service requires.
#[utoipa::path(
    post, path = "/v1/top-ups", tag = "operator",
    request_body = TopUp,
    responses(
        (status = 201, description = "deposited", body = paysaga_contracts::account::api::Transaction),
        (status = 200, description = "the key's deposit, made before", body = paysaga_contracts::account::api::Transaction),
        (status = 202, description = "above STAFF_TOP_UP_FOUR_EYES_ABOVE: the pending approval (nothing deposited yet)", body = Approval),
        (status = 401, description = "UNAUTHENTICATED: no staff session (people only; the operator tools' credential tops up nothing)", body = paysaga_common::ErrorBody),
        (status = 403, description = "FORBIDDEN_ROLE (admins only); DEPOSIT_NOT_APPROVED (the account service refused the authorization)", body = paysaga_common::ErrorBody),
        (status = 404, description = "MEMBER_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "TOP_UP_KEY_REUSED; APPROVAL_DECIDED (the key's top-up was rejected); ACCOUNT_PENDING; OPERATION_KEY_REUSED", body = paysaga_common::ErrorBody),
        (status = 422, description = "INVALID_BODY, REASON_INVALID, INVALID_TOP_UP_KEY", body = paysaga_common::ErrorBody),
        (status = 503, description = "TOP_UP_UNAVAILABLE: ask again with the same key", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all, fields(member = %req.member_id))]
pub async fn top_up(
    State(state): State<SagaState>,
    Person(by): Person<{ ADMIN }>,
    Json(req): Json<TopUp>,
) -> Result<Response> {
    Ok(state.operations.top_up_as(&by, req).await?.answer())
}

/// The approvals (four eyes) of refunds and top-ups, newest first, filtered by state
/// and kind.
#[utoipa::path(
    get, path = "/v1/approvals", tag = "operator",
    params(ListApprovals),
    responses(
        (status = 200, body = ApprovalPage),
        (status = 400, description = "INVALID_QUERY", body = paysaga_common::ErrorBody),
        (status = 401, description = "UNAUTHENTICATED: no staff session (people only)", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn approvals(
    State(state): State<SagaState>,
    _viewer: Person<{ ANY }>,
    Query(filter): Query<ListApprovals>,
) -> Result<AxumJson<ApprovalPage>> {
    Ok(AxumJson(state.operations.approvals(&filter).await?))
}

/// A decision on an approval: approve and reject differ only in their path, doc and
/// decision.
macro_rules! approval_decision {
    ($(#[$doc:meta])* $name:ident, $decision:expr, $path:literal) => {
        $(#[$doc])*
        #[utoipa::path(
            post, path = $path, tag = "operator",
            params(("id" = i64, Path, description = "approval id")),
            request_body(content = Option<ActionReason>, description = "why (kept in the audit trail, and on an approved refund's step log); the body may be empty"),
            responses(
                (status = 200, description = "the decided approval, and on approval the payment after waiting up to RESPONSE_WAIT_MS, or the top-up's deposit", body = ApprovalDecided),
                (status = 401, description = "UNAUTHENTICATED: no staff session (people only; the operator tools' credential decides nothing)", body = paysaga_common::ErrorBody),
                (status = 403, description = "FORBIDDEN_ROLE (admins only); SAME_PERSON (the one who asked)", body = paysaga_common::ErrorBody),
                (status = 404, description = "APPROVAL_NOT_FOUND", body = paysaga_common::ErrorBody),
                (status = 409, description = "APPROVAL_DECIDED; PAYMENT_NOT_REFUNDABLE (approved, but the payment can no longer be refunded)", body = paysaga_common::ErrorBody),
                (status = 422, description = "INVALID_BODY, REASON_INVALID", body = paysaga_common::ErrorBody),
            ),
            security(("staff" = []))
        )]
        #[tracing::instrument(skip_all, fields(approval_id = id))]
        pub async fn $name(
            State(state): State<SagaState>,
            Person(by): Person<{ ADMIN }>,
            Path(id): Path<i64>,
            body: Bytes,
        ) -> Result<AxumJson<ApprovalDecided>> {
            let reason = accounts::reason_from_body(&body)?;
            Ok(AxumJson(
                state.operations.decide_as(&by, id, $decision, reason).await?,
            ))
        }
    };
}

approval_decision!(
    /// Approve a refund or a top-up (an admin other than the one who asked): a refund is
    /// carried out at once through the saga, the step log naming both people; a top-up
    /// is deposited, its authorization naming both people.
    approve,
    Decision::Approve,
    "/v1/approvals/{id}/approve"
);

approval_decision!(
    /// Reject a refund or a top-up (an admin other than the one who asked): nothing is
    /// refunded or deposited.
    reject,
    Decision::Reject,
    "/v1/approvals/{id}/reject"
);
