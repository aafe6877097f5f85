//! Refund approvals (four eyes): asked for once per payment at a time (the partial
//! unique index `refund_approvals_one_pending`), decided once (a conditional UPDATE on
//! `state = 'PENDING'`), listed newest first.

use chrono::{DateTime, Utc};
use paysaga_contracts::staff::api::{ApprovalState, RefundApproval};
use paysaga_staff::Acting;
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::{Breach, Result};

const APPROVAL_COLUMNS: &str = r#"id, payment_id, amount, requested_by, requested_by_name,
    requested_at, reason, state, decided_by, decided_by_name, decided_at, decision_reason"#;

/// A `refund_approvals` row, its state typed from the moment it is decoded.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApprovalRow {
    pub id: i64,
    pub payment_id: Uuid,
    pub amount: i64,
    pub requested_by: Option<i64>,
    pub requested_by_name: String,
    pub requested_at: DateTime<Utc>,
    pub reason: Option<String>,
    #[sqlx(try_from = "String")]
    pub state: ApprovalState,
    pub decided_by: Option<i64>,
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
}

impl ApprovalRow {
    pub fn to_api(&self) -> RefundApproval {
        RefundApproval {
            id: self.id,
            payment_id: self.payment_id,
            amount: self.amount,
            state: self.state,
            requested_by: self.requested_by,
            requested_by_name: self.requested_by_name.clone(),
            requested_at: self.requested_at,
            reason: self.reason.clone(),
            decided_by: self.decided_by,
            decided_by_name: self.decided_by_name.clone(),
            decided_at: self.decided_at,
            decision_reason: self.decision_reason.clone(),
        }
    }
}

/// The pending approval of a refund of `payment_id` (`amount`), asked for by `by`: a new
/// one, or the one already pending (asking again makes no second row).
pub async fn request(
    pool: &PgPool,
    payment_id: Uuid,
    amount: i64,
    by: &Acting,
    reason: Option<&str>,
) -> Result<ApprovalRow> {
    // The insert finds a pending one (made now by someone else, which this statement's
    // snapshot may not see), or the pending one it found is decided before it is read:
    // then ask again. Each round either inserts or reads a row another request made, so
    // two rounds are enough unless decisions keep racing in.
    for _ in 0..4 {
        let inserted = sqlx::query_as::<_, ApprovalRow>(&format!(
            r#"INSERT INTO refund_approvals (payment_id, amount, requested_by, requested_by_name, reason)
               VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (payment_id) WHERE state = 'PENDING' DO NOTHING
               RETURNING {APPROVAL_COLUMNS}"#
        ))
        .bind(payment_id)
        .bind(amount)
        .bind(by.actor.staff_id())
        .bind(by.actor.name())
        .bind(reason)
        .fetch_optional(pool)
        .await?;
        if let Some(row) = inserted {
            return Ok(row);
        }
        let pending = sqlx::query_as::<_, ApprovalRow>(&format!(
            r#"SELECT {APPROVAL_COLUMNS} FROM refund_approvals
               WHERE payment_id = $1 AND state = 'PENDING'"#
        ))
        .bind(payment_id)
        .fetch_optional(pool)
        .await?;
        if let Some(row) = pending {
            return Ok(row);
        }
    }
    Err(Breach::ApprovalRequestRaced {
        payment: payment_id,
    }
    .into())
}

/// The approval `id`, if there is one.
pub async fn load(pool: &PgPool, id: i64) -> Result<Option<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"SELECT {APPROVAL_COLUMNS} FROM refund_approvals WHERE id = $1"#
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?)
}

/// Decides the approval `id` (`to`: approved or rejected) by `by`, if it is still
/// pending: one conditional UPDATE, so of two deciding at once exactly one gets the row.
/// `None`: it was decided already (or is no approval).
pub async fn decide(
    pool: &PgPool,
    id: i64,
    to: ApprovalState,
    by: &Acting,
    reason: Option<&str>,
) -> Result<Option<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"UPDATE refund_approvals
           SET state = $2, decided_by = $3, decided_by_name = $4, decided_at = now(),
               decision_reason = $5
           WHERE id = $1 AND state = 'PENDING'
           RETURNING {APPROVAL_COLUMNS}"#
    ))
    .bind(id)
    .bind(to.as_str())
    .bind(by.actor.staff_id())
    .bind(by.actor.name())
    .bind(reason)
    .fetch_optional(pool)
    .await?)
}

/// The approvals, newest first, in `state` if given, older than `before` if given.
pub async fn list(
    pool: &PgPool,
    state: Option<ApprovalState>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"SELECT {APPROVAL_COLUMNS} FROM refund_approvals
           WHERE ($1::TEXT IS NULL OR state = $1)
             AND ($2::BIGINT IS NULL OR id < $2)
           ORDER BY id DESC
           LIMIT $3"#
    ))
    .bind(state.map(ApprovalState::as_str))
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
