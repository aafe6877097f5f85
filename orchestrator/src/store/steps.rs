//! The step log and the compare-and-set that appends to it: a driver's moves, an
//! operator's moves, and reading a payment's steps back.

use std::{sync::LazyLock, time::Duration};

use chrono::{DateTime, Utc};
use paysaga_contracts::orchestrator::api::Step;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;
use workflows::{Action, Outcome, Position, State};

use super::row::{millis, returned_columns, PaymentRow, PAYMENT_COLUMNS};
use crate::{
    answer::AnswerSlot,
    error::{Breach, Result},
    failure::FailureCode,
    idempotency::ANSWER_KEYS,
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
    pub failure_code: Option<FailureCode>,
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
#[tracing::instrument(skip_all, fields(payment_id = %row.id, steps = steps.len()))]
pub async fn record_steps(
    pool: &PgPool,
    row: &PaymentRow,
    driver: Uuid,
    lease: Duration,
    steps: &[StepMove],
) -> Result<Option<PaymentRow>> {
    let one = Recording::new(row, driver, lease, steps.to_vec());
    let mut conn = pool.acquire().await?;
    Ok(record_many(&mut conn, std::slice::from_ref(&one))
        .await?
        .pop()
        .flatten()
        .map(|r| r.row))
}

/// One payment's move for [`record_many`]: the guard (the version and state its driver
/// read, and the driver's lease) and the steps to append.
#[derive(Debug)]
pub struct Recording {
    pub id: Uuid,
    pub version: i64,
    pub state: State,
    pub driver: Uuid,
    pub lease: Duration,
    pub steps: Vec<StepMove>,
    /// A waiting request's answer, stored under its key in the same statement.
    pub answer: Option<Answer>,
}

/// The answer a settling move stores for the request that waits on it: the payment as
/// the move leaves it, stamped with the `updated_at` the move writes.
#[derive(Debug)]
pub struct Answer {
    pub slot: AnswerSlot,
    pub updated_at: DateTime<Utc>,
    pub body: String,
}

impl Recording {
    pub fn new(row: &PaymentRow, driver: Uuid, lease: Duration, steps: Vec<StepMove>) -> Self {
        Self {
            id: row.id,
            version: row.version,
            state: row.state,
            driver,
            lease,
            steps,
            answer: None,
        }
    }

    /// The failure code the move writes: the last one any step names, as with one
    /// update per step (`None` keeps the stored one).
    fn failure_code(&self) -> Option<FailureCode> {
        self.steps.iter().rev().find_map(|s| s.mv.failure_code)
    }

    /// Stores `slot`'s answer with this move: the payment as the move leaves `row` (the
    /// row the guard names, so nothing else can have changed it), stamped with a time
    /// taken here to the microsecond PostgreSQL keeps, so the stored body and the row
    /// agree to the byte. Only for a move that settles the payment.
    pub fn answering(mut self, row: &PaymentRow, slot: &AnswerSlot) -> Result<Self> {
        let last = self
            .steps
            .last()
            .ok_or(Breach::MoveWithoutStep { payment: self.id })?;
        let to = last.mv.to;
        if !to.state().is_terminal() || to.pending().is_some() {
            return Err(Breach::AnswerBeforeSettling {
                payment: self.id,
                state: to.state(),
                pending: to.pending(),
            }
            .into());
        }
        let now = Utc::now();
        let updated_at = DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now);
        let mut after = row.to_api();
        after.state = to.state().as_str().to_owned();
        after.terminal = true;
        if let Some(code) = self.failure_code() {
            after.failure_code = Some(code.as_str().to_owned());
        }
        after.updated_at = updated_at;
        let body = serde_json::to_string(&after).map_err(|source| Breach::Serialise {
            what: "the answered payment",
            source,
        })?;
        self.answer = Some(Answer {
            slot: slot.clone(),
            updated_at,
            body,
        });
        Ok(self)
    }
}

/// A move [`record_many`] made: the payment's new row, and the answer it stored under
/// the waiting request's key, if it carried one and the key was still that request's.
#[derive(Debug)]
pub struct Recorded {
    pub row: PaymentRow,
    pub answered: Option<String>,
}

/// A row of the record statement: the request it answers, whether its answer was
/// stored, and the payment.
#[derive(sqlx::FromRow)]
struct RecordedRow {
    batch_idx: i32,
    answered: bool,
    #[sqlx(flatten)]
    row: PaymentRow,
}

