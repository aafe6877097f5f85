//! The credit rule (a refund): from the merchant shard a debit paid into back to the
//! account it came from, once per operation key, never more than is left of the debit.
//! A refused refund is not recorded: each reason is stable (a debit's kind, status and
//! account never change, its refunded total only grows), so asking again gives the
//! same answer.

use sqlx::{PgPool, Row};

use crate::{
    api::{CreditRequest, TransactionStatus},
    error::{Error, Result, Rule},
    ledger::{self, Answer, Met},
};

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `held`: the keys that already hold a row, answered from it.
/// - `debits`: the other credits' refunded debits, by key, `FOR NO KEY UPDATE` (the
///   lock the `refunded` update takes; newest versions, as for a debit's accounts).
/// - `passing`: the credits their debit allows (applied, the same account, and
///   `refunded + amount <= amount`), at most one per debit (the caller's rounds).
/// - `locked`: their accounts, by id. `inserted`: the credits, in key order, each on
///   its debit's shard; a key a concurrent statement holds is waited for and skipped.
/// - `refunded`: each inserted credit added to its debit's `refunded`; `moved`: each
///   account and what its credits raise it to.
/// - `tally`: every debit moved to exactly what the statement decided from its locked
///   row and every account the credits name locked, else the statement fails whole;
///   CHECK `transactions_refund_within_debit` stands behind it.
///
/// The balances move with the ledger rows: at the statement's end the ledger's trigger
/// (migration `balances_follow_ledger`) raises each account (rows this statement has
/// locked) and draws each shard paid out of, locking them last, by number. A debit's
/// shard holds at least what is still unrefunded of it, and CHECK
/// `merchant_shards_balance_nonnegative` stands behind that.
///
/// Answers one row per credit, in order, with the refunded debit as it was locked
/// (`debit_*`, null when there is no such debit), which says why a credit did not pass.
const STATEMENT: &str = concat!(
    ledger::fresh!(
        "$1::UUID[], $2::TEXT[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[]",
        "id, operation_key, account_id, amount, refund_of"
    ),
    ledger::lock_in_order!(
        "debits",
        "d.operation_key, d.status, d.account_id, d.amount, d.refunded, d.merchant_shard",
        "transactions d",
        "d.operation_key",
        "f.refund_of FROM fresh f",
        "d.operation_key IS NOT NULL AND d.kind = 'DEBIT'"
    ),
    r#"
passing AS MATERIALIZED (
    SELECT f.id, f.operation_key, f.account_id, f.amount, f.refund_of, d.merchant_shard
    FROM fresh f
    JOIN debits d ON d.operation_key = f.refund_of
    WHERE d.status = 'APPLIED' AND d.account_id = f.account_id
      AND d.refunded + f.amount <= d.amount
),
"#,
    ledger::locked_members!("p.account_id FROM passing p"),
    r#"
inserted AS (
    INSERT INTO transactions (id, operation_key, kind, status, account_id, amount, refund_of, merchant_shard)
    SELECT p.id, p.operation_key, 'CREDIT', 'APPLIED', p.account_id, p.amount, p.refund_of,
           p.merchant_shard
    FROM passing p
    JOIN locked l ON l.id = p.account_id
    ORDER BY p.operation_key
    ON CONFLICT (operation_key) WHERE operation_key IS NOT NULL DO NOTHING
    RETURNING id, operation_key, kind, status, account_id, amount, refund_of, merchant_shard,
              hold_key, declined_for, created_at
),
refunded AS (
    UPDATE transactions d SET refunded = d.refunded + i.amount
    FROM inserted i
    JOIN debits x ON x.operation_key = i.refund_of
    WHERE d.operation_key = i.refund_of AND d.operation_key IS NOT NULL AND d.kind = 'DEBIT'
    RETURNING d.refunded, x.refunded + i.amount AS expected, x.amount
),"#,
    ledger::moved_locked!(),
    r#"
tally AS MATERIALIZED (
    SELECT CASE WHEN c.refunded = c.inserted AND c.moved = c.accounts AND c.off_debits = 0
                THEN 0
                ELSE CAST('account invariant breach;credit;inserted=' || c.inserted
                          || ';refunded=' || c.refunded || ';accounts=' || c.accounts
                          || ';moved=' || c.moved || ';debits_off=' || c.off_debits AS INTEGER)
           END AS breach
    FROM (SELECT (SELECT COUNT(*) FROM inserted) AS inserted,
                 (SELECT COUNT(*) FROM refunded) AS refunded,
                 (SELECT COUNT(DISTINCT account_id) FROM inserted) AS accounts,
                 (SELECT COUNT(*) FROM moved) AS moved,
                 (SELECT COUNT(*) FROM refunded
                  WHERE refunded <> expected OR expected > amount) AS off_debits) AS c
)
"#,
    ledger::answer_columns!(),
    r#",
       d.status AS debit_status, d.account_id AS debit_account_id,
       d.amount AS debit_amount, d.refunded AS debit_refunded,
       t.breach
"#,
    ledger::answer_joins!(),
    r#"
LEFT JOIN debits d ON d.operation_key = o.refund_of
ORDER BY o.ord
"#
);

