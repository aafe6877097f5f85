//! The order service's errors: each client-facing case with its stable code, and the
//! internal ones that become a generic 500.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    batch::BatchFailure, error::internal_error_response, pass::PassError, retry, ApiError,
    ErrorBody,
};
use paysaga_contracts::batch::Reply;

use crate::{api::ErrorCode, breach::Breach};

paysaga_common::service_error! {
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        #[error("no units left")]
        SoldOut,
        #[error(
            "the member already holds a live reservation of this product, \
             or bought the most allowed"
        )]
        MemberLimit,
        #[error("product {0} not found")]
        ProductNotFound(i64),
        #[error("pass rejected: {0}")]
        Pass(PassError),
        #[error("pass is for product {pass}, not {asked}")]
        PassWrongProduct { pass: i64, asked: i64 },
        #[error("pass belongs to another member")]
        PassWrongMember,
        #[error("pass already used by another member")]
        PassAlreadyUsed,
        #[error("reservation not found")]
        ReservationNotFound,
        #[error("units of the product are on sale")]
        NotSoldOut,
        #[error("not on the product's waitlist")]
        NotOnWaitlist,
        #[error("offer not found")]
        OfferNotFound,
        #[error("offer expired")]
        OfferExpired,
        #[error("offer released")]
        OfferReleased,
        #[error("reservation has expired")]
        ReservationExpired,
        #[error("reservation was cancelled")]
        ReservationCancelled,
        #[error("reservation is confirmed")]
        ReservationConfirmed,
        /// The buyer's available balance does not cover the price: nothing held, no unit.
        #[error("insufficient funds to hold {price}")]
        InsufficientFunds { price: i64 },
        /// A pass or offer that has made [`crate::funds::MAX_ATTEMPTS`] attempts.
        #[error("the pass or offer was tried too often")]
        AttemptsUsedUp,
        #[error("the member has no account")]
        NoAccount,
        /// The member fails one of the product's eligibility rules.
        #[error(transparent)]
        Ineligible(#[from] paysaga_contracts::eligibility::Ineligible),
        /// The account service gave no definite answer to a hold: nothing was reserved (a
        /// hold it may have placed is reused by a retry, or released by the reconciliation).
        #[error("the account service did not answer: {0}")]
        Funds(paysaga_common::client::CallError),
        /// The claim came later than a hold allows ([`crate::funds::CLAIM_WINDOW_SHARE`]):
        /// nothing was reserved, the hold is released.
        #[error("the claim came too late for its hold")]
        ClaimTooLate,
        /// A benchmark alternative's optimistic claim lost to another claim
        /// ([`crate::claim_alternatives`]): nothing held, nothing claimed.
        #[error("another claim changed the product's counter first")]
        ClaimConflict,
        #[error("database error")]
        Database(#[from] sqlx::Error),
        #[error("request task failed")]
        Task(#[from] tokio::task::JoinError),
        /// Something that must never happen did (e.g. a unit not in the state its
        /// reservation implies). The transaction is rolled back; nothing is written.
        #[error("invariant violated: {0}")]
        Invariant(Breach),
        /// The group-committed statement this operation rode in failed as a whole (its own
        /// error inside); the operation may not have been applied.
        #[error("{0}")]
        Batch(BatchFailure<Error>),
    }
}

impl Error {
    pub fn invalid(code: ErrorCode, message: impl Into<String>) -> Self {
        Error::Api(ApiError::unprocessable(code.as_str(), message))
    }

    fn api(&self) -> Option<ApiError> {
        let e = match self {
            Error::Api(e) => e.clone(),
            Error::SoldOut => ApiError::conflict(
                ErrorCode::SoldOut.as_str(),
                "no units left for this product: join its waitlist for a unit that comes back",
            ),
            Error::MemberLimit => ApiError::conflict(
                ErrorCode::MemberLimitReached.as_str(),
                "you already hold a reservation of this product, or bought as many as allowed",
            ),
            Error::ProductNotFound(id) => ApiError::not_found(
                ErrorCode::ProductNotFound.as_str(),
                format!("product {id} not found"),
            ),
            // A pass is an admission credential: one that does not admit this member to
            // this product now is refused as a credential is (403), however it failed.
            Error::Pass(e) => ApiError::new(StatusCode::FORBIDDEN, e.code(), e.to_string()),
            Error::PassWrongProduct { pass, asked } => ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::PassWrongProduct.as_str(),
                format!("the pass is for product {pass}, not product {asked}"),
            ),
            Error::PassWrongMember => ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::PassWrongMember.as_str(),
                "the pass was issued to another member",
            ),
            Error::PassAlreadyUsed => ApiError::conflict(
                ErrorCode::PassAlreadyUsed.as_str(),
                "the pass has already been used by another member",
            ),
            Error::ReservationNotFound => ApiError::not_found(
                ErrorCode::ReservationNotFound.as_str(),
                "reservation not found",
            ),
            Error::NotSoldOut => ApiError::conflict(
                ErrorCode::NotSoldOut.as_str(),
                "units of this product are on sale: reserve one instead of waiting",
            ),
            Error::NotOnWaitlist => ApiError::not_found(
                ErrorCode::NotOnWaitlist.as_str(),
                "you are not on this waitlist",
            ),
            Error::OfferNotFound => {
                ApiError::not_found(ErrorCode::OfferNotFound.as_str(), "offer not found")
            }
            Error::OfferExpired => ApiError::conflict(
                ErrorCode::OfferExpired.as_str(),
                "the offer's deadline passed; the unit went to the next in line",
            ),
            Error::OfferReleased => ApiError::conflict(
                ErrorCode::OfferReleased.as_str(),
                "the offer was given up when you left the waitlist",
            ),
            Error::ReservationExpired => ApiError::conflict(
                ErrorCode::ReservationExpired.as_str(),
                "the reservation expired; its unit is back on sale",
            ),
            Error::ReservationCancelled => ApiError::conflict(
                ErrorCode::ReservationCancelled.as_str(),
                "the reservation was cancelled",
            ),
            Error::ReservationConfirmed => ApiError::conflict(
                ErrorCode::ReservationConfirmed.as_str(),
                "the reservation is confirmed (paid); only an operator can cancel it",
            ),
            Error::InsufficientFunds { price } => ApiError::unprocessable(
                ErrorCode::InsufficientFunds.as_str(),
                format!(
                    "your available balance (balance minus what your live reservations hold) \
                     does not cover the price ({price}); nothing was held and no unit reserved"
                ),
            ),
            Error::ClaimConflict => ApiError::conflict(
                ErrorCode::ClaimConflict.as_str(),
                "another claim changed the product's stock counter first; nothing was held, retry",
            ),
            Error::AttemptsUsedUp => ApiError::conflict(
                ErrorCode::PassAlreadyUsed.as_str(),
                "this pass (or offer) has been tried too often without a unit; take a new pass",
            ),
            Error::NoAccount => ApiError::unprocessable(
                ErrorCode::NoAccount.as_str(),
                "you have no account to hold the price on yet; nothing was reserved",
            ),
            Error::Ineligible(why) => {
                ApiError::new(StatusCode::FORBIDDEN, why.code(), why.to_string())
            }
            Error::Database(_)
            | Error::Invariant(_)
            | Error::Task(_)
            | Error::Batch(_)
            | Error::Funds(_)
            | Error::ClaimTooLate => return None,
        };
        Some(e)
    }
}

