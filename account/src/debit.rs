//! The debit rule: a member account pays a merchant shard, once per operation key,
//! either from its available balance or by capturing a hold placed for it; a debit the
//! balance (or its hold) does not allow is recorded `DECLINED` under its key, with the
//! reason, so a late duplicate can never succeed after the caller was told "declined".

use sqlx::PgPool;

use crate::{
    api::{DebitRequest, Transaction, TransactionStatus},
    error::{Error, Result, Rule},
    ledger::{self, Answer, Met, Outcome},
};

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `held`: the keys that already hold a row (as the statement's snapshot sees them):
///   those are answered from it, and nothing is locked for them.
/// - `holding`: the holds the other debits capture, by key, `FOR NO KEY UPDATE` (a
///   release or the sweep of the same hold waits, or is waited for).
/// - `locked`: the other debits' member accounts, by id, `FOR NO KEY UPDATE` (the lock
///   a plain `UPDATE` takes: `FOR UPDATE` would also conflict with the `KEY SHARE` that
///   ledger inserts take on an account through the foreign key). In READ COMMITTED a
///   locking read that waited returns the row's newest version, so each balance, and
///   what the account's holds hold, is the one this statement will change.
///   They are locked after `holding` is complete: the count of its rows, evaluated
///   once, gates the scan.
/// - `decided`: each debit judged, at `clock` (read once every lock is held, so a
///   deadline that passed while the statement waited counts): one without a hold
///   against its account's available balance (`balance - held`); a capture against its
///   hold (there, on this account, for this amount, not captured by another debit, not
///   released, within its deadline). The hold's money is already set aside, so a
///   capture needs no more of the balance.
/// - `inserted`: `APPLIED` with the round's shard, or `DECLINED` with the reason, in
///   key order. A key a concurrent statement holds makes this one wait for it and skip
///   it; with at most one debit per account in a statement (the caller's rounds), a
///   skipped debit cannot have changed what another one of this statement was decided
///   against.
/// - `captured`: each captured hold `CAPTURED` by its debit's key, found by the debit's
///   `hold_key` (one probe of the key index each; the lock `holding` took keeps it `HELD`).
/// - `tally`: every capture captured its hold, and each applied debit leaves its
///   account's balance at no less than what stays held, else the statement fails whole
///   (see [`crate::error::BREACH_MARK`]); CHECK `accounts_available_nonnegative` stands
///   behind it.
///
/// The balances move with the ledger rows: at the statement's end the ledger's trigger
/// (migrations `balances_follow_ledger`, `captures_release_holds_in_ledger`) takes each
/// applied debit from its account, and a capture's amount from what the account holds,
/// in one write per account, and pays the sum into the shard: the accounts are rows this
/// statement has locked, and the shard is locked there, last, as the lock order wants.
///
/// Answers one row per debit, in order.
const STATEMENT: &str = concat!(
    ledger::fresh!(
        "$1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $6::TEXT[]",
        "id, operation_key, account_id, amount, hold_key"
    ),
    ledger::lock_in_order!(
        "holding",
        "h.operation_key, h.account_id, h.amount, h.state, h.expires_at",
        "holds h",
        "h.operation_key",
        "f.hold_key FROM fresh f WHERE f.hold_key IS NOT NULL"
    ),
    // Its keys wait for `holding`'s locks: the holds first, then the accounts.
    ledger::locked_members!("f.account_id FROM fresh f WHERE (SELECT COUNT(*) FROM holding) >= 0"),
    r#"
clock AS MATERIALIZED (
    SELECT clock_timestamp() AS checked_at FROM (SELECT COUNT(*) FROM locked) AS locks_held
),
decided AS MATERIALIZED (
    SELECT f.id, f.operation_key, f.account_id, f.amount, f.hold_key,
           CASE
               WHEN f.hold_key IS NULL THEN
                   CASE WHEN f.amount > l.balance - l.held THEN 'INSUFFICIENT_FUNDS' END
               WHEN h.operation_key IS NULL THEN 'HOLD_NOT_FOUND'
               WHEN h.account_id <> f.account_id OR h.amount <> f.amount
                    OR h.state = 'CAPTURED' THEN 'HOLD_MISMATCH'
               WHEN h.state = 'RELEASED' THEN 'HOLD_RELEASED'
               WHEN h.expires_at <= c.checked_at THEN 'HOLD_EXPIRED'
           END AS declined_for
    FROM fresh f
    JOIN locked l ON l.id = f.account_id
    CROSS JOIN clock c
    LEFT JOIN holding h ON h.operation_key = f.hold_key
),
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, merchant_shard,
                              hold_key, declined_for)
    SELECT d.id, d.operation_key, 'DEBIT',
           CASE WHEN d.declined_for IS NULL THEN 'APPLIED' ELSE 'DECLINED' END,
           d.account_id, d.amount,
           CASE WHEN d.declined_for IS NULL THEN $5::SMALLINT END,
           d.hold_key, d.declined_for"#,
    ledger::insert_once!("decided d", "d"),
    r#"
applied AS (
    SELECT i.account_id, i.hold_key,
           l.balance - i.amount AS expected,
           l.held - CASE WHEN i.hold_key IS NULL THEN 0 ELSE i.amount END AS expected_held
    FROM inserted i
    JOIN locked l ON l.id = i.account_id
    WHERE i.status = 'APPLIED'
),
captured AS (
    UPDATE holds h SET state = 'CAPTURED', captured_by = i.operation_key, settled_at = now()
    FROM inserted i
    WHERE h.operation_key = i.hold_key AND i.status = 'APPLIED'
    RETURNING h.operation_key
),
tally AS MATERIALIZED (
    SELECT CASE WHEN c.captured = c.capturing AND c.off IS NULL
                THEN 0
                ELSE CAST('account invariant breach;debit;shard=' || $5 || ';applied=' || c.applied
                          || ';capturing=' || c.capturing || ';captured=' || c.captured
                          || ';account=' || COALESCE(c.off, 0) AS INTEGER)
           END AS breach
    FROM (SELECT (SELECT COUNT(*) FROM applied) AS applied,
                 (SELECT COUNT(*) FROM applied WHERE hold_key IS NOT NULL) AS capturing,
                 (SELECT COUNT(*) FROM captured) AS captured,
                 (SELECT MIN(account_id) FROM applied
                  WHERE expected < expected_held OR expected_held < 0) AS off) AS c
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
    let holds: Vec<Option<&str>> = debits
        .iter()
        .map(|d| d.hold_key.as_ref().map(|k| k.as_str()))
        .collect();
    let rows = ledger::run(pool, STATEMENT, debits, |q| {
        ledger::money(q, debits).bind(shard).bind(holds.clone())
    })
    .await?;
    let met = Met::read_all(&rows, Rule::Debit)?;
    count(&met);
    ledger::answer(pool, debits, met, recorded, |_| None).await
}

/// A debit this statement wrote: applied, or a decline on record.
fn recorded(t: Transaction) -> Outcome {
    match t.status {
        TransactionStatus::Applied => ledger::created(t),
        TransactionStatus::Declined => Err(Error::Declined(Box::new(t))),
    }
}

fn count(met: &[Met]) {
    let (mut applied, mut captured, mut declined) = (0u64, 0u64, 0u64);
    for m in met {
        if let Met::Recorded(t) = m {
            match (t.status, &t.hold_key) {
                (TransactionStatus::Applied, None) => applied += 1,
                (TransactionStatus::Applied, Some(_)) => captured += 1,
                (TransactionStatus::Declined, _) => declined += 1,
            }
        }
    }
    for (outcome, n) in [
        ("applied", applied),
        ("captured", captured),
        ("declined", declined),
    ] {
        if n > 0 {
            metrics::counter!("account_debits_total", "outcome" => outcome).increment(n);
        }
    }
}
