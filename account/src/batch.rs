//! `POST /v1/batch`: many operations in one request, the debits group-committed in one
//! database transaction, usually a single statement.
//!
//! Every operation gets the answer its own endpoint would give. Debits go first, all
//! together; credits (refunds, rare) follow one by one through the single path; reads
//! come last, so they see what the batch did. The debit transaction takes its locks in
//! the same order as the single path (operation keys, sorted; then member accounts,
//! by id; then the batch's one merchant shard), so batches and single calls rarely
//! deadlock one another. Rarely, not never: row-lock waiters queue on PostgreSQL's
//! tuple locks, where two statements can still meet in a cycle; the one PostgreSQL
//! rolls back changed nothing and is run again.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use paysaga_common::retry;
use paysaga_contracts::batch::{Reply, MAX_OPS};
use sqlx::{FromRow, PgPool, Row};
use uuid::Uuid;

use crate::{
    api::{AccountOp, DebitRequest, OperationKey, Transaction},
    error::{Error, Result},
    ledger::{self, Recorded},
    rows::{AccountRow, TransactionRow},
    shard::merchant_shard,
};

/// Answers `ops` in order. `Err` concerns the whole batch: nothing was applied (a
/// refusal, or the debit transaction failed and rolled back), or, for a database error
/// after the debits committed, the caller must ask by key like after a lost answer.
pub async fn answer(
    pool: &PgPool,
    shards: u16,
    fast_path: bool,
    ops: Vec<AccountOp>,
) -> Result<Vec<Reply>> {
    if ops.is_empty() || ops.len() > MAX_OPS {
        return Err(Error::BatchTooLarge {
            max: MAX_OPS,
            got: ops.len(),
        });
    }
    let mut replies: Vec<Option<Reply>> = vec![None; ops.len()];
    let mut debits = Vec::new();
    let mut credits = Vec::new();
    let mut account_reads = Vec::new();
    let mut key_reads = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            AccountOp::Debit(req) => debits.push((i, req)),
            AccountOp::Credit(req) => credits.push((i, req)),
            AccountOp::Account { account_id } => account_reads.push((i, account_id)),
            // The single GET takes the key from its path and refuses a malformed one
            // with 400; the batch carries it as a plain string to answer the same.
            AccountOp::Transaction { operation_key } => match OperationKey::parse(operation_key) {
                Ok(key) => key_reads.push((i, key)),
                Err(why) => replies[i] = Some(reply_to(Err(Error::InvalidOperationKey(why)))),
            },
        }
    }

    for (i, outcome) in debit_all(pool, shards, fast_path, debits).await? {
        replies[i] = Some(reply_to(outcome));
    }
    for (i, req) in credits {
        replies[i] = Some(reply_to(ledger::credit(pool, &req).await));
    }
    if !account_reads.is_empty() {
        let ids: BTreeSet<i64> = account_reads.iter().map(|(_, id)| *id).collect();
        let found = accounts_by_id(pool, &ids.into_iter().collect::<Vec<_>>()).await?;
        for (i, id) in account_reads {
            replies[i] = Some(match found.get(&id) {
                Some(account) => Reply::ok(200, account),
                None => reply_to(Err(Error::AccountNotFound(id))),
            });
        }
    }
    if !key_reads.is_empty() {
        let keys: BTreeSet<&str> = key_reads.iter().map(|(_, k)| k.as_str()).collect();
        let found = transactions_by_key(pool, &keys.into_iter().collect::<Vec<_>>()).await?;
        for (i, key) in key_reads {
            replies[i] = Some(match found.get(key.as_str()) {
                Some(t) => Reply::ok(200, t),
                None => reply_to(Err(Error::TransactionNotFound(key.to_string()))),
            });
        }
    }
    replies
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| Error::Corrupt(format!("batch operation {i} unanswered"))))
        .collect()
}

/// The reply the operation's own endpoint would have sent.
fn reply_to(outcome: Result<Recorded>) -> Reply {
    match outcome {
        Ok(r) => Reply::ok(if r.created { 201 } else { 200 }, &r.transaction),
        Err(e) => match e.into_api() {
            Ok(api) => Reply::error(api.status.as_u16(), api.code, api.message),
            Err(internal) => {
                // The whole-response path logs in the middleware; a reply inside a 200
                // passes no middleware, so its cause is logged here.
                tracing::error!(error = %paysaga_common::error::cause_chain(&internal), "batch operation failed");
                Reply::error(
                    500,
                    paysaga_common::error::codes::INTERNAL,
                    "internal error; it has been logged",
                )
            }
        },
    }
}