/// SQLSTATE of `invariant_breach(detail)` (migration `..._invariant_breach.sql`): a
/// set-based statement found its own writes disagreeing with its plan and aborted itself
/// whole; DETAIL is the breach as JSON.
const BREACH_SQLSTATE: &str = "OB001";

/// A statement's error; its deliberate failure (see [`BREACH_SQLSTATE`]) as the
/// invariant breach it reports.
pub(crate) fn from_statement(e: sqlx::Error) -> Error {
    if let Some(db) = e.as_database_error() {
        if db.code().as_deref() == Some(BREACH_SQLSTATE) {
            let detail = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail())
                .and_then(|d| serde_json::from_str::<Breach>(d).ok());
            if let Some(breach) = detail {
                return Error::Invariant(breach);
            }
        }
    }
    e.into()
}

/// Waits until the server has finished a statement that failed on `conn`. The error
/// reaches the client before the server aborts the statement's implicit transaction, so
/// until then its row locks are still held: a statement run next (a retry, the next
/// flush) would skip those units and find a product sold out, or wait for the locks.
/// One more round trip, on failures only.
pub(crate) async fn settle(conn: &mut sqlx::PgConnection) {
    if let Err(e) = sqlx::Connection::ping(conn).await {
        tracing::warn!(error = %e, "settling a connection after a failed statement");
    }
}