/// The compare-and-set of many payments at once (group commit): one statement moves
/// every payment whose guard still holds and appends all their steps. Each answer is
/// that payment's new row, or `None` where someone else moved it (that driver then
/// stops without a write). Round trips, not the work inside them, are most of what a
/// payment costs the database (see docs/benchmark.md).
pub async fn record_many(
    conn: &mut PgConnection,
    moves: &[Recording],
) -> Result<Vec<Option<Recorded>>> {
    let mut cols = MoveColumns::default();
    let mut log = StepColumns::default();
    let mut answers = AnswerColumns::default();
    for (i, m) in moves.iter().enumerate() {
        let idx = batch_index(i, moves.len())?;
        let Some(StepMove {
            step: last_step,
            mv: last,
            ..
        }) = m.steps.last()
        else {
            return Err(Breach::MoveWithoutStep { payment: m.id }.into());
        };
        // A handful of steps per move: the count always fits.
        let count = m.steps.len() as i64;
        let failure_code = m.failure_code();
        cols.idx.push(idx);
        cols.id.push(m.id);
        cols.version.push(m.version);
        cols.from_state.push(m.state.as_str());
        cols.driver.push(m.driver);
        cols.to_state.push(last.to.state().as_str());
        cols.pending.push(last.to.pending().map(Action::as_str));
        cols.attempts.push(last.attempts);
        cols.next_ms.push(last.next_attempt_in.map(millis));
        cols.needs_attention.push(last.needs_attention);
        cols.last_error.push(last_step.error.clone());
        cols.failure_code
            .push(failure_code.map(FailureCode::as_str));
        cols.keep_lease.push(last.keep_lease);
        cols.lease_ms.push(millis(m.lease));
        cols.count.push(count);
        cols.at.push(m.answer.as_ref().map(|a| a.updated_at));
        if let Some(a) = &m.answer {
            answers.idx.push(idx);
            answers.member.push(a.slot.scope().member.clone());
            answers.operation.push(a.slot.scope().operation);
            answers.key.push(a.slot.scope().key.as_str().to_owned());
            answers.token.push(a.slot.token());
            answers.body.push(a.body.clone());
        }
        let mut from_state = m.state;
        for (n, s) in (1..).zip(&m.steps) {
            let to_state = s.mv.to.state();
            log.push(
                idx,
                n,
                s,
                std::mem::replace(&mut from_state, to_state),
                to_state,
            );
        }
    }
    // `p.id = ANY($2)` beside the join: without it the planner may read the whole table
    // into a hash join (it cannot tell how few rows the UNNEST yields), a cost that
    // grows with every payment ever made.
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            r#"
        WITH mv AS (
            SELECT *
            FROM UNNEST($1::INTEGER[], $2::UUID[], $3::BIGINT[], $4::TEXT[], $5::UUID[], $6::TEXT[],
                        $7::TEXT[], $8::INTEGER[], $9::BIGINT[], $10::BOOLEAN[], $11::TEXT[], $12::TEXT[],
                        $13::BOOLEAN[], $14::BIGINT[], $15::BIGINT[], $27::TIMESTAMPTZ[])
                AS m(idx, id, version, from_state, driver, to_state, pending, attempts, next_ms,
                     needs_attention, last_error, failure_code, keep_lease, lease_ms, count, at)
        ), moved AS (
            UPDATE payments p
            SET state = mv.to_state,
                pending_action = mv.pending,
                attempts = mv.attempts,
                next_attempt_at = now() + mv.next_ms * INTERVAL '1 millisecond',
                needs_attention = mv.needs_attention,
                last_error = mv.last_error,
                failure_code = COALESCE(mv.failure_code, p.failure_code),
                lease_owner = CASE WHEN mv.keep_lease THEN p.lease_owner END,
                lease_until = CASE WHEN mv.keep_lease THEN now() + mv.lease_ms * INTERVAL '1 millisecond' END,
                version = p.version + mv.count,
                updated_at = COALESCE(mv.at, now())
            FROM mv
            WHERE p.id = ANY($2) AND p.id = mv.id AND p.version = mv.version
              AND p.state = mv.from_state AND p.lease_owner = mv.driver
            RETURNING mv.idx AS batch_idx, mv.version AS from_version, mv.driver AS by_driver,
                      {RETURNED}
        ), logged AS (
            INSERT INTO payment_steps (payment_id, seq, action, operation_key, outcome, from_state, to_state,
                                       downstream_status, latency_ms, error, settled_by_query, driver)
            SELECT moved.id, moved.from_version + step.n, step.action, step.operation_key, step.outcome,
                   step.from_state, step.to_state, step.downstream_status, step.latency_ms, step.error,
                   step.settled_by_query, moved.by_driver
            FROM moved
            JOIN UNNEST($16::INTEGER[], $17::BIGINT[], $18::TEXT[], $19::TEXT[], $20::TEXT[], $21::TEXT[],
                        $22::TEXT[], $23::INTEGER[], $24::INTEGER[], $25::TEXT[], $26::BOOLEAN[])
                     AS step(idx, n, action, operation_key, outcome, from_state, to_state,
                             downstream_status, latency_ms, error, settled_by_query)
              ON step.idx = moved.batch_idx
        ), {ANSWER_KEYS}
        SELECT batch_idx, batch_idx IN (SELECT idx FROM answered) AS answered, {PAYMENT_COLUMNS}
        FROM moved
        "#,
            RETURNED = returned_columns("p"),
        )
    });
    let rows = sqlx::query_as::<_, RecordedRow>(&SQL)
        .bind(cols.idx)
        .bind(cols.id)
        .bind(cols.version)
        .bind(cols.from_state)
        .bind(cols.driver)
        .bind(cols.to_state)
        .bind(cols.pending)
        .bind(cols.attempts)
        .bind(cols.next_ms)
        .bind(cols.needs_attention)
        .bind(cols.last_error)
        .bind(cols.failure_code)
        .bind(cols.keep_lease)
        .bind(cols.lease_ms)
        .bind(cols.count)
        .bind(log.idx)
        .bind(log.n)
        .bind(log.action)
        .bind(log.operation_key)
        .bind(log.outcome)
        .bind(log.from_state)
        .bind(log.to_state)
        .bind(log.downstream_status)
        .bind(log.latency_ms)
        .bind(log.error)
        .bind(log.settled_by_query)
        .bind(cols.at)
        .bind(answers.idx)
        .bind(answers.member)
        .bind(answers.operation)
        .bind(answers.key)
        .bind(answers.token)
        .bind(answers.body)
        .fetch_all(&mut *conn)
        .await?;
    let mut placed: Vec<Option<Recorded>> = (0..moves.len()).map(|_| None).collect();
    for r in rows {
        let i = usize::try_from(r.batch_idx)
            .ok()
            .filter(|&i| i < moves.len())
            .ok_or(Breach::BatchIndex {
                index: r.batch_idx.into(),
                len: moves.len(),
            })?;
        let answered = match (&moves[i].answer, r.answered) {
            (Some(a), true) => {
                // The body was made from the row as the move leaves it; the two fields
                // the statement writes that the body reports must be what it wrote.
                if r.row.updated_at != a.updated_at || !r.row.is_terminal() {
                    tracing::error!(payment_id = %r.row.id, "the stored answer differs from the row it reports");
                }
                Some(a.body.clone())
            }
            _ => None,
        };
        placed[i] = Some(Recorded {
            row: r.row,
            answered,
        });
    }
    Ok(placed)
}

