//! Rows as PostgreSQL returns them, their `kind` and `status` columns read into the
//! contract's enums, and their conversion into wire types.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::api::{
    Account, AccountCode, AccountKind, Hold, HoldState, Transaction, TransactionKind,
    TransactionStatus, UnknownName,
};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountRow {
    pub id: i64,
    pub member_id: String,
    #[sqlx(try_from = "String")]
    pub kind: AccountKind,
    pub balance: i64,
    pub held: i64,
    pub created_at: DateTime<Utc>,
}

impl From<AccountRow> for Account {
    fn from(r: AccountRow) -> Self {
        Account {
            id: r.id,
            member_id: r.member_id,
            balance: r.balance,
            held: r.held,
            available: r.balance - r.held,
            kind: r.kind,
            created_at: r.created_at,
        }
    }
}

/// A hold as PostgreSQL returns it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HoldRow {
    pub id: Uuid,
    pub operation_key: String,
    pub account_id: i64,
    pub amount: i64,
    #[sqlx(try_from = "String")]
    pub state: HoldState,
    pub expires_at: DateTime<Utc>,
    pub captured_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub settled_at: Option<DateTime<Utc>>,
}

impl From<HoldRow> for Hold {
    fn from(r: HoldRow) -> Self {
        Hold {
            id: r.id,
            operation_key: r.operation_key,
            account_id: r.account_id,
            amount: r.amount,
            state: r.state,
            expires_at: r.expires_at,
            captured_by: r.captured_by,
            created_at: r.created_at,
            settled_at: r.settled_at,
        }
    }
}

/// A keyed ledger row. Openings have no key and a kind with no wire form: every query
/// that reads this selects keyed rows only, and an opening would fail to decode.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TransactionRow {
    pub id: Uuid,
    pub operation_key: String,
    #[sqlx(try_from = "String")]
    pub kind: TransactionKind,
    #[sqlx(try_from = "String")]
    pub status: TransactionStatus,
    pub account_id: i64,
    pub amount: i64,
    pub refund_of: Option<String>,
    pub hold_key: Option<String>,
    #[sqlx(try_from = "Option<String>")]
    pub declined_for: OptionalDecline,
    pub created_at: DateTime<Utc>,
}

/// A `declined_for` column: one of the decline codes, or null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalDecline(pub Option<AccountCode>);

impl TryFrom<Option<String>> for OptionalDecline {
    type Error = UnknownName;
    fn try_from(s: Option<String>) -> Result<Self, UnknownName> {
        let Some(s) = s else {
            return Ok(OptionalDecline(None));
        };
        match AccountCode::parse(&s).filter(|c| c.is_decline()) {
            Some(code) => Ok(OptionalDecline(Some(code))),
            None => Err(UnknownName {
                what: "decline reason",
                got: s,
            }),
        }
    }
}

impl From<TransactionRow> for Transaction {
    fn from(r: TransactionRow) -> Self {
        Transaction {
            id: r.id,
            operation_key: r.operation_key,
            kind: r.kind,
            status: r.status,
            account_id: r.account_id,
            amount: r.amount,
            refund_of: r.refund_of,
            hold_key: r.hold_key,
            declined_for: r.declined_for.0,
            created_at: r.created_at,
        }
    }
}
