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
    /// The debit (or transfer) would take more than the available balance. A debit's is
    /// recorded: the key stays declined; a hold's or a transfer's is not.
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
    /// No hold under this operation key. On a capture: recorded, the debit's key stays
    /// declined.
    HoldNotFound,
    /// A capture found its hold released (the reservation was cancelled, or the hold
    /// lapsed and was swept). Recorded: the debit's key stays declined.
    HoldReleased,
    /// A capture found its hold past its deadline. Recorded: the debit's key stays
    /// declined.
    HoldExpired,
    /// A capture named a hold on another account, for another amount, or one another
    /// debit already captured. Recorded: the debit's key stays declined.
    HoldMismatch,
    /// A release of a hold that a debit captured: the money is paid, not held.
    HoldCaptured,
    /// A transfer to the sender's own account (or any account of the sender).
    TransferToSelf,
    /// A deposit without a valid deposit authorization of the orchestrator naming this
    /// very deposit (missing, not signed with the orchestrator's key, expired, or for
    /// another member, amount or key): nothing written (403).
    DepositNotApproved,
}

impl AccountCode {
    /// A debit refused with this code never applies under its key: a decline is
    /// recorded and answered again (short of funds, or a capture whose hold is gone),
    /// and the account named is missing or not a member's.
    pub fn ends_debit(self) -> bool {
        self.is_decline()
            || matches!(
                self,
                AccountCode::AccountNotFound | AccountCode::AccountNotMember
            )
    }

