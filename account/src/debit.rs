//! The debit rule: a member account pays a merchant shard, once per operation key; a
//! debit the balance does not cover is recorded `DECLINED` under its key, so a late
//! duplicate can never succeed after the caller was told "declined".

use sqlx::PgPool;

use crate::{
    api::{DebitRequest, Transaction, TransactionStatus},
    error::{Error, Result, Rule},
    ledger::{self, Answer, Met, Outcome},
};

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `held`: the keys that already hold a row (as the statement's snapshot sees them):
///   those are answered from it, and their accounts are not locked.
/// - `locked`: the other debits' member accounts, by id, `FOR NO KEY UPDATE` (the lock
///   a plain `UPDATE` takes: `FOR UPDATE` would also conflict with the `KEY SHARE` that
///   ledger inserts take on an account through the foreign key). In READ COMMITTED a
///   locking read that waited returns the row's newest version, so each balance is the
///   one this statement will change.
/// - `inserted`: each debit decided against its account's locked balance (`APPLIED`
///   with the round's shard, or `DECLINED` without one) and inserted in key order. A
///   key a concurrent statement holds makes this one wait for it and skip it; with at
///   most one debit per account in a statement (the caller's rounds), a skipped debit
///   cannot have changed what another one of this statement was decided against.
/// - `moved`: each account charged its applied debit; only rows `locked` holds.
/// - `credited`: the shard credited the sum of what `moved` took.
/// - `tally`: every applied debit moved its account to exactly the locked balance less
///   the debit, and the shard moved, else the statement fails whole (see
///   [`crate::error::BREACH_MARK`]); CHECK `accounts_balance_nonnegative` stands
///   behind it.
///
/// PostgreSQL computes an update's new row first on the version the statement's
/// snapshot sees, which can be older than the one `locked` holds, and, finding it
/// superseded, computes it again on the newest before writing it. The first result
/// must not fail (an older balance may not cover a debit the newest covers), so it is
/// bounded at 0; what was written is checked by `tally`, against the balance the
/// debit was decided on.
///
/// Answers one row per debit, in order.
const STATEMENT: &str = concat!(
    ledger::input_held!(),
    r#"
locked AS MATERIALIZED (
    SELECT a.id, a.balance
    FROM accounts a
    WHERE a.id = ANY(ARRAY(SELECT o.account_id FROM input o
                           WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.ord = o.ord)))
      AND a.kind = 'MEMBER'
    ORDER BY a.id
    FOR NO KEY UPDATE
),
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, merchant_shard)
    SELECT o.id, o.operation_key, 'DEBIT',
           CASE WHEN o.amount <= l.balance THEN 'APPLIED' ELSE 'DECLINED' END,
           o.account_id, o.amount,
           CASE WHEN o.amount <= l.balance THEN $5::SMALLINT END"#,
    ledger::insert_once!("input o", "o"),
    r#"
applied AS (
    SELECT i.account_id, i.amount, l.balance - i.amount AS expected
    FROM inserted i
    JOIN locked l ON l.id = i.account_id
    WHERE i.status = 'APPLIED'
),
moved AS (
    UPDATE accounts a SET balance = GREATEST(a.balance - p.amount, 0)
    FROM applied p
    WHERE a.id = p.account_id
    RETURNING a.id, a.balance, p.expected, p.amount
),
credited AS (
    UPDATE merchant_shards s SET balance = s.balance + m.total
    FROM (SELECT SUM(amount)::BIGINT AS total FROM moved) AS m
    WHERE s.shard = $5 AND m.total IS NOT NULL
    RETURNING s.shard
),
tally AS MATERIALIZED (
    SELECT CASE WHEN c.moved = c.applied AND c.off IS NULL AND c.credited = LEAST(c.applied, 1)
                THEN 0
                ELSE CAST('account invariant breach;debit;shard=' || $5 || ';applied=' || c.applied
                          || ';moved=' || c.moved || ';credited=' || c.credited
                          || ';account=' || COALESCE(c.off, 0) AS INTEGER)
           END AS breach
    FROM (SELECT (SELECT COUNT(*) FROM applied) AS applied,
                 (SELECT COUNT(*) FROM moved) AS moved,
                 (SELECT COUNT(*) FROM credited) AS credited,
                 (SELECT MIN(id) FROM moved WHERE balance <> expected OR expected < 0) AS off) AS c
)
"#,
    ledger::answered!()
);

/// Applies `debits` (distinct keys, at most one per account) in one statement, paying
/// into merchant `shard`, and answers each as `POST /v1/debits` would.
#[tracing::instrument(skip_all, fields(debits = debits.len(), shard = shard))]
pub(crate) async fn apply(
    pool: &PgPool,
    shard: i16,
    debits: &[DebitRequest],
) -> Result<Vec<Answer>> {
    let rows = ledger::run(pool, STATEMENT, debits, |q| q.bind(shard)).await?;
    let met = Met::read_all(&rows, Rule::Debit)?;
    count(&met);
    ledger::answer(pool, debits, met, recorded, |_| None).await
}

/// A debit this statement wrote: applied, or a decline on record.
fn recorded(t: Transaction) -> Outcome {
    match t.status {
        TransactionStatus::Applied => ledger::created(t),
        TransactionStatus::Declined => Err(Error::InsufficientFunds(Box::new(t))),
    }
}

fn count(met: &[Met]) {
    let (mut applied, mut declined) = (0u64, 0u64);
    for m in met {
        if let Met::Recorded(t) = m {
            match t.status {
                TransactionStatus::Applied => applied += 1,
                TransactionStatus::Declined => declined += 1,
            }
        }
    }
    if applied > 0 {
        metrics::counter!("account_debits_total", "outcome" => "applied").increment(applied);
    }
    if declined > 0 {
        metrics::counter!("account_debits_total", "outcome" => "declined").increment(declined);
    }
}
