//! The account service's wire types, shared by its server and its typed client.

use chrono::{DateTime, Utc};
use paysaga_common::{auth::MemberId, money::Amount};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// The codes this service refuses with, beside the common ones in
/// `paysaga_common::error::codes`. Stable: callers match on them. On the wire each is
/// its SCREAMING_SNAKE_CASE name (`INSUFFICIENT_FUNDS`), in the `code` of the error body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AccountCode {
    /// The debit would take the balance below zero. Recorded: the key stays declined.
    InsufficientFunds,
    /// The operation key was already used for a different request.
    OperationKeyReused,
    /// No such account (or not one the caller may see).
    AccountNotFound,
    /// Debits and credits move a member's money; the merchant account is the other side.
    AccountNotMember,
    /// No transaction was ever recorded under this operation key.
    TransactionNotFound,
    /// `refund_of` names no debit.
    DebitNotFound,
    /// `refund_of` names a debit that was declined: no money moved, nothing to refund.
    DebitDeclined,
    /// The refund would return more than the debit took.
    RefundExceedsDebit,
    /// A refund goes back to the account the debit came from, nowhere else.
    RefundAccountMismatch,
    /// An opening balance below zero or above the maximum.
    InvalidOpeningBalance,
    /// An operation key outside 1-128 characters of `[A-Za-z0-9_.:-]`.
    InvalidOperationKey,
    /// The movement would overflow a balance.
    AmountOutOfRange,
}

impl AccountCode {
    pub const ALL: [AccountCode; 12] = [
        AccountCode::InsufficientFunds,
        AccountCode::OperationKeyReused,
        AccountCode::AccountNotFound,
        AccountCode::AccountNotMember,
        AccountCode::TransactionNotFound,
        AccountCode::DebitNotFound,
        AccountCode::DebitDeclined,
        AccountCode::RefundExceedsDebit,
        AccountCode::RefundAccountMismatch,
        AccountCode::InvalidOpeningBalance,
        AccountCode::InvalidOperationKey,
        AccountCode::AmountOutOfRange,
    ];

    /// The wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            AccountCode::InsufficientFunds => "INSUFFICIENT_FUNDS",
            AccountCode::OperationKeyReused => "OPERATION_KEY_REUSED",
            AccountCode::AccountNotFound => "ACCOUNT_NOT_FOUND",
            AccountCode::AccountNotMember => "ACCOUNT_NOT_MEMBER",
            AccountCode::TransactionNotFound => "TRANSACTION_NOT_FOUND",
            AccountCode::DebitNotFound => "DEBIT_NOT_FOUND",
            AccountCode::DebitDeclined => "DEBIT_DECLINED",
            AccountCode::RefundExceedsDebit => "REFUND_EXCEEDS_DEBIT",
            AccountCode::RefundAccountMismatch => "REFUND_ACCOUNT_MISMATCH",
            AccountCode::InvalidOpeningBalance => "INVALID_OPENING_BALANCE",
            AccountCode::InvalidOperationKey => "INVALID_OPERATION_KEY",
            AccountCode::AmountOutOfRange => "AMOUNT_OUT_OF_RANGE",
        }
    }

    /// The code an error body carries, if it is one of this service's own (`None` for
    /// a common code such as `UNAVAILABLE`, or one this contract does not know).
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// A debit refused with this code never applies under its key: a decline is
    /// recorded and answered again, and the account named is missing or not a member's.
    pub fn ends_debit(self) -> bool {
        matches!(
            self,
            AccountCode::InsufficientFunds
                | AccountCode::AccountNotFound
                | AccountCode::AccountNotMember
        )
    }

    /// A refund refused with this code is refused again however often it is sent: a
    /// debit's kind, status and account never change and its refunded total only grows.
    pub fn ends_refund(self) -> bool {
        matches!(
            self,
            AccountCode::RefundExceedsDebit
                | AccountCode::DebitNotFound
                | AccountCode::DebitDeclined
                | AccountCode::RefundAccountMismatch
        )
    }
}

impl std::fmt::Display for AccountCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// [`AccountCode`]s as string constants, for callers that list codes beside other
/// services' (the member service's pass-through list).
pub mod codes {
    use super::AccountCode;

