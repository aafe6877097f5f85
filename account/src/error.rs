//! The account service's errors and the answer each one gets.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    error::{codes as common_codes, internal_error_response},
    retry, ApiError,
};

use paysaga_contracts::batch::BATCH_TOO_LARGE;

use crate::api::{codes, Transaction};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rejection from a common extractor (auth, JSON, path).
    #[error("{}: {}", .0.code, .0.message)]
    Api(ApiError),
    /// Recorded under its key: the same key is declined forever.
    #[error("insufficient funds for debit {}", .0.operation_key)]
    InsufficientFunds(Box<Transaction>),
    #[error("operation key {0} was already used for a different request")]
    OperationKeyReused(String),
    #[error("account {0} not found")]
    AccountNotFound(i64),
    #[error("account {0} is not a member account")]
    AccountNotMember(i64),
    #[error("no transaction under operation key {0}")]
    TransactionNotFound(String),
    #[error("no debit under operation key {0}")]
    DebitNotFound(String),
    #[error("debit {0} was declined; there is nothing to refund")]
    DebitDeclined(String),
    #[error("refund of {requested} exceeds what is left of debit {debit} ({left})")]
    RefundExceedsDebit {
        debit: String,
        requested: i64,
        left: i64,
    },
    #[error("debit {debit} was taken from account {debited}, not {requested}")]
    RefundAccountMismatch {
        debit: String,
        debited: i64,
        requested: i64,
    },
    #[error("opening balance must be between 0 and {max} minor units")]
    InvalidOpeningBalance { max: i64 },
    #[error("{0}")]
    InvalidOperationKey(&'static str),
    #[error("the movement would take a balance out of range")]
    AmountOutOfRange,
    #[error("a batch carries 1 to {max} operations, not {got}")]
    BatchTooLarge { max: usize, got: usize },
    /// The database cannot serve now (no connection free in time, connection lost, a
    /// server that is down, starting, or a standby): retry under the same operation key,
    /// which tells whether a statement cut mid-way had committed.
    #[error(
        "the ledger's database is unavailable or overloaded; retry with the same operation key"
    )]
    Unavailable,
    #[error("database")]
    Database(#[source] sqlx::Error),
    /// A stored row that breaks the schema's own rules; should be impossible.
    #[error("corrupt ledger row: {0}")]
    Corrupt(String),
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Error::Api(e)
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if paysaga_common::db::unavailable(&e) {
            return Error::Unavailable;
        }
        if let Some(db) = e.as_database_error() {
            // 22003 numeric_value_out_of_range: a BIGINT balance would overflow.
            if db.code().as_deref() == Some("22003") {
                return Error::AmountOutOfRange;
            }
        }
        Error::Database(e)
    }
}

impl Error {
    /// PostgreSQL rolled the transaction back to break a deadlock or a serialization
    /// conflict: running it again is safe.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Database(e) if retry::is_rolled_back_conflict(e))
    }

    /// The answer a client sees for this error, or the error itself back when it is
    /// internal (a 500 whose cause is logged, never shown). One mapping for whole
    /// responses and for the per-operation replies of a batch, so both say the same.
    pub(crate) fn into_api(self) -> Result<ApiError, Error> {
        let msg = self.to_string();
        Ok(match self {
            Error::Api(e) => e,
            Error::InsufficientFunds(_) => ApiError::unprocessable(codes::INSUFFICIENT_FUNDS, msg),
            Error::OperationKeyReused(_) => ApiError::conflict(codes::OPERATION_KEY_REUSED, msg),
            Error::AccountNotFound(_) => ApiError::not_found(codes::ACCOUNT_NOT_FOUND, msg),
            Error::AccountNotMember(_) => ApiError::unprocessable(codes::ACCOUNT_NOT_MEMBER, msg),
            Error::TransactionNotFound(_) => ApiError::not_found(codes::TRANSACTION_NOT_FOUND, msg),
            Error::DebitNotFound(_) => ApiError::not_found(codes::DEBIT_NOT_FOUND, msg),
            Error::DebitDeclined(_) => ApiError::unprocessable(codes::DEBIT_DECLINED, msg),
            Error::RefundExceedsDebit { .. } => {
                ApiError::unprocessable(codes::REFUND_EXCEEDS_DEBIT, msg)
            }
            Error::RefundAccountMismatch { .. } => {
                ApiError::unprocessable(codes::REFUND_ACCOUNT_MISMATCH, msg)
            }
            Error::InvalidOpeningBalance { .. } => {
                ApiError::unprocessable(codes::INVALID_OPENING_BALANCE, msg)
            }
            Error::InvalidOperationKey(_) => {
                ApiError::bad_request(codes::INVALID_OPERATION_KEY, msg)
            }
            Error::AmountOutOfRange => ApiError::unprocessable(codes::AMOUNT_OUT_OF_RANGE, msg),
            Error::BatchTooLarge { .. } => ApiError::bad_request(BATCH_TOO_LARGE, msg),
            Error::Unavailable => {
                tracing::warn!("database unavailable or pool exhausted; answering 503");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    common_codes::UNAVAILABLE,
                    msg,
                )
            }
            // Rolled back whole by PostgreSQL and still meeting a conflict after the
            // retries: nothing happened, the caller may try again.
            Error::Database(ref e) if retry::is_rolled_back_conflict(e) => {
                tracing::warn!("lock conflicts persisted through retries; answering 503");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    common_codes::UNAVAILABLE,
                    "the ledger is busy; nothing was done, try again",
                )
            }
            e @ (Error::Database(_) | Error::Corrupt(_)) => return Err(e),
        })
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self.into_api() {
            Ok(api) => api.into_response(),
            Err(internal) => internal_error_response(&internal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_out_of_reach_is_503_unavailable_not_500() {
        let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        for e in [
            sqlx::Error::Io(lost),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
        ] {
            let api = Error::from(e).into_api().expect("a client-facing answer");
            assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(api.code, common_codes::UNAVAILABLE);
        }
        assert!(Error::from(sqlx::Error::RowNotFound).into_api().is_err());
    }
}
