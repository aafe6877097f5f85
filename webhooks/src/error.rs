//! The webhook platform's errors: each refusal of the operators' webhook API with its
//! stable code, and the internal ones that become a generic 500.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    client::CallError,
    error::{codes as common_codes, internal_error_response, with_retry_after},
    ApiError,
};
use paysaga_contracts::orchestrator::api::codes;

use crate::store::DeliveryState;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rejection from a common extractor or an input check, already shaped.
    #[error("{}: {}", .0.code, .0.message)]
    Api(ApiError),
    #[error("webhook URL refused: {0}")]
    UrlInvalid(String),
    /// The URL's host is an address deliveries may not reach.
    #[error("webhook address {0} is forbidden")]
    AddressForbidden(std::net::IpAddr),
    #[error("unknown event type {0:?}")]
    EventTypeUnknown(String),
    #[error("webhook endpoint not found")]
    EndpointNotFound,
    #[error("webhook delivery not found")]
    DeliveryNotFound,
    #[error("webhook delivery is {0}, not DEAD")]
    DeliveryNotDead(DeliveryState),
    /// The order service did not give its events (the ingest retries next run).
    #[error("the order service's outbox did not answer")]
    Outbox(#[source] CallError),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// A stored secret does not open with `WEBHOOK_SECRET_KEY`.
    #[error(transparent)]
    Unsealable(#[from] crate::sealing::Unsealable),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(e)
    }
}

impl Error {
    /// The client-facing shape of this error (code, message), if it has one.
    pub fn api(&self) -> Option<ApiError> {
        let e = match self {
            Error::Api(e) => e.clone(),
            Error::UrlInvalid(why) => {
                ApiError::unprocessable(codes::WEBHOOK_URL_INVALID, format!("url: {why}"))
            }
            Error::AddressForbidden(ip) => ApiError::unprocessable(
                codes::WEBHOOK_ADDRESS_FORBIDDEN,
                format!(
                    "url: {ip} is an internal address (loopback, private, link-local, unique-local, \
                     multicast or reserved); webhooks are delivered to public addresses only"
                ),
            ),
            Error::EventTypeUnknown(t) => ApiError::unprocessable(
                codes::EVENT_TYPE_UNKNOWN,
                format!(
                    "{t:?} is not in the event catalogue ({})",
                    paysaga_contracts::events::types::ALL.join(", ")
                ),
            ),
            Error::EndpointNotFound => ApiError::not_found(
                codes::WEBHOOK_ENDPOINT_NOT_FOUND,
                "no such webhook endpoint",
            ),
            Error::DeliveryNotFound => ApiError::not_found(
                codes::WEBHOOK_DELIVERY_NOT_FOUND,
                "no such webhook delivery",
            ),
            Error::DeliveryNotDead(state) => ApiError::conflict(
                codes::WEBHOOK_DELIVERY_NOT_DEAD,
                format!("the delivery is {state}; only a DEAD delivery can be replayed"),
            ),
            // The database could not serve (connection lost, server down or a standby):
            // a retry may succeed, so it is answered 503, not 500.
            Error::Database(e) if paysaga_common::db::unavailable(e) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                common_codes::UNAVAILABLE,
                "the webhook database is unavailable; retry",
            ),
            Error::Database(_) | Error::Outbox(_) | Error::Unsealable(_) => return None,
        };
        Some(e)
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self.api() {
            Some(api) => {
                let unavailable = api.status == StatusCode::SERVICE_UNAVAILABLE;
                with_retry_after(api.into_response(), unavailable.then_some(1))
            }
            None => internal_error_response(&self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn a_database_out_of_reach_is_503_and_anything_else_internal() {
        let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let response = Error::Database(sqlx::Error::Io(lost)).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
        let response = Error::Database(sqlx::Error::RowNotFound).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let conflict = Error::DeliveryNotDead(DeliveryState::Pending).into_response();
        assert_eq!(conflict.status(), StatusCode::CONFLICT);
    }
}
