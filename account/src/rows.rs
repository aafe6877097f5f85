//! Rows as PostgreSQL returns them, and their conversion into wire types.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{
    api::{Account, AccountKind, Transaction, TransactionKind, TransactionStatus},
    error::{Error, Result},
};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountRow {
    pub id: i64,
    pub member_id: String,
    pub kind: String,
    pub balance: i64,
    pub created_at: DateTime<Utc>,
}

impl AccountRow {
    pub fn into_api(self) -> Result<Account> {
        let kind = match self.kind.as_str() {
            "MEMBER" => AccountKind::Member,
            "MERCHANT" => AccountKind::Merchant,
            other => {
                return Err(Error::Corrupt(format!(
                    "account {} has kind {other}",
                    self.id
                )))
            }
        };
        Ok(Account {
            id: self.id,
            member_id: self.member_id,
            balance: self.balance,
            kind,
            created_at: self.created_at,
        })
    }
}

/// A keyed ledger row (openings have no key and are never turned into a `Transaction`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TransactionRow {
    pub id: Uuid,
    pub operation_key: Option<String>,
    pub kind: String,
    pub status: String,
    pub account_id: i64,
    pub amount: i64,
    pub refund_of: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl TransactionRow {
    pub fn into_api(self) -> Result<Transaction> {
        let corrupt = |what: &str| Error::Corrupt(format!("transaction {}: {what}", self.id));
        let kind = match self.kind.as_str() {
            "DEBIT" => TransactionKind::Debit,
            "CREDIT" => TransactionKind::Credit,
            "DEPOSIT" => TransactionKind::Deposit,
            other => return Err(corrupt(&format!("kind {other} has no wire form"))),
        };
        let status = match self.status.as_str() {
            "APPLIED" => TransactionStatus::Applied,
            "DECLINED" => TransactionStatus::Declined,
            other => return Err(corrupt(&format!("status {other}"))),
        };
        let operation_key = self
            .operation_key
            .clone()
            .ok_or_else(|| corrupt("keyed kind without a key"))?;
        Ok(Transaction {
            id: self.id,
            operation_key,
            kind,
            status,
            account_id: self.account_id,
            amount: self.amount,
            refund_of: self.refund_of,
            created_at: self.created_at,
        })
    }
}
