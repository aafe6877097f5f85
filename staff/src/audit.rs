//! The audit trail: one row per change a person made (or tried to make), append-only
//! (the service role may not update or delete a row; see the grants), listed newest
//! first with filters.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use paysaga_common::paging::next_cursor;
use paysaga_contracts::staff::api::{AuditEntry, AuditPage, ListAudit};
use sqlx::PgExecutor;

use crate::{
    error::{Error, Result},
    Acting, AuditAction, AuditOutcome, Staff,
};

/// What one row says beside who and from where.
#[derive(Debug, Clone)]
pub struct Entry {
    pub action: AuditAction,
    pub target: Option<String>,
    pub reason: Option<String>,
    pub outcome: AuditOutcome,
    pub detail: Option<String>,
}

impl Entry {
    /// The row of `action` on `target` that ended in `result`: `DONE` with what `done`
    /// says it left, `REFUSED` with the refusal's code (`code` gives it when the error
    /// is a refusal), else `FAILED`.
    pub fn of<T, E>(
        action: AuditAction,
        target: String,
        reason: Option<String>,
        result: &std::result::Result<T, E>,
        done: impl FnOnce(&T) -> Option<String>,
        code: impl FnOnce(&E) -> Option<&'static str>,
    ) -> Self {
        let (outcome, detail) = match result {
            Ok(v) => (AuditOutcome::Done, done(v)),
            Err(e) => match code(e) {
                Some(code) => (AuditOutcome::Refused, Some(code.to_owned())),
                None => (AuditOutcome::Failed, None),
            },
        };
        Entry {
            action,
            target: Some(target),
            reason,
            outcome,
            detail,
        }
    }
}

/// Appends one row for `by`.
pub async fn record(db: impl PgExecutor<'_>, by: &Acting, entry: Entry) -> sqlx::Result<()> {
    record_as(db, by.actor.staff_id(), &by.actor.name(), by.from, entry).await
}

/// Appends one row for an actor named by hand (a failed sign-in names the email tried).
pub async fn record_as(
    db: impl PgExecutor<'_>,
    staff_id: Option<i64>,
    actor: &str,
    from: Option<IpAddr>,
    entry: Entry,
) -> sqlx::Result<()> {
    sqlx::query(
        r#"INSERT INTO audit_log (staff_id, actor, client_addr, action, target, reason, outcome, detail)
           VALUES ($1, $2, $3::INET, $4, $5, $6, $7, $8)"#,
    )
    .bind(staff_id)
    .bind(actor)
    .bind(from.map(|a| a.to_string()))
    .bind(entry.action.as_str())
    .bind(entry.target)
    .bind(entry.reason)
    .bind(entry.outcome.as_str())
    .bind(entry.detail)
    .execute(db)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    at: DateTime<Utc>,
    staff_id: Option<i64>,
    actor: String,
    client_addr: Option<String>,
    action: String,
    target: Option<String>,
    reason: Option<String>,
    outcome: String,
    detail: Option<String>,
}

impl Row {
    fn entry(self) -> Result<AuditEntry> {
        Ok(AuditEntry {
            id: self.id,
            at: self.at,
            staff_id: self.staff_id,
            actor: self.actor,
            client_addr: self.client_addr,
            action: AuditAction::parse(&self.action)
                .ok_or_else(|| Error::Internal(format!("audit action {:?}", self.action)))?,
            target: self.target,
            reason: self.reason,
            outcome: AuditOutcome::parse(&self.outcome)
                .ok_or_else(|| Error::Internal(format!("audit outcome {:?}", self.outcome)))?,
            detail: self.detail,
        })
    }
}

pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 500;

impl Staff {
    /// The trail, newest first, filtered, keyset paged by id.
    pub async fn audit(&self, filter: &ListAudit) -> Result<AuditPage> {
        let limit = filter.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::InvalidQuery(format!(
                "limit must be 1 to {MAX_LIMIT}"
            )));
        }
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let action = match given(&filter.action) {
            None => None,
            Some(a) => Some(
                AuditAction::parse(&a.to_ascii_uppercase())
                    .ok_or_else(|| {
                        Error::InvalidQuery(format!(
                            "action {a:?} is none of {}",
                            AuditAction::ALL.map(AuditAction::as_str).join(", ")
                        ))
                    })?
                    .as_str(),
            ),
        };
        let rows = sqlx::query_as::<_, Row>(
            r#"SELECT id, at, staff_id, actor, host(client_addr) AS client_addr, action, target,
                      reason, outcome, detail
               FROM audit_log
               WHERE ($1::TEXT IS NULL OR actor = $1)
                 AND ($2::TEXT IS NULL OR action = $2)
                 AND ($3::TEXT IS NULL OR target = $3)
                 AND ($4::BIGINT IS NULL OR id < $4)
               ORDER BY id DESC
               LIMIT $5"#,
        )
        .bind(given(&filter.actor).map(|a| a.to_lowercase()))
        .bind(action)
        .bind(given(&filter.target))
        .bind(filter.before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let entries = rows
            .into_iter()
            .map(Row::entry)
            .collect::<Result<Vec<_>>>()?;
        Ok(AuditPage {
            next_before: next_cursor(&entries, limit, |e| e.id),
            entries,
        })
    }

    /// Appends one row for `by` on the pool.
    pub async fn record(&self, by: &Acting, entry: Entry) -> Result<()> {
        Ok(record(&self.pool, by, entry).await?)
    }
}
