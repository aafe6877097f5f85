//! The operator's view: the filtered payment list and the per-state counts behind the gauges.

use sqlx::{PgPool, Row};
use workflows::State;

use super::{named, PaymentRow, PAYMENT_COLUMNS};
use crate::{api::ListPayments, error::Result};

/// The operator's list: filters, newest first, keyset paging on the time-ordered id.
pub async fn list(pool: &PgPool, f: &ListPayments, limit: i64) -> Result<Vec<PaymentRow>> {
    let sql = format!(
        r#"
        SELECT {PAYMENT_COLUMNS}
        FROM payments
        WHERE ($1::TEXT IS NULL OR state = $1)
          AND ($2::BOOLEAN IS NULL OR needs_attention = $2)
          AND ($3::BIGINT IS NULL OR created_at <= now() - $3 * INTERVAL '1 second')
          AND ($4::BIGINT IS NULL OR created_at >= now() - $4 * INTERVAL '1 second')
          AND ($5::TEXT IS NULL OR strpos(last_error, $5) > 0)
          AND ($6::UUID IS NULL OR id < $6)
        ORDER BY id DESC
        LIMIT $7
        "#
    );
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(f.state.as_deref())
        .bind(f.needs_attention)
        .bind(f.min_age_secs)
        .bind(f.max_age_secs)
        .bind(f.error_contains.as_deref())
        .bind(f.cursor)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}

/// What the recovery job's gauges show.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// Payments with work left (an action pending), per state.
    pub by_state: Vec<(State, i64)>,
    /// Payments flagged for an operator.
    pub attention: i64,
    /// How long the longest-waiting due payment nobody holds has been due, in seconds
    /// (0 when none is): work the recovery job has not reached.
    pub recovery_lag_seconds: f64,
}

/// Open payments per state, the attention count and the recovery lag, for the gauges.
pub async fn census(pool: &PgPool) -> Result<Census> {
    // Settled payments are left out (through `payments_open_idx`): the gauge is work
    // left, and the settled history would make every run a full scan.
    let by_state = sqlx::query(
        r#"SELECT state, COUNT(*) AS n FROM payments WHERE pending_action IS NOT NULL GROUP BY state"#,
    )
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| Ok((named(r, "state")?, r.try_get("n")?)))
    .collect::<sqlx::Result<Vec<(State, i64)>>>()?;
    let attention: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM payments WHERE needs_attention"#)
            .fetch_one(pool)
            .await?;
    // The oldest due payment comes first in `payments_due_idx`; the lease test only
    // skips the few being driven right now.
    let lag: Option<f64> = sqlx::query_scalar(
        r#"
        SELECT EXTRACT(EPOCH FROM now() - MIN(next_attempt_at))::FLOAT8
        FROM payments
        WHERE next_attempt_at IS NOT NULL
          AND next_attempt_at <= now()
          AND NOT needs_attention
          AND (lease_until IS NULL OR lease_until < now())
        "#,
    )
    .fetch_one(pool)
    .await?;
    Ok(Census {
        by_state,
        attention,
        recovery_lag_seconds: lag.unwrap_or(0.0).max(0.0),
    })
}
