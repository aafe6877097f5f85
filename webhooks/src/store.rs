//! The webhook tables in PostgreSQL: endpoints, the fan-out of events into deliveries,
//! the delivery claim and its outcome, the operators' views, the gauges' numbers, and
//! the order service's events coming in.

use std::time::Duration;

use chrono::{DateTime, Utc};
use paysaga_common::db::column;
use paysaga_contracts::orchestrator::api::{DeliveryFailure, WebhookDelivery, WebhookEndpoint};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    error::Result,
    ingest::Source,
    sealing::{SealingKey, Unsealable},
};

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Where a delivery is: waiting for an attempt, received, or given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    Pending,
    Delivered,
    Dead,
}

// The stored names are the `webhook_deliveries_state_known` constraint's.
paysaga_contracts::wire_names!(
    DeliveryState {
        Pending => PENDING,
        Delivered => DELIVERED,
        Dead => DEAD,
    },
    unknown: UnknownDeliveryState
);

/// A name that is no delivery state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown delivery state {0:?}")]
pub struct UnknownDeliveryState(pub String);

/// Held (for one transaction) by the instance that fans events out. Dispatch is one
/// set-based statement per batch, so one dispatcher at a time costs nothing, and it is
/// what keeps a subject's deliveries in seq order: two dispatchers taking disjoint
/// batches at once could create a later event's delivery before an earlier one's.
const DISPATCH_LOCK: i64 = 0x7061_7973_6167_6177; // "paysagaw"

const ENDPOINT_COLUMNS: &str =
    r#"id, url, event_types, enabled, description, created_at, updated_at"#;

/// A new endpoint, enabled, its secret sealed ([`SealingKey::seal`] for `id`).
pub async fn create_endpoint(
    pool: &PgPool,
    id: Uuid,
    url: &str,
    secret_sealed: &[u8],
    event_types: &[String],
    description: &str,
) -> Result<WebhookEndpoint> {
    let sql = format!(
        r#"
        INSERT INTO webhook_endpoints (id, url, secret_sealed, event_types, description)
        VALUES ($1, $2, $3, $4, $5)
        RETURNING {ENDPOINT_COLUMNS}
        "#
    );
    Ok(sqlx::query_as::<_, WebhookEndpoint>(&sql)
        .bind(id)
        .bind(url)
        .bind(secret_sealed)
        .bind(event_types)
        .bind(description)
        .fetch_one(pool)
        .await?)
}

