//! HTTP `Idempotency-Key` handling, as a payments API does it: one record per
//! (member, operation, key) with a fingerprint of the request, a lease for the request
//! executing it, and the response it finally gave, replayed byte for byte.
//!
//! Semantics (published in docs/orchestrator.md):
//! - finished request, same fingerprint: its stored status and body, `Idempotency-Replayed: true`;
//! - different fingerprint: 422 `IDEMPOTENCY_KEY_REUSED`;
//! - still running (live lease): 409 `IDEMPOTENCY_KEY_IN_PROGRESS` with `Retry-After`;
//! - lease expired (the executing instance died): taken over under a new owner token;
//!   the old owner's writes are refused (compare-and-set on the token);
//! - a request that failed before changing anything (validation, a downstream that
//!   did not answer) releases its key, so a retry executes afresh.

use std::{collections::HashSet, time::Duration};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::error::{Breach, Error, Result};

pub const HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
pub const MAX_KEY_LEN: usize = 255;

/// A validated `Idempotency-Key`: 1-255 visible ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn from_headers(headers: &HeaderMap) -> Result<Self> {
        let mut values = headers.get_all(HEADER).iter();
        let value = values.next().ok_or(Error::IdempotencyKeyMissing)?;
        if values.next().is_some() {
            return Err(Error::IdempotencyKeyInvalid(
                "send exactly one Idempotency-Key header",
            ));
        }
        let s = value
            .to_str()
            .map_err(|_| Error::IdempotencyKeyInvalid("Idempotency-Key must be visible ASCII"))?;
        Self::parse(s)
    }

    pub fn parse(s: &str) -> Result<Self> {
        if s.is_empty() || s.len() > MAX_KEY_LEN {
            return Err(Error::IdempotencyKeyInvalid(
                "Idempotency-Key must be 1-255 characters",
            ));
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::IdempotencyKeyInvalid(
                "Idempotency-Key must be visible ASCII without spaces",
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// sha256 over the operation, the member and the normalised body (the parsed request
/// serialised again: fixed field order, canonical UUID spelling, no whitespace).
pub fn fingerprint(operation: &str, member: &str, normalised_body: &str) -> String {
    let mut h = Sha256::new();
    for part in [operation, member, normalised_body] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Which record: the key is scoped to (member, operation).
#[derive(Debug, Clone)]
pub struct Scope {
    pub member: String,
    pub operation: &'static str,
    pub key: IdempotencyKey,
}

/// An existing record: fingerprint, status, owner, lease expired, lease seconds left,
/// payment, stored status and body.
type StoredKey = (
    String,
    String,
    Option<Uuid>,
    bool,
    f64,
    Option<Uuid>,
    Option<i32>,
    Option<String>,
);

/// What the caller of [`begin`] does next.
#[derive(Debug)]
pub enum Begin {
    /// Execute the request; only `token` may write its result. `payment_id` is set
    /// when a crashed owner already created the payment (execution resumes from it).
    Owned {
        token: Uuid,
        payment_id: Option<Uuid>,
    },
    /// Answer with the stored response.
    Replay { status: u16, body: String },
}

/// Starts (or joins, or takes over) the request under `scope`.
#[tracing::instrument(skip_all, fields(operation = scope.operation))]
pub async fn begin(
    pool: &PgPool,
    scope: &Scope,
    fingerprint: &str,
    lease: Duration,
    retention_hours: i64,
) -> Result<Begin> {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    // A released key can vanish between the insert and the read; a few rounds settle it.
    for _ in 0..5 {
        let token = Uuid::new_v4();
        let inserted = sqlx::query(
            r#"
            INSERT INTO idempotency_keys (member_id, operation, idem_key, fingerprint, owner_token, lease_until, expires_at)
            VALUES ($1, $2, $3, $4, $5, now() + $6 * INTERVAL '1 millisecond', now() + $7 * INTERVAL '1 hour')
            ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO NOTHING
            "#,
        )
        .bind(&scope.member)
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .bind(fingerprint)
        .bind(token)
        .bind(lease_ms)
        .bind(retention_hours)
        .execute(pool)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Begin::Owned {
                token,
                payment_id: None,
            });
        }

        let existing: Option<StoredKey> = sqlx::query_as(
            r#"
            SELECT fingerprint, status, owner_token, COALESCE(lease_until < now(), TRUE),
                   COALESCE(EXTRACT(EPOCH FROM (lease_until - now()))::FLOAT8, 0),
                   payment_id, response_status, response_body
            FROM idempotency_keys
            WHERE member_id = $1 AND operation = $2 AND idem_key = $3
            "#,
        )
        .bind(&scope.member)
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .fetch_optional(pool)
        .await?;
        let Some((
            stored_fp,
            status,
            owner,
            lease_expired,
            lease_left,
            payment_id,
            response_status,
            response_body,
        )) = existing
        else {
            continue;
        };
        if stored_fp != fingerprint {
            return Err(Error::IdempotencyKeyReused);
        }
        if status == "COMPLETED" {
            let (Some(status), Some(body)) = (response_status, response_body) else {
                return Err(Breach::KeyWithoutResponse {
                    operation: scope.operation,
                }
                .into());
            };
            let status = u16::try_from(status).map_err(|_| Breach::StoredStatus { status })?;
            return Ok(Begin::Replay { status, body });
        }
        if !lease_expired {
            // The running request answers within RESPONSE_WAIT_MS (shorter than the lease),
            // so a retry soon is useful; a crashed owner's lease is at most LEASE_MS.
            let retry_after_secs = lease_left.clamp(1.0, 2.0).ceil() as u64;
            return Err(Error::IdempotencyInProgress { retry_after_secs });
        }
        let taken = sqlx::query(
            r#"
            UPDATE idempotency_keys
            SET owner_token = $4, lease_until = now() + $5 * INTERVAL '1 millisecond', updated_at = now()
            WHERE member_id = $1 AND operation = $2 AND idem_key = $3
              AND status = 'PROCESSING' AND owner_token IS NOT DISTINCT FROM $6
            "#,
        )
        .bind(&scope.member)
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .bind(token)
        .bind(lease_ms)
        .bind(owner)
        .execute(pool)
        .await?;
        if taken.rows_affected() == 1 {
            tracing::info!(payment_id = ?payment_id, "took over an idempotent request whose owner's lease expired");
            return Ok(Begin::Owned { token, payment_id });
        }
    }
    Err(Error::IdempotencyInProgress {
        retry_after_secs: 1,
    })
}

/// A new request's record, for [`claim_many`]: inserted under `token` unless the key
/// already has one.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub scope: Scope,
    pub fingerprint: String,
    pub token: Uuid,
    pub lease: Duration,
    pub retention_hours: i64,
}

/// The first move of [`begin`] for many requests at once (group commit): one statement
/// inserts every key not yet recorded. `true`: this request owns its new key; `false`:
/// the key exists (or an earlier request in the batch took it), and [`begin`] decides.
pub async fn claim_many(conn: &mut PgConnection, keys: &[NewKey]) -> Result<Vec<bool>> {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let inserted: HashSet<Uuid> = sqlx::query_scalar(
        r#"
        INSERT INTO idempotency_keys (member_id, operation, idem_key, fingerprint, owner_token, lease_until, expires_at)
        SELECT k.member_id, k.operation, k.idem_key, k.fingerprint, k.token,
               now() + k.lease_ms * INTERVAL '1 millisecond', now() + k.retention_hours * INTERVAL '1 hour'
        FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::UUID[], $6::BIGINT[], $7::BIGINT[])
            AS k(member_id, operation, idem_key, fingerprint, token, lease_ms, retention_hours)
        ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO NOTHING
        RETURNING owner_token
        "#,
    )
    .bind(keys.iter().map(|k| k.scope.member.clone()).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.scope.operation).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.scope.key.as_str()).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.fingerprint.as_str()).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.token).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| ms(k.lease)).collect::<Vec<_>>())
    .bind(keys.iter().map(|k| k.retention_hours).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    Ok(keys.iter().map(|k| inserted.contains(&k.token)).collect())
}

