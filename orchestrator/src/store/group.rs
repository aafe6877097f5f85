//! Group commit of the saga's own writes: idempotency claims, new payments, step
//! records and stored answers of concurrent requests go to PostgreSQL together, one
//! set-based statement per kind and one commit per flush, each answered on its own.
//! A lone write leaves at once in a single statement, so at low load nothing waits.

use paysaga_common::batch::Coalescer;
use sqlx::{PgConnection, PgPool};

use super::{
    payments,
    row::PaymentRow,
    steps::{self, Recorded},
};
use crate::{
    error::{Breach, Error, GroupCommitFailure, Result},
    idempotency,
};

/// The most writes one flush carries.
const MAX_BATCH: usize = 512;

/// One write of a flush.
#[derive(Debug)]
pub enum Write {
    /// A new request: its key claimed and, if that succeeds, its payment created.
    Open(idempotency::NewKey, payments::Linked),
    Insert(payments::Linked),
    Record(steps::Recording),
    Complete(idempotency::Answered),
}

/// Its answer, of the same kind.
#[derive(Debug)]
pub enum Written {
    /// `None`: the key exists already; `Some(row)`: the key claimed and the payment
    /// created, or `Some(None)`: claimed, but no payment was made.
    Opened(Option<Option<PaymentRow>>),
    Inserted(Option<PaymentRow>),
    Recorded(Option<Recorded>),
    Completed(bool),
}

/// The saga's batched writer; cheap to clone.
#[derive(Debug, Clone)]
pub struct Writes {
    batcher: Coalescer<Write, Written, Error>,
    pool: PgPool,
}

impl Writes {
    /// The batched writer, with at most `in_flight`
    /// flushes at once. Flushes touch disjoint rows (each payment and each key has one
    /// writer at a time), so they do not wait on each other's locks.
    pub fn new(pool: PgPool, in_flight: usize) -> Self {
        let p = pool.clone();
        let batcher = Coalescer::new("saga_writes", MAX_BATCH, in_flight, move |writes| {
            let pool = p.clone();
            async move { flush(&pool, writes).await }
        });
        Self { batcher, pool }
    }

    /// Every writer of a failed flush shares its error, as it is: one the database
    /// could not serve is answered 503 like a lone write's, anything else is internal
    /// (see [`Error::is_unavailable`]).
    async fn write(&self, w: Write) -> Result<Written> {
        self.batcher
            .submit(w)
            .await
            .map_err(|failure| Error::GroupCommit(GroupCommitFailure(failure)))
    }

    /// A new request's key claimed and its payment created, in one flush: `Ok(None)`
    /// when the key exists already (the caller takes the long way, `idempotency::begin`);
    /// `ReservationAlreadyPaid` when the key was claimed but the reservation has a
    /// payment (the caller releases the key).
    pub async fn open(
        &self,
        key: idempotency::NewKey,
        linked: payments::Linked,
    ) -> Result<Option<PaymentRow>> {
        let opened = match self.write(Write::Open(key, linked.clone())).await? {
            Written::Opened(o) => o,
            other => return Err(mismatch("open", &other)),
        };
        match opened {
            None => Ok(None),
            Some(Some(row)) => Ok(Some(row)),
            Some(None) => match payments::explain_missing(&self.pool, &linked, None).await? {
                Some(row) => Ok(Some(row)),
                None => Err(Breach::ClaimNotOwned {
                    payment: linked.new.id,
                }
                .into()),
            },
        }
    }

    /// [`payments::insert_linked_payment`], batched.
    pub async fn insert(&self, linked: payments::Linked) -> Result<Option<PaymentRow>> {
        let inserted = match self.write(Write::Insert(linked.clone())).await? {
            Written::Inserted(row) => row,
            other => return Err(mismatch("insert", &other)),
        };
        payments::explain_missing(&self.pool, &linked, inserted).await
    }

    /// [`steps::record_many`], batched: the payment's new row, and the answer stored
    /// with it if the recording carried one.
    pub async fn record(&self, recording: steps::Recording) -> Result<Option<Recorded>> {
        match self.write(Write::Record(recording)).await? {
            Written::Recorded(row) => Ok(row),
            other => Err(mismatch("record", &other)),
        }
    }