    /// A reason a debit is recorded `DECLINED` for (its `declined_for`).
    pub fn is_decline(self) -> bool {
        matches!(
            self,
            AccountCode::InsufficientFunds
                | AccountCode::HoldNotFound
                | AccountCode::HoldReleased
                | AccountCode::HoldExpired
                | AccountCode::HoldMismatch
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

wire_names!(
    AccountCode,
    /// [`AccountCode`]s as string constants, for callers that list codes beside other
    /// services' (the member service's pass-through list).
    mod codes {
        InsufficientFunds => INSUFFICIENT_FUNDS,
        OperationKeyReused => OPERATION_KEY_REUSED,
        AccountNotFound => ACCOUNT_NOT_FOUND,
        AccountNotMember => ACCOUNT_NOT_MEMBER,
        TransactionNotFound => TRANSACTION_NOT_FOUND,
        DebitNotFound => DEBIT_NOT_FOUND,
        DebitDeclined => DEBIT_DECLINED,
        RefundExceedsDebit => REFUND_EXCEEDS_DEBIT,
        RefundAccountMismatch => REFUND_ACCOUNT_MISMATCH,
        InvalidOpeningBalance => INVALID_OPENING_BALANCE,
        InvalidOperationKey => INVALID_OPERATION_KEY,
        AmountOutOfRange => AMOUNT_OUT_OF_RANGE,
        HoldNotFound => HOLD_NOT_FOUND,
        HoldReleased => HOLD_RELEASED,
        HoldExpired => HOLD_EXPIRED,
        HoldMismatch => HOLD_MISMATCH,
        HoldCaptured => HOLD_CAPTURED,
        TransferToSelf => TRANSFER_TO_SELF,
        DepositNotApproved => DEPOSIT_NOT_APPROVED,
    }
);

/// A stored name (an enum's column value) that this contract has no variant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {got:?} is not part of the contract")]
pub struct UnknownName {
    pub what: &'static str,
    pub got: String,
}

/// `wire_names!` and `TryFrom<String>` (reading a column) for a fieldless wire enum.
macro_rules! named {
    ($ty:ident, $what:literal, { $($variant:ident => $name:ident),+ $(,)? }) => {
        wire_names!($ty { $($variant => $name),+ });

        impl TryFrom<String> for $ty {
            type Error = UnknownName;
            fn try_from(s: String) -> Result<Self, UnknownName> {
                $ty::parse(&s).ok_or(UnknownName { what: $what, got: s })
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

/// [`OperationKey::parse`] as a pattern, for the OpenAPI document.
pub const OPERATION_KEY_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,128}$";

/// The longest operation key accepted.
pub const MAX_OPERATION_KEY_LEN: usize = 128;

/// `s` when it is 1 to `max` characters of `[A-Za-z0-9_.:-]`, the characters of every
/// key the ledger keeps; else `refusal`.
fn key_of(s: String, max: usize, refusal: &'static str) -> Result<String, &'static str> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if s.is_empty() || s.len() > max || !s.chars().all(ok_char) {
        return Err(refusal);
    }
    Ok(s)
}

impl OperationKey {
    pub fn parse(s: impl Into<String>) -> Result<Self, &'static str> {
        key_of(
            s.into(),
            MAX_OPERATION_KEY_LEN,
            "operation key must be 1-128 characters of [A-Za-z0-9_.:-]",
        )
        .map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

paysaga_common::checked_newtype!(OperationKey(String), parse, &'static str);

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

/// `POST /v1/deposits`: money paid in from outside (a staff top-up), once per operation
/// key. A ledger entry of kind `DEPOSIT`; the merchant is not involved. Carried out only
/// with `authorization`, the orchestrator's signed deposit authorization naming this
/// account's member, this amount and this key, and the people who asked and approved
/// (`paysaga_common::deposits`); the ledger row records those people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DepositRequest {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
    /// The orchestrator's deposit authorization (a compact JWS, 60 s). Without a valid
    /// one the deposit is refused 403 `DEPOSIT_NOT_APPROVED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<String>,
}

#[cfg(feature = "testkit")]
impl DepositRequest {
    /// For tests: a deposit of `minor` into `member`'s account `account_id` under `key`,
    /// with the orchestrator's authorization under its development key (asked for by
    /// `admin@example.com`), as the member service forwards a staff top-up.
    pub fn approved_for_tests(key: &str, member: &str, account_id: i64, minor: i64) -> Self {
        Self {
            operation_key: OperationKey::parse(key).expect("a valid operation key"),
            account_id,
            amount: Amount::new(minor).expect("a valid amount"),
            authorization: Some(paysaga_common::testkit::deposit_authorization(
                member,
                minor,
                key,
                "admin@example.com",
                None,
            )),
        }
    }
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
    /// Money held by holds not yet captured or released (a lapsed hold counts until it
    /// is swept, within a second or so). Always 0 for the merchant.
    #[serde(default)]
    pub held: i64,
    /// `balance - held`: what a new hold or a debit may take. Never below 0.
    #[serde(default)]
    pub available: i64,
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
/// With `hold_key` the debit captures that hold (placed on this account for this
/// amount): it applies only while the hold is held and within its deadline, and is
/// otherwise declined with the reason on record. Without one, the debit may take only
/// the available balance (what no hold holds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DebitRequest {
    pub operation_key: OperationKey,
    pub account_id: i64,
    pub amount: Amount,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_key: Option<OperationKey>,
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
    /// The sender's side of a transfer to another member (under the transfer's key).
    TransferOut,
    /// The recipient's side of a transfer (no key of its own: the out side carries it).
    TransferIn,
}

/// `APPLIED`: money moved. `DECLINED`: a debit refused (insufficient funds, or a
/// capture whose hold was gone; the reason is its `declined_for`); no money moved, and
/// the key can never succeed afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TransactionStatus {
    Applied,
    Declined,
}

named!(AccountKind, "account kind", { Member => MEMBER, Merchant => MERCHANT });
named!(TransactionKind, "transaction kind", {
    Debit => DEBIT,
    Credit => CREDIT,
    Deposit => DEPOSIT,
    TransferOut => TRANSFER_OUT,
    TransferIn => TRANSFER_IN,
});
named!(TransactionStatus, "transaction status", {
    Applied => APPLIED,
    Declined => DECLINED,
});

/// One movement of money of a member account: to or from the merchant (a debit, a
/// credit), in from outside (a deposit), or to another member (a transfer's out side).
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
    /// For a debit that captures a hold: the hold's operation key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_key: Option<String>,
    /// For a `DECLINED` debit: why (`INSUFFICIENT_FUNDS`, `HOLD_NOT_FOUND`,
    /// `HOLD_RELEASED`, `HOLD_EXPIRED`, `HOLD_MISMATCH`); the code every replay of its
    /// key is refused with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declined_for: Option<AccountCode>,
    pub created_at: DateTime<Utc>,
}

/// Who a transfer pays: a member (their first member account) or a member account by
/// id. `{"member_id": "member-2"}` or `{"account_id": 42}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case", try_from = "RecipientFields")]
pub enum Recipient {
    MemberId(MemberId),
    AccountId(i64),
}

/// A [`Recipient`] as read: an object with one of the two fields. Read this way, a
/// body naming both is a well-formed JSON value with a wrong shape (`INVALID_BODY`),
/// where serde's own enum reading would call it malformed JSON.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipientFields {
    member_id: Option<MemberId>,
    account_id: Option<i64>,
}

impl TryFrom<RecipientFields> for Recipient {
    type Error = &'static str;
    fn try_from(f: RecipientFields) -> Result<Self, Self::Error> {
        match (f.member_id, f.account_id) {
            (Some(m), None) => Ok(Recipient::MemberId(m)),
            (None, Some(id)) => Ok(Recipient::AccountId(id)),
            _ => Err("a recipient is one of member_id or account_id"),
        }
    }
}

/// `POST /v1/transfers` (buyer token, header `Idempotency-Key`): move `amount` from the
/// caller's account (their first member account) to another member's. Applied only if
/// the caller's available balance (balance minus what holds hold) covers it; once per
/// key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    pub to: Recipient,
    pub amount: Amount,
}

/// A transfer between two member accounts: two ledger rows, `TRANSFER_OUT` on the
/// sender's account and `TRANSFER_IN` on the recipient's, summing to zero. `id` is the
/// out row's id, which both rows carry as their `transfer_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Transfer {
    pub id: Uuid,
    pub from_account_id: i64,
    pub to_account_id: i64,
    pub amount: i64,
    pub created_at: DateTime<Utc>,
}

/// The `Idempotency-Key` of a transfer: 1 to 48 characters of `[A-Za-z0-9_.:-]`. The
/// ledger keys the transfer by the caller and this key ([`TransferKey::operation_key`]),
/// so two members' keys never meet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransferKey(String);

/// [`TransferKey::parse`] as a pattern, for the OpenAPI document.
pub const TRANSFER_KEY_PATTERN: &str = "^[A-Za-z0-9_.:-]{1,48}$";

/// The longest transfer `Idempotency-Key` accepted: with the prefix and the longest
/// member id, the ledger key stays within [`MAX_OPERATION_KEY_LEN`].
pub const MAX_TRANSFER_KEY_LEN: usize = 48;

impl TransferKey {
    pub fn parse(s: impl Into<String>) -> Result<Self, &'static str> {
        key_of(
            s.into(),
            MAX_TRANSFER_KEY_LEN,
            "Idempotency-Key must be 1-48 characters of [A-Za-z0-9_.:-]",
        )
        .map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ledger's operation key of `member`'s transfer under this key:
    /// `xfer:{length of the member id}:{member id}:{key}`. The length keeps it
    /// unambiguous (a member id may hold `:`), so no two members' keys are the same.
    pub fn operation_key(&self, member: &MemberId) -> OperationKey {
        let m = member.as_str();
        OperationKey::parse(format!("xfer:{}:{m}:{}", m.len(), self.0))
            .expect("a member id (at most 64) and a transfer key (at most 48) fit an operation key")
    }
}

/// How long a hold lasts, in seconds: 1 to 86,400. The hold lapses at its deadline by
/// the database's clock: it can no longer be captured, and its money is available again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct HoldTtl(u32);

/// The longest a hold may last.
pub const MAX_HOLD_TTL_SECS: u32 = 86_400;

impl HoldTtl {
    pub fn new(secs: u32) -> Result<Self, &'static str> {
        if (1..=MAX_HOLD_TTL_SECS).contains(&secs) {
            Ok(Self(secs))
        } else {
            Err("a hold lasts 1 to 86400 seconds")
        }
    }
    /// From a duration, rounded up to whole seconds.
    pub fn from_duration(d: std::time::Duration) -> Result<Self, &'static str> {
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        Self::new(u32::try_from(secs).unwrap_or(u32::MAX))
    }
    pub fn secs(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for HoldTtl {
    type Error = &'static str;
    fn try_from(secs: u32) -> Result<Self, Self::Error> {
        Self::new(secs)
    }
}

impl From<HoldTtl> for u32 {
    fn from(t: HoldTtl) -> u32 {
        t.0
    }
}

/// `POST /v1/holds`: hold `amount` of the member's account for `ttl_secs`, once per
/// operation key. Placed only if the account's available balance (balance minus what
/// other holds hold) covers it: two holds never count the same money. The member's
/// account is their first member account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    pub operation_key: OperationKey,
    pub member_id: MemberId,
    pub amount: Amount,
    #[schema(value_type = u32, minimum = 1, maximum = 86400)]
    pub ttl_secs: HoldTtl,
}

/// `POST /v1/holds/{key}/release` (or a batch's `release`): give the money of the hold
/// under `operation_key` back to the available balance, once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub operation_key: OperationKey,
}

