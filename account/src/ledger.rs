//! Debits and refund credits: one outcome per operation key, balances checked and
//! moved in single conditional statements, both sides in one database transaction.
//!
//! Locks are always taken in the same order (operation key, then the refunded debit,
//! then the member account, then one merchant shard), so debits and credits rarely
//! deadlock each other; when PostgreSQL still breaks a cycle, the transaction it rolled
//! back is run again.

use paysaga_common::retry;
use sqlx::{PgPool, Postgres, Transaction as PgTx};
use uuid::Uuid;

use crate::{
    accounts,
    api::{
        CreditRequest, DebitRequest, DepositRequest, Transaction, TransactionKind,
        TransactionStatus,
    },
    error::{Error, Result},
    rows::TransactionRow,
    shard::merchant_shard,
};

/// A transaction and whether this request created it (`false`: a replay).
#[derive(Debug)]
pub struct Recorded {
    pub transaction: Transaction,
    pub created: bool,
}

/// Looks a transaction up by operation key.
#[tracing::instrument(skip_all, fields(operation_key = key))]
pub async fn by_key(pool: &PgPool, key: &str) -> Result<Option<Transaction>> {
    let row: Option<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, created_at
           FROM transactions
           WHERE operation_key = $1"#,
    )
    .bind(key)
    .fetch_optional(pool)
    .await?;
    row.map(TransactionRow::into_api).transpose()
}

/// Takes `amount` from a member account and gives it to a merchant shard. Insufficient
/// funds are recorded as a DECLINED transaction under the key, so that a late duplicate
/// can never succeed after the caller was told "declined".
#[tracing::instrument(skip_all, fields(operation_key = %req.operation_key, account_id = req.account_id, amount = %req.amount))]
pub async fn debit(pool: &PgPool, shards: u16, req: &DebitRequest) -> Result<Recorded> {
    retry::on_conflict(Error::is_conflict, || debit_once(pool, shards, req)).await
}