/// The first debit of the batch under its key, with the row id it gets if it claims
/// the key.
struct Claim {
    index: usize,
    req: DebitRequest,
    id: Uuid,
}

/// Applies the batch's debits in one transaction and answers each with its op index.
///
/// A key repeated inside the batch is judged against what its key holds once the
/// batch's debits are in (a replay, a decline again, or a reuse), as if sent right
/// after; only when the key still holds nothing (its first occurrence named a missing
/// or merchant account) does the repeat go through the single path, afterwards.
async fn debit_all(
    pool: &PgPool,
    shards: u16,
    fast_path: bool,
    ops: Vec<(usize, DebitRequest)>,
) -> Result<Vec<(usize, Result<Recorded>)>> {
    let Some((_, first)) = ops.first() else {
        return Ok(Vec::new());
    };
    // One merchant shard for the whole batch: one row lock and one update instead of
    // one per key, and two concurrent batches meet on a shard 1 time in 16 rather than
    // almost always. The shard is recorded on every row, which is where refunds draw.
    let shard = merchant_shard(first.operation_key.as_str(), shards);
    let mut claims: Vec<Claim> = Vec::with_capacity(ops.len());
    let mut repeats: Vec<(usize, DebitRequest)> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::with_capacity(ops.len());
    for (index, req) in ops {
        let key = req.operation_key.as_str();
        if position.contains_key(key) {
            repeats.push((index, req));
            continue;
        }
        position.insert(key.to_owned(), claims.len());
        claims.push(Claim {
            index,
            id: Uuid::now_v7(),
            req,
        });
    }

    let (inserted, declined) = apply_claims(pool, shard, fast_path, &claims, &position).await?;

    // What each key holds now: this batch's rows first, then the rows others wrote.
    let mut stored: HashMap<String, Transaction> = HashMap::with_capacity(claims.len());
    let mut outcomes: Vec<(usize, Result<Recorded>)> = Vec::with_capacity(claims.len());
    for row in inserted {
        let t = row.into_api()?;
        let claim = &claims[position[t.operation_key.as_str()]];
        let outcome = if declined.contains(&t.id) {
            Err(Error::InsufficientFunds(Box::new(t.clone())))
        } else {
            Ok(Recorded {
                transaction: t.clone(),
                created: true,
            })
        };
        outcomes.push((claim.index, outcome));
        stored.insert(t.operation_key.clone(), t);
    }
    let unclaimed: Vec<&Claim> = claims
        .iter()
        .filter(|c| !stored.contains_key(c.req.operation_key.as_str()))
        .collect();
    for (claim, found) in why_unclaimed(pool, &unclaimed).await? {
        let outcome = match found {
            Found::Existing(t) => {
                let same = ledger::same_debit(&t, &claim.req);
                stored.insert(t.operation_key.clone(), t.clone());
                ledger::answer_existing(t, same)
            }
            Found::Nothing { account_kind } => Err(ledger::why_not_claimed(
                claim.req.account_id,
                account_kind.as_deref(),
            )),
        };
        outcomes.push((claim.index, outcome));
    }

    for (index, req) in repeats {
        let outcome = match stored.get(req.operation_key.as_str()) {
            Some(t) => ledger::answer_existing(t.clone(), ledger::same_debit(t, &req)),
            None => ledger::debit(pool, shards, &req).await,
        };
        outcomes.push((index, outcome));
    }
    Ok(outcomes)
}

/// The claims as the columns the statements unnest.
struct Columns<'a> {
    ids: Vec<Uuid>,
    keys: Vec<&'a str>,
    accounts: Vec<i64>,
    amounts: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn of(claims: &'a [Claim]) -> Self {
        let mut c = Columns {
            ids: Vec::with_capacity(claims.len()),
            keys: Vec::with_capacity(claims.len()),
            accounts: Vec::with_capacity(claims.len()),
            amounts: Vec::with_capacity(claims.len()),
        };
        for claim in claims {
            c.ids.push(claim.id);
            c.keys.push(claim.req.operation_key.as_str());
            c.accounts.push(claim.req.account_id);
            c.amounts.push(claim.req.amount.minor());
        }
        c
    }
}

