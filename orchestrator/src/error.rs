//! The orchestrator's errors: each client-facing case with its stable code, and the
//! internal ones that become a generic 500.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::batch::BatchFailure;
use paysaga_common::{
    client::CallError,
    error::{codes as common_codes, internal_error_response, with_retry_after},
    ApiError,
};
use paysaga_contracts::order::api::ReservationState;
use uuid::Uuid;
use workflows::{Action, IllegalTransition, State};

use paysaga_contracts::orchestrator::api::codes;

paysaga_common::service_error! {
    rate_limited;
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        #[error("Idempotency-Key header is required")]
        IdempotencyKeyMissing,
        #[error("Idempotency-Key is invalid: {0}")]
        IdempotencyKeyInvalid(&'static str),
        #[error("Idempotency-Key was used with a different request")]
        IdempotencyKeyReused,
        #[error("a request with this Idempotency-Key is still running")]
        IdempotencyInProgress { retry_after_secs: u64 },
        #[error("reservation not found")]
        ReservationNotFound,
        #[error("reservation is {0}, not RESERVED")]
        ReservationNotPayable(ReservationState),
        #[error("account not found")]
        AccountNotFound,
        #[error("reservation {reservation_id} already has payment {payment_id}")]
        ReservationAlreadyPaid {
            reservation_id: Uuid,
            payment_id: Uuid,
        },
        #[error("payment not found")]
        PaymentNotFound,
        #[error("payment in {0} cannot be refunded")]
        NotRefundable(State),
        #[error("payment in {0} has nothing left to resume")]
        NotResumable(State),
        /// A service needed to accept the payment did not give a definite answer.
        #[error("{service} unavailable: {source}")]
        Downstream {
            service: &'static str,
            source: CallError,
        },
        /// This instance is shutting down mid-request; the payment (if any) carries on elsewhere.
        #[error("instance stopping")]
        Stopping,
        #[error("database error")]
        Database(#[from] sqlx::Error),
        /// A group commit of the saga's writes gave this write no answer: its flush failed
        /// (every writer of that flush shares the flush's own error), miscounted its
        /// answers, or was dropped. A flush the database could not serve is answered 503
        /// (see [`Error::is_unavailable`]), anything else is internal.
        #[error("group commit failed")]
        GroupCommit(#[source] GroupCommitFailure),
        /// Something that must never happen did; nothing half-done is kept.
        #[error("invariant violated")]
        Invariant(#[from] Breach),
    }
}

/// Why a group commit gave a write no answer, with the flush's own error (when that
/// is why) as its cause, so the log shows the whole chain.
#[derive(Debug)]
pub struct GroupCommitFailure(pub BatchFailure<Error>);

impl std::fmt::Display for GroupCommitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            BatchFailure::Flush { batch, .. } => write!(f, "the {batch} flush failed"),
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for GroupCommitFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .flush_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A broken invariant, with what was expected and what was found. Answered as a
/// generic 500 and logged once with its cause chain; never shown to a client.
#[derive(Debug, thiserror::Error)]
pub enum Breach {
    /// The stored state and pending action are no position the machine reaches.
    #[error("payment {payment} is stored at an unreachable position")]
    UnreachablePosition {
        payment: Uuid,
        #[source]
        found: IllegalTransition,
    },
    /// The machine refused the outcome of the action the payment owes.
    #[error("payment {payment}: the machine refused the move")]
    IllegalMove {
        payment: Uuid,
        #[source]
        refused: IllegalTransition,
    },
    /// A local step (which cannot fail) did not move the payment.
    #[error("payment {payment}: local step {action} left it in {state}")]
    LocalStepStuck {
        payment: Uuid,
        action: Action,
        state: State,
    },
    /// A move was to be recorded (or answered) with no step in it.
    #[error("payment {payment}: a move without a step")]
    MoveWithoutStep { payment: Uuid },
    /// An answer was to be stored with a move that does not settle the payment.
    #[error("payment {payment}: only a settling move answers, this one ends in {state} owing {pending:?}")]
    AnswerBeforeSettling {
        payment: Uuid,
        state: State,
        pending: Option<Action>,
    },
    /// The position a refund moves to owes no action.
    #[error("payment {payment}: the refund's position {state} owes nothing")]
    RefundOwesNothing { payment: Uuid, state: State },
    /// An idempotency record links a payment that does not exist.
    #[error("the idempotency record names payment {payment}, which does not exist")]
    KeyNamesMissingPayment { payment: Uuid },
    /// A COMPLETED idempotency record without its status or body.
    #[error("a completed idempotency record of {operation} has no stored response")]
    KeyWithoutResponse { operation: &'static str },
    /// A stored response status that is no HTTP status.
    #[error("an idempotency record stores status {status}, not an HTTP status")]
    StoredStatus { status: i32 },
    /// A key claimed in a flush was not owned by the request that claimed it.
    #[error("the key of payment {payment}, claimed in this flush, is not its claimer's")]
    ClaimNotOwned { payment: Uuid },
    /// A reservation the order service reports with a price that is no amount.
    #[error("reservation {reservation} has price {price}, expected a positive amount")]
    NonPositivePrice { reservation: Uuid, price: i64 },
    /// A value this service builds did not serialise.
    #[error("{what} does not serialise")]
    Serialise {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The task running a payment request ended without an answer (a panic).
    #[error("the payment request's task ended without an answer")]
    RequestTask(#[source] tokio::task::JoinError),
    /// A batch statement named a request outside its batch.
    #[error("batch answer index {index} outside a batch of {len}")]
    BatchIndex { index: i64, len: usize },
    /// A group commit answered a write with an answer of another kind.
    #[error("group commit answered a {asked} with a {got}")]
    WrongAnswer {
        asked: &'static str,
        got: &'static str,
    },
    /// A write of a flush was left without an answer.
    #[error("a write of the flush got no answer")]
    Unanswered,
    /// Asking for a refund's approval neither made one nor found the pending one, round
    /// after round (each pending one found was decided before it could be read).
    #[error("payment {payment}: no pending refund approval could be made or found")]
    ApprovalRequestRaced { payment: Uuid },
    /// Asking for a top-up's approval neither made one nor found the one its key made.
    #[error("top-up {key}: no approval could be made or found")]
    TopUpApprovalRaced { key: String },
    /// A refund approval without its payment, or a top-up's without its member or key
    /// (the CHECK `approvals_kind_target` forbids both).
    #[error("approval {approval} lacks its target")]
    ApprovalWithoutTarget { approval: i64 },
}

impl Error {
    /// The database could not serve (connection lost, server down or a standby): a
    /// retry may succeed, so it is answered 503, not 500.
    pub(crate) fn is_unavailable(&self) -> bool {
        match self {
            Error::Database(e) => paysaga_common::db::unavailable(e),
            Error::GroupCommit(GroupCommitFailure(failure)) => {
                failure.flush_error().is_some_and(Error::is_unavailable)
            }
            _ => false,
        }
    }

    /// The client-facing shape of this error (code, message), if it has one.
    pub(crate) fn api(&self) -> Option<ApiError> {
        use StatusCode as S;
        let e = match self {
            Error::Api(e) => e.clone(),
            Error::IdempotencyKeyMissing => ApiError::bad_request(
                codes::IDEMPOTENCY_KEY_MISSING,
                "the Idempotency-Key header is required: send a unique key per payment attempt and reuse it on retries",
            ),
            Error::IdempotencyKeyInvalid(why) => ApiError::bad_request(codes::IDEMPOTENCY_KEY_INVALID, *why),
            Error::IdempotencyKeyReused => ApiError::unprocessable(
                codes::IDEMPOTENCY_KEY_REUSED,
                "this Idempotency-Key was already used with a different request body",
            ),
            Error::IdempotencyInProgress { .. } => ApiError::conflict(
                codes::IDEMPOTENCY_KEY_IN_PROGRESS,
                "a request with this Idempotency-Key is still running; retry after the indicated delay",
            ),
            Error::ReservationNotFound => ApiError::not_found(codes::RESERVATION_NOT_FOUND, "no such reservation"),
            Error::ReservationNotPayable(state) => ApiError::conflict(
                codes::RESERVATION_NOT_PAYABLE,
                format!("the reservation is {state}; only a RESERVED reservation can be paid"),
            ),
            Error::AccountNotFound => ApiError::not_found(codes::ACCOUNT_NOT_FOUND, "no such account"),
            Error::ReservationAlreadyPaid { payment_id, .. } => ApiError::conflict(
                codes::RESERVATION_ALREADY_PAID,
                format!("this reservation already has payment {payment_id}"),
            ),
            Error::PaymentNotFound => ApiError::not_found(codes::PAYMENT_NOT_FOUND, "no such payment"),
            Error::NotRefundable(state) => ApiError::conflict(
                codes::PAYMENT_NOT_REFUNDABLE,
                format!("a payment in {state} cannot be refunded; only a settled COMPLETED one can"),
            ),
            Error::NotResumable(state) => ApiError::conflict(
                codes::PAYMENT_NOT_RESUMABLE,
                format!("the payment is {state} with nothing left to do"),
            ),
            Error::Downstream { service, .. } => ApiError::new(
                S::SERVICE_UNAVAILABLE,
                common_codes::UNAVAILABLE,
                format!("the {service} service did not answer; nothing was charged, retry with the same Idempotency-Key"),
            ),
            Error::Stopping => ApiError::new(
                S::SERVICE_UNAVAILABLE,
                common_codes::UNAVAILABLE,
                "this instance is stopping; retry with the same Idempotency-Key to get the payment's answer",
            ),
            Error::Database(_) | Error::GroupCommit(_) if self.is_unavailable() => {
                Self::unavailable()
            }
            Error::Database(_)
            | Error::GroupCommit(_)
            | Error::Invariant(_)
            | Error::RateLimited(_) => return None,
        };
        Some(e)
    }
}

impl Error {
    /// The answer while the database cannot serve (a failover, a pool exhausted):
    /// retryable, and the payment's own state decides what a retry finds.
    fn unavailable() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            common_codes::UNAVAILABLE,
            "the payment database is unavailable; retry with the same Idempotency-Key",
        )
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::RateLimited(limited) = self {
            return limited.into_response();
        }
        match self.api() {
            Some(api) => {
                let retry_after = match &self {
                    Error::IdempotencyInProgress { retry_after_secs } => Some(*retry_after_secs),
                    Error::Downstream { .. }
                    | Error::Stopping
                    | Error::GroupCommit(_)
                    | Error::Database(_) => Some(1),
                    _ => None,
                };
                with_retry_after(api.into_response(), retry_after)
            }
            None => internal_error_response(&self),
        }
    }
}

impl Error {
    /// A refusal of a payment request's checks (reservation, account, a downstream that
    /// did not answer). Before answering with it, the request's key is consulted: the
    /// same key may have succeeded before, and then its answer is replayed instead.
    pub fn defers_to_key(&self) -> bool {
        matches!(
            self,
            Error::ReservationNotFound
                | Error::ReservationNotPayable(_)
                | Error::AccountNotFound
                | Error::Downstream { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn a_database_out_of_reach_is_503_unavailable_not_500() {
        for response in
            paysaga_common::testkit::check_database_outages(|e| Error::Database(e).into_response())
        {
            assert!(response.headers().contains_key(header::RETRY_AFTER));
        }
        let flush_timed_out = Error::GroupCommit(GroupCommitFailure(BatchFailure::Flush {
            batch: "saga_writes",
            error: std::sync::Arc::new(Error::Database(sqlx::Error::PoolTimedOut)),
        }));
        let api = flush_timed_out.api().expect("a client-facing answer");
        assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(api.code, common_codes::UNAVAILABLE);
        let response = flush_timed_out.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
        let api = Error::Database(sqlx::Error::PoolClosed)
            .api()
            .expect("a client-facing answer");
        assert_eq!(api.code, common_codes::UNAVAILABLE);
        // The log shows a failed flush with the flush's own error and its cause.
        let failed = Error::GroupCommit(GroupCommitFailure(BatchFailure::Flush {
            batch: "saga_writes",
            error: std::sync::Arc::new(Error::Database(sqlx::Error::PoolTimedOut)),
        }));
        let chain = paysaga_common::error::cause_chain(&failed);
        assert!(
            chain.starts_with(
                "group commit failed: the saga_writes flush failed: database error: pool timed out"
            ),
            "{chain}"
        );
        for internal in [
            Error::Database(sqlx::Error::RowNotFound),
            Error::GroupCommit(GroupCommitFailure(BatchFailure::Dropped)),
            Error::GroupCommit(GroupCommitFailure(BatchFailure::Flush {
                batch: "saga_writes",
                error: std::sync::Arc::new(Error::Database(sqlx::Error::RowNotFound)),
            })),
            Error::Invariant(Breach::Unanswered),
        ] {
            assert!(internal.api().is_none(), "{internal:?}");
            let response = internal.into_response();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            assert!(!response.headers().contains_key(header::RETRY_AFTER));
        }
    }
}
