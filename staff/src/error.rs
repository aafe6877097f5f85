//! The staff routes' errors and the answer each one gets.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    error::{internal_error_response, with_retry_after},
    limits::RateLimited,
    password::{HashError, Rule},
    ApiError,
};
use paysaga_contracts::staff::api::codes;

use crate::{allow, StaffRole};

paysaga_common::service_error! {
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        /// No such person, a wrong password or a wrong code: which is not said.
        #[error("sign-in failed: wrong email, password or code")]
        SignInFailed,
        #[error("too many sign-in attempts; retry after {}s", .0.retry_after_secs)]
        TooManyAttempts(RateLimited),
        #[error("no staff session (none given, expired or signed out)")]
        NoSession,
        /// The operator tools' credential outside development mode, where only people
        /// act (it may only make the first admin).
        #[error("the operator tools' credential does not act as staff here")]
        PeopleOnly,
        /// The allow list the route has, which the person's role is not in.
        #[error("this route admits staff of another role")]
        ForbiddenRole(u8),
        #[error("a staff account with this email exists already")]
        EmailTaken,
        #[error("not an email address a staff account can have")]
        EmailInvalid,
        #[error("{}", .0.message())]
        WeakPassword(Rule),
        #[error("a reason is required: at most 500 characters, no control characters but tabs and line breaks")]
        ReasonInvalid,
        #[error("audit query: {0}")]
        InvalidQuery(String),
        #[error("database")]
        Database(#[from] sqlx::Error),
        #[error(transparent)]
        Hashing(#[from] HashError),
        /// A broken assumption; should be impossible.
        #[error("internal: {0}")]
        Internal(String),
    }
}

/// The roles an allow list names, for a refusal's message.
pub fn role_names(allowed: u8) -> String {
    StaffRole::ALL
        .into_iter()
        .filter(|r| crate::bit(*r) & allowed != 0)
        .map(StaffRole::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// The client-facing shape of this error, if it has one (internal ones have none).
    pub fn api(&self) -> Option<ApiError> {
        Some(match self {
            Error::Api(e) => e.clone(),
            Error::SignInFailed => ApiError::new(
                StatusCode::UNAUTHORIZED,
                codes::STAFF_SIGN_IN_FAILED,
                "wrong email, password or code",
            ),
            Error::TooManyAttempts(_) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                codes::TOO_MANY_SIGN_IN_ATTEMPTS,
                "too many sign-in attempts for this email or from this address; retry later",
            ),
            Error::NoSession => ApiError::unauthorized(
                "sign in: no staff session (none given, unknown, expired or signed out)",
            ),
            Error::PeopleOnly => ApiError::new(
                StatusCode::FORBIDDEN,
                codes::PEOPLE_ONLY,
                "staff routes are for people: sign in as yourself (the operator tools' \
                 credential acts as staff only in development mode, and otherwise only \
                 makes the first admin)",
            ),
            Error::ForbiddenRole(allowed) => ApiError::new(
                StatusCode::FORBIDDEN,
                codes::FORBIDDEN_ROLE,
                format!("this route admits staff of role: {}", role_names(*allowed)),
            ),
            Error::EmailTaken => ApiError::conflict(
                codes::STAFF_EMAIL_TAKEN,
                "a staff account with this email exists",
            ),
            Error::EmailInvalid => ApiError::unprocessable(
                codes::STAFF_EMAIL_INVALID,
                "not an email address (at most 254 characters, one @, no spaces or colons)",
            ),
            Error::WeakPassword(rule) => ApiError::unprocessable(rule.code(), rule.message()),
            Error::ReasonInvalid => ApiError::unprocessable(
                codes::REASON_INVALID,
                "a reason is required: at most 500 characters, no control characters but tabs and line breaks",
            ),
            Error::InvalidQuery(why) => {
                ApiError::bad_request(codes::INVALID_AUDIT_QUERY, why.clone())
            }
            Error::Database(e) if paysaga_common::db::unavailable(e) => {
                ApiError::database_unavailable("the staff store is unavailable; try again")
            }
            Error::Database(_) | Error::Hashing(_) | Error::Internal(_) => return None,
        })
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let retry = match &self {
            Error::TooManyAttempts(r) => Some(r.retry_after_secs),
            _ => None,
        };
        match self.api() {
            Some(api) => with_retry_after(api.into_response(), retry),
            None => internal_error_response(&self),
        }
    }
}

/// Anything the role check refuses must be in the allow list's complement.
pub(crate) fn admit(role: StaffRole, allowed: u8) -> Result<()> {
    if crate::bit(role) & allowed != 0 {
        Ok(())
    } else {
        Err(Error::ForbiddenRole(allowed))
    }
}

/// An allow list that names no role or a bit that is no role does not build.
pub(crate) struct AllowList<const ALLOW: u8>;

impl<const ALLOW: u8> AllowList<ALLOW> {
    pub(crate) const VALID: () = assert!(
        ALLOW != 0 && ALLOW & !allow::ANY == 0,
        "a staff allow list names at least one role and only roles"
    );
}
