//! Opening and reading accounts.

use std::collections::HashMap;

use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    api::{Account, AccountKind, AccountView, OpenAccountRequest, Transaction},
    error::{Breach, Error, Result},
    ledger::Recorded,
    rows::{AccountRow, TransactionRow},
};

/// How many debits and credits an account view lists.
pub const RECENT_TRANSACTIONS: i64 = 20;

/// A member's most recent keyed transactions ($1 account, $2 limit). Public so a test
/// can check its plan: it is read for every payment, and its cost must not grow with
/// the ledger (index `transactions_account_keyed_recent`).
pub const MEMBER_RECENT_SQL: &str = r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, hold_key,
           declined_for, created_at
    FROM transactions
    WHERE account_id = $1 AND operation_key IS NOT NULL
    ORDER BY created_at DESC, id DESC
    LIMIT $2"#;

/// The largest opening deposit; keeps every balance far from BIGINT overflow.
pub const MAX_OPENING_BALANCE: i64 = paysaga_common::money::MAX_AMOUNT;

/// Opens a member account with its opening deposit, at most `max_opening` (0 outside
/// development mode: see [`crate::Config::openings_with_money`]). With an `open_key` the
/// opening is idempotent: the account, not `created`, when the key already opened this
/// same account.
#[tracing::instrument(skip_all, fields(member = %req.member_id))]
pub async fn open(
    pool: &PgPool,
    req: &OpenAccountRequest,
    max_opening: i64,
) -> Result<Recorded<Account>> {
    if !(0..=max_opening).contains(&req.opening_balance) {
        return Err(Error::InvalidOpeningBalance { max: max_opening });
    }
    let open_key = req.open_key.as_ref().map(|k| k.as_str());
    let mut tx = pool.begin().await?;
    // A second opening under the same key waits on the first's row lock, then finds it.
    // The account opens empty: its opening row below raises it (balances follow the
    // ledger).
    let row: Option<AccountRow> = sqlx::query_as(
        r#"INSERT INTO accounts (member_id, kind, balance, open_key)
           VALUES ($1, 'MEMBER', 0, $2)
           ON CONFLICT ON CONSTRAINT accounts_open_key_unique DO NOTHING
           RETURNING id, member_id, kind, balance, held, created_at"#,
    )
    .bind(req.member_id.as_str())
    .bind(open_key)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        tx.rollback().await?;
        let key = open_key.ok_or_else(|| Breach::UnkeyedOpeningConflicted {
            member: req.member_id.as_str().to_owned(),
        })?;
        return opened_before(pool, key, req).await.map(|value| Recorded {
            value,
            created: false,
        });
    };
    // The deposit is on the ledger too, so every balance is explained by its rows; the
    // account is answered as the ledger's trigger left it.
    let row = if req.opening_balance > 0 {
        sqlx::query(
            r#"INSERT INTO transactions (id, operation_key, kind, status, account_id, amount)
               VALUES ($1, NULL, 'OPENING', 'APPLIED', $2, $3)"#,
        )
        .bind(Uuid::now_v7())
        .bind(row.id)
        .bind(req.opening_balance)
        .execute(&mut *tx)
        .await?;
        sqlx::query_as(
            r#"SELECT id, member_id, kind, balance, held, created_at
               FROM accounts
               WHERE id = $1"#,
        )
        .bind(row.id)
        .fetch_one(&mut *tx)
        .await?
    } else {
        row
    };
    tx.commit().await?;
    Ok(Recorded {
        value: row.into(),
        created: true,
    })
}

/// The account `key` opened, if it was opened for the same member with the same deposit;
/// otherwise the key was reused for a different request.
async fn opened_before(pool: &PgPool, key: &str, req: &OpenAccountRequest) -> Result<Account> {
    let found: Option<Opened> = sqlx::query_as(
        r#"SELECT a.id, a.member_id, a.kind, a.balance, a.held, a.created_at,
                  COALESCE((SELECT SUM(t.amount) FROM transactions t
                            WHERE t.account_id = a.id AND t.kind = 'OPENING'), 0)::BIGINT AS opening
           FROM accounts a
           WHERE a.open_key = $1"#,
    )
    .bind(key)
    .fetch_optional(pool)
    .await?;
    match found {
        Some(o)
            if o.account.member_id == req.member_id.as_str()
                && o.opening == req.opening_balance =>
        {
            Ok(o.account.into())
        }
        Some(_) => Err(Error::OperationKeyReused(key.to_owned())),
        None => Err(Breach::OpeningKeyHoldsNothing {
            key: key.to_owned(),
        }
        .into()),
    }
}

/// An account opened under a key, with the deposit it was opened with.
#[derive(sqlx::FromRow)]
struct Opened {
    #[sqlx(flatten)]
    account: AccountRow,
    opening: i64,
}

/// The account and its recent keyed transactions, or `None` if it does not exist.
#[tracing::instrument(skip_all, fields(account_id = id))]
pub async fn view(pool: &PgPool, id: i64) -> Result<Option<AccountView>> {
    let row: Option<AccountRow> = sqlx::query_as(
        r#"SELECT a.id, a.member_id, a.kind, b.balance, a.held, a.created_at
           FROM accounts a
           JOIN balances b ON b.account_id = a.id
           WHERE a.id = $1"#,
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let account = Account::from(row);
    // Every transaction has the merchant on its other side, so the merchant's recent
    // history is the ledger's; uuid v7 ids are time-ordered, so the primary key serves it.
    let recent: Vec<TransactionRow> = if account.kind == AccountKind::Merchant {
        sqlx::query_as(
            r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, hold_key,
                      declined_for, created_at
               FROM transactions
               WHERE operation_key IS NOT NULL AND status = 'APPLIED'
               ORDER BY id DESC
               LIMIT $1"#,
        )
        .bind(RECENT_TRANSACTIONS)
        .fetch_all(pool)
        .await?
    } else {
        sqlx::query_as(MEMBER_RECENT_SQL)
            .bind(id)
            .bind(RECENT_TRANSACTIONS)
            .fetch_all(pool)
            .await?
    };
    let recent_transactions = recent.into_iter().map(Transaction::from).collect();
    Ok(Some(AccountView {
        account,
        recent_transactions,
    }))
}

/// Accounts by id as `GET /v1/accounts/{id}` shows them (the merchant's balance being
/// the sum of its shards), without their recent transactions.
pub async fn by_ids(pool: &PgPool, ids: &[i64]) -> Result<HashMap<i64, Account>> {
    let rows: Vec<AccountRow> = sqlx::query_as(
        // The `balances` view's rule inline: joined to the view, the id list did not
        // reach the view's own scan of `accounts`, which then read every account.
        r#"SELECT a.id, a.member_id, a.kind,
                  CASE WHEN a.kind = 'MERCHANT'
                       THEN (SELECT COALESCE(SUM(s.balance), 0) FROM merchant_shards s)::BIGINT
                       ELSE a.balance
                  END AS balance,
                  a.held, a.created_at
           FROM accounts a
           WHERE a.id = ANY($1)"#,
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, Account::from(r))).collect())
}