/// The index of request `i` of a batch of `len`, as the statement carries it. A batch
/// holds at most a few hundred requests, so it always fits.
pub(crate) fn batch_index(i: usize, len: usize) -> Result<i32> {
    i32::try_from(i).map_err(|_| {
        Breach::BatchIndex {
            index: i64::try_from(i).unwrap_or(i64::MAX),
            len,
        }
        .into()
    })
}

/// The answers of [`record_many`], one array each.
#[derive(Default)]
struct AnswerColumns {
    idx: Vec<i32>,
    member: Vec<String>,
    operation: Vec<&'static str>,
    key: Vec<String>,
    token: Vec<Uuid>,
    body: Vec<String>,
}

/// The per-payment columns of [`record_many`], one array each.
#[derive(Default)]
struct MoveColumns {
    idx: Vec<i32>,
    id: Vec<Uuid>,
    version: Vec<i64>,
    from_state: Vec<&'static str>,
    driver: Vec<Uuid>,
    to_state: Vec<&'static str>,
    pending: Vec<Option<&'static str>>,
    attempts: Vec<i32>,
    next_ms: Vec<Option<i64>>,
    needs_attention: Vec<bool>,
    last_error: Vec<Option<String>>,
    failure_code: Vec<Option<&'static str>>,
    keep_lease: Vec<bool>,
    lease_ms: Vec<i64>,
    count: Vec<i64>,
    /// The `updated_at` an answered move writes (its answer carries it); else `now()`.
    at: Vec<Option<DateTime<Utc>>>,
}

/// The step log's columns, one array each, for a single `UNNEST` insert.
#[derive(Default)]
struct StepColumns {
    idx: Vec<i32>,
    n: Vec<i64>,
    action: Vec<&'static str>,
    operation_key: Vec<String>,
    outcome: Vec<&'static str>,
    from_state: Vec<&'static str>,
    to_state: Vec<&'static str>,
    downstream_status: Vec<Option<i32>>,
    latency_ms: Vec<i32>,
    error: Vec<Option<String>>,
    settled_by_query: Vec<bool>,
}

impl StepColumns {
    fn push(&mut self, idx: i32, n: i64, logged: &StepMove, from_state: State, to_state: State) {
        let step = &logged.step;
        self.idx.push(idx);
        self.n.push(n);
        self.action.push(step.action.as_str());
        self.operation_key.push(step.operation_key.clone());
        self.outcome
            .push(step.outcome.map(Outcome::as_str).unwrap_or("OPERATOR"));
        self.from_state.push(from_state.as_str());
        self.to_state.push(to_state.as_str());
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
    from_state: State,
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
    .bind(from_state.as_str())
    .bind(moved.state.as_str())
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
    insert_step(&mut tx, &moved, row.state, driver, &step).await?;
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
