//! Payments in PostgreSQL: creation, the compare-and-set step record, leases and
//! recovery claims, and the operator queries. Every write is one short transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;
use workflows::{Action, Outcome, Position, State};

use crate::{
    api::{ListPayments, Payment, PaymentAdmin, Step},
    error::{Error, Result},
    idempotency::Scope,
};

const PAYMENT_COLUMNS: &str = r#"id, member_id, account_id, reservation_id, amount, state, pending_action,
    attempts, next_attempt_at, needs_attention, last_error, failure_code, lease_owner, lease_until,
    version, created_at, updated_at"#;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
    pub state: String,
    pub pending_action: Option<String>,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub needs_attention: bool,
    pub last_error: Option<String>,
    pub failure_code: Option<String>,
    pub lease_owner: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl PaymentRow {
    /// The stored position, checked against the machine.
    pub fn position(&self) -> Result<Position> {
        let bad = |e: String| Error::Invariant(format!("payment {}: {e}", self.id));
        let state: State = self
            .state
            .parse()
            .map_err(|e: workflows::ParseError| bad(e.to_string()))?;
        let pending = match &self.pending_action {
            Some(a) => Some(a.parse::<Action>().map_err(|e| bad(e.to_string()))?),
            None => None,
        };
        Position::new(state, pending).map_err(|e| bad(e.to_string()))
    }

    pub fn is_terminal(&self) -> bool {
        self.state
            .parse::<State>()
            .map(State::is_terminal)
            .unwrap_or(false)
    }

    pub fn to_api(&self) -> Payment {
        Payment {
            id: self.id,
            reservation_id: self.reservation_id,
            account_id: self.account_id,
            member_id: self.member_id.clone(),
            amount: self.amount,
            state: self.state.clone(),
            terminal: self.is_terminal(),
            failure_code: self.failure_code.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    pub fn to_admin(&self) -> PaymentAdmin {
        PaymentAdmin {
            payment: self.to_api(),
            pending_action: self.pending_action.clone(),
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            needs_attention: self.needs_attention,
            last_error: self.last_error.clone(),
            lease_owner: self.lease_owner,
            lease_until: self.lease_until,
            version: self.version,
        }
    }
}

/// A new payment's facts, checked with the downstreams before it is stored.
#[derive(Debug, Clone)]
pub struct NewPayment {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Inserts a payment in PROCESSING, owing the debit, leased to `driver` so nobody
/// else starts it and due at once for recovery should the driver die, and links it to
/// the idempotency record that asked for it. One statement: a payment without its
/// record is never committed, and `None` (nothing written) means `token` no longer
/// owns the key (its lease was taken over; the new owner creates the payment).
pub async fn insert_linked_payment(
    pool: &PgPool,
    new: &NewPayment,
    driver: Uuid,
    lease: Duration,
    scope: &Scope,
    token: Uuid,
) -> Result<Option<PaymentRow>> {
    let start = Position::start();
    // The key's row is updated before the payment row exists, but the foreign key is
    // checked at the end of the statement, when both do.
    let sql = format!(
        r#"
        WITH linked AS (
            UPDATE idempotency_keys
            SET payment_id = $1, updated_at = now()
            WHERE member_id = $10 AND operation = $11 AND idem_key = $12 AND owner_token = $13
              AND status = 'PROCESSING'
            RETURNING payment_id
        )
        INSERT INTO payments (id, member_id, account_id, reservation_id, amount, state, pending_action,
                              next_attempt_at, lease_owner, lease_until)
        SELECT linked.payment_id, $2, $3, $4, $5, $6, $7, now(), $8, now() + $9 * INTERVAL '1 millisecond'
        FROM linked
        RETURNING {PAYMENT_COLUMNS}
        "#
    );
    let inserted = sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(new.id)
        .bind(&new.member_id)
        .bind(new.account_id)
        .bind(new.reservation_id)
        .bind(new.amount)
        .bind(start.state().as_str())
        .bind(start.pending().map(Action::as_str))
        .bind(driver)
        .bind(millis(lease))
        .bind(&scope.member)
        .bind(scope.operation)
        .bind(scope.key.as_str())
        .bind(token)
        .fetch_optional(pool)
        .await;
    match inserted {
        Ok(row) => Ok(row),
        Err(e) if constraint(&e) == Some("payments_reservation_unique") => {
            Err(Error::ReservationAlreadyPaid {
                reservation_id: new.reservation_id,
                payment_id: Uuid::nil(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The name of the constraint a database error violated, if any.
pub fn constraint(e: &sqlx::Error) -> Option<&str> {
    e.as_database_error().and_then(|d| d.constraint())
}

pub async fn load(pool: &PgPool, id: Uuid) -> Result<Option<PaymentRow>> {
    let sql = format!(r#"SELECT {PAYMENT_COLUMNS} FROM payments WHERE id = $1"#);
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub async fn by_reservation(pool: &PgPool, reservation_id: Uuid) -> Result<Option<PaymentRow>> {
    let sql = format!(r#"SELECT {PAYMENT_COLUMNS} FROM payments WHERE reservation_id = $1"#);
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(reservation_id)
        .fetch_optional(pool)
        .await?)
}

/// What one attempt did, for the step log.
#[derive(Debug, Clone)]
pub struct StepRecord {
    pub action: Action,
    pub operation_key: String,
    /// `None` for an operator's action.
    pub outcome: Option<Outcome>,
    pub downstream_status: Option<u16>,
    pub latency: Duration,
    pub error: Option<String>,
}

/// Where the payment goes after a step, and how it is scheduled.
#[derive(Debug, Clone)]
pub struct Move {
    pub to: Position,
    pub attempts: i32,
    /// Due again after this long; `None`: not scheduled (settled, or waiting for an operator).
    pub next_attempt_in: Option<Duration>,
    pub needs_attention: bool,
    /// Keep the lease (the driver goes on) or let it go (recovery or nobody takes over).
    pub keep_lease: bool,
    pub failure_code: Option<String>,
}

/// The compare-and-set at the heart of the saga: moves `row` to `mv` and appends the
/// step, in one transaction, only if the payment is still at the version and state
/// the driver read and still leased to it. `None`: someone else moved it (a stale
/// driver learns here that it lost its lease and writes nothing).
pub async fn record_step(
    pool: &PgPool,
    row: &PaymentRow,
    driver: Uuid,
    lease: Duration,
    step: &StepRecord,
    mv: &Move,
) -> Result<Option<PaymentRow>> {
    record_steps(pool, row, driver, lease, &[(step.clone(), mv.clone())]).await
}

/// [`record_step`] for several consecutive steps (a remote step and the local step it
/// leads to), all or nothing. The payment moves straight to the last step's position,
/// its version advancing by one per step, and each step is logged under the version it
/// produced, exactly as if the steps had been recorded one by one under the lease.
///
/// One statement, no explicit transaction: the guard, the move and the step log go to
/// PostgreSQL in a single round trip. A payment makes several of these moves, and
/// round trips, not the work inside them, are most of what a payment costs the
/// database (see docs/benchmark.md).
#[tracing::instrument(skip_all, fields(payment_id = %row.id, steps = steps.len()))]
pub async fn record_steps(
    pool: &PgPool,
    row: &PaymentRow,
    driver: Uuid,
    lease: Duration,
    steps: &[(StepRecord, Move)],
) -> Result<Option<PaymentRow>> {
    let Some((last_step, last)) = steps.last() else {
        return Err(Error::Invariant(format!(
            "payment {}: no step to record",
            row.id
        )));
    };
    let count =
        i64::try_from(steps.len()).map_err(|e| Error::Invariant(format!("step count: {e}")))?;
    // The last failure code any step names wins, as with one update per step.
    let failure_code = steps
        .iter()
        .rev()
        .find_map(|(_, mv)| mv.failure_code.clone());
    let mut from_state = row.state.clone();
    let mut log = StepColumns::default();
    for (step, mv) in steps {
        let to_state = mv.to.state().as_str().to_owned();
        log.push(
            step,
            std::mem::replace(&mut from_state, to_state.clone()),
            to_state,
        );
    }
    let sql = format!(
        r#"
        WITH moved AS (
            UPDATE payments
            SET state = $5,
                pending_action = $6,
                attempts = $7,
                next_attempt_at = now() + $8 * INTERVAL '1 millisecond',
                needs_attention = $9,
                last_error = $10,
                failure_code = COALESCE($11, failure_code),
                lease_owner = CASE WHEN $12 THEN lease_owner END,
                lease_until = CASE WHEN $12 THEN now() + $13 * INTERVAL '1 millisecond' END,
                version = version + $14,
                updated_at = now()
            WHERE id = $1 AND version = $2 AND state = $3 AND lease_owner = $4
            RETURNING {PAYMENT_COLUMNS}
        ), logged AS (
            INSERT INTO payment_steps (payment_id, seq, action, operation_key, outcome, from_state, to_state,
                                       downstream_status, latency_ms, error, driver)
            SELECT moved.id, $2 + step.n, step.action, step.operation_key, step.outcome, step.from_state,
                   step.to_state, step.downstream_status, step.latency_ms, step.error, $4
            FROM moved,
                 UNNEST($15::TEXT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::TEXT[], $20::INTEGER[],
                        $21::INTEGER[], $22::TEXT[])
                     WITH ORDINALITY AS step(action, operation_key, outcome, from_state, to_state,
                                             downstream_status, latency_ms, error, n)
        )
        SELECT {PAYMENT_COLUMNS} FROM moved
        "#
    );
    Ok(sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(row.id)
        .bind(row.version)
        .bind(&row.state)
        .bind(driver)
        .bind(last.to.state().as_str())
        .bind(last.to.pending().map(Action::as_str))
        .bind(last.attempts)
        .bind(last.next_attempt_in.map(millis))
        .bind(last.needs_attention)
        .bind(last_step.error.as_deref())
        .bind(failure_code)
        .bind(last.keep_lease)
        .bind(millis(lease))
        .bind(count)
        .bind(log.action)
        .bind(log.operation_key)
        .bind(log.outcome)
        .bind(log.from_state)
        .bind(log.to_state)
        .bind(log.downstream_status)
        .bind(log.latency_ms)
        .bind(log.error)
        .fetch_optional(pool)
        .await?)
}

/// The step log's columns, one array each, for a single `UNNEST` insert.
#[derive(Default)]
struct StepColumns {
    action: Vec<&'static str>,
    operation_key: Vec<String>,
    outcome: Vec<&'static str>,
    from_state: Vec<String>,
    to_state: Vec<String>,
    downstream_status: Vec<Option<i32>>,
    latency_ms: Vec<i32>,
    error: Vec<Option<String>>,
}

impl StepColumns {
    fn push(&mut self, step: &StepRecord, from_state: String, to_state: String) {
        self.action.push(step.action.as_str());
        self.operation_key.push(step.operation_key.clone());
        self.outcome
            .push(step.outcome.map(Outcome::as_str).unwrap_or("OPERATOR"));
        self.from_state.push(from_state);
        self.to_state.push(to_state);
        self.downstream_status
            .push(step.downstream_status.map(i32::from));
        self.latency_ms
            .push(i32::try_from(step.latency.as_millis()).unwrap_or(i32::MAX));
        self.error.push(step.error.clone());
    }
}

/// One step record, inside an operator's move.
async fn insert_step(
    tx: &mut Transaction<'_, Postgres>,
    moved: &PaymentRow,
    from_state: &str,
    driver: Uuid,
    step: &StepRecord,
) -> Result<()> {
    sqlx::query(
        r#"
        INSERT INTO payment_steps (payment_id, seq, action, operation_key, outcome, from_state, to_state,
                                   downstream_status, latency_ms, error, driver)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
        "#,
    )
    .bind(moved.id)
    .bind(moved.version)
    .bind(step.action.as_str())
    .bind(&step.operation_key)
    .bind(step.outcome.map(Outcome::as_str).unwrap_or("OPERATOR"))
    .bind(from_state)
    .bind(&moved.state)
    .bind(step.downstream_status.map(i32::from))
    .bind(i32::try_from(step.latency.as_millis()).unwrap_or(i32::MAX))
    .bind(step.error.as_deref())
    .bind(driver)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

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

/// An operator action (refund, resume) as a guarded move with its own step record:
/// from exactly `row`'s version, whatever lease is held (an operator overrides a
/// flagged payment, which nobody drives). The caller then holds the lease.
pub async fn operator_move(
    pool: &PgPool,
    row: &PaymentRow,
    driver: Uuid,
    lease: Duration,
    to: Position,
    action: Action,
    note: &str,
) -> Result<Option<PaymentRow>> {
    let mut tx = pool.begin().await?;
    let sql = format!(
        r#"
        UPDATE payments
        SET state = $3, pending_action = $4, attempts = 0, next_attempt_at = now(),
            needs_attention = FALSE, lease_owner = $5,
            lease_until = now() + $6 * INTERVAL '1 millisecond',
            version = version + 1, updated_at = now()
        WHERE id = $1 AND version = $2 AND (lease_until IS NULL OR lease_until < now() OR needs_attention)
        RETURNING {PAYMENT_COLUMNS}
        "#
    );
    let moved = sqlx::query_as::<_, PaymentRow>(&sql)
        .bind(row.id)
        .bind(row.version)
        .bind(to.state().as_str())
        .bind(to.pending().map(Action::as_str))
        .bind(driver)
        .bind(millis(lease))
        .fetch_optional(&mut *tx)
        .await?;
    let Some(moved) = moved else {
        return Ok(None);
    };
    let step = StepRecord {
        action,
        operation_key: action.operation_key(row.id),
        outcome: None,
        downstream_status: None,
        latency: Duration::ZERO,
        error: Some(note.to_owned()),
    };
    insert_step(&mut tx, &moved, &row.state, driver, &step).await?;
    tx.commit().await?;
    Ok(Some(moved))
}

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

pub async fn steps(pool: &PgPool, id: Uuid) -> Result<Vec<Step>> {
    let rows = sqlx::query_as::<
        _,
        (
            i64,
            String,
            String,
            String,
            String,
            String,
            Option<i32>,
            i32,
            Option<String>,
            Uuid,
            DateTime<Utc>,
        ),
    >(
        r#"
        SELECT seq, action, operation_key, outcome, from_state, to_state, downstream_status,
               latency_ms, error, driver, created_at
        FROM payment_steps
        WHERE payment_id = $1
        ORDER BY seq
        "#,
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                seq,
                action,
                operation_key,
                outcome,
                from_state,
                to_state,
                downstream_status,
                latency_ms,
                error,
                driver,
                created_at,
            )| Step {
                seq,
                action,
                operation_key,
                outcome,
                from_state,
                to_state,
                downstream_status,
                latency_ms,
                error,
                driver,
                created_at,
            },
        )
        .collect())
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
