//! The hold rule: money of a member's account set aside under an operation key, once,
//! only if the account's available balance (balance minus what its holds hold) covers
//! it, so two holds never count the same money. A hold the balance does not cover is
//! refused and nothing is recorded: a placement has no effect until it is placed, and
//! asking again is judged afresh.

use sqlx::{PgPool, Row};

use crate::{
    api::{AccountKind, HoldRequest},
    error::{Error, Result, Rule},
    holds::{self, HoldRecord},
    ledger::{self, Answer, Met},
};

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `known`: the keys that already hold a hold (as the statement's snapshot sees
///   them): answered from it, nothing locked for them.
/// - `members`: each other request's account, the member's first member account (read,
///   not locked).
/// - `locked`: those accounts, by id, `FOR NO KEY UPDATE`: the newest balance and
///   `held`, which this statement then changes.
/// - `inserted`: each hold its account's available balance covers, with its deadline
///   `ttl_secs` from now by this database's clock, in key order; a key a concurrent
///   statement holds is waited for and skipped. With at most one placement per member in
///   a statement (the caller's rounds), each is decided against what the one before it
///   left.
/// - `moved`: each account's `held` raised by its new hold; bounded by the balance on
///   the first computation over an older version (see [`crate::debit`]), checked by
///   `tally`.
/// - `tally`: every account moved to exactly its locked `held` plus its hold, within its
///   balance, else the statement fails whole; CHECK `accounts_available_nonnegative`
///   stands behind it.
///
/// Answers one row per request, in order: the hold it placed or met, or else the
/// account's kind and available balance, which say why nothing was placed.
const STATEMENT: &str = concat!(
    ledger::input!(
        "$1::UUID[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::FLOAT8[]",
        "id, operation_key, member_id, amount, ttl_secs"
    ),
    r#"known AS MATERIALIZED (
    SELECT o.ord, h.id, h.operation_key, h.account_id, h.amount, h.state, h.expires_at,
           h.captured_by, h.created_at, h.settled_at, a.member_id AS owner
    FROM input o
    JOIN holds h ON h.operation_key = o.operation_key
    JOIN accounts a ON a.id = h.account_id
),
fresh AS (
    SELECT o.* FROM input o WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.ord = o.ord)
),
members AS MATERIALIZED (
    SELECT DISTINCT ON (a.member_id) a.member_id, a.id
    FROM accounts a
    WHERE a.member_id = ANY($3) AND a.kind = 'MEMBER'
    ORDER BY a.member_id, a.id
),"#,
    ledger::locked_members!("m.id FROM fresh f JOIN members m ON m.member_id = f.member_id"),
    r#"
inserted AS (
    INSERT INTO holds (id, operation_key, account_id, amount, expires_at)
    SELECT f.id, f.operation_key, l.id, f.amount, now() + make_interval(secs => f.ttl_secs)
    FROM fresh f
    JOIN members m ON m.member_id = f.member_id
    JOIN locked l ON l.id = m.id
    WHERE f.amount <= l.balance - l.held
    ORDER BY f.operation_key
    ON CONFLICT (operation_key) DO NOTHING
    RETURNING id, operation_key, account_id, amount, state, expires_at, captured_by, created_at,
              settled_at
),
moved AS (
    UPDATE accounts a SET held = LEAST(a.held + t.total, a.balance)
    FROM (SELECT i.account_id, SUM(i.amount)::BIGINT AS total, MIN(l.held) AS locked_held
          FROM inserted i
          JOIN locked l ON l.id = i.account_id
          GROUP BY i.account_id) AS t
    WHERE a.id = t.account_id
    RETURNING a.id, a.held, a.balance, t.locked_held + t.total AS expected
),"#,
    ledger::accounts_tally!("hold", "held <> expected OR expected > balance"),
    r#"SELECT o.ord, i.id IS NOT NULL AS created,
       COALESCE(i.id, k.id) AS id,
       COALESCE(i.operation_key, k.operation_key) AS operation_key,
       COALESCE(i.account_id, k.account_id) AS account_id,
       COALESCE(i.amount, k.amount) AS amount,
       COALESCE(i.state, k.state) AS state,
       COALESCE(i.expires_at, k.expires_at) AS expires_at,
       COALESCE(i.captured_by, k.captured_by) AS captured_by,
       COALESCE(i.created_at, k.created_at) AS created_at,
       COALESCE(i.settled_at, k.settled_at) AS settled_at,
       COALESCE(k.owner, o.member_id) AS owner,
       CASE WHEN m.id IS NOT NULL THEN 'MEMBER' END AS account_kind,
       l.balance - l.held AS available,
       t.breach"#,
    ledger::answer_from!(),
    r#"LEFT JOIN known k ON k.ord = o.ord
LEFT JOIN members m ON m.member_id = o.member_id
LEFT JOIN locked l ON l.id = m.id
ORDER BY o.ord
"#
);

/// Places `holds` (distinct keys, at most one per member) in one statement and answers
/// each as `POST /v1/holds` would.
#[tracing::instrument(skip_all, fields(holds = holds.len()))]
pub(crate) async fn apply(pool: &PgPool, holds: &[HoldRequest]) -> Result<Vec<Answer<HoldRecord>>> {
    let members: Vec<&str> = holds.iter().map(|h| h.member_id.as_str()).collect();
    let amounts: Vec<i64> = holds.iter().map(|h| h.amount.minor()).collect();
    let ttls: Vec<f64> = holds.iter().map(|h| f64::from(h.ttl_secs.secs())).collect();
    let rows = ledger::run(pool, STATEMENT, holds, |q| {
        q.bind(members.clone())
            .bind(amounts.clone())
            .bind(ttls.clone())
    })
    .await?;
    let (met, available, placed) =
        Met::read_all_with(&rows, Rule::Hold, HoldRecord::read, |row| {
            Ok(row.try_get::<Option<i64>, _>("available")?)
        })?;
    if placed > 0 {
        metrics::counter!("account_holds_total", "outcome" => "placed").increment(placed as u64);
    }
    ledger::answer_with(
        holds,
        met,
        ledger::created,
        |keys| async move { holds::by_keys(pool, &keys).await },
        |i, account| {
            Some(match account {
                None => Error::NoAccount(holds[i].member_id.as_str().to_owned()),
                Some(AccountKind::Member | AccountKind::Merchant) => {
                    let (available, amount) = (available[i].unwrap_or(0), holds[i].amount.minor());
                    if available >= amount {
                        // Covered, yet not placed: a concurrent placement of the same key
                        // that then rolled back made this one skip it. Nothing was done.
                        return Some(Error::Unavailable);
                    }
                    metrics::counter!("account_holds_total", "outcome" => "insufficient_funds")
                        .increment(1);
                    Error::NotCovered { available, amount }
                }
            })
        },
        |_| 0,
    )
    .await
}

impl ledger::Statement for HoldRequest {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}
