//! Rows as PostgreSQL returns them, their `kind` and `status` columns read into the
//! contract's enums, and their conversion into wire types.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::api::{Account, AccountKind, Transaction, TransactionKind, TransactionStatus};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountRow {
    pub id: i64,
    pub member_id: String,
    #[sqlx(try_from = "String")]
    pub kind: AccountKind,
    pub balance: i64,
    pub created_at: DateTime<Utc>,
}

impl From<AccountRow> for Account {
    fn from(r: AccountRow) -> Self {
        Account {
            id: r.id,
            member_id: r.member_id,
            balance: r.balance,
            kind: r.kind,
            created_at: r.created_at,
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
    pub created_at: DateTime<Utc>,
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
            created_at: r.created_at,
        }
    }
}