/// Claims the keys, decides each debit against the locked balances, and moves the
/// money, atomically. Returns the inserted rows and the ids of those declined (already
/// marked so in the database).
///
/// First as one statement that applies every claimed debit or none: it fails on the
/// balance constraint, changing nothing, as soon as one account cannot pay all of its
/// claimed debits, and only then is the batch decided one debit at a time in a
/// transaction. When every account covers the sum of its debits, each one applies
/// whatever the order, which is exactly what the debit-by-debit decision gives.
async fn apply_claims(
    pool: &PgPool,
    shard: i16,
    fast_path: bool,
    claims: &[Claim],
    position: &HashMap<String, usize>,
) -> Result<(Vec<TransactionRow>, BTreeSet<Uuid>)> {
    let columns = Columns::of(claims);
    retry::on_conflict(Error::is_conflict, || {
        apply_claims_once(pool, shard, fast_path, &columns, position)
    })
    .await
}

async fn apply_claims_once(
    pool: &PgPool,
    shard: i16,
    fast_path: bool,
    columns: &Columns<'_>,
    position: &HashMap<String, usize>,
) -> Result<(Vec<TransactionRow>, BTreeSet<Uuid>)> {
    if fast_path {
        match apply_all_or_none(pool, shard, columns).await {
            Ok(inserted) => {
                metrics::counter!("account_debits_total", "outcome" => "applied")
                    .increment(inserted.len() as u64);
                return Ok((inserted, BTreeSet::new()));
            }
            Err(e) if short_of_funds(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    apply_one_by_one(pool, shard, columns, position).await
}

/// The statement failed because an account would have gone below zero: it rolled back
/// whole, nothing happened.
fn short_of_funds(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.constraint())
        .is_some_and(|c| c == "accounts_balance_nonnegative")
}

/// One statement in autocommit, so one round trip and no BEGIN/COMMIT: every key
/// claimed, every account charged the sum of its claimed debits, the merchant shard
/// credited, or (an account short of funds) nothing at all.
///
/// The locks come in the single path's order. The keys first, in one sorted pass:
/// `locked` reads the accounts through an `ARRAY(...)` built from `totals`, an
/// aggregate over every claimed row, so no account is locked before the last key is
/// claimed. Then the accounts, in id order (`LockRows` over an ordered scan), with
/// `FOR NO KEY UPDATE` for the reason given on the multi-statement path. `moved`
/// updates only those locked rows, reached through the same kind of array, so it takes
/// no lock of its own out of order, and reads the newest balance (the rows were locked
/// at their newest version; the update re-reads it). The shard last: its new balance
/// is the sum over all of `moved`. The shard exists: the rows just inserted reference
/// it (`transactions_merchant_shard_fk`, checked at the end of the statement).
async fn apply_all_or_none(
    pool: &PgPool,
    shard: i16,
    c: &Columns<'_>,
) -> Result<Vec<TransactionRow>, sqlx::Error> {
    sqlx::query_as(
        r#"WITH claimed AS (
               INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, merchant_shard)
               SELECT o.id, o.operation_key, 'DEBIT', 'APPLIED', a.id, o.amount, $5
               FROM UNNEST($1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[])
                    AS o (id, operation_key, account_id, amount)
               JOIN accounts a ON a.id = o.account_id AND a.kind = 'MEMBER' AND a.id = ANY($3)
               ORDER BY o.operation_key
               ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
               RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at
           ),
           totals AS MATERIALIZED (
               SELECT account_id, SUM(amount)::BIGINT AS total
               FROM claimed
               GROUP BY account_id
           ),
           locked AS MATERIALIZED (
               SELECT a.id
               FROM accounts a
               WHERE a.id = ANY(ARRAY(SELECT t.account_id FROM totals t))
               ORDER BY a.id
               FOR NO KEY UPDATE
           ),
           moved AS (
               UPDATE accounts a SET balance = a.balance - t.total
               FROM totals t
               WHERE a.id = ANY(ARRAY(SELECT l.id FROM locked l)) AND t.account_id = a.id
               RETURNING t.total
           ),
           credited AS (
               UPDATE merchant_shards s SET balance = s.balance + m.total
               FROM (SELECT SUM(total)::BIGINT AS total FROM moved) AS m
               WHERE s.shard = $5 AND m.total IS NOT NULL
               RETURNING s.shard
           )
           SELECT id, operation_key, kind, status, account_id, amount, refund_of, created_at
           FROM claimed"#,
    )
    .bind(&c.ids)
    .bind(&c.keys)
    .bind(&c.accounts)
    .bind(&c.amounts)
    .bind(shard)
    .fetch_all(pool)
    .await
}