    /// [`idempotency::complete`], batched.
    pub async fn complete(&self, answered: idempotency::Answered) -> Result<bool> {
        match self.write(Write::Complete(answered)).await? {
            Written::Completed(b) => Ok(b),
            other => Err(mismatch("complete", &other)),
        }
    }
}

fn mismatch(asked: &'static str, got: &Written) -> Error {
    let got = match got {
        Written::Opened(_) => "open",
        Written::Inserted(_) => "insert",
        Written::Recorded(_) => "record",
        Written::Completed(_) => "complete",
    };
    Breach::WrongAnswer { asked, got }.into()
}

/// One flush: each kind's statement once, all in one transaction when there is more
/// than one kind (one commit), else the lone statement on its own.
async fn flush(pool: &PgPool, writes: Vec<Write>) -> Result<Vec<Written>> {
    let n = writes.len();
    let mut opens = (Vec::new(), Vec::new());
    let mut inserts = (Vec::new(), Vec::new());
    let mut records = (Vec::new(), Vec::new());
    let mut completes = (Vec::new(), Vec::new());
    for (i, w) in writes.into_iter().enumerate() {
        match w {
            Write::Open(k, p) => (opens.0.push(i), opens.1.push((k, p))),
            Write::Insert(p) => (inserts.0.push(i), inserts.1.push(p)),
            Write::Record(r) => (records.0.push(i), records.1.push(r)),
            Write::Complete(a) => (completes.0.push(i), completes.1.push(a)),
        };
    }
    let kinds = [
        opens.1.len(),
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
        let got = apply(conn, &opens.1, &inserts.1, &records.1, &completes.1).await?;
        tx.commit().await?;
        place(opens.0, got.0);
        place(inserts.0, got.1);
        place(records.0, got.2);
        place(completes.0, got.3);
    } else {
        let mut conn = pool.acquire().await?;
        let got = apply(&mut conn, &opens.1, &inserts.1, &records.1, &completes.1).await?;
        place(opens.0, got.0);
        place(inserts.0, got.1);
        place(records.0, got.2);
        place(completes.0, got.3);
    }
    answers
        .into_iter()
        .map(|a| a.ok_or_else(|| Breach::Unanswered.into()))
        .collect()
}

type Applied = (Vec<Written>, Vec<Written>, Vec<Written>, Vec<Written>);

fn written<T>(rows: impl IntoIterator<Item = T>, as_written: fn(T) -> Written) -> Vec<Written> {
    rows.into_iter().map(as_written).collect()
}

async fn apply(
    conn: &mut PgConnection,
    opens: &[(idempotency::NewKey, payments::Linked)],
    inserts: &[payments::Linked],
    records: &[steps::Recording],
    completes: &[idempotency::Answered],
) -> Result<Applied> {
    let mut out: Applied = Default::default();
    if !completes.is_empty() {
        out.3 = written(
            idempotency::complete_many(conn, completes).await?,
            Written::Completed,
        );
    }
    if !records.is_empty() {
        out.2 = written(steps::record_many(conn, records).await?, Written::Recorded);
    }
    // New requests: their keys first, then one insert for their payments (those whose
    // key was claimed) and the taken-over requests' payments together.
    let claimed = if opens.is_empty() {
        Vec::new()
    } else {
        let keys: Vec<idempotency::NewKey> = opens.iter().map(|(k, _)| k.clone()).collect();
        idempotency::claim_many(conn, &keys).await?
    };
    let mut all: Vec<payments::Linked> = inserts.to_vec();
    all.extend(
        opens
            .iter()
            .zip(&claimed)
            .filter(|(_, c)| **c)
            .map(|((_, p), _)| p.clone()),
    );
    let mut made = if all.is_empty() {
        Vec::new()
    } else {
        payments::insert_many(conn, &all).await?
    }
    .into_iter();
    out.1 = written(made.by_ref().take(inserts.len()), Written::Inserted);
    out.0 = claimed
        .iter()
        .map(|&c| Written::Opened(if c { Some(made.next().flatten()) } else { None }))
        .collect();
    Ok(out)
}
