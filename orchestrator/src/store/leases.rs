//! Leases: who drives a payment now. Recovery's batch claim, a single claim, and letting go.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::row::{millis, PaymentRow, PAYMENT_COLUMNS};
use crate::error::Result;

/// Lets go of a lease without moving the payment (the driver stops for now).
pub async fn release(pool: &PgPool, id: Uuid, driver: Uuid) -> Result<()> {
    sqlx::query(r#"UPDATE payments SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2"#)
        .bind(id)
        .bind(driver)
        .execute(pool)
        .await?;
    Ok(())
}

/// Recovery's claim: up to `batch` due, unflagged payments whose lease is free or
/// expired, leased to `driver`. `SKIP LOCKED` lets several instances claim at once
/// without waiting on each other or taking the same payment.
#[tracing::instrument(skip_all, fields(batch))]
pub async fn claim_due(
    pool: &PgPool,
    driver: Uuid,
    lease: Duration,
    batch: i64,
) -> Result<Vec<PaymentRow>> {
    let sql = String::from(
        r#"
        WITH due AS (
            SELECT id
            FROM payments
            WHERE next_attempt_at IS NOT NULL
              AND next_attempt_at <= now()
              AND NOT needs_attention
              AND (lease_until IS NULL OR lease_until < now())
            ORDER BY next_attempt_at
            LIMIT $3
            FOR UPDATE SKIP LOCKED
        )
        UPDATE payments p
        SET lease_owner = $1, lease_until = now() + $2 * INTERVAL '1 millisecond'
        FROM due
        WHERE p.id = due.id
        RETURNING p.*
        "#,
    );
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(driver)
        .bind(millis(lease))
        .bind(batch)
        .fetch_all(pool)
        .await?)
}

/// Claims one payment if it has work and nobody holds a live lease on it.
pub async fn claim_one(
    pool: &PgPool,
    id: Uuid,
    driver: Uuid,
    lease: Duration,
) -> Result<Option<PaymentRow>> {
    let sql = format!(
        r#"
        UPDATE payments
        SET lease_owner = $2, lease_until = now() + $3 * INTERVAL '1 millisecond'
        WHERE id = $1
          AND pending_action IS NOT NULL
          AND NOT needs_attention
          AND (lease_until IS NULL OR lease_until < now())
        RETURNING {PAYMENT_COLUMNS}
        "#
    );
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(id)
        .bind(driver)
        .bind(millis(lease))
        .fetch_optional(pool)
        .await?)
}