/// The transaction for batches where some account cannot pay all its debits: each
/// debit decided in batch order against the locked balance, declines recorded.
async fn apply_one_by_one(
    pool: &PgPool,
    shard: i16,
    c: &Columns<'_>,
    position: &HashMap<String, usize>,
) -> Result<(Vec<TransactionRow>, BTreeSet<Uuid>)> {
    let mut tx = pool.begin().await?;
    // Keys in one sorted pass: a key held by another open transaction makes this one
    // wait for it, and with every batch claiming in the same order no two wait on each
    // other. Rows of missing or merchant accounts are simply not inserted.
    let mut inserted: Vec<TransactionRow> = sqlx::query_as(
        r#"INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, merchant_shard)
           SELECT o.id, o.operation_key, 'DEBIT', 'APPLIED', a.id, o.amount, $5
           FROM UNNEST($1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[])
                AS o (id, operation_key, account_id, amount)
           JOIN accounts a ON a.id = o.account_id AND a.kind = 'MEMBER' AND a.id = ANY($3)
           ORDER BY o.operation_key
           ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
           RETURNING id, operation_key, kind, status, account_id, amount, refund_of, created_at"#,
    )
    .bind(&c.ids)
    .bind(&c.keys)
    .bind(&c.accounts)
    .bind(&c.amounts)
    .bind(shard)
    .fetch_all(&mut *tx)
    .await?;
    if inserted.is_empty() {
        tx.rollback().await?;
        return Ok((inserted, BTreeSet::new()));
    }

    // Debits of one account are decided in the order the batch lists them, as the same
    // calls made one after another would be.
    let order = |row: &TransactionRow| {
        row.operation_key
            .as_deref()
            .and_then(|k| position.get(k))
            .copied()
            .unwrap_or(usize::MAX)
    };
    inserted.sort_by_key(order);
    let involved: BTreeSet<i64> = inserted.iter().map(|r| r.account_id).collect();
    let involved: Vec<i64> = involved.into_iter().collect();
    // Locked until commit, so the balances read here are the ones the update changes.
    // NO KEY UPDATE, the lock a plain UPDATE takes: FOR UPDATE would also conflict with
    // the KEY SHARE locks that other transactions' ledger inserts take on the account
    // (the foreign key), and two batches each holding one would deadlock.
    let mut balances: HashMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>(
        r#"SELECT id, balance
           FROM accounts
           WHERE id = ANY($1)
           ORDER BY id
           FOR NO KEY UPDATE"#,
    )
    .bind(&involved)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();

    let mut declined = BTreeSet::new();
    let mut taken: BTreeMap<i64, i64> = BTreeMap::new();
    let mut to_merchant: i64 = 0;
    for row in &mut inserted {
        let Some(balance) = balances.get_mut(&row.account_id) else {
            return Err(Error::Corrupt(format!(
                "account {} vanished under a debit",
                row.account_id
            )));
        };
        if *balance >= row.amount {
            *balance -= row.amount;
            *taken.entry(row.account_id).or_default() += row.amount;
            to_merchant = to_merchant
                .checked_add(row.amount)
                .ok_or(Error::AmountOutOfRange)?;
        } else {
            declined.insert(row.id);
            row.status = "DECLINED".to_owned();
        }
    }

    if !taken.is_empty() {
        let (ids, totals): (Vec<i64>, Vec<i64>) = taken.into_iter().unzip();
        // `balance >= total` cannot fail under the lock; it is the same guard as the
        // single path's, and a mismatch aborts the whole batch rather than overdraw.
        let moved = sqlx::query(
            r#"UPDATE accounts a SET balance = a.balance - d.total
               FROM UNNEST($1::BIGINT[], $2::BIGINT[]) AS d (id, total)
               WHERE a.id = d.id AND a.balance >= d.total"#,
        )
        .bind(&ids)
        .bind(&totals)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved != ids.len() as u64 {
            return Err(Error::Corrupt(format!(
                "{moved} of {} locked accounts took their debits",
                ids.len()
            )));
        }
    }
    if !declined.is_empty() {
        sqlx::query(
            r#"UPDATE transactions SET status = 'DECLINED', merchant_shard = NULL
               WHERE id = ANY($1)"#,
        )
        .bind(declined.iter().copied().collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
    }
    if to_merchant > 0 {
        let credited =
            sqlx::query(r#"UPDATE merchant_shards SET balance = balance + $2 WHERE shard = $1"#)
                .bind(shard)
                .bind(to_merchant)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        if credited != 1 {
            return Err(Error::Corrupt(format!("merchant shard {shard} is missing")));
        }
    }
    tx.commit().await?;

    let declined_n = declined.len() as u64;
    let applied_n = inserted.len() as u64 - declined_n;
    metrics::counter!("account_debits_total", "outcome" => "applied").increment(applied_n);
    metrics::counter!("account_debits_total", "outcome" => "declined").increment(declined_n);
    Ok((inserted, declined))
}

/// What a key that this batch did not claim holds.
enum Found {
    Existing(Transaction),
    /// Nothing: `account_kind` of the account named (`None`: no such account).
    Nothing {
        account_kind: Option<String>,
    },
}

/// Why each unclaimed debit was not inserted, in one read after the commit: the rows
/// holding those keys, and the kinds of the accounts named. Both are final once
/// written (a key's row and an account's kind never change), so reading late is
/// reading what the insert met.
async fn why_unclaimed<'c>(pool: &PgPool, claims: &[&'c Claim]) -> Result<Vec<(&'c Claim, Found)>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&str> = claims
        .iter()
        .map(|c| c.req.operation_key.as_str())
        .collect();
    let accounts: Vec<i64> = claims.iter().map(|c| c.req.account_id).collect();
    let rows = sqlx::query(
        r#"SELECT o.n, a.kind AS account_kind,
                  t.id, t.operation_key, t.kind, t.status, t.account_id, t.amount, t.refund_of, t.created_at
           FROM UNNEST($1::TEXT[], $2::BIGINT[]) WITH ORDINALITY AS o (operation_key, account_id, n)
           LEFT JOIN transactions t
                  ON t.operation_key = o.operation_key AND t.operation_key IS NOT NULL
           LEFT JOIN accounts a ON a.id = o.account_id"#,
    )
    .bind(&keys)
    .bind(&accounts)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(claims.len());
    for row in rows {
        let n: i64 = row.try_get("n")?;
        let claim = usize::try_from(n - 1)
            .ok()
            .and_then(|i| claims.get(i))
            .ok_or_else(|| Error::Corrupt(format!("unnest ordinal {n} out of range")))?;
        let found = match row.try_get::<Option<Uuid>, _>("id")? {
            Some(_) => Found::Existing(TransactionRow::from_row(&row)?.into_api()?),
            None => Found::Nothing {
                account_kind: row.try_get("account_kind")?,
            },
        };
        out.push((*claim, found));
    }
    Ok(out)
}

