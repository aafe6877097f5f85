//! The release rule: a hold's money back to the available balance, once: by key (a
//! reservation cancelled, a claim that got no unit, an orphan the order service
//! reconciled), or swept once its deadline has passed. A captured hold is never
//! released: its money is paid.

use std::time::Duration;

use paysaga_common::jobs::{self, Jobs};
use sqlx::{PgPool, Row};

use crate::{
    api::{HoldState, ReleaseRequest},
    error::{Breach, Error, Result, Rule},
    holds::HoldRecord,
    ledger::{self, Answer, Recorded},
};

/// One statement, in the lock order of [`crate::ledger`]:
///
/// - `named`: the holds released by key, `FOR NO KEY UPDATE` in key order (a capture
///   of the same hold waits, or is waited for, and the newest version is read);
///   `due`: the sweep's, held past their deadline, oldest first, `SKIP LOCKED` (one
///   being captured or released right now is left to that).
/// - `going`: the held ones among them (a held hold past its deadline is released like
///   any other: its money is free either way).
/// - `locked`: their accounts, by id.
/// - `released`: each `RELEASED`, by id (one probe each; the lock keeps it `HELD`); `moved`: each account's `held` lowered by what its
///   released holds held.
/// - `tally`: every hold released and every account moved to exactly its locked `held`
///   less those holds, never below zero, else the statement fails whole.
///
/// Answers one row per hold named, in order (the hold as it is now, or none), with the
/// number of holds the statement released (the sweep's count).
const STATEMENT: &str = concat!(
    r#"
WITH input AS (
    SELECT * FROM UNNEST($1::TEXT[]) WITH ORDINALITY AS o (operation_key, ord)
),"#,
    ledger::lock_in_order!(
        "named",
        "h.id, h.operation_key, h.account_id, h.amount, h.state, h.expires_at, h.captured_by,
           h.created_at, h.settled_at",
        "holds h",
        "h.operation_key",
        "o.operation_key FROM input o"
    ),
    r#"
due AS MATERIALIZED (
    SELECT h.id, h.operation_key, h.account_id, h.amount, h.state, h.expires_at, h.captured_by,
           h.created_at, h.settled_at
    FROM holds h
    WHERE h.state = 'HELD' AND h.expires_at <= now()
    ORDER BY h.expires_at
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
),
going AS MATERIALIZED (
    SELECT n.id, n.account_id, n.amount FROM named n WHERE n.state = 'HELD'
    UNION
    SELECT d.id, d.account_id, d.amount FROM due d
),"#,
    ledger::lock_in_order!(
        "locked",
        "a.id, a.held",
        "accounts a",
        "a.id",
        "g.account_id FROM going g"
    ),
    r#"
released AS (
    UPDATE holds h SET state = 'RELEASED', settled_at = now()
    FROM going g
    WHERE h.id = g.id
    RETURNING h.id, h.operation_key, h.account_id, h.amount, h.state, h.expires_at,
              h.captured_by, h.created_at, h.settled_at
),
moved AS (
    UPDATE accounts a SET held = GREATEST(a.held - t.total, 0)
    FROM (SELECT account_id, SUM(amount)::BIGINT AS total FROM released GROUP BY account_id) AS t
    JOIN locked l ON l.id = t.account_id
    WHERE a.id = t.account_id
    RETURNING a.id, a.held, l.held - t.total AS expected
),"#,
    ledger::paired_tally!(
        "release",
        "going" = "released",
        "released",
        "held <> expected OR expected < 0"
    ),
    r#"
SELECT o.ord, t.released AS swept, t.breach,
       COALESCE(r.id, n.id) AS id,
       COALESCE(r.operation_key, n.operation_key) AS operation_key,
       COALESCE(r.account_id, n.account_id) AS account_id,
       COALESCE(r.amount, n.amount) AS amount,
       COALESCE(r.state, n.state) AS state,
       COALESCE(r.expires_at, n.expires_at) AS expires_at,
       COALESCE(r.captured_by, n.captured_by) AS captured_by,
       COALESCE(r.created_at, n.created_at) AS created_at,
       COALESCE(r.settled_at, n.settled_at) AS settled_at,
       a.member_id AS owner
FROM tally t
LEFT JOIN input o ON TRUE
LEFT JOIN named n ON n.operation_key = o.operation_key
LEFT JOIN released r ON r.id = n.id
LEFT JOIN accounts a ON a.id = n.account_id
ORDER BY o.ord
"#
);

