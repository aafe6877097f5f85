//! Approvals (four eyes) of refunds and top-ups: a refund's asked for once per payment
//! at a time (the partial unique index `approvals_one_pending_refund`), a top-up's once
//! per key (`approvals_one_per_top_up_key`); decided once (a conditional UPDATE on
//! `state = 'PENDING'`), listed newest first.

use chrono::{DateTime, Utc};
use paysaga_contracts::staff::api::{Approval, ApprovalKind, ApprovalState};
use paysaga_staff::Acting;
use sqlx::{postgres::PgArguments, query::QueryAs, PgPool, Postgres};
use uuid::Uuid;

use crate::error::{Breach, Result};

const APPROVAL_COLUMNS: &str = r#"id, kind, payment_id, member_id, operation_key, amount,
    requested_by, requested_by_name, requested_at, reason, state, decided_by, decided_by_name,
    decided_at, decision_reason"#;

/// An `approvals` row, its kind and state typed from the moment it is decoded.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApprovalRow {
    pub id: i64,
    #[sqlx(try_from = "String")]
    pub kind: ApprovalKind,
    pub payment_id: Option<Uuid>,
    pub member_id: Option<Uuid>,
    pub operation_key: Option<String>,
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
    pub fn to_api(&self) -> Approval {
        Approval {
            id: self.id,
            kind: self.kind,
            payment_id: self.payment_id,
            member_id: self.member_id,
            operation_key: self.operation_key.clone(),
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

/// A statement answered with approval rows.
type ApprovalQuery<'q> = QueryAs<'q, Postgres, ApprovalRow, PgArguments>;

/// `q` with who acts (staff id, then name) and their reason bound: the last three
/// parameters of every statement that asks for or decides an approval.
fn acted<'q>(q: ApprovalQuery<'q>, by: &Acting, reason: Option<&'q str>) -> ApprovalQuery<'q> {
    q.bind(by.actor.staff_id())
        .bind(by.actor.name())
        .bind(reason)
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
        let insert = format!(
            r#"INSERT INTO approvals (kind, payment_id, amount, requested_by, requested_by_name, reason)
               VALUES ('REFUND', $1, $2, $3, $4, $5)
               ON CONFLICT (payment_id) WHERE state = 'PENDING' DO NOTHING
               RETURNING {APPROVAL_COLUMNS}"#
        );
        let insert = sqlx::query_as(&insert).bind(payment_id).bind(amount);
        let inserted = acted(insert, by, reason).fetch_optional(pool).await?;
        if let Some(row) = inserted {
            return Ok(row);
        }
        let pending = sqlx::query_as::<_, ApprovalRow>(&format!(
            r#"SELECT {APPROVAL_COLUMNS} FROM approvals
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

/// The top-up approval under the deposit's operation key `key`: a new pending one of
/// `member_id` and `amount` asked for by `by`, or the one the key made before (whatever
/// its state, and whatever it is of: the caller compares).
pub async fn request_top_up(
    pool: &PgPool,
    member_id: Uuid,
    amount: i64,
    key: &str,
    by: &Acting,
    reason: &str,
) -> Result<ApprovalRow> {
    // One round inserts, or reads the row the key holds (committed before this
    // statement's conflict check, so the read sees it); a second round only if it was
    // not visible yet.
    for _ in 0..2 {
        let insert = format!(
            r#"INSERT INTO approvals (kind, member_id, operation_key, amount, requested_by,
                                      requested_by_name, reason)
               VALUES ('TOP_UP', $1, $2, $3, $4, $5, $6)
               ON CONFLICT (operation_key) WHERE kind = 'TOP_UP' DO NOTHING
               RETURNING {APPROVAL_COLUMNS}"#
        );
        let insert = sqlx::query_as(&insert)
            .bind(member_id)
            .bind(key)
            .bind(amount);
        let inserted = acted(insert, by, Some(reason)).fetch_optional(pool).await?;
        if let Some(row) = inserted {
            return Ok(row);
        }
        if let Some(row) = top_up_by_key(pool, key).await? {
            return Ok(row);
        }
    }
    Err(Breach::TopUpApprovalRaced {
        key: key.to_owned(),
    }
    .into())
}

/// The top-up approval the deposit's operation key `key` made, if any.
pub async fn top_up_by_key(pool: &PgPool, key: &str) -> Result<Option<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"SELECT {APPROVAL_COLUMNS} FROM approvals
           WHERE kind = 'TOP_UP' AND operation_key = $1"#
    ))
    .bind(key)
    .fetch_optional(pool)
    .await?)
}

/// The approval `id`, if there is one.
pub async fn load(pool: &PgPool, id: i64) -> Result<Option<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"#
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
    let update = format!(
        r#"UPDATE approvals
           SET state = $2, decided_by = $3, decided_by_name = $4, decided_at = now(),
               decision_reason = $5
           WHERE id = $1 AND state = 'PENDING'
           RETURNING {APPROVAL_COLUMNS}"#
    );
    let update = sqlx::query_as(&update).bind(id).bind(to.as_str());
    Ok(acted(update, by, reason).fetch_optional(pool).await?)
}

/// The approvals, newest first, in `state` and of `kind` if given, older than `before`
/// if given.
pub async fn list(
    pool: &PgPool,
    state: Option<ApprovalState>,
    kind: Option<ApprovalKind>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<ApprovalRow>> {
    Ok(sqlx::query_as::<_, ApprovalRow>(&format!(
        r#"SELECT {APPROVAL_COLUMNS} FROM approvals
           WHERE ($1::TEXT IS NULL OR state = $1)
             AND ($2::TEXT IS NULL OR kind = $2)
             AND ($3::BIGINT IS NULL OR id < $3)
           ORDER BY id DESC
           LIMIT $4"#
    ))
    .bind(state.map(ApprovalState::as_str))
    .bind(kind.map(ApprovalKind::as_str))
    .bind(before)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}