    pub const INSUFFICIENT_FUNDS: &str = AccountCode::InsufficientFunds.as_str();
    pub const OPERATION_KEY_REUSED: &str = AccountCode::OperationKeyReused.as_str();
    pub const ACCOUNT_NOT_FOUND: &str = AccountCode::AccountNotFound.as_str();
    pub const ACCOUNT_NOT_MEMBER: &str = AccountCode::AccountNotMember.as_str();
    pub const TRANSACTION_NOT_FOUND: &str = AccountCode::TransactionNotFound.as_str();
    pub const DEBIT_NOT_FOUND: &str = AccountCode::DebitNotFound.as_str();
    pub const DEBIT_DECLINED: &str = AccountCode::DebitDeclined.as_str();
    pub const REFUND_EXCEEDS_DEBIT: &str = AccountCode::RefundExceedsDebit.as_str();
    pub const REFUND_ACCOUNT_MISMATCH: &str = AccountCode::RefundAccountMismatch.as_str();
    pub const INVALID_OPENING_BALANCE: &str = AccountCode::InvalidOpeningBalance.as_str();
    pub const INVALID_OPERATION_KEY: &str = AccountCode::InvalidOperationKey.as_str();
    pub const AMOUNT_OUT_OF_RANGE: &str = AccountCode::AmountOutOfRange.as_str();
}

/// A stored name (an enum's column value) that this contract has no variant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {got:?} is not part of the contract")]
pub struct UnknownName {
    pub what: &'static str,
    pub got: String,
}

/// `as_str` (the wire and column form, SCREAMING_SNAKE_CASE, as serde writes it) and
/// `TryFrom<String>` (reading a column) for a fieldless wire enum.
macro_rules! named {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl TryFrom<String> for $ty {
            type Error = UnknownName;
            fn try_from(s: String) -> Result<Self, UnknownName> {
                match s.as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(UnknownName { what: $what, got: s }),
                }
            }
        }
    };
}

/// A caller-supplied key naming one movement of money: 1 to 128 characters of
/// `[A-Za-z0-9_.:-]`, e.g. `pay:0190c2a4-...:debit`. A key has one outcome forever.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationKey(String);

/// The schema states what [`OperationKey::parse`] accepts.
impl utoipa::PartialSchema for OperationKey {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_OPERATION_KEY_LEN))
            .pattern(Some(OPERATION_KEY_PATTERN))
            .examples(["pay:0190c2a4-7c1e-7cc0-8a55-3b1f0e6f2d11:debit"])
            .into()
    }
}

impl ToSchema for OperationKey {
    fn name() -> std::borrow::Cow<'static, str> {
        "OperationKey".into()
    }
}

/// [`OperationKey::parse`] as a pattern, for the OpenAPI document.
pub const OPERATION_KEY_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,128}$";

/// The longest operation key accepted.
pub const MAX_OPERATION_KEY_LEN: usize = 128;

