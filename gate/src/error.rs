//! The gate's error type and how each variant answers over HTTP.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::error::{internal_error_response, with_retry_after};
use paysaga_common::ApiError;

use crate::api::codes;

paysaga_common::service_error! {
    rate_limited;
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        /// The member fails one of the product's eligibility rules.
        #[error(transparent)]
        Ineligible(#[from] paysaga_contracts::eligibility::Ineligible),
        #[error("product {0} is sold out")]
        SoldOut(i64),
        #[error("product id must be a positive integer")]
        InvalidProductId,
        #[error("product {0} not found")]
        ProductNotFound(i64),
        #[error("{0}")]
        QuotaUnavailable(&'static str),
        #[error("redis: {0}")]
        Redis(#[from] redis::RedisError),
        #[error("redis (batched issue): {0}")]
        RedisBatch(String),
        #[error("redis did not answer within {0:?}")]
        RedisTimeout(std::time::Duration),
        #[error("unexpected answer from a redis script: {0}")]
        ScriptReply(String),
    }
}

impl Error {
    /// Whether this error means Redis could not be used (as opposed to a real answer).
    pub fn is_redis_outage(&self) -> bool {
        matches!(
            self,
            Error::Redis(_) | Error::RedisBatch(_) | Error::RedisTimeout(_) | Error::ScriptReply(_)
        )
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self {
            Error::Api(e) => e.into_response(),
            Error::RateLimited(e) => e.into_response(),
            Error::Ineligible(why) => {
                ApiError::new(StatusCode::FORBIDDEN, why.code(), why.to_string()).into_response()
            }
            Error::SoldOut(_) => ApiError::conflict(
                codes::SOLD_OUT,
                "no units left for this product: join its waitlist for a unit that comes back",
            )
            .into_response(),
            Error::InvalidProductId => ApiError::unprocessable(
                codes::INVALID_PRODUCT_ID,
                "product_id must be a positive integer",
            )
            .into_response(),
            Error::ProductNotFound(_) => {
                ApiError::not_found(codes::PRODUCT_NOT_FOUND, "no such product").into_response()
            }
            Error::QuotaUnavailable(why) => with_retry_after(
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    codes::QUOTA_UNAVAILABLE,
                    why,
                )
                .into_response(),
                Some(1),
            ),
            other => internal_error_response(&other),
        }
    }
}
