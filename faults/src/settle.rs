//! Waiting for recovery: every payment terminal with no work owed (a FAILED payment's
//! reservation released), or flagged for an operator with a cause, and every live hold
//! owned by a live reservation (no release owed, no orphan left), read from
//! PostgreSQL, within a bound.

use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{PgPool, Row};

/// Where the payments stood when recovery ended (or the bound passed).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Settled {
    /// From the heal until the last payment settled (or the bound, if it did not).
    pub recovery: Duration,
    /// Payments not terminal, or owing work, and not flagged: must be 0.
    pub open: i64,
    /// Non-terminal payments flagged for an operator with a recorded cause.
    pub flagged: i64,
    /// Flagged without a cause: must be 0.
    pub flagged_without_cause: i64,
    /// Live holds without their live reservation, and releases owed: must be 0.
    pub holds_owed: i64,
    pub within_bound: bool,
}

const TERMINAL: &str = "('COMPLETED', 'FAILED', 'REFUNDED')";

async fn census(pool: &PgPool) -> anyhow::Result<(i64, i64, i64)> {
    let sql = format!(
        r#"
        SELECT
            -- A FAILED payment may still owe the release of its reservation: not settled yet.
            COUNT(*) FILTER (WHERE (state NOT IN {TERMINAL} OR pending_action IS NOT NULL)
                             AND NOT needs_attention) AS open,
            COUNT(*) FILTER (WHERE state NOT IN {TERMINAL} AND needs_attention
                             AND COALESCE(last_error, '') <> '') AS flagged,
            COUNT(*) FILTER (WHERE state NOT IN {TERMINAL} AND needs_attention
                             AND COALESCE(last_error, '') = '') AS blind
        FROM payment_service.payments
        "#
    );
    let row = sqlx::query(&sql)
        .fetch_one(pool)
        .await
        .context("reading payment states")?;
    Ok((
        row.try_get("open")?,
        row.try_get("flagged")?,
        row.try_get("blind")?,
    ))
}

/// Payments open right now: not terminal or owing work, and not flagged.
pub async fn open(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(census(pool).await?.0)
}

/// Polls until no payment is open, or `bound` has passed since `healed_at`.
pub async fn wait(pool: &PgPool, healed_at: Instant, bound: Duration) -> anyhow::Result<Settled> {
    loop {
        let (open, flagged, blind) = census(pool).await?;
        let holds_owed = paysaga_drop::invariants::holds_owed(pool).await?;
        let elapsed = healed_at.elapsed();
        let settled = open == 0 && blind == 0 && holds_owed == 0;
        if settled || elapsed >= bound {
            return Ok(Settled {
                recovery: elapsed,
                open,
                flagged,
                flagged_without_cause: blind,
                holds_owed,
                within_bound: settled,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