/// Accounts by id as `GET /v1/accounts/{id}` shows them (the merchant's balance being
/// the sum of its shards), without their recent transactions.
async fn accounts_by_id(pool: &PgPool, ids: &[i64]) -> Result<HashMap<i64, crate::api::Account>> {
    let rows: Vec<AccountRow> = sqlx::query_as(
        // The `balances` view's rule inline: joined to the view, the id list did not
        // reach the view's own scan of `accounts`, which then read every account.
        r#"SELECT a.id, a.member_id, a.kind,
                  CASE WHEN a.kind = 'MERCHANT'
                       THEN (SELECT COALESCE(SUM(s.balance), 0) FROM merchant_shards s)::BIGINT
                       ELSE a.balance
                  END AS balance,
                  a.created_at
           FROM accounts a
           WHERE a.id = ANY($1)"#,
    )
    .bind(ids)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| r.into_api().map(|a| (a.id, a)))
        .collect()
}

/// Transactions by operation key, as `GET /v1/transactions/{key}` shows them.
async fn transactions_by_key(pool: &PgPool, keys: &[&str]) -> Result<HashMap<String, Transaction>> {
    let rows: Vec<TransactionRow> = sqlx::query_as(
        r#"SELECT id, operation_key, kind, status, account_id, amount, refund_of, created_at
           FROM transactions
           WHERE operation_key = ANY($1) AND operation_key IS NOT NULL"#,
    )
    .bind(keys)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| r.into_api().map(|t| (t.operation_key.clone(), t)))
        .collect()
}