impl Error {
    /// This error as one operation's answer inside a batch: the status and body its own
    /// endpoint would have sent (internal errors never reach here: they fail the batch).
    pub(crate) fn reply(&self) -> Reply {
        let (status, code, message) = match self.api() {
            Some(e) => (e.status, e.code, e.message),
            None if self.is_unavailable() => self.unavailable(),
            None => (
                StatusCode::INTERNAL_SERVER_ERROR,
                paysaga_common::error::codes::INTERNAL,
                "internal error".to_owned(),
            ),
        };
        Reply::refused(
            status.as_u16(),
            &ErrorBody {
                code: code.to_owned(),
                message,
            },
        )
    }

    /// PostgreSQL rolled the transaction back to break a deadlock or a serialization
    /// conflict: running it again is safe.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Database(e) if retry::is_rolled_back_conflict(e))
    }

    /// The database could not serve, and nothing was written: busy (no connection free
    /// in time, the statement timeout, a lock conflict that outlasted its retries) or out
    /// of reach (connection lost, a server down, starting, or a standby;
    /// `paysaga_common::db::unavailable`).
    fn is_unavailable(&self) -> bool {
        match self {
            // 57014 query_canceled: statement_timeout fired.
            Error::Database(sqlx::Error::Database(e)) if e.code().as_deref() == Some("57014") => {
                true
            }
            _ if self.is_conflict() => true,
            Error::Database(e) => paysaga_common::db::unavailable(e),
            Error::Batch(f) => f.flush_error().is_some_and(Error::is_unavailable),
            // Nothing was reserved; a retry with the same pass is safe.
            Error::Funds(_) | Error::ClaimTooLate => true,
            _ => false,
        }
    }
}

impl Error {
    /// The answer to a request that could not be served now and did nothing: 503, retry
    /// shortly (with the same pass: a hold it placed is reused).
    fn unavailable(&self) -> (StatusCode, &'static str, String) {
        let message = match self {
            Error::Funds(_) => {
                "the account service did not answer; nothing was reserved, retry with the same pass"
            }
            Error::ClaimTooLate => {
                "the reservation could not be made in time; nothing was reserved, retry"
            }
            _ => "the service's database is overloaded or unavailable; retry shortly",
        };
        (
            StatusCode::SERVICE_UNAVAILABLE,
            paysaga_common::error::codes::UNAVAILABLE,
            message.to_owned(),
        )
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match self.api() {
            Some(e) => e.into_response(),
            None => {
                // Load (pool exhaustion, the statement timeout) and a database out of reach
                // (a failover) are not bugs: say so, so callers retry (and a saga treats it
                // as an unknown outcome, as it must).
                if self.is_unavailable() {
                    tracing::warn!(error = %self, cause = ?self, "busy or unavailable; answering 503");
                    let (status, code, message) = self.unavailable();
                    return ApiError::new(status, code, message).into_response();
                }
                internal_error_response(&self)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_out_of_reach_is_503_unavailable_not_500() {
        paysaga_common::testkit::check_database_outages(|e| Error::Database(e).into_response());
    }

    #[test]
    fn an_account_service_without_an_answer_is_503_unavailable_not_500() {
        let silent = Error::Funds(paysaga_common::client::CallError::Unknown {
            status: None,
            reason: "timed out".into(),
        });
        let (status, code, message) = silent.unavailable();
        assert_eq!(
            (status, code),
            (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
        );
        assert!(message.contains("account service"), "{message}");
        assert_eq!(
            silent.into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            Error::ClaimTooLate.into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            Error::InsufficientFunds { price: 1 }
                .into_response()
                .status(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