/// Where a hold is. `HELD` is live until its deadline; `CAPTURED` (a debit took the
/// money) and `RELEASED` (the money is available again: released, or lapsed and swept)
/// are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HoldState {
    Held,
    Captured,
    Released,
}

named!(HoldState, "hold state", {
    Held => HELD,
    Captured => CAPTURED,
    Released => RELEASED,
});

/// Money of a member account set aside, under an operation key, until a debit captures
/// it, it is released, or its deadline passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Hold {
    pub id: Uuid,
    pub operation_key: String,
    pub account_id: i64,
    pub amount: i64,
    pub state: HoldState,
    /// The deadline, by the account database's clock: past it a `HELD` hold can no
    /// longer be captured and its money is no longer held.
    pub expires_at: DateTime<Utc>,
    /// The operation key of the debit that captured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it was captured or released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<DateTime<Utc>>,
}

impl Hold {
    /// Held and within its deadline at `now`: capturable, its money set aside.
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.state == HoldState::Held && self.expires_at > now
    }
}

/// `GET /v1/holds`: live holds placed at least `older_than_ms` ago, oldest first, after
/// the cursor (`after_created_at`, `after_id`), at most `limit` (1 to 1,000, default 500).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListHolds {
    #[param(minimum = 0, maximum = 3_162_240_000_000_u64)]
    #[serde(deserialize_with = "hold_age_ms")]
    pub older_than_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_created_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

