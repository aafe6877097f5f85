//! The operator's view: the filtered payment list and the per-state counts behind the gauges.

use sqlx::PgPool;

use super::{PaymentRow, PAYMENT_COLUMNS};
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

/// Payments per state and the attention count, for the gauges.
pub async fn census(pool: &PgPool) -> Result<(Vec<(String, i64)>, i64)> {
    let by_state: Vec<(String, i64)> =
        sqlx::query_as(r#"SELECT state, COUNT(*) FROM payments GROUP BY state"#)
            .fetch_all(pool)
            .await?;
    let attention: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM payments WHERE needs_attention"#)
            .fetch_one(pool)
            .await?;
    Ok((by_state, attention))
}
