//! The transactional outbox: events the triggers and transitions wrote beside their
//! change, served oldest first to the orchestrator, which relays them and acknowledges.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{api::OutboxEvent, error::Result};

#[derive(sqlx::FromRow)]
struct EventRow {
    id: Uuid,
    #[sqlx(rename = "type")]
    kind: String,
    subject: String,
    data: serde_json::Value,
    occurred_at: DateTime<Utc>,
}

/// Up to `limit` events not yet relayed, in the order they were written (through the
/// partial index of unrelayed events, so relayed history costs nothing).
#[tracing::instrument(skip_all, fields(limit))]
pub async fn pending(pool: &PgPool, limit: i64) -> Result<Vec<OutboxEvent>> {
    let rows = sqlx::query_as::<_, EventRow>(
        r#"
        SELECT id, type, subject, data, occurred_at
        FROM outbox_events
        WHERE relayed_at IS NULL
        ORDER BY seq
        LIMIT $1
        "#,
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| OutboxEvent {
            id: r.id,
            kind: r.kind,
            subject: r.subject,
            occurred_at: r.occurred_at,
            data: r.data,
        })
        .collect())
}

/// Marks these events relayed; ids already relayed or unknown change nothing. Returns
/// how many were newly marked.
#[tracing::instrument(skip_all, fields(ids = ids.len()))]
pub async fn ack(pool: &PgPool, ids: &[Uuid]) -> Result<u64> {
    let marked = sqlx::query(
        r#"
        UPDATE outbox_events
        SET relayed_at = now()
        WHERE id = ANY($1) AND relayed_at IS NULL
        "#,
    )
    .bind(ids)
    .execute(pool)
    .await?
    .rows_affected();
    metrics::counter!("order_outbox_relayed_total").increment(marked);
    Ok(marked)
}

/// The age in seconds of the oldest event not yet relayed (0 when none is): how far the
/// orchestrator's ingest is behind. The first entry of the partial index of unrelayed
/// events, so it costs the same whatever the history.
pub async fn lag_seconds(pool: &PgPool) -> Result<f64> {
    let lag: Option<f64> = sqlx::query_scalar(
        r#"
        SELECT EXTRACT(EPOCH FROM now() - occurred_at)::FLOAT8
        FROM outbox_events
        WHERE relayed_at IS NULL
        ORDER BY seq
        LIMIT 1
        "#,
    )
    .fetch_optional(pool)
    .await?;
    Ok(lag.unwrap_or(0.0).max(0.0))
}