/// The oldest age a holds listing may ask about: a century, beyond any hold's life (the
/// database's interval arithmetic overflows long before `u64::MAX` milliseconds).
pub const MAX_HOLD_AGE_MS: u64 = 3_162_240_000_000;

fn hold_age_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let ms = u64::deserialize(d)?;
    if ms > MAX_HOLD_AGE_MS {
        return Err(serde::de::Error::custom(format!(
            "older_than_ms is at most {MAX_HOLD_AGE_MS}"
        )));
    }
    Ok(ms)
}

impl ListHolds {
    /// The first page of live holds at least `ms` old, at the default size.
    pub fn older_than(ms: u64) -> Self {
        ListHolds {
            older_than_ms: ms,
            after_created_at: None,
            after_id: None,
            limit: None,
        }
    }
}

/// A page of [`ListHolds`]: `next` is the cursor of the last hold when the page is full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldPage {
    pub holds: Vec<Hold>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<HoldCursor>,
}

/// Where a [`HoldPage`] left off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldCursor {
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
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
    /// As `POST /v1/holds`.
    Hold(HoldRequest),
    /// As `POST /v1/holds/{key}/release`.
    Release(ReleaseRequest),
}

impl AccountOp {
    /// The roles that may send this operation: the saga moves money and reads it, the
    /// order service holds and releases. A batch carrying an operation its caller may
    /// not send is refused whole.
    pub fn allowed_roles(&self) -> u8 {
        use paysaga_common::auth::allow::{ORCHESTRATOR, ORDER};
        match self {
            AccountOp::Debit(_)
            | AccountOp::Credit(_)
            | AccountOp::Account { .. }
            | AccountOp::Transaction { .. } => ORCHESTRATOR,
            AccountOp::Hold(_) | AccountOp::Release(_) => ORDER,
        }
    }
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
    fn transfer_keys_are_scoped_to_their_member() {
        let key = TransferKey::parse("k:1").expect("key");
        let a = key.operation_key(&MemberId::parse("a").expect("member"));
        let b = TransferKey::parse("1")
            .expect("key")
            .operation_key(&MemberId::parse("a:k").expect("member"));
        assert_eq!(a.as_str(), "xfer:1:a:k:1");
        assert_ne!(a, b);
        let longest = TransferKey::parse("k".repeat(MAX_TRANSFER_KEY_LEN)).expect("key");
        let _ = longest.operation_key(&MemberId::parse("m".repeat(64)).expect("member"));
        assert!(TransferKey::parse("k".repeat(MAX_TRANSFER_KEY_LEN + 1)).is_err());
        assert!(TransferKey::parse("").is_err());
        let to: TransferRequest =
            serde_json::from_value(serde_json::json!({"to": {"account_id": 7}, "amount": 5}))
                .expect("parses");
        assert_eq!(to.to, Recipient::AccountId(7));
        let back = serde_json::to_value(&to.to).expect("json");
        assert_eq!(back, serde_json::json!({"account_id": 7}));
        for both in [
            serde_json::json!({"member_id": "m", "account_id": 7}),
            serde_json::json!({}),
        ] {
            assert!(serde_json::from_value::<Recipient>(both).is_err());
        }
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

    /// Each of `all` serialises as its name and reads back from it as a column.
    fn names_read_back<T>(all: &[T])
    where
        T: Serialize + TryFrom<String> + Copy + PartialEq + std::fmt::Debug + std::fmt::Display,
    {
        for &v in all {
            assert_eq!(
                serde_json::to_value(v).expect("json"),
                serde_json::json!(v.to_string())
            );
            assert!(
                T::try_from(v.to_string()).is_ok_and(|read| read == v),
                "{v}"
            );
        }
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
        names_read_back(&TransactionKind::ALL);
        names_read_back(&TransactionStatus::ALL);
        names_read_back(&AccountKind::ALL);
        names_read_back(&HoldState::ALL);
        assert!(TransactionKind::try_from("OPENING".to_owned()).is_err());
    }

    #[test]
    fn hold_times_are_bounded_and_declines_end_a_debit() {
        assert!(HoldTtl::new(0).is_err());
        assert!(HoldTtl::new(MAX_HOLD_TTL_SECS + 1).is_err());
        assert_eq!(HoldTtl::new(120).map(HoldTtl::secs), Ok(120));
        assert_eq!(
            HoldTtl::from_duration(std::time::Duration::from_millis(1500)).map(HoldTtl::secs),
            Ok(2)
        );
        assert!(serde_json::from_value::<HoldTtl>(serde_json::json!(0)).is_err());
        for code in AccountCode::ALL.into_iter().filter(|c| c.is_decline()) {
            assert!(code.ends_debit(), "{code}");
        }
        assert!(!AccountCode::HoldCaptured.ends_debit());
    }
}
