//! The member service's errors and the answer each one gets.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    client::CallError,
    error::{codes as common_codes, internal_error_response, with_retry_after},
    ApiError,
};
use paysaga_contracts::account::api::codes as account_codes;

use crate::{api::codes, password::Rule, throttle::SignUpScope};

/// How long a client told `ACCOUNT_PENDING` should wait before retrying its sign-up.
const ACCOUNT_PENDING_RETRY_SECS: u64 = 5;

paysaga_common::service_error! {
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        #[error("not a valid email address")]
        InvalidEmail,
        #[error("member {index} of the bulk sign-up has an invalid email address")]
        InvalidBulkEmail { index: usize },
        #[error("{}", .0.message())]
        WeakPassword(Rule),
        #[error("a member with this email already exists")]
        EmailTaken,
        /// Sign-up: the member exists, its account is not open yet (the account service did
        /// not answer definitely). Retrying the sign-up, or the repair job, completes it.
        #[error("the member was created; its account is being opened, retry shortly")]
        AccountPending,
        /// A top-up for a member whose account is not open yet.
        #[error("the member's account is not open yet; retry shortly")]
        AccountNotOpen,
        #[error("invalid email or password")]
        InvalidCredentials,
        #[error("too many failed sign-ins; retry after {retry_after_secs} s")]
        TooManyAttempts { retry_after_secs: u64 },
        /// A sign-up refused before anything was looked up or hashed.
        #[error("too many sign-ups {scope}; retry after {retry_after_secs} s")]
        TooManySignUps {
            scope: SignUpScope,
            retry_after_secs: u64,
        },
        #[error("this refresh token was already used; its sessions are revoked, sign in again")]
        RefreshTokenReused,
        #[error("unknown, expired or revoked refresh token")]
        InvalidRefreshToken,
        /// An email-verification token past its expiry.
        #[error("this verification token has expired; nothing was changed")]
        TokenExpired,
        /// Not an email-verification token this service signed, or for a member or email
        /// that does not exist.
        #[error("not a valid email-verification token; nothing was changed")]
        InvalidToken,
        #[error("member not found")]
        MemberNotFound,
        #[error("a bulk sign-up carries 1 to {max} members, not {got}")]
        BulkTooLarge { max: usize, got: usize },
        #[error("opening balance must be between 0 and {max} minor units")]
        InvalidOpeningBalance { max: i64 },
        #[error("no such route")]
        BulkDisabled,
        /// The account service refused the call with a definite 4xx.
        #[error("the account service refused: {0}")]
        AccountRejected(CallError),
        /// The account service gave no definite answer (timeout, connection, 5xx).
        #[error("the account service did not answer; nothing is known to have happened, retry")]
        AccountUnavailable(#[source] CallError),
        /// The database cannot serve now (no connection free in time, connection lost, a
        /// server that is down, starting, or a standby): try again.
        #[error("the member service's database is unavailable or overloaded; try again")]
        Unavailable,
        #[error("database")]
        Database(#[source] sqlx::Error),
        /// Hashing failed or a stored hash does not parse; should be impossible.
        #[error(transparent)]
        Hashing(#[from] paysaga_common::password::HashError),
        /// A broken assumption; should be impossible.
        #[error("internal: {0}")]
        Internal(String),
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if paysaga_common::db::unavailable(&e) {
            return Error::Unavailable;
        }
        if let Some(db) = e.as_database_error() {
            if db.constraint() == Some("members_email_unique") {
                return Error::EmailTaken;
            }
        }
        Error::Database(e)
    }
}

/// The account service's codes this service passes on as they came.
const PASSED_ON: [&str; 7] = [
    account_codes::OPERATION_KEY_REUSED,
    account_codes::DEPOSIT_NOT_APPROVED,
    account_codes::ACCOUNT_NOT_FOUND,
    account_codes::AMOUNT_OUT_OF_RANGE,
    account_codes::INVALID_OPERATION_KEY,
    account_codes::INVALID_OPENING_BALANCE,
    account_codes::ACCOUNT_NOT_MEMBER,
];

impl Error {
    /// A failed call to the account service: refused with a definite 4xx, or no definite
    /// answer (timeout, connection, 5xx).
    pub(crate) fn account_call(e: CallError) -> Self {
        match e {
            CallError::Rejected { .. } => Error::AccountRejected(e),
            CallError::Unknown { .. } => Error::AccountUnavailable(e),
        }
    }

    /// The answer a client sees for this error, or the error itself back when it is
    /// internal (a 500 whose cause is logged, never shown).
    fn into_api(self) -> Result<ApiError, Error> {
        let msg = self.to_string();
        Ok(match self {
            Error::Api(e) => e,
            Error::InvalidEmail | Error::InvalidBulkEmail { .. } => {
                ApiError::unprocessable(codes::INVALID_EMAIL, msg)
            }
            Error::WeakPassword(rule) => ApiError::unprocessable(rule.code(), msg),
            Error::EmailTaken => ApiError::conflict(codes::EMAIL_TAKEN, msg),
            Error::AccountPending => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, codes::ACCOUNT_PENDING, msg)
            }
            Error::AccountNotOpen => ApiError::conflict(codes::ACCOUNT_PENDING, msg),
            Error::InvalidCredentials => {
                ApiError::new(StatusCode::UNAUTHORIZED, codes::INVALID_CREDENTIALS, msg)
            }
            Error::TooManyAttempts { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, codes::TOO_MANY_ATTEMPTS, msg)
            }
            Error::TooManySignUps { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, codes::TOO_MANY_SIGN_UPS, msg)
            }
            Error::RefreshTokenReused => {
                ApiError::new(StatusCode::UNAUTHORIZED, codes::REFRESH_TOKEN_REUSED, msg)
            }
            Error::InvalidRefreshToken => {
                ApiError::new(StatusCode::UNAUTHORIZED, codes::INVALID_REFRESH_TOKEN, msg)
            }
            // The token is the route's credential: one that is not (or no longer) good is
            // 401, as a refresh token is.
            Error::TokenExpired => {
                ApiError::new(StatusCode::UNAUTHORIZED, codes::TOKEN_EXPIRED, msg)
            }
            Error::InvalidToken => {
                ApiError::new(StatusCode::UNAUTHORIZED, codes::INVALID_TOKEN, msg)
            }
            Error::MemberNotFound => ApiError::not_found(codes::MEMBER_NOT_FOUND, msg),
            Error::BulkTooLarge { .. } => ApiError::unprocessable(codes::BULK_TOO_LARGE, msg),
            Error::InvalidOpeningBalance { .. } => {
                ApiError::unprocessable(codes::INVALID_OPENING_BALANCE, msg)
            }
            Error::BulkDisabled => ApiError::not_found(common_codes::NOT_FOUND, msg),
            Error::AccountRejected(CallError::Rejected { status, body }) => {
                match (
                    StatusCode::from_u16(status),
                    PASSED_ON.iter().find(|c| **c == body.code),
                ) {
                    (Ok(status), Some(code)) => ApiError::new(status, code, body.message),
                    _ => return Err(Error::AccountRejected(CallError::Rejected { status, body })),
                }
            }
            e @ Error::AccountRejected(_) => return Err(e),
            Error::AccountUnavailable(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                codes::ACCOUNT_UNAVAILABLE,
                msg,
            ),
            Error::Unavailable => ApiError::database_unavailable(msg),
            e @ (Error::Database(_) | Error::Hashing(_) | Error::Internal(_)) => return Err(e),
        })
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let retry_after = match &self {
            Error::TooManyAttempts { retry_after_secs }
            | Error::TooManySignUps {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            Error::AccountPending | Error::AccountUnavailable(_) | Error::Unavailable => {
                Some(ACCOUNT_PENDING_RETRY_SECS)
            }
            _ => None,
        };
        let response = match self.into_api() {
            Ok(api) => api.into_response(),
            Err(internal) => internal_error_response(&internal),
        };
        with_retry_after(response, retry_after.map(|secs| secs.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn a_database_out_of_reach_is_503_unavailable_not_500() {
        let answers =
            paysaga_common::testkit::check_database_outages(|e| Error::from(e).into_response());
        for response in answers {
            assert!(response.headers().contains_key(header::RETRY_AFTER));
        }
        let api = Error::from(sqlx::Error::PoolClosed)
            .into_api()
            .expect("a client-facing answer");
        assert_eq!(api.code, common_codes::UNAVAILABLE);
        assert!(Error::from(sqlx::Error::RowNotFound).into_api().is_err());
    }
}
