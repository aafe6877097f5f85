//! The orchestrator's errors: each client-facing case with its stable code, and the
//! internal ones that become a generic 500.

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use paysaga_common::{
    client::CallError,
    error::{codes as common_codes, internal_error_response},
    limits::RateLimited,
    ApiError,
};
use uuid::Uuid;

use crate::api::codes;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rejection from a common extractor or an input check, already shaped.
    #[error("{}: {}", .0.code, .0.message)]
    Api(ApiError),
    /// The member called faster than `MEMBER_RATE_PER_SEC` allows; nothing was done.
    #[error(transparent)]
    RateLimited(#[from] RateLimited),
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
    ReservationNotPayable(String),
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
    NotRefundable(String),
    #[error("payment in {0} has nothing left to resume")]
    NotResumable(String),
    #[error("webhook URL refused: {0}")]
    WebhookUrlInvalid(String),
    #[error("unknown event type {0:?}")]
    EventTypeUnknown(String),
    #[error("webhook endpoint not found")]
    WebhookEndpointNotFound,
    #[error("webhook delivery not found")]
    WebhookDeliveryNotFound,
    #[error("webhook delivery is {0}, not DEAD")]
    WebhookDeliveryNotDead(String),
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
    /// A group commit failed because the database could not serve (see
    /// [`Error::is_unavailable`]); every writer of that flush gets this.
    #[error("{0}")]
    Unavailable(String),
    /// Something that must never happen did; nothing half-done is kept.
    #[error("invariant violated: {0}")]
    Invariant(String),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(e)
    }
}

impl Error {
    /// The database could not serve (connection lost, server down or a standby): a
    /// retry may succeed, so it is answered 503, not 500.
    pub(crate) fn is_unavailable(&self) -> bool {
        match self {
            Error::Database(e) => paysaga_common::db::unavailable(e),
            Error::Unavailable(_) => true,
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
            Error::WebhookUrlInvalid(why) => ApiError::unprocessable(
                codes::WEBHOOK_URL_INVALID,
                format!("url: {why}"),
            ),
            Error::EventTypeUnknown(t) => ApiError::unprocessable(
                codes::EVENT_TYPE_UNKNOWN,
                format!("{t:?} is not in the event catalogue ({})", paysaga_contracts::events::types::ALL.join(", ")),
            ),
            Error::WebhookEndpointNotFound => ApiError::not_found(codes::WEBHOOK_ENDPOINT_NOT_FOUND, "no such webhook endpoint"),
            Error::WebhookDeliveryNotFound => ApiError::not_found(codes::WEBHOOK_DELIVERY_NOT_FOUND, "no such webhook delivery"),
            Error::WebhookDeliveryNotDead(state) => ApiError::conflict(
                codes::WEBHOOK_DELIVERY_NOT_DEAD,
                format!("the delivery is {state}; only a DEAD delivery can be replayed"),
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
            Error::Database(e) if paysaga_common::db::unavailable(e) => Self::unavailable(),
            Error::Unavailable(_) => Self::unavailable(),
            Error::Database(_) | Error::Invariant(_) | Error::RateLimited(_) => return None,
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
                let mut response = api.into_response();
                let retry_after = match &self {
                    Error::IdempotencyInProgress { retry_after_secs } => Some(*retry_after_secs),
                    Error::Downstream { .. }
                    | Error::Stopping
                    | Error::Unavailable(_)
                    | Error::Database(_) => Some(1),
                    _ => None,
                };
                if let Some(secs) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
                response
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

    #[test]
    fn a_database_out_of_reach_is_503_unavailable_not_500() {
        let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        for e in [
            Error::Database(sqlx::Error::Io(lost)),
            Error::Database(sqlx::Error::PoolTimedOut),
            Error::Database(sqlx::Error::PoolClosed),
            Error::Unavailable("saga_writes: database unavailable".into()),
        ] {
            let api = e.api().expect("a client-facing answer");
            assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(api.code, common_codes::UNAVAILABLE);
            let response = e.into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert!(response.headers().contains_key(header::RETRY_AFTER));
        }
        let response = Error::Database(sqlx::Error::RowNotFound).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
