//! The account service's errors and the answer each one gets.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    error::{codes as common_codes, internal_error_response},
    retry, ApiError, ErrorBody,
};

use paysaga_contracts::batch::BATCH_TOO_LARGE;

use crate::api::{AccountCode, Transaction};

paysaga_common::service_error! {
    rate_limited;
    #[derive(Debug, thiserror::Error)]
    pub enum Error {
        /// A debit recorded `DECLINED` under its key (its `declined_for` says why: short of
        /// funds, or a capture whose hold is gone): the same key is declined forever.
        #[error("debit {} declined: {}", .0.operation_key, decline_reason(.0))]
        Declined(Box<Transaction>),
        /// A hold or a transfer the available balance does not cover: nothing held or
        /// moved, nothing recorded.
        #[error("insufficient funds: {available} available, {amount} asked for")]
        NotCovered { available: i64, amount: i64 },
        #[error("member {0} has no account")]
        NoAccount(String),
        #[error("no hold under operation key {0}")]
        HoldNotFound(String),
        #[error("hold {0} was captured by a debit; it cannot be released")]
        HoldCaptured(String),
        #[error("operation key {0} was already used for a different request")]
        OperationKeyReused(String),
        #[error("account {0} not found")]
        AccountNotFound(i64),
        #[error("account {0} is not a member account")]
        AccountNotMember(i64),
        #[error("a transfer goes to another member's account, not the sender's own")]
        TransferToSelf,
        /// A deposit without a valid orchestrator authorization naming it: nothing written.
        #[error("deposit not approved: {0}")]
        DepositNotApproved(#[source] paysaga_common::deposits::DepositRefusal),
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
        #[error("opening balance must be between 0 and {max} minor units (outside development mode an account opens empty: money enters by a deposit a staff top-up authorizes)")]
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
        /// The ledger broke one of its own rules; should be impossible.
        #[error("ledger invariant breach")]
        Breach(#[from] Breach),
    }
}

/// Why a declined debit was declined, in words.
fn decline_reason(t: &Transaction) -> &'static str {
    match t.declined_for.unwrap_or(AccountCode::InsufficientFunds) {
        AccountCode::HoldNotFound => "no hold under its hold key",
        AccountCode::HoldReleased => "its hold was released",
        AccountCode::HoldExpired => "its hold expired",
        AccountCode::HoldMismatch => {
            "its hold is on another account, for another amount, or already captured"
        }
        _ => "insufficient funds",
    }
}

/// The rule a statement carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Debit,
    Credit,
    Deposit,
    Hold,
    Release,
    Transfer,
}

