//! Group commit of the saga's own writes: idempotency claims, new payments, step
//! records and stored answers of concurrent requests go to PostgreSQL together, one
//! set-based statement per kind and one commit per flush, each answered on its own.
//! A lone write leaves at once in a single statement, so at low load nothing waits.

use paysaga_common::batch::Coalescer;
use sqlx::{PgConnection, PgPool};

use super::{payments, steps, PaymentRow};
use crate::{
    error::{Error, Result},
    idempotency,
};

/// The most writes one flush carries.
const MAX_BATCH: usize = 512;

/// One write of a flush.
#[derive(Debug)]
pub enum Write {
    Claim(idempotency::NewKey),
    Insert(payments::Linked),
    Record(steps::Recording),
    Complete(idempotency::Answered),
}

/// Its answer, of the same kind.
#[derive(Debug)]
pub enum Written {
    Claimed(bool),
    Inserted(Option<PaymentRow>),
    Recorded(Option<PaymentRow>),
    Completed(bool),
}

/// The saga's batched writer; cheap to clone.
#[derive(Debug, Clone)]
pub struct Writes {
    batcher: Coalescer<Write, Written>,
    pool: PgPool,
}

impl Writes {
    /// Starts the flushing task (needs a Tokio runtime), with at most `in_flight`
    /// flushes at once. Flushes touch disjoint rows (each payment and each key has one
    /// writer at a time), so they do not wait on each other's locks.
    pub fn new(pool: PgPool, in_flight: usize) -> Self {
        let p = pool.clone();
        let batcher = Coalescer::spawn("saga_writes", MAX_BATCH, in_flight, move |writes| {
            let pool = p.clone();
            async move { flush(&pool, writes).await.map_err(|e| e.to_string()) }
        });
        Self { batcher, pool }
    }

    async fn write(&self, w: Write) -> Result<Written> {
        self.batcher
            .submit(w)
            .await
            .map_err(|e| Error::Invariant(format!("group commit: {e}")))
    }

    /// [`idempotency::claim_many`] for one request.
    pub async fn claim(&self, key: idempotency::NewKey) -> Result<bool> {
        match self.write(Write::Claim(key)).await? {
            Written::Claimed(b) => Ok(b),
            other => Err(mismatch(&other)),
        }
    }

    /// [`payments::insert_linked_payment`], batched.
    pub async fn insert(&self, linked: payments::Linked) -> Result<Option<PaymentRow>> {
        let inserted = match self.write(Write::Insert(linked.clone())).await? {
            Written::Inserted(row) => row,
            other => return Err(mismatch(&other)),
        };
        payments::explain_missing(&self.pool, &linked, inserted).await
    }

    /// [`steps::record_steps`], batched.
    pub async fn record(&self, recording: steps::Recording) -> Result<Option<PaymentRow>> {
        match self.write(Write::Record(recording)).await? {
            Written::Recorded(row) => Ok(row),
            other => Err(mismatch(&other)),
        }
    }

    /// [`idempotency::complete`], batched.
    pub async fn complete(&self, answered: idempotency::Answered) -> Result<bool> {
        match self.write(Write::Complete(answered)).await? {
            Written::Completed(b) => Ok(b),
            other => Err(mismatch(&other)),
        }
    }
}

fn mismatch(w: &Written) -> Error {
    Error::Invariant(format!("group commit answered with the wrong kind: {w:?}"))
}

/// One flush: each kind's statement once, all in one transaction when there is more
/// than one kind (one commit), else the lone statement on its own.
async fn flush(pool: &PgPool, writes: Vec<Write>) -> Result<Vec<Written>> {
    let n = writes.len();
    let mut claims = (Vec::new(), Vec::new());
    let mut inserts = (Vec::new(), Vec::new());
    let mut records = (Vec::new(), Vec::new());
    let mut completes = (Vec::new(), Vec::new());
    for (i, w) in writes.into_iter().enumerate() {
        match w {
            Write::Claim(k) => (claims.0.push(i), claims.1.push(k)),
            Write::Insert(p) => (inserts.0.push(i), inserts.1.push(p)),
            Write::Record(r) => (records.0.push(i), records.1.push(r)),
            Write::Complete(a) => (completes.0.push(i), completes.1.push(a)),
        };
    }
    let kinds = [
        claims.1.len(),
        inserts.1.len(),
        records.1.len(),
        completes.1.len(),
    ]
    .iter()
    .filter(|&&k| k > 0)
    .count();
    let mut answers: Vec<Option<Written>> = (0..n).map(|_| None).collect();
    let mut place = |idx: Vec<usize>, got: Vec<Written>| {
        for (i, w) in idx.into_iter().zip(got) {
            answers[i] = Some(w);
        }
    };
    if kinds > 1 {
        let mut tx = pool.begin().await?;
        let conn: &mut PgConnection = &mut tx;
        let got = apply(conn, &claims.1, &inserts.1, &records.1, &completes.1).await?;
        tx.commit().await?;
        place(claims.0, got.0);
        place(inserts.0, got.1);
        place(records.0, got.2);
        place(completes.0, got.3);
    } else {
        let mut conn = pool.acquire().await?;
        let got = apply(&mut conn, &claims.1, &inserts.1, &records.1, &completes.1).await?;
        place(claims.0, got.0);
        place(inserts.0, got.1);
        place(records.0, got.2);
        place(completes.0, got.3);
    }
    answers
        .into_iter()
        .map(|a| a.ok_or_else(|| Error::Invariant("a write of the flush got no answer".into())))
        .collect()
}

type Applied = (Vec<Written>, Vec<Written>, Vec<Written>, Vec<Written>);

async fn apply(
    conn: &mut PgConnection,
    claims: &[idempotency::NewKey],
    inserts: &[payments::Linked],
    records: &[steps::Recording],
    completes: &[idempotency::Answered],
) -> Result<Applied> {
    let mut out: Applied = Default::default();
    if !completes.is_empty() {
        out.3 = idempotency::complete_many(conn, completes)
            .await?
            .into_iter()
            .map(Written::Completed)
            .collect();
    }
    if !records.is_empty() {
        out.2 = steps::record_many(conn, records)
            .await?
            .into_iter()
            .map(Written::Recorded)
            .collect();
    }
    if !inserts.is_empty() {
        out.1 = payments::insert_many(conn, inserts)
            .await?
            .into_iter()
            .map(Written::Inserted)
            .collect();
    }
    if !claims.is_empty() {
        out.0 = idempotency::claim_many(conn, claims)
            .await?
            .into_iter()
            .map(Written::Claimed)
            .collect();
    }
    Ok(out)
}