/// The statement over `keys` and up to `sweep` due holds: one row per key, in order (one
/// row of the tally alone when there are none), and how many holds it released.
async fn run(
    pool: &PgPool,
    keys: &[&str],
    sweep: i64,
) -> Result<(Vec<sqlx::postgres::PgRow>, i64)> {
    let rows = ledger::rerun(pool, || {
        sqlx::query(STATEMENT).bind(keys.to_vec()).bind(sweep)
    })
    .await?;
    let released = match rows.first() {
        Some(row) => row.try_get("swept")?,
        None => {
            return Err(Breach::Unanswered {
                rule: Rule::Release,
                sent: keys.len().max(1),
                got: 0,
            }
            .into())
        }
    };
    Ok((rows, released))
}

/// Releases the holds `releases` name (distinct keys) in one statement and answers each
/// as `POST /v1/holds/{key}/release` would: the hold released (now, or before), a
/// captured one refused, a missing one not found.
#[tracing::instrument(skip_all, fields(releases = releases.len()))]
pub(crate) async fn apply(
    pool: &PgPool,
    releases: &[ReleaseRequest],
) -> Result<Vec<Answer<HoldRecord>>> {
    let keys: Vec<&str> = releases.iter().map(|r| r.operation_key.as_str()).collect();
    let (rows, released) = run(pool, &keys, 0).await?;
    Breach::all_answered(Rule::Release, releases.len(), rows.len())?;
    count(released, "released");
    releases
        .iter()
        .zip(&rows)
        .enumerate()
        .map(|(i, (req, row))| {
            let ord: Option<i64> = row.try_get("ord")?;
            if ord.and_then(|o| usize::try_from(o).ok()) != Some(i + 1) {
                return Err(Breach::Misordered {
                    rule: Rule::Release,
                    index: i,
                    ord: ord.unwrap_or(0),
                }
                .into());
            }
            if row.try_get::<Option<uuid::Uuid>, _>("id")?.is_none() {
                return Ok(Answer {
                    outcome: Err(Error::HoldNotFound(req.operation_key.to_string())),
                    holds: None,
                });
            }
            let record = HoldRecord::read(row)?;
            let outcome = match record.hold.state {
                HoldState::Captured => Err(Error::HoldCaptured(req.operation_key.to_string())),
                HoldState::Released | HoldState::Held => Ok(Recorded {
                    value: record.clone(),
                    created: false,
                }),
            };
            Ok(Answer {
                outcome,
                holds: Some(record),
            })
        })
        .collect()
}

impl ledger::Statement for ReleaseRequest {
    fn apply<'a>(pool: &'a PgPool, reqs: &'a [Self]) -> ledger::Applying<'a, Self::Record> {
        Box::pin(apply(pool, reqs))
    }
}

fn count(n: i64, outcome: &'static str) {
    if let Ok(n @ 1..) = u64::try_from(n) {
        metrics::counter!("account_holds_total", "outcome" => outcome).increment(n);
    }
}

/// Releases up to `limit` held holds past their deadline (their money held until now);
/// returns how many.
#[tracing::instrument(skip_all, fields(limit))]
pub async fn sweep_batch(pool: &PgPool, limit: i64) -> Result<u64> {
    let (_, released) = run(pool, &[], limit).await?;
    count(released, "lapsed");
    Ok(u64::try_from(released).unwrap_or(0))
}

/// One sweep run: batches until one comes back short, at most `max_batches`.
pub async fn sweep(pool: &PgPool, batch: i64, max_batches: u32) -> Result<u64> {
    let total = jobs::timed_in_batches("account_hold_sweep_seconds", batch, max_batches, || {
        sweep_batch(pool, batch)
    })
    .await?;
    if total > 0 {
        tracing::info!(holds_released = total, "lapsed holds swept");
    }
    Ok(total)
}

/// Schedules the sweep of lapsed holds every `interval`.
pub async fn start(pool: PgPool, interval: Duration, batch: i64) -> anyhow::Result<Jobs> {
    let jobs = Jobs::start().await?;
    jobs.every("hold_sweep", interval, move || {
        let pool = pool.clone();
        async move {
            if let Err(e) = sweep(&pool, batch, 20).await {
                metrics::counter!("account_hold_sweep_errors_total").increment(1);
                tracing::warn!(error = %e, "hold sweep failed; the next run retries");
            }
        }
    })
    .await?;
    Ok(jobs)
}
