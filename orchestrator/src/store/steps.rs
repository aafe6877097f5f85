//! The step log and the compare-and-set that appends to it: a driver's moves, an
//! operator's moves, and reading a payment's steps back.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;
use workflows::{Action, Outcome, Position};

use super::{millis, PaymentRow, PAYMENT_COLUMNS};
use crate::{
    api::Step,
    error::{Error, Result},
};

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
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// One step for [`record_steps`]: the attempt, how its outcome was learnt, and the
/// move it leads to.
#[derive(Debug, Clone)]
pub struct StepMove {
    pub step: StepRecord,
    /// The call's own answer was lost and a status query settled the outcome: the step
    /// carries the query's outcome, and this keeps the fact that the call went unanswered.
    pub settled_by_query: bool,
    pub mv: Move,
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
    let one = StepMove {
        step: step.clone(),
        settled_by_query: false,
        mv: mv.clone(),
    };
    record_steps(pool, row, driver, lease, &[one]).await
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
    steps: &[StepMove],
) -> Result<Option<PaymentRow>> {
    let Some(StepMove {
        step: last_step,
        mv: last,
        ..
    }) = steps.last()
    else {
        return Err(Error::Invariant(format!(
            "payment {}: no step to record",
            row.id
        )));
    };
    let count =
        i64::try_from(steps.len()).map_err(|e| Error::Invariant(format!("step count: {e}")))?;
    // The last failure code any step names wins, as with one update per step.
    let failure_code = steps.iter().rev().find_map(|s| s.mv.failure_code.clone());
    let mut from_state = row.state.clone();
    let mut log = StepColumns::default();
    for s in steps {
        let to_state = s.mv.to.state().as_str().to_owned();
        log.push(
            s,
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
                                       downstream_status, latency_ms, error, settled_by_query, driver)
            SELECT moved.id, $2 + step.n, step.action, step.operation_key, step.outcome, step.from_state,
                   step.to_state, step.downstream_status, step.latency_ms, step.error,
                   step.settled_by_query, $4
            FROM moved,
                 UNNEST($15::TEXT[], $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::TEXT[], $20::INTEGER[],
                        $21::INTEGER[], $22::TEXT[], $23::BOOLEAN[])
                     WITH ORDINALITY AS step(action, operation_key, outcome, from_state, to_state,
                                             downstream_status, latency_ms, error, settled_by_query, n)
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
        .bind(log.settled_by_query)
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
    settled_by_query: Vec<bool>,
}

impl StepColumns {
    fn push(&mut self, logged: &StepMove, from_state: String, to_state: String) {
        let step = &logged.step;
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
        self.settled_by_query.push(logged.settled_by_query);
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

/// A step-log row as stored.
#[derive(sqlx::FromRow)]
struct StepRow {
    seq: i64,
    action: String,
    operation_key: String,
    outcome: String,
    from_state: String,
    to_state: String,
    downstream_status: Option<i32>,
    latency_ms: i32,
    error: Option<String>,
    settled_by_query: bool,
    driver: Uuid,
    created_at: DateTime<Utc>,
}

/// A payment's step log, oldest first.
pub async fn steps(pool: &PgPool, id: Uuid) -> Result<Vec<Step>> {
    let rows = sqlx::query_as::<_, StepRow>(
        r#"
        SELECT seq, action, operation_key, outcome, from_state, to_state, downstream_status,
               latency_ms, error, settled_by_query, driver, created_at
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
        .map(|r| Step {
            seq: r.seq,
            action: r.action,
            operation_key: r.operation_key,
            outcome: r.outcome,
            from_state: r.from_state,
            to_state: r.to_state,
            downstream_status: r.downstream_status,
            latency_ms: r.latency_ms,
            error: r.error,
            settled_by_query: r.settled_by_query,
            driver: r.driver,
            created_at: r.created_at,
        })
        .collect())
}
