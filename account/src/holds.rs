//! What the hold rules share (placing, in `hold`; releasing and sweeping, in `release`;
//! capturing is the debit's): a hold as their statements answer it, the requests'
//! side of a batch's rounds, the by-key lookups, and live holds listed by age.

use std::collections::HashMap;

use sqlx::{postgres::PgRow, FromRow, PgPool, Row};

use crate::{
    api::{Hold, HoldCursor, HoldPage, HoldRequest, HoldState, ListHolds, ReleaseRequest},
    error::{Error, Result, Rule},
    ledger::{self, Outcome, Request},
    rows::HoldRow,
};

/// A hold and the member whose account it is on (what a repeated placement is compared
/// with: a hold request names the member, the hold its account).
#[derive(Debug, Clone)]
pub(crate) struct HoldRecord {
    pub hold: Hold,
    pub owner: String,
}

impl HoldRecord {
    /// Reads a statement's or a lookup's row: the hold's columns and `owner`.
    pub(crate) fn read(row: &PgRow) -> Result<Self> {
        Ok(HoldRecord {
            hold: Hold::from(HoldRow::from_row(row)?),
            owner: row.try_get("owner")?,
        })
    }
}

/// A hold rule's outcome as the wire shows it.
pub(crate) fn public(outcome: Outcome<HoldRecord>) -> Outcome<Hold> {
    outcome.map(|r| r.map(|record| record.hold))
}

/// A placement's key already holding a hold: the same request (the same member and
/// amount) gets the hold as it is now, whatever its state; anything else is a reuse.
impl Request for HoldRequest {
    const RULE: Rule = Rule::Hold;
    type Record = HoldRecord;
    /// A member's placements are decided one after another, each against what the one
    /// before left available.
    type Group = String;
    fn group(&self) -> String {
        self.member_id.as_str().to_owned()
    }
    fn key(&self) -> &str {
        self.operation_key.as_str()
    }
    fn again(&self, record: &HoldRecord) -> Outcome<HoldRecord> {
        if record.owner != self.member_id.as_str() || record.hold.amount != self.amount.minor() {
            return ledger::reused(&record.hold.operation_key);
        }
        ledger::replayed(record)
    }
}

/// A release of a hold already settled: released (or lapsed and swept) is the same
/// answer again; captured, a refusal.
impl Request for ReleaseRequest {
    const RULE: Rule = Rule::Release;
    type Record = HoldRecord;
    type Group = String;
    fn group(&self) -> String {
        self.operation_key.as_str().to_owned()
    }
    fn key(&self) -> &str {
        self.operation_key.as_str()
    }
    fn again(&self, record: &HoldRecord) -> Outcome<HoldRecord> {
        match record.hold.state {
            HoldState::Captured => Err(Error::HoldCaptured(record.hold.operation_key.clone())),
            HoldState::Released | HoldState::Held => ledger::replayed(record),
        }
    }
}

/// The columns a hold is answered with, from `holds` aliased `h` and `accounts` `a`.
pub(crate) const HOLD_COLUMNS: &str = "h.id, h.operation_key, h.account_id, h.amount, h.state, \
     h.expires_at, h.captured_by, h.created_at, h.settled_at, a.member_id AS owner";

/// Holds by operation key, with their owners.
pub(crate) async fn by_keys<K: AsRef<str>>(
    pool: &PgPool,
    keys: &[K],
) -> Result<HashMap<String, HoldRecord>> {
    let keys: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    let rows = sqlx::query(&format!(
        r#"SELECT {HOLD_COLUMNS}
           FROM holds h
           JOIN accounts a ON a.id = h.account_id
           WHERE h.operation_key = ANY($1)"#
    ))
    .bind(keys)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| HoldRecord::read(row).map(|r| (r.hold.operation_key.clone(), r)))
        .collect()
}

/// `GET /v1/holds/{key}`.
pub(crate) async fn by_key(pool: &PgPool, key: &str) -> Result<Option<Hold>> {
    Ok(by_keys(pool, &[key]).await?.remove(key).map(|r| r.hold))
}

/// The most holds one page lists, and the default.
pub const MAX_PAGE: i64 = 1_000;
pub const DEFAULT_PAGE: i64 = 500;

/// `GET /v1/holds`: live holds (held, within their deadline) placed at least
/// `older_than_ms` ago by the database's clock, oldest first, after the cursor. Through
/// the partial index of held holds by placement time, so settled history costs nothing.
#[tracing::instrument(skip_all, fields(older_than_ms = q.older_than_ms))]
pub(crate) async fn list(pool: &PgPool, q: &ListHolds) -> Result<HoldPage> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let rows = sqlx::query(&format!(
        r#"SELECT {HOLD_COLUMNS}
           FROM holds h
           JOIN accounts a ON a.id = h.account_id
           WHERE h.state = 'HELD' AND h.expires_at > now()
             AND h.created_at <= now() - make_interval(secs => $1::FLOAT8 / 1000)
             AND ($2::TIMESTAMPTZ IS NULL OR (h.created_at, h.id) > ($2, COALESCE($3, '00000000-0000-0000-0000-000000000000'::UUID)))
           ORDER BY h.created_at, h.id
           LIMIT $4"#
    ))
    .bind(q.older_than_ms as f64)
    .bind(q.after_created_at)
    .bind(q.after_id)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    let holds: Vec<Hold> = rows
        .iter()
        .map(|row| HoldRecord::read(row).map(|r| r.hold))
        .collect::<Result<_>>()?;
    let next = (holds.len() as i64 == limit)
        .then(|| holds.last())
        .flatten()
        .map(|h| HoldCursor {
            created_at: h.created_at,
            id: h.id,
        });
    Ok(HoldPage { holds, next })
}
