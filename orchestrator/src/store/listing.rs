//! The operator's view: the filtered payment list, the per-state counts behind the
//! gauges, the console's counts per product, and a payment's trace context.

use paysaga_contracts::orchestrator::api::ListPayments;
use sqlx::{PgPool, Row};
use uuid::Uuid;
use workflows::State;

use super::row::{named, PaymentRow, PAYMENT_COLUMNS};
use crate::error::Result;

/// The operator's list: filters (`state` parsed from `f.state`), newest first, keyset
/// paging on the time-ordered id.
pub async fn list(
    pool: &PgPool,
    f: &ListPayments,
    state: Option<State>,
    limit: i64,
) -> Result<Vec<PaymentRow>> {
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
        .bind(state.map(State::as_str))
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

/// One product's payments in one state (`product_id` `None`: payments older than the
/// product column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductCensus {
    pub product_id: Option<i64>,
    pub state: State,
    pub n: i64,
    /// Of them, flagged for an operator.
    pub attention: i64,
    pub created_last_minute: i64,
    /// Last updated in the last minute: for a terminal state, the move into it.
    pub updated_last_minute: i64,
}

/// Payments per product and state. One scan of `payments`: the console polls it every
/// few seconds per open page, which is an operator's load, not a buyer's.
pub async fn product_census(pool: &PgPool) -> Result<Vec<ProductCensus>> {
    let rows = sqlx::query(
        r#"
        SELECT product_id, state, COUNT(*) AS n,
               COUNT(*) FILTER (WHERE needs_attention) AS attention,
               COUNT(*) FILTER (WHERE created_at > now() - INTERVAL '60 seconds') AS created,
               COUNT(*) FILTER (WHERE updated_at > now() - INTERVAL '60 seconds') AS updated
        FROM payments
        GROUP BY product_id, state
        "#,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .iter()
        .map(|r| {
            Ok(ProductCensus {
                product_id: r.try_get("product_id")?,
                state: named(r, "state")?,
                n: r.try_get("n")?,
                attention: r.try_get("attention")?,
                created_last_minute: r.try_get("created")?,
                updated_last_minute: r.try_get("updated")?,
            })
        })
        .collect::<sqlx::Result<_>>()?)
}

/// The payment's W3C `traceparent`, if it was recorded with one.
pub async fn traceparent(pool: &PgPool, id: Uuid) -> Result<Option<String>> {
    let row: Option<Option<String>> =
        sqlx::query_scalar(r#"SELECT traceparent FROM payments WHERE id = $1"#)
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(row.flatten())
}
