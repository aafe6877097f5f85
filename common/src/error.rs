//! The one JSON error body every service answers with, and the generic 500.

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `{"code": "SOLD_OUT", "message": "..."}`: `code` is stable and machine-readable,
/// `message` is for people and may change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    #[schema(example = "SOLD_OUT")]
    pub code: String,
    #[schema(example = "no units left for this product")]
    pub message: String,
}

/// A client-facing error: status, stable code, safe message. As an error it reads
/// `CODE: message`, so a service's error enum can carry it with `#[error(transparent)]`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, codes::UNAUTHENTICATED, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, codes::UNAVAILABLE, message)
    }

    /// 503 `UNAVAILABLE` for a database that cannot serve now (out of reach, or its pool
    /// exhausted: load, not a bug), logged as such once.
    pub fn database_unavailable(message: impl Into<String>) -> Self {
        tracing::warn!("database unavailable or pool exhausted; answering 503");
        Self::unavailable(message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                code: self.code.to_owned(),
                message: self.message,
            }),
        )
            .into_response()
    }
}

/// Declares error codes: each a `&str` constant whose value is its own name, so a code
/// and its constant can never differ. Doc comments go before a name as before a constant.
#[macro_export]
macro_rules! error_codes {
    ($($(#[$meta:meta])* $code:ident),* $(,)?) => {
        $($(#[$meta])* pub const $code: &str = stringify!($code);)*
    };
}

/// A service's `Error` enum, as the caller declares it (its attributes, usually
/// `#[derive(Debug, thiserror::Error)]`, and its variants), with its `Result`: first the
/// variant every service has, `Api` (a rejection already shaped), then with
/// `rate_limited;` the one of a service that limits each member's rate, then the
/// caller's. Each shows as the error it carries and has no source of its own, as
/// `#[error(transparent)]` would make it (which cannot be written here: thiserror binds
/// such a field under the caller's name).
#[macro_export]
macro_rules! service_error {
    (rate_limited; $(#[$attr:meta])* pub enum Error { $($variants:tt)* }) => {
        $crate::service_error! {
            @with [
                /// A member over their rate: 429 with `Retry-After`, nothing done.
                #[error("{0}")]
                RateLimited($crate::limits::RateLimited),
            ]
            $(#[$attr])* pub enum Error { $($variants)* }
        }

        impl From<$crate::limits::RateLimited> for Error {
            fn from(e: $crate::limits::RateLimited) -> Self {
                Error::RateLimited(e)
            }
        }
    };
    (@with [$($first:tt)*] $(#[$attr:meta])* pub enum Error { $($variants:tt)* }) => {
        pub type Result<T, E = Error> = ::std::result::Result<T, E>;

        $(#[$attr])*
        pub enum Error {
            /// A rejection from a common extractor (auth, JSON, path, query) or an input
            /// check, already shaped.
            #[error("{0}")]
            Api($crate::ApiError),
            $($first)*
            $($variants)*
        }

        impl From<$crate::ApiError> for Error {
            fn from(e: $crate::ApiError) -> Self {
                Error::Api(e)
            }
        }
    };
    ($(#[$attr:meta])* pub enum Error { $($variants:tt)* }) => {
        $crate::service_error! { @with [] $(#[$attr])* pub enum Error { $($variants)* } }
    };
}

/// Codes shared by every service. Each service documents its own beside these.
pub mod codes {
    crate::error_codes! {
        MALFORMED_JSON,
        INVALID_BODY,
        UNSUPPORTED_MEDIA_TYPE,
        PAYLOAD_TOO_LARGE,
        INVALID_PATH,
        INVALID_QUERY,
        INVALID_HEADER,
        NOT_FOUND,
        METHOD_NOT_ALLOWED,
        UNAUTHENTICATED,
        FORBIDDEN,
        /// A valid service credential whose role the route does not admit.
        FORBIDDEN_CALLER,
        INTERNAL,
        UNAVAILABLE,
        TIMEOUT,
        OVERLOADED,
        RATE_LIMITED,
    }
}

/// Carried in the response extensions of a 500 so the logging middleware can report
/// the cause chain once, while the client sees only a generic message.
#[derive(Debug, Clone)]
pub struct InternalErrorReport(pub String);

/// An error and its causes, `outer: inner: innermost`, as the logs show them.
pub fn cause_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    chain
}

/// The response for an internal error: a generic body for the client, the full cause
/// chain attached for the middleware to log.
pub fn internal_error_response(err: &(dyn std::error::Error + 'static)) -> Response {
    internal_with_report(cause_chain(err))
}

/// Same as [`internal_error_response`] for an `anyhow::Error`.
pub fn internal_anyhow_response(err: &anyhow::Error) -> Response {
    internal_with_report(format!("{err:#}"))
}

fn internal_with_report(chain: String) -> Response {
    let mut response = ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        codes::INTERNAL,
        "internal error; it has been logged",
    )
    .into_response();
    response.extensions_mut().insert(InternalErrorReport(chain));
    response
}

/// `response` with `Retry-After: secs` when `secs` is given: a refusal worth asking
/// again after that many seconds.
pub fn with_retry_after(mut response: Response, secs: Option<u64>) -> Response {
    if let Some(secs) = secs {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Fallback for unknown routes.
pub async fn not_found() -> ApiError {
    ApiError::not_found(codes::NOT_FOUND, "no such route")
}

/// Fallback for a known route called with the wrong method.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

#[cfg(test)]
mod tests {
    use super::codes;

    #[test]
    fn a_code_is_its_own_name() {
        assert_eq!(codes::MALFORMED_JSON, "MALFORMED_JSON");
        assert_eq!(codes::FORBIDDEN_CALLER, "FORBIDDEN_CALLER");
        assert_eq!(codes::RATE_LIMITED, "RATE_LIMITED");
    }
}