async fn debit_once(pool: &PgPool, shards: u16, req: &DebitRequest) -> Result<Recorded> {
    let key = req.operation_key.as_str();
    let amount = req.amount.minor();
    let shard = merchant_shard(key, shards);
    let mut tx = pool.begin().await?;
    // Claiming the key first: a concurrent request with the same key waits here for this
    // transaction to end, then finds the row and replays it.
    let claimed: Option<TransactionRow> = sqlx::query_as(
        r#"INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, merchant_shard)
           SELECT $1, $2, 'DEBIT', 'APPLIED', a.id, $4, $5
           FROM accounts a
           WHERE a.id = $3 AND a.kind = 'MEMBER'
           ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
           RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at"#,
    )
    .bind(Uuid::now_v7())
    .bind(key)
    .bind(req.account_id)
    .bind(amount)
    .bind(shard)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(claimed) = claimed else {
        tx.rollback().await?;
        return replay_or_refuse(pool, key, req.account_id, |t| same_debit(t, req)).await;
    };

    let taken = sqlx::query(
        r#"UPDATE accounts SET balance = balance - $2
           WHERE id = $1 AND balance >= $2"#,
    )
    .bind(req.account_id)
    .bind(amount)
    .execute(&mut *tx)
    .await?
    .rows_affected();

    if taken == 0 {
        let declined: TransactionRow = sqlx::query_as(
            r#"UPDATE transactions SET status = 'DECLINED', merchant_shard = NULL
               WHERE id = $1
               RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at"#,
        )
        .bind(claimed.id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        metrics::counter!("account_debits_total", "outcome" => "declined").increment(1);
        return Err(Error::InsufficientFunds(Box::new(declined.into_api()?)));
    }

    credit_shard(&mut tx, shard, amount).await?;
    tx.commit().await?;
    metrics::counter!("account_debits_total", "outcome" => "applied").increment(1);
    Ok(Recorded {
        transaction: claimed.into_api()?,
        created: true,
    })
}

/// Refunds (part of) the debit named by `refund_of`: from the merchant shard that debit
/// paid into, back to the account it came from, never more than it took in total.
#[tracing::instrument(skip_all, fields(operation_key = %req.operation_key, account_id = req.account_id, refund_of = %req.refund_of))]
pub async fn credit(pool: &PgPool, req: &CreditRequest) -> Result<Recorded> {
    retry::on_conflict(Error::is_conflict, || credit_once(pool, req)).await
}

async fn credit_once(pool: &PgPool, req: &CreditRequest) -> Result<Recorded> {
    let key = req.operation_key.as_str();
    let debit_key = req.refund_of.as_str();
    let amount = req.amount.minor();
    let mut tx = pool.begin().await?;
    let claimed: Option<TransactionRow> = sqlx::query_as(
        r#"INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, refund_of, merchant_shard)
           SELECT $1, $2, 'CREDIT', 'APPLIED', a.id, $4, $5, 0
           FROM accounts a
           WHERE a.id = $3 AND a.kind = 'MEMBER'
           ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
           RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at"#,
    )
    .bind(Uuid::now_v7())
    .bind(key)
    .bind(req.account_id)
    .bind(amount)
    .bind(debit_key)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(claimed) = claimed else {
        tx.rollback().await?;
        return replay_or_refuse(pool, key, req.account_id, |t| {
            t.kind == TransactionKind::Credit
                && t.account_id == req.account_id
                && t.amount == amount
                && t.refund_of.as_deref() == Some(debit_key)
        })
        .await;
    };

    // The check and the bookkeeping in one statement: the debit row's lock serialises
    // concurrent refunds of it, and `refunded <= amount` is also a named constraint.
    let shard: Option<i16> = sqlx::query_scalar(
        r#"UPDATE transactions SET refunded = refunded + $2
           WHERE operation_key = $1
             AND kind = 'DEBIT'
             AND status = 'APPLIED'
             AND account_id = $3
             AND refunded + $2 <= amount
           RETURNING merchant_shard"#,
    )
    .bind(debit_key)
    .bind(amount)
    .bind(req.account_id)
    .fetch_optional(&mut *tx)
    .await?
    .flatten();
    let Some(shard) = shard else {
        tx.rollback().await?;
        return Err(why_not_refundable(pool, req).await?);
    };

    sqlx::query(r#"UPDATE accounts SET balance = balance + $2 WHERE id = $1"#)
        .bind(req.account_id)
        .bind(amount)
        .execute(&mut *tx)
        .await?;
    // The shard that received the debit holds at least what is still unrefunded of it.
    let drawn = sqlx::query(
        r#"UPDATE merchant_shards SET balance = balance - $2
           WHERE shard = $1 AND balance >= $2"#,
    )
    .bind(shard)
    .bind(amount)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if drawn == 0 {
        return Err(Error::Corrupt(format!(
            "merchant shard {shard} holds less than unrefunded debit {debit_key}"
        )));
    }
    sqlx::query(r#"UPDATE transactions SET merchant_shard = $2 WHERE id = $1"#)
        .bind(claimed.id)
        .bind(shard)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    metrics::counter!("account_credits_total", "outcome" => "applied").increment(1);
    Ok(Recorded {
        transaction: claimed.into_api()?,
        created: true,
    })
}

/// Pays `amount` into a member account from outside (an operator's top-up), once per
/// operation key. The merchant is not involved: like an opening, a deposit adds money
/// to the system, and the ledger explains it.
#[tracing::instrument(skip_all, fields(operation_key = %req.operation_key, account_id = req.account_id, amount = %req.amount))]
pub async fn deposit(pool: &PgPool, req: &DepositRequest) -> Result<Recorded> {
    retry::on_conflict(Error::is_conflict, || deposit_once(pool, req)).await
}

async fn deposit_once(pool: &PgPool, req: &DepositRequest) -> Result<Recorded> {
    let key = req.operation_key.as_str();
    let amount = req.amount.minor();
    let mut tx = pool.begin().await?;
    let claimed: Option<TransactionRow> = sqlx::query_as(
        r#"INSERT INTO transactions (id, operation_key, kind, status, account_id, amount)
           SELECT $1, $2, 'DEPOSIT', 'APPLIED', a.id, $4
           FROM accounts a
           WHERE a.id = $3 AND a.kind = 'MEMBER'
           ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
           RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at"#,
    )
    .bind(Uuid::now_v7())
    .bind(key)
    .bind(req.account_id)
    .bind(amount)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(claimed) = claimed else {
        tx.rollback().await?;
        return replay_or_refuse(pool, key, req.account_id, |t| {
            t.kind == TransactionKind::Deposit
                && t.account_id == req.account_id
                && t.amount == amount
        })
        .await;
    };
    sqlx::query(r#"UPDATE accounts SET balance = balance + $2 WHERE id = $1"#)
        .bind(req.account_id)
        .bind(amount)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Recorded {
        transaction: claimed.into_api()?,
        created: true,
    })
}

async fn credit_shard(tx: &mut PgTx<'_, Postgres>, shard: i16, amount: i64) -> Result<()> {
    let n = sqlx::query(r#"UPDATE merchant_shards SET balance = balance + $2 WHERE shard = $1"#)
        .bind(shard)
        .bind(amount)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if n != 1 {
        return Err(Error::Corrupt(format!("merchant shard {shard} is missing")));
    }
    Ok(())
}

/// Nothing was inserted: either the key is taken (replay it if the request is the same,
/// refuse it otherwise) or the account is not a member account.
async fn replay_or_refuse(
    pool: &PgPool,
    key: &str,
    account_id: i64,
    same_request: impl Fn(&Transaction) -> bool,
) -> Result<Recorded> {
    if let Some(existing) = by_key(pool, key).await? {
        let same = same_request(&existing);
        return answer_existing(existing, same);
    }
    let kind = accounts::kind_of(pool, account_id).await?;
    Err(why_not_claimed(account_id, kind.as_deref()))
}

/// Whether a stored transaction is the debit `req` asks for (a replay) or not (a reuse).
pub(crate) fn same_debit(t: &Transaction, req: &DebitRequest) -> bool {
    t.kind == TransactionKind::Debit
        && t.account_id == req.account_id
        && t.amount == req.amount.minor()
}

/// The answer to a request whose key already holds `existing`: the same transaction
/// again (a declined one is declined again), or a refusal if the request differs.
pub(crate) fn answer_existing(existing: Transaction, same_request: bool) -> Result<Recorded> {
    if !same_request {
        metrics::counter!("account_replays_total", "outcome" => "key_reused").increment(1);
        return Err(Error::OperationKeyReused(existing.operation_key));
    }
    metrics::counter!("account_replays_total", "outcome" => "replayed").increment(1);
    if existing.status == TransactionStatus::Declined {
        return Err(Error::InsufficientFunds(Box::new(existing)));
    }
    Ok(Recorded {
        transaction: existing,
        created: false,
    })
}

/// Why a key that holds nothing was not claimed, given the kind of the account named
/// (`None`: no such account).
pub(crate) fn why_not_claimed(account_id: i64, kind: Option<&str>) -> Error {
    match kind {
        None => Error::AccountNotFound(account_id),
        Some("MERCHANT") => Error::AccountNotMember(account_id),
        Some(_) => Error::Corrupt(format!(
            "operation on member account {account_id} neither inserted nor conflicted"
        )),
    }
}

/// Why a refund's conditional update matched nothing. Every reason is stable: a debit's
/// refunded total only grows, so asking again gives the same answer.
async fn why_not_refundable(pool: &PgPool, req: &CreditRequest) -> Result<Error> {
    let debit_key = req.refund_of.as_str().to_owned();
    let row: Option<(String, String, i64, i64, i64)> = sqlx::query_as(
        r#"SELECT kind, status, account_id, amount, refunded
           FROM transactions
           WHERE operation_key = $1"#,
    )
    .bind(&debit_key)
    .fetch_optional(pool)
    .await?;
    Ok(match row {
        None => Error::DebitNotFound(debit_key),
        Some((kind, ..)) if kind != "DEBIT" => Error::DebitNotFound(debit_key),
        Some((_, status, ..)) if status != "APPLIED" => Error::DebitDeclined(debit_key),
        Some((_, _, debited, ..)) if debited != req.account_id => Error::RefundAccountMismatch {
            debit: debit_key,
            debited,
            requested: req.account_id,
        },
        Some((_, _, _, amount, refunded)) => Error::RefundExceedsDebit {
            debit: debit_key,
            requested: req.amount.minor(),
            left: amount - refunded,
        },
    })
}