/// An owner's answer, for [`complete_many`].
#[derive(Debug, Clone)]
pub struct Answered {
    pub scope: Scope,
    pub token: Uuid,
    pub status: u16,
    pub body: String,
}

/// Stores the response the owner gives; `false` if the token lost ownership meanwhile
/// (its answer still stands, but the new owner's is the one kept).
pub async fn complete(
    pool: &PgPool,
    scope: &Scope,
    token: Uuid,
    status: u16,
    body: &str,
) -> Result<bool> {
    let one = Answered {
        scope: scope.clone(),
        token,
        status,
        body: body.to_owned(),
    };
    let mut conn = pool.acquire().await?;
    Ok(complete_many(&mut conn, std::slice::from_ref(&one))
        .await?
        .first()
        .copied()
        .unwrap_or(false))
}

/// [`complete`] for many requests in one statement (group commit). `member_id = ANY`
/// beside the join keeps the read on the primary key's index whatever plan the
/// UNNEST's unknown size suggests.
pub async fn complete_many(conn: &mut PgConnection, answers: &[Answered]) -> Result<Vec<bool>> {
    let done: HashSet<Uuid> = sqlx::query_scalar(
        r#"
        UPDATE idempotency_keys k
        SET status = 'COMPLETED', response_status = a.status, response_body = a.body,
            owner_token = NULL, lease_until = NULL, updated_at = now()
        FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::UUID[], $5::INTEGER[], $6::TEXT[])
            AS a(member_id, operation, idem_key, token, status, body)
        WHERE k.member_id = ANY($1)
          AND k.member_id = a.member_id AND k.operation = a.operation AND k.idem_key = a.idem_key
          AND k.owner_token = a.token AND k.status = 'PROCESSING'
        RETURNING a.token
        "#,
    )
    .bind(
        answers
            .iter()
            .map(|a| a.scope.member.clone())
            .collect::<Vec<_>>(),
    )
    .bind(
        answers
            .iter()
            .map(|a| a.scope.operation)
            .collect::<Vec<_>>(),
    )
    .bind(
        answers
            .iter()
            .map(|a| a.scope.key.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(answers.iter().map(|a| a.token).collect::<Vec<_>>())
    .bind(
        answers
            .iter()
            .map(|a| i32::from(a.status))
            .collect::<Vec<_>>(),
    )
    .bind(answers.iter().map(|a| a.body.as_str()).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    Ok(answers.iter().map(|a| done.contains(&a.token)).collect())
}

/// Forgets a request that changed nothing, so a retry with the same key executes afresh.
pub async fn release(pool: &PgPool, scope: &Scope, token: Uuid) -> Result<()> {
    sqlx::query(
        r#"
        DELETE FROM idempotency_keys
        WHERE member_id = $1 AND operation = $2 AND idem_key = $3 AND owner_token = $4
          AND status = 'PROCESSING' AND payment_id IS NULL
        "#,
    )
    .bind(&scope.member)
    .bind(scope.operation)
    .bind(scope.key.as_str())
    .bind(token)
    .execute(pool)
    .await?;
    Ok(())
}

/// Deletes records past their retention, in bounded batches; returns how many.
pub async fn purge_expired(pool: &PgPool, batch: i64) -> Result<u64> {
    let mut total = 0;
    loop {
        let n = sqlx::query(
            r#"
            DELETE FROM idempotency_keys
            WHERE (member_id, operation, idem_key) IN (
                SELECT member_id, operation, idem_key
                FROM idempotency_keys
                WHERE expires_at < now()
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            )
            "#,
        )
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected();
        total += n;
        if n < u64::try_from(batch).unwrap_or(u64::MAX) {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_visible_ascii() {
        assert!(IdempotencyKey::parse("order-123_abc").is_ok());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
        assert!(IdempotencyKey::parse("é").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn fingerprint_separates_its_parts() {
        let a = fingerprint("create_payment", "m1", "{}");
        assert_eq!(a, fingerprint("create_payment", "m1", "{}"));
        assert_ne!(a, fingerprint("create_payment", "m2", "{}"));
        assert_ne!(fingerprint("op", "ab", "c"), fingerprint("op", "a", "bc"));
    }
}