/// Every endpoint, oldest first.
pub async fn list_endpoints(pool: &PgPool) -> Result<Vec<WebhookEndpoint>> {
    let sql =
        format!(r#"SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY created_at, id"#);
    Ok(sqlx::query_as::<_, WebhookEndpoint>(&sql)
        .fetch_all(pool)
        .await?)
}

/// Seals every endpoint secret still stored in plaintext (endpoints made before secrets
/// were sealed) under `key` and clears the plaintext, one transaction per batch; run at
/// start-up. Returns how many were sealed.
pub async fn seal_plaintext_secrets(pool: &PgPool, key: &SealingKey) -> Result<u64> {
    let mut sealed = 0;
    loop {
        let mut tx = pool.begin().await?;
        let plain: Vec<(Uuid, String)> = sqlx::query_as(
            r#"
            SELECT id, secret FROM webhook_endpoints
            WHERE secret IS NOT NULL
            ORDER BY id
            LIMIT 100
            FOR UPDATE SKIP LOCKED
            "#,
        )
        .fetch_all(&mut *tx)
        .await?;
        if plain.is_empty() {
            tx.commit().await?;
            return Ok(sealed);
        }
        for (id, secret) in &plain {
            sqlx::query(
                r#"UPDATE webhook_endpoints SET secret_sealed = $2, secret = NULL WHERE id = $1"#,
            )
            .bind(id)
            .bind(key.seal(*id, secret))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        sealed += plain.len() as u64;
    }
}

/// Whether `key` opens the stored secrets (checked on one of them; `true` when none is
/// sealed yet): a service started with another key than the one that sealed them could
/// sign nothing.
pub async fn key_opens_secrets(pool: &PgPool, key: &SealingKey) -> Result<bool> {
    let one: Option<(Uuid, Vec<u8>)> = sqlx::query_as(
        r#"SELECT id, secret_sealed FROM webhook_endpoints WHERE secret_sealed IS NOT NULL LIMIT 1"#,
    )
    .fetch_optional(pool)
    .await?;
    Ok(one.is_none_or(|(id, sealed)| key.open(id, &sealed).is_ok()))
}

/// Rotates an endpoint's secret: `secret` (sealed here) becomes the current one and the
/// one before stays signed with until `grace` from now (a rotation during a grace drops
/// the oldest). `None`: no such endpoint. Returns when the previous one expires.
pub async fn rotate_secret(
    pool: &PgPool,
    key: &SealingKey,
    id: Uuid,
    secret: &str,
    grace: Duration,
) -> Result<Option<DateTime<Utc>>> {
    let mut tx = pool.begin().await?;
    let current: Option<(Option<String>, Option<Vec<u8>>)> = sqlx::query_as(
        r#"SELECT secret, secret_sealed FROM webhook_endpoints WHERE id = $1 FOR UPDATE"#,
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((plain, sealed)) = current else {
        return Ok(None);
    };
    let previous = match (plain, sealed) {
        // Not yet sealed (made before secrets were): sealed now, as the previous one.
        (Some(plain), _) => key.seal(id, &plain),
        // A previous secret the service cannot open could never sign: refused now
        // rather than kept through the grace.
        (None, Some(sealed)) => {
            key.open(id, &sealed)?;
            sealed
        }
        (None, None) => return Err(Unsealable.into()),
    };
    let expires: DateTime<Utc> = sqlx::query_scalar(
        r#"
        UPDATE webhook_endpoints
        SET secret = NULL, secret_sealed = $2,
            previous_secret_sealed = $3,
            previous_secret_expires_at = now() + $4 * INTERVAL '1 millisecond',
            updated_at = now()
        WHERE id = $1
        RETURNING previous_secret_expires_at
        "#,
    )
    .bind(id)
    .bind(key.seal(id, secret))
    .bind(previous)
    .bind(millis(grace))
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(expires))
}

/// Enables or disables an endpoint; `None` if there is no such endpoint.
pub async fn set_enabled(
    pool: &PgPool,
    id: Uuid,
    enabled: bool,
) -> Result<Option<WebhookEndpoint>> {
    let sql = format!(
        r#"
        UPDATE webhook_endpoints
        SET enabled = $2,
            updated_at = CASE WHEN enabled = $2 THEN updated_at ELSE now() END
        WHERE id = $1
        RETURNING {ENDPOINT_COLUMNS}
        "#
    );
    Ok(sqlx::query_as::<_, WebhookEndpoint>(&sql)
        .bind(id)
        .bind(enabled)
        .fetch_optional(pool)
        .await?)
}

/// A delivery as the operator sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub subject: String,
    pub endpoint_id: Uuid,
    #[sqlx(try_from = "String")]
    pub state: DeliveryState,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DeliveryRow {
    pub fn to_api(&self) -> WebhookDelivery {
        WebhookDelivery {
            id: self.id,
            event_id: self.event_id,
            event_type: self.event_type.clone(),
            subject: self.subject.clone(),
            endpoint_id: self.endpoint_id,
            state: self.state.as_str().to_owned(),
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            last_status: self.last_status,
            // The `webhook_deliveries_last_error_class` constraint admits only the
            // classes' names.
            last_error: self.last_error.as_deref().and_then(DeliveryFailure::parse),
            delivered_at: self.delivered_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

const DELIVERY_COLUMNS: &str = r#"d.id, d.event_id, ev.type AS event_type, d.subject, d.endpoint_id, d.state,
    d.attempts, d.next_attempt_at, d.last_status, d.last_error, d.delivered_at, d.created_at, d.updated_at"#;

/// Deliveries, newest first (by when they last changed), filtered.
pub async fn list_deliveries(
    pool: &PgPool,
    state: Option<DeliveryState>,
    endpoint_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<DeliveryRow>> {
    let sql = format!(
        r#"
        SELECT {DELIVERY_COLUMNS}
        FROM webhook_deliveries d
        JOIN events ev ON ev.id = d.event_id
        WHERE ($1::TEXT IS NULL OR d.state = $1)
          AND ($2::UUID IS NULL OR d.endpoint_id = $2)
        ORDER BY d.updated_at DESC, d.id DESC
        LIMIT $3
        "#
    );
    Ok(sqlx::query_as::<_, DeliveryRow>(&sql)
        .bind(state.map(DeliveryState::as_str))
        .bind(endpoint_id)
        .bind(limit)
        .fetch_all(pool)
        .await?)
}

pub async fn load_delivery(pool: &PgPool, id: Uuid) -> Result<Option<DeliveryRow>> {
    let sql = format!(
        r#"
        SELECT {DELIVERY_COLUMNS}
        FROM webhook_deliveries d
        JOIN events ev ON ev.id = d.event_id
        WHERE d.id = $1
        "#
    );
    Ok(sqlx::query_as::<_, DeliveryRow>(&sql)
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

/// A DEAD delivery made PENDING again, its attempts counted afresh, due at once, as
/// the update left it (the dispatcher may attempt it the moment this commits, so a
/// second read could already show that attempt). `None`: no such delivery, or it is not
/// DEAD (the caller tells which).
pub async fn replay(pool: &PgPool, id: Uuid) -> Result<Option<DeliveryRow>> {
    let sql = format!(
        r#"
        WITH replayed AS (
            UPDATE webhook_deliveries
            SET state = 'PENDING', attempts = 0, next_attempt_at = now(),
                lease_owner = NULL, lease_until = NULL, updated_at = now()
            WHERE id = $1 AND state = 'DEAD'
            RETURNING *
        )
        SELECT {DELIVERY_COLUMNS}
        FROM replayed d
        JOIN events ev ON ev.id = d.event_id
        "#
    );
    Ok(sqlx::query_as::<_, DeliveryRow>(&sql)
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

/// What one dispatch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispatched {
    pub events: i64,
    pub deliveries: i64,
}

/// Fans up to `batch` events after the dispatch cursor (in (xid, seq) order, only those
/// whose transaction is older than every one still running) out into one PENDING
/// delivery per enabled, subscribed endpoint, and moves the cursor past them, in one
/// transaction. `None`: another instance is dispatching right now (this one skips its
/// turn).
#[tracing::instrument(skip_all, fields(batch))]
pub async fn dispatch(pool: &PgPool, batch: i64) -> Result<Option<Dispatched>> {
    let mut tx = pool.begin().await?;
    let got: bool = sqlx::query_scalar(r#"SELECT pg_try_advisory_xact_lock($1)"#)
        .bind(DISPATCH_LOCK)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(None);
    }
    let (events, deliveries): (i64, i64) = sqlx::query_as(
        r#"
        WITH batch AS (
            SELECT e.xid, e.seq, e.id, e.type, e.subject
            FROM events e, event_dispatch_cursor c
            WHERE (e.xid, e.seq) > (c.xid, c.seq)
              AND e.xid < pg_snapshot_xmin(pg_current_snapshot())
            ORDER BY e.xid, e.seq
            LIMIT $1
        ), fanned AS (
            INSERT INTO webhook_deliveries (id, event_id, endpoint_id, event_seq, subject, next_attempt_at)
            SELECT uuid_v7(), b.id, ep.id, b.seq, b.subject, now()
            FROM batch b
            JOIN webhook_endpoints ep
              ON ep.enabled AND (cardinality(ep.event_types) = 0 OR b.type = ANY (ep.event_types))
            ORDER BY b.xid, b.seq, ep.id
            ON CONFLICT ON CONSTRAINT webhook_deliveries_event_endpoint_unique DO NOTHING
            RETURNING 1
        ), moved AS (
            UPDATE event_dispatch_cursor c
            SET xid = last.xid, seq = last.seq
            FROM (SELECT xid, seq FROM batch ORDER BY xid DESC, seq DESC LIMIT 1) last
            RETURNING 1
        )
        SELECT (SELECT COUNT(*) FROM batch), (SELECT COUNT(*) FROM fanned)
        "#,
    )
    .bind(batch)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(Dispatched { events, deliveries }))
}

/// A delivery claimed for an attempt, with what the attempt needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub id: Uuid,
    /// Attempts started, this one included.
    pub attempts: i32,
    pub event_id: Uuid,
    pub event_type: String,
    pub occurred_at: DateTime<Utc>,
    pub data: serde_json::Value,
    pub endpoint_id: Uuid,
    pub url: String,
    /// The endpoint's secret: sealed, or (made before secrets were sealed, and not yet
    /// sealed at start-up) in plaintext.
    pub secret_sealed: Option<Vec<u8>>,
    pub secret: Option<String>,
    /// The secret before the last rotation, sealed, while its grace lasts (by the
    /// database's clock).
    pub previous_secret_sealed: Option<Vec<u8>>,
}

/// Claims up to `n` due deliveries to enabled endpoints, leased to `owner` for `lease`,
/// counting the attempt. A delivery waits while an earlier one (by event seq) of the
/// same endpoint and subject is PENDING, so one subject's events arrive in order.
/// `SKIP LOCKED` lets many instances claim at once without taking the same delivery.
#[tracing::instrument(skip_all, fields(n))]
pub async fn claim(pool: &PgPool, owner: Uuid, lease: Duration, n: i64) -> Result<Vec<Claimed>> {
    Ok(sqlx::query_as::<_, Claimed>(
        r#"
        WITH due AS (
            SELECT d.id
            FROM webhook_deliveries d
            JOIN webhook_endpoints ep ON ep.id = d.endpoint_id
            WHERE d.state = 'PENDING'
              AND d.next_attempt_at <= now()
              AND (d.lease_until IS NULL OR d.lease_until < now())
              AND ep.enabled
              AND NOT EXISTS (
                  SELECT 1
                  FROM webhook_deliveries earlier
                  WHERE earlier.endpoint_id = d.endpoint_id
                    AND earlier.subject = d.subject
                    AND earlier.state = 'PENDING'
                    AND earlier.event_seq < d.event_seq)
            ORDER BY d.next_attempt_at
            LIMIT $3
            FOR UPDATE OF d SKIP LOCKED
        ), claimed AS (
            UPDATE webhook_deliveries d
            SET lease_owner = $1,
                lease_until = now() + $2 * INTERVAL '1 millisecond',
                attempts = d.attempts + 1,
                updated_at = now()
            FROM due
            WHERE d.id = due.id
            RETURNING d.id, d.attempts, d.event_id, d.endpoint_id
        )
        SELECT c.id, c.attempts, ev.id AS event_id, ev.type AS event_type, ev.occurred_at, ev.data,
               ep.id AS endpoint_id, ep.url, ep.secret_sealed, ep.secret,
               CASE WHEN ep.previous_secret_expires_at > now() THEN ep.previous_secret_sealed END
                   AS previous_secret_sealed
        FROM claimed c
        JOIN events ev ON ev.id = c.event_id
        JOIN webhook_endpoints ep ON ep.id = c.endpoint_id
        "#,
    )
    .bind(owner)
    .bind(millis(lease))
    .bind(n)
    .fetch_all(pool)
    .await?)
}

/// An attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx.
    Delivered { status: i32 },
    /// Anything else; retried after `retry_in`, or DEAD when `None`.
    Failed {
        status: Option<i32>,
        error: DeliveryFailure,
        retry_in: Option<Duration>,
    },
}

/// Records an attempt's outcome if `owner` still holds the claim (a delivery whose
/// lease ran out and was claimed again is the new owner's to record). Returns whether
/// it was recorded.
pub async fn record(pool: &PgPool, id: Uuid, owner: Uuid, outcome: &Outcome) -> Result<bool> {
    // Delivered: no error and nothing due again; failed: DEAD when no retry is due.
    let (delivered, status, error, retry_in) = match outcome {
        Outcome::Delivered { status } => (true, Some(*status), None, None),
        Outcome::Failed {
            status,
            error,
            retry_in,
        } => (false, *status, Some(error.as_str()), retry_in.map(millis)),
    };
    let done = sqlx::query(
        r#"
        UPDATE webhook_deliveries
        SET state = CASE WHEN $6 THEN 'DELIVERED'
                         WHEN $5::BIGINT IS NULL THEN 'DEAD'
                         ELSE 'PENDING' END,
            delivered_at = CASE WHEN $6 THEN now() ELSE delivered_at END,
            next_attempt_at = now() + $5 * INTERVAL '1 millisecond',
            last_status = $3, last_error = $4,
            lease_owner = NULL, lease_until = NULL, updated_at = now()
        WHERE id = $1 AND lease_owner = $2 AND state = 'PENDING'
        "#,
    )
    .bind(id)
    .bind(owner)
    .bind(status)
    .bind(error)
    .bind(retry_in)
    .bind(delivered)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The webhook gauges' numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Census {
    /// The age in seconds of the oldest event not yet delivered (not yet dispatched, or
    /// with a PENDING delivery to an enabled endpoint); 0 when there is none.
    pub lag_seconds: f64,
    /// DEAD deliveries (until replayed or purged).
    pub dead: i64,
    /// PENDING deliveries to enabled endpoints: the delivery backlog.
    pub pending: i64,
}

/// The gauges' numbers, in one statement (each part through a partial index).
pub async fn census(pool: &PgPool) -> Result<Census> {
    let (lag, dead, pending): (Option<f64>, i64, i64) = sqlx::query_as(
        r#"
        SELECT EXTRACT(EPOCH FROM now() - LEAST(
                   (SELECT occurred_at FROM events_undispatched ORDER BY xid, seq LIMIT 1),
                   (SELECT ev.occurred_at FROM events ev
                    WHERE ev.seq = (SELECT MIN(d.event_seq)
                                    FROM webhook_deliveries d
                                    JOIN webhook_endpoints ep ON ep.id = d.endpoint_id AND ep.enabled
                                    WHERE d.state = 'PENDING'))))::FLOAT8,
               (SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'DEAD'),
               (SELECT COUNT(*)
                FROM webhook_deliveries d
                JOIN webhook_endpoints ep ON ep.id = d.endpoint_id AND ep.enabled
                WHERE d.state = 'PENDING')
        "#,
    )
    .fetch_one(pool)
    .await?;
    Ok(Census {
        lag_seconds: lag.unwrap_or(0.0).max(0.0),
        dead,
        pending,
    })
}

/// An event pulled from a service's outbox.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub id: Uuid,
    pub event_type: String,
    pub subject: String,
    pub data: serde_json::Value,
    pub occurred_at: DateTime<Utc>,
}

/// Inserts events pulled from `source` in the order given (their seq follows it), each
/// once: an id already here (pulled before, or by another instance) is skipped.
/// Returns how many were new.
pub async fn ingest(pool: &PgPool, source: Source, events: &[Incoming]) -> Result<u64> {
    if events.is_empty() {
        return Ok(0);
    }
    let inserted = sqlx::query(
        r#"
        INSERT INTO events (id, type, subject, data, occurred_at, source)
        SELECT e.id, e.type, e.subject, e.data, e.occurred_at, $6
        FROM UNNEST($1::UUID[], $2::TEXT[], $3::TEXT[], $4::JSONB[], $5::TIMESTAMPTZ[])
             WITH ORDINALITY AS e(id, type, subject, data, occurred_at, n)
        ORDER BY e.n
        ON CONFLICT ON CONSTRAINT events_id_unique DO NOTHING
        "#,
    )
    .bind(column(events, |e| e.id))
    .bind(column(events, |e| e.event_type.as_str()))
    .bind(column(events, |e| e.subject.as_str()))
    .bind(column(events, |e| e.data.clone()))
    .bind(column(events, |e| e.occurred_at))
    .bind(source.as_str())
    .execute(pool)
    .await?;
    Ok(inserted.rows_affected())
}

/// Deletes up to `batch` events recorded more than `retention` ago, oldest first, with
/// their DELIVERED and DEAD deliveries. An event with a PENDING delivery, or not yet
/// dispatched, is kept (with its settled deliveries) until it is done. Returns the
/// deliveries and events deleted.
pub async fn purge(pool: &PgPool, retention: Duration, batch: i64) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        r#"
        WITH old AS (
            SELECT e.seq, e.id
            FROM events e
            WHERE e.recorded_at < now() - $1 * INTERVAL '1 millisecond'
              AND (e.xid, e.seq) <= (SELECT c.xid, c.seq FROM event_dispatch_cursor c)
              AND NOT EXISTS (
                  SELECT 1 FROM webhook_deliveries d
                  WHERE d.event_id = e.id AND d.state = 'PENDING')
            ORDER BY e.seq
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ), deliveries_gone AS (
            DELETE FROM webhook_deliveries d
            USING old
            WHERE d.event_id = old.id AND d.state <> 'PENDING'
            RETURNING d.event_id
        ), events_gone AS (
            DELETE FROM events e
            USING old
            WHERE e.seq = old.seq
            RETURNING 1
        )
        SELECT (SELECT COUNT(*) FROM deliveries_gone), (SELECT COUNT(*) FROM events_gone)
        "#,
    )
    .bind(millis(retention))
    .bind(batch)
    .fetch_one(pool)
    .await?)
}
