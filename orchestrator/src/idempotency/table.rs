//! The key table's writes, all of them: a new request's claim (alone or a flush's
//! worth), the take-over of a crashed owner's key, the link from a key to the payment
//! made under it and the answer stored with a settling move (both parts of the store's
//! statements, which commit them with the payment in one round trip), the owner's
//! answer, the release of a key under which nothing was made, and the purge.

use std::{collections::HashSet, time::Duration};

use paysaga_common::db::column;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::key::{Begin, Scope};
use crate::error::{Breach, Error, Result};

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
    .bind(column(keys, |k| k.scope.member.clone()))
    .bind(column(keys, |k| k.scope.operation))
    .bind(column(keys, |k| k.scope.key.as_str()))
    .bind(column(keys, |k| k.fingerprint.as_str()))
    .bind(column(keys, |k| k.token))
    .bind(column(keys, |k| ms(k.lease)))
    .bind(column(keys, |k| k.retention_hours))
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
    .bind(column(answers, |a| a.scope.member.clone()))
    .bind(column(answers, |a| a.scope.operation))
    .bind(column(answers, |a| a.scope.key.as_str()))
    .bind(column(answers, |a| a.token))
    .bind(column(answers, |a| i32::from(a.status)))
    .bind(column(answers, |a| a.body.as_str()))
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

/// The `owned` part of the statement that creates a flush's payments
/// (`store::insert_many`): the requests of `req` whose token still owns its unlinked,
/// PROCESSING key, the key locked until the statement ends. `$3` holds the requests'
/// member ids; `member_id = ANY` beside the join keeps the lookup on the primary key's
/// index whatever plan the UNNEST's unknown size suggests.
pub(crate) const OWNED_KEYS: &str = r#"owned AS (
            SELECT req.*
            FROM req
            JOIN idempotency_keys k
              ON k.member_id = ANY($3)
             AND k.member_id = req.member_id AND k.operation = req.operation AND k.idem_key = req.idem_key
             AND k.owner_token = req.token AND k.status = 'PROCESSING' AND k.payment_id IS NULL
            FOR UPDATE OF k
        )"#;

/// The `linked` part of the same statement: each key points at the payment made for
/// it (`inserted`), in the statement that makes it, so a payment never exists without
/// a record to replay.
pub(crate) const LINK_KEYS: &str = r#"linked AS (
            UPDATE idempotency_keys k
            SET payment_id = inserted.id, updated_at = now()
            FROM inserted
            JOIN req ON req.id = inserted.id
            WHERE k.member_id = ANY($3)
              AND k.member_id = req.member_id AND k.operation = req.operation AND k.idem_key = req.idem_key
        )"#;

/// The `answered` part of the step record's statement (`store::record_many`): the
/// waiting request's 201, stored under its own key with the move that settles its
/// payment (`moved`), only while the key is still that request's and unanswered (a
/// request that timed out stored its 202 first, or lost the key to a retry: then
/// nothing here). `$28` to `$33` are the answers' index, member, operation, key, owner
/// token and body.
pub(crate) const ANSWER_KEYS: &str = r#"answered AS (
            UPDATE idempotency_keys k
            SET status = 'COMPLETED', response_status = 201, response_body = a.body,
                owner_token = NULL, lease_until = NULL, updated_at = now()
            FROM moved
            JOIN UNNEST($28::INTEGER[], $29::TEXT[], $30::TEXT[], $31::TEXT[], $32::UUID[], $33::TEXT[])
                     AS a(idx, member_id, operation, idem_key, token, body)
              ON a.idx = moved.batch_idx
            WHERE k.member_id = ANY($29)
              AND k.member_id = a.member_id AND k.operation = a.operation AND k.idem_key = a.idem_key
              AND k.owner_token = a.token AND k.status = 'PROCESSING'
            RETURNING a.idx
        )"#;