impl OperationKey {
    pub fn parse(s: impl Into<String>) -> Result<Self, &'static str> {
        let s = s.into();
        let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
        if s.is_empty() || s.len() > MAX_OPERATION_KEY_LEN || !s.chars().all(ok_char) {
            return Err("operation key must be 1-128 characters of [A-Za-z0-9_.:-]");
        }
        Ok(Self(s))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OperationKey {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl From<OperationKey> for String {
    fn from(k: OperationKey) -> String {
        k.0
    }
}

impl std::fmt::Display for OperationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `POST /v1/accounts`: open a member account. The opening balance (minor units,
/// `>= 0`) is a deposit from outside the system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAccountRequest {
    pub member_id: MemberId,
    /// 0 to 1,000,000,000,000 minor units.
    #[schema(example = 100000, minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub opening_balance: i64,
    /// Makes the opening idempotent: the same key opens one account, however often it
    /// is sent (201 the first time, 200 with the same account after); the key with a
    /// different member or balance is 409 `OPERATION_KEY_REUSED`. Without a key every
    /// call opens a new account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_key: Option<OperationKey>,
}

/// `POST /v1/deposits`: money paid in from outside (an operator's top-up), once per
/// operation key. A ledger entry of kind `DEPOSIT`; the merchant is not involved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DepositRequest {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AccountKind {
    Member,
    Merchant,
}

/// An account. For the merchant account, `balance` is the sum of its shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Account {
    pub id: i64,
    pub member_id: String,
    pub balance: i64,
    pub kind: AccountKind,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/accounts/{id}`: the account with its most recent debits and credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccountView {
    pub account: Account,
    pub recent_transactions: Vec<Transaction>,
}

/// `POST /v1/debits`: take `amount` from a member account and give it to the merchant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DebitRequest {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
}

/// `POST /v1/credits`: refund (part of) the debit whose operation key is `refund_of`,
/// from the merchant back to the member account that debit came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditRequest {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
    pub refund_of: OperationKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TransactionKind {
    Debit,
    Credit,
    Deposit,
}

/// `APPLIED`: money moved. `DECLINED`: a debit refused for insufficient funds; no money
/// moved, and the key can never succeed afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TransactionStatus {
    Applied,
    Declined,
}

named!(AccountKind, "account kind", { Member => "MEMBER", Merchant => "MERCHANT" });
named!(TransactionKind, "transaction kind", {
    Debit => "DEBIT",
    Credit => "CREDIT",
    Deposit => "DEPOSIT",
});
named!(TransactionStatus, "transaction status", {
    Applied => "APPLIED",
    Declined => "DECLINED",
});

/// One movement of money between a member account and the merchant account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Transaction {
    pub id: Uuid,
    pub operation_key: String,
    pub kind: TransactionKind,
    pub status: TransactionStatus,
    pub account_id: i64,
    pub amount: i64,
    /// For a credit: the operation key of the debit it refunds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_of: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One operation of `POST /v1/batch` (service credential). Each is answered as its own
/// endpoint would answer it; the debits of one batch are applied together, then its
/// credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AccountOp {
    /// As `POST /v1/debits`.
    Debit(DebitRequest),
    /// As `POST /v1/credits`.
    Credit(CreditRequest),
    /// As `GET /v1/accounts/{id}`, without the recent transactions.
    Account { account_id: i64 },
    /// As `GET /v1/transactions/{key}`.
    Transaction { operation_key: String },
}

/// `POST /v1/batch`: up to `batch::MAX_OPS` operations, answered in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountBatch {
    pub ops: Vec<AccountOp>,
    /// The W3C `traceparent` of the payment each operation belongs to, by position
    /// (`null` for one without): each operation's span joins its own payment's trace.
    /// Sent only when tracing is on; absent, the batch is answered the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traceparents: Vec<Option<String>>,
}

impl AccountBatch {
    /// A batch of `ops` without trace contexts.
    pub fn new(ops: Vec<AccountOp>) -> Self {
        Self {
            ops,
            traceparents: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_keys_are_bounded_and_plain() {
        assert!(OperationKey::parse("pay:0190c2a4-7c1e-7cc0-8a55-3b1f0e6f2d11:debit").is_ok());
        assert!(OperationKey::parse("").is_err());
        assert!(OperationKey::parse("a/b").is_err());
        assert!(OperationKey::parse("a b").is_err());
        assert!(OperationKey::parse("x".repeat(MAX_OPERATION_KEY_LEN + 1)).is_err());
        assert!(OperationKey::parse("x".repeat(MAX_OPERATION_KEY_LEN)).is_ok());
    }

    #[test]
    fn wire_names_are_the_contract() {
        let json = serde_json::json!({
            "id": "0190c2a4-7c1e-7cc0-8a55-3b1f0e6f2d11",
            "operation_key": "k",
            "kind": "DEBIT",
            "status": "DECLINED",
            "account_id": 7,
            "amount": 100,
            "created_at": "2026-01-01T00:00:00Z"
        });
        let t: Transaction = serde_json::from_value(json).expect("contract shape parses");
        assert_eq!(t.kind, TransactionKind::Debit);
        assert_eq!(t.status, TransactionStatus::Declined);
        assert_eq!(t.refund_of, None);
        let kind = serde_json::to_value(AccountKind::Merchant).expect("serialises");
        assert_eq!(kind, serde_json::json!("MERCHANT"));
    }

    #[test]
    fn codes_and_names_read_as_serde_writes_them() {
        for code in AccountCode::ALL {
            let wire = serde_json::to_value(code).expect("serialises");
            assert_eq!(wire, serde_json::json!(code.as_str()));
            assert_eq!(AccountCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(AccountCode::parse("UNAVAILABLE"), None);
        assert_eq!(codes::INSUFFICIENT_FUNDS, "INSUFFICIENT_FUNDS");
        for kind in [
            TransactionKind::Debit,
            TransactionKind::Credit,
            TransactionKind::Deposit,
        ] {
            assert_eq!(
                serde_json::to_value(kind).expect("json"),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(
                TransactionKind::try_from(kind.as_str().to_owned()),
                Ok(kind)
            );
        }
        for status in [TransactionStatus::Applied, TransactionStatus::Declined] {
            assert_eq!(
                serde_json::to_value(status).expect("json"),
                serde_json::json!(status.as_str())
            );
            assert_eq!(
                TransactionStatus::try_from(status.as_str().to_owned()),
                Ok(status)
            );
        }
        for kind in [AccountKind::Member, AccountKind::Merchant] {
            assert_eq!(
                serde_json::to_value(kind).expect("json"),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(AccountKind::try_from(kind.as_str().to_owned()), Ok(kind));
        }
        assert!(TransactionKind::try_from("OPENING".to_owned()).is_err());
    }
}