impl Rule {
    pub const ALL: [Rule; 6] = [
        Rule::Debit,
        Rule::Credit,
        Rule::Deposit,
        Rule::Hold,
        Rule::Release,
        Rule::Transfer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Debit => "debit",
            Rule::Credit => "credit",
            Rule::Deposit => "deposit",
            Rule::Hold => "hold",
            Rule::Release => "release",
            Rule::Transfer => "transfer",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What broke, with what it concerns; never shown to clients (a generic 500), logged once
/// with the error's cause chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Breach {
    /// A rule's statement failed one of its own checks (a balance that would not cover
    /// what its rows take, an account or shard that did not move by what its rows say)
    /// and failed whole: nothing of it was applied.
    #[error("{rule} statement failed its own check: {}", show_facts(.facts))]
    Check {
        rule: Rule,
        /// What the statement reported, by name (`account`, `balance`, `applied`,
        /// `moved`, ...).
        facts: Vec<(String, i64)>,
    },
    /// Nothing was recorded under the key, no row holds it, yet it names a member
    /// account: the insert neither inserted nor met a conflict.
    #[error("{rule} {key} on member account {account} was neither recorded nor found")]
    Unclaimed {
        rule: Rule,
        key: String,
        account: i64,
    },
    /// A rule's statement answered `got` of the `sent` operations it was given.
    #[error("{rule} statement answered {got} of {sent} operations")]
    Unanswered { rule: Rule, sent: usize, got: usize },
    /// A batch (or a lone operation) got `got` answers for its `sent` operations.
    #[error("{got} answers for {sent} operations")]
    Unreplied { sent: usize, got: usize },
    /// A rule's statement answered request `index` (0-based) with the row of ordinal
    /// `ord` (1-based).
    #[error("{rule} statement answered request {index} with row {ord}")]
    Misordered { rule: Rule, index: usize, ord: i64 },
    /// An opening without a key met a conflict on the key's constraint.
    #[error("an unkeyed opening for member {member} conflicted")]
    UnkeyedOpeningConflicted { member: String },
    /// An opening key met a conflict but no account holds it.
    #[error("opening key {key} conflicted but holds no account")]
    OpeningKeyHoldsNothing { key: String },
}

fn show_facts(facts: &[(String, i64)]) -> String {
    facts
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a rule's statement casts to a number to fail itself when one of its checks
/// fails (SQLSTATE 22P02, the one way a plain SQL statement can abort): this, the rule,
/// then `name=value` pairs, separated by `;`. An autocommit statement so failed rolls
/// back whole.
pub(crate) const BREACH_MARK: &str = "account invariant breach";

impl Breach {
    /// `Ok` when a rule's statement answered each of the `sent` operations it was given
    /// (`got` answers), else [`Breach::Unanswered`].
    pub fn all_answered(rule: Rule, sent: usize, got: usize) -> Result<(), Breach> {
        if got == sent {
            Ok(())
        } else {
            Err(Breach::Unanswered { rule, sent, got })
        }
    }

    /// The breach a statement reported by failing on purpose (see [`BREACH_MARK`]).
    fn reported(e: &sqlx::Error) -> Option<Breach> {
        let db = e.as_database_error()?;
        if db.code().as_deref() != Some("22P02") {
            return None;
        }
        // `invalid input syntax for type integer: "<mark>;<rule>;<name>=<n>;..."`
        let message = db.message();
        let start = message.find(BREACH_MARK)?;
        let mut parts = message[start..].trim_end_matches('"').split(';').skip(1);
        let name = parts.next()?;
        let rule = Rule::ALL.into_iter().find(|r| r.as_str() == name)?;
        let facts = parts
            .filter_map(|p| {
                let (name, n) = p.split_once('=')?;
                Some((name.to_owned(), n.parse().ok()?))
            })
            .collect();
        Some(Breach::Check { rule, facts })
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if paysaga_common::db::unavailable(&e) {
            return Error::Unavailable;
        }
        if let Some(breach) = Breach::reported(&e) {
            return Error::Breach(breach);
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
    /// PostgreSQL rolled the statement back to break a deadlock or a serialization
    /// conflict: running it again is safe.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Database(e) if retry::is_rolled_back_conflict(e))
    }

    /// The service's own code for this refusal, if it has one.
    fn code(&self) -> Option<AccountCode> {
        Some(match self {
            Error::Declined(t) => t.declined_for.unwrap_or(AccountCode::InsufficientFunds),
            Error::NotCovered { .. } => AccountCode::InsufficientFunds,
            Error::NoAccount(_) => AccountCode::AccountNotFound,
            Error::HoldNotFound(_) => AccountCode::HoldNotFound,
            Error::HoldCaptured(_) => AccountCode::HoldCaptured,
            Error::OperationKeyReused(_) => AccountCode::OperationKeyReused,
            Error::AccountNotFound(_) => AccountCode::AccountNotFound,
            Error::AccountNotMember(_) => AccountCode::AccountNotMember,
            Error::TransferToSelf => AccountCode::TransferToSelf,
            Error::DepositNotApproved(_) => AccountCode::DepositNotApproved,
            Error::TransactionNotFound(_) => AccountCode::TransactionNotFound,
            Error::DebitNotFound(_) => AccountCode::DebitNotFound,
            Error::DebitDeclined(_) => AccountCode::DebitDeclined,
            Error::RefundExceedsDebit { .. } => AccountCode::RefundExceedsDebit,
            Error::RefundAccountMismatch { .. } => AccountCode::RefundAccountMismatch,
            Error::InvalidOpeningBalance { .. } => AccountCode::InvalidOpeningBalance,
            Error::InvalidOperationKey(_) => AccountCode::InvalidOperationKey,
            Error::AmountOutOfRange => AccountCode::AmountOutOfRange,
            Error::Api(_)
            | Error::RateLimited(_)
            | Error::BatchTooLarge { .. }
            | Error::Unavailable
            | Error::Database(_)
            | Error::Breach(_) => return None,
        })
    }

    /// The answer a client sees for this error, or the error itself back when it is
    /// internal (a 500 whose cause is logged, never shown). One mapping for whole
    /// responses and for the per-operation replies of a batch, so both say the same.
    pub(crate) fn into_api(self) -> Result<ApiError, Error> {
        let msg = self.to_string();
        // Every recorded decline is 422, whatever its reason (a capture's missing hold
        // included): the debit was judged and refused.
        if let (Error::Declined(_), Some(code)) = (&self, self.code()) {
            return Ok(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code.as_str(),
                msg,
            ));
        }
        if let Some(code) = self.code() {
            let status = match code {
                AccountCode::OperationKeyReused | AccountCode::HoldCaptured => StatusCode::CONFLICT,
                AccountCode::AccountNotFound
                | AccountCode::TransactionNotFound
                | AccountCode::DebitNotFound
                | AccountCode::HoldNotFound => StatusCode::NOT_FOUND,
                AccountCode::InvalidOperationKey => StatusCode::BAD_REQUEST,
                AccountCode::DepositNotApproved => StatusCode::FORBIDDEN,
                AccountCode::InsufficientFunds
                | AccountCode::AccountNotMember
                | AccountCode::DebitDeclined
                | AccountCode::RefundExceedsDebit
                | AccountCode::RefundAccountMismatch
                | AccountCode::InvalidOpeningBalance
                | AccountCode::AmountOutOfRange
                | AccountCode::HoldReleased
                | AccountCode::HoldExpired
                | AccountCode::HoldMismatch
                | AccountCode::TransferToSelf => StatusCode::UNPROCESSABLE_ENTITY,
            };
            return Ok(ApiError::new(status, code.as_str(), msg));
        }
        Ok(match self {
            Error::Api(e) => e,
            Error::RateLimited(_) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                common_codes::RATE_LIMITED,
                msg,
            ),
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
            e => return Err(e),
        })
    }

    /// This error as one operation's reply inside a batch: the status and body its own
    /// endpoint would have sent. An internal error is logged here, since a reply inside
    /// a 200 passes no middleware, and answered with the generic 500.
    pub(crate) fn into_reply(self) -> (u16, ErrorBody) {
        match self.into_api() {
            Ok(api) => (
                api.status.as_u16(),
                ErrorBody {
                    code: api.code.to_owned(),
                    message: api.message,
                },
            ),
            Err(internal) => {
                tracing::error!(error = %paysaga_common::error::cause_chain(&internal), "batch operation failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
                    ErrorBody {
                        code: common_codes::INTERNAL.to_owned(),
                        message: "internal error; it has been logged".to_owned(),
                    },
                )
            }
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        // Its own answer carries `Retry-After`.
        if let Error::RateLimited(limited) = self {
            return limited.into_response();
        }
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
        paysaga_common::testkit::check_database_outages(|e| Error::from(e).into_response());
        let api = Error::from(sqlx::Error::PoolClosed)
            .into_api()
            .expect("a client-facing answer");
        assert_eq!(api.code, common_codes::UNAVAILABLE);
        assert!(Error::from(sqlx::Error::RowNotFound).into_api().is_err());
    }

    #[test]
    fn a_breach_is_internal_and_names_what_it_concerns() {
        let breach = Breach::Check {
            rule: Rule::Debit,
            facts: vec![("applied".into(), 3), ("moved".into(), 2)],
        };
        assert_eq!(
            breach.to_string(),
            "debit statement failed its own check: applied 3, moved 2"
        );
        assert!(Error::from(breach).into_api().is_err());
        let hidden = Breach::OpeningKeyHoldsNothing {
            key: "member:secret".into(),
        };
        let (status, body) = Error::from(hidden).into_reply();
        assert_eq!(status, 500);
        assert_eq!(body.code, common_codes::INTERNAL);
        assert!(!body.message.contains("secret"), "{}", body.message);
    }
}