/// The refunded debit as the statement locked it.
struct Debit {
    status: TransactionStatus,
    account_id: i64,
    amount: i64,
    refunded: i64,
}

/// Applies `credits` (distinct keys, at most one per refunded debit) in one statement
/// and answers each as `POST /v1/credits` would.
#[tracing::instrument(skip_all, fields(credits = credits.len()))]
pub(crate) async fn apply(pool: &PgPool, credits: &[CreditRequest]) -> Result<Vec<Answer>> {
    let debit_keys: Vec<&str> = credits.iter().map(|c| c.refund_of.as_str()).collect();
    let rows = ledger::run(pool, STATEMENT, credits, |q| {
        ledger::money(q, credits).bind(debit_keys.clone())
    })
    .await?;
    let (met, debits, applied) =
        Met::read_all_with(&rows, Rule::Credit, ledger::transaction, debit_of)?;
    if applied > 0 {
        metrics::counter!("account_credits_total", "outcome" => "applied")
            .increment(applied as u64);
    }
    ledger::answer(pool, credits, met, ledger::created, |i| {
        why_not_refundable(&credits[i], debits[i].as_ref())
    })
    .await
}

impl ledger::Statement for CreditRequest {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}

fn debit_of(row: &sqlx::postgres::PgRow) -> Result<Option<Debit>> {
    let Some(status) = row.try_get::<Option<String>, _>("debit_status")? else {
        return Ok(None);
    };
    let status = TransactionStatus::try_from(status).map_err(|e| sqlx::Error::ColumnDecode {
        index: "debit_status".into(),
        source: Box::new(e),
    })?;
    Ok(Some(Debit {
        status,
        account_id: row.try_get("debit_account_id")?,
        amount: row.try_get("debit_amount")?,
        refunded: row.try_get("debit_refunded")?,
    }))
}

/// Why the refunded debit, as locked, does not allow `req`; `None` if it does.
fn why_not_refundable(req: &CreditRequest, debit: Option<&Debit>) -> Option<Error> {
    let key = || req.refund_of.as_str().to_owned();
    let Some(d) = debit else {
        return Some(Error::DebitNotFound(key()));
    };
    if d.status != TransactionStatus::Applied {
        return Some(Error::DebitDeclined(key()));
    }
    if d.account_id != req.account_id {
        return Some(Error::RefundAccountMismatch {
            debit: key(),
            debited: d.account_id,
            requested: req.account_id,
        });
    }
    let left = d.amount - d.refunded;
    (req.amount.minor() > left).then(|| Error::RefundExceedsDebit {
        debit: key(),
        requested: req.amount.minor(),
        left,
    })
}
