//! Group commit of confirms, cancels and lookups: a constant number of set-based
//! statements per batch (one, in the common case), each operation answered as its own
//! endpoint would.
//!
//! The same answers and the same tables whichever path a batch takes:
//! - **One statement** (`fast`), for a batch of confirms and cancels naming each
//!   reservation once and undoing no sale (the orchestrator's usual batch): locks,
//!   decides, writes and answers in a single autocommit statement, one round trip.
//! - **Lookups beside writes** (`lookups_beside`): lookups naming no reservation the
//!   batch writes are one plain read, then the rest goes as the one statement.
//! - **The general path** (`general`), for everything else (a lookup of a reservation
//!   the batch writes, an id named twice, a refund): lock every reservation a confirm or cancel names (one `SELECT ... = ANY
//!   ... ORDER BY id FOR UPDATE`), take the database clock once every lock is held, read
//!   the reservations only looked up, then decide every operation in Rust, in op order,
//!   on an in-memory copy of each row (so an id named twice sees its own earlier
//!   operation), and finally write the net change of each reservation with at most four
//!   statements: units, new orders, cancelled orders, reservations.
//!
//! Any failure drops the statement or transaction, so a batch is applied whole or not
//! at all.

use std::{collections::HashMap, time::Instant};

use chrono::{DateTime, Utc};
use paysaga_common::retry;
use paysaga_contracts::batch::Reply;
use sqlx::{FromRow, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::{
    api::{OrderOp, Reservation, ReservationState},
    error::{self, Error, Result},
    reservations::ReservationRow,
};

/// One reservation as the batch sees it: where it started (what the tables hold) and
/// where the operations so far have taken it.
struct Tracked {
    initial: ReservationState,
    due: bool,
    current: Reservation,
    /// The order this batch writes for it, if it confirms it.
    new_order: Option<Uuid>,
    /// Its order (existing or new) is cancelled by a service cancel in this batch.
    order_cancelled: bool,
}

/// What the single path counts, summed over the batch and recorded after the commit.
#[derive(Default)]
struct Counts {
    confirmed: u64,
    expired_on_touch: u64,
    cancelled: u64,
    order_cancelled: u64,
    /// Units that came back and were offered to a waitlist (the handoff trigger).
    offers_made: u64,
}

/// The unit state a reservation in `state` implies.
fn unit_state(state: ReservationState) -> &'static str {
    match state {
        ReservationState::Reserved => "RESERVED",
        ReservationState::Confirmed => "SOLD",
        ReservationState::Cancelled | ReservationState::Expired => "AVAILABLE",
    }
}

fn id_of(op: &OrderOp) -> Uuid {
    match *op {
        OrderOp::Confirm { reservation_id }
        | OrderOp::Cancel { reservation_id }
        | OrderOp::Reservation { reservation_id } => reservation_id,
    }
}

/// Applies `ops` atomically and answers each, in order. `Err` means nothing was
/// written and the whole request fails.
#[tracing::instrument(skip_all, fields(ops = ops.len()))]
pub async fn apply(pool: &PgPool, ops: &[OrderOp]) -> Result<Vec<Reply>> {
    let start = Instant::now();
    // A deadlock PostgreSQL broke rolled the statement or transaction back whole.
    let (replies, counts) = retry::on_conflict(Error::is_conflict, || async {
        if let Some(done) = lookups_beside(pool, ops).await? {
            return Ok(done);
        }
        let fast_done = if fits_one_statement(ops) {
            fast(pool, ops).await?
        } else {
            None
        };
        match fast_done {
            Some(done) => Ok(done),
            None => general(pool, ops).await,
        }
    })
    .await?;
    record(ops, &counts, start);
    Ok(replies)
}

/// A batch whose lookups name no reservation its confirms and cancels name (the
/// orchestrator's usual mix: new payments' checks beside older payments' confirms):
/// the lookups are one plain read, then the rest is the one statement, with no
/// transaction around either. The two touch different rows, so answering the reads
/// first is an order the batch could have had anyway. The read comes first so that an
/// error leaves nothing written. `None`: not such a batch (nothing was written).
async fn lookups_beside(pool: &PgPool, ops: &[OrderOp]) -> Result<Option<(Vec<Reply>, Counts)>> {
    let is_lookup = |op: &OrderOp| matches!(op, OrderOp::Reservation { .. });
    if !ops.iter().any(is_lookup) {
        return Ok(None);
    }
    let writes: Vec<OrderOp> = ops.iter().copied().filter(|op| !is_lookup(op)).collect();
    let mut written_ids: Vec<Uuid> = writes.iter().map(id_of).collect();
    written_ids.sort_unstable();
    let mut read_ids: Vec<Uuid> = ops.iter().filter(|op| is_lookup(op)).map(id_of).collect();
    if read_ids
        .iter()
        .any(|id| written_ids.binary_search(id).is_ok())
        || (!writes.is_empty() && !fits_one_statement(&writes))
    {
        return Ok(None);
    }
    read_ids.sort_unstable();
    read_ids.dedup();
    let found: HashMap<Uuid, Reservation> = look_up(pool, &read_ids)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    let (mut written, counts) = if writes.is_empty() {
        (Vec::new().into_iter(), Counts::default())
    } else {
        match fast(pool, &writes).await? {
            Some((replies, counts)) => (replies.into_iter(), counts),
            None => return Ok(None),
        }
    };
    let mut replies = Vec::with_capacity(ops.len());
    for op in ops {
        replies.push(if is_lookup(op) {
            match found.get(&id_of(op)) {
                Some(r) => Reply::ok(200, r),
                None => Error::ReservationNotFound.reply(),
            }
        } else {
            written.next().ok_or_else(|| {
                Error::Invariant("batch: fewer answers than confirms and cancels".into())
            })?
        });
    }
    Ok(Some((replies, counts)))
}

/// The named reservations as they are now, outside any transaction.
async fn look_up(pool: &PgPool, ids: &[Uuid]) -> Result<Vec<Reservation>> {
    sqlx::query_as::<_, ReservationRow>(
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE id = ANY($1)
        "#,
    )
    .bind(ids)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(Reservation::try_from)
    .collect()
}

/// [`apply`] always through the general path (tests compare the two paths).
pub async fn apply_general(pool: &PgPool, ops: &[OrderOp]) -> Result<Vec<Reply>> {
    let start = Instant::now();
    let (replies, counts) = general(pool, ops).await?;
    record(ops, &counts, start);
    Ok(replies)
}

/// [`apply`] through the one statement only: `None` (nothing written) when the batch
/// is not one it handles (tests compare the two paths).
pub async fn apply_fast(pool: &PgPool, ops: &[OrderOp]) -> Result<Option<Vec<Reply>>> {
    if !fits_one_statement(ops) {
        return Ok(None);
    }
    let start = Instant::now();
    let Some((replies, counts)) = fast(pool, ops).await? else {
        return Ok(None);
    };
    record(ops, &counts, start);
    Ok(Some(replies))
}

/// The metrics of the single path, counted once the batch has committed.
fn record(ops: &[OrderOp], counts: &Counts, start: Instant) {
    metrics::counter!("order_orders_confirmed_total").increment(counts.confirmed);
    for (reason, n) in [
        ("expired_on_touch", counts.expired_on_touch),
        ("cancelled", counts.cancelled),
        ("order_cancelled", counts.order_cancelled),
    ] {
        if n > 0 {
            metrics::counter!("order_units_returned_total", "reason" => reason).increment(n);
        }
    }
    if counts.offers_made > 0 {
        metrics::counter!("order_waitlist_offers_total", "outcome" => "made")
            .increment(counts.offers_made);
    }
    for op in ops {
        let name = match op {
            OrderOp::Confirm { .. } => "confirm",
            OrderOp::Cancel { .. } => "cancel",
            OrderOp::Reservation { .. } => "reservation",
        };
        metrics::counter!("order_batch_ops_total", "op" => name).increment(1);
    }
    metrics::histogram!("order_batch_seconds").record(start.elapsed().as_secs_f64());
}

/// Confirms and cancels only, each reservation once: then no operation depends on
/// another's outcome and the statement can decide them all at once.
fn fits_one_statement(ops: &[OrderOp]) -> bool {
    if ops
        .iter()
        .any(|op| matches!(op, OrderOp::Reservation { .. }))
    {
        return false;
    }
    let mut ids: Vec<Uuid> = ops.iter().map(id_of).collect();
    ids.sort_unstable();
    ids.windows(2).all(|w| w[0] != w[1])
}

/// The batch in one autocommit statement: one round trip instead of BEGIN, five or six
/// statements and COMMIT.
///
/// 1. `locked`: the named reservations, `ORDER BY id FOR UPDATE` (the lock order of the
///    general path).
/// 2. `clock`: `clock_timestamp()` read by an aggregate over `locked`, so only once every
///    lock is held (a bare column beside `FOR UPDATE` would be computed below the lock,
///    before any wait).
/// 3. `plan`: each reservation's target by the rules of the single path; `REFUND` (a
///    service cancel of a `CONFIRMED` one) makes the statement write nothing and the
///    batch go the general way: the order row to cancel may have been committed after
///    this statement's snapshot was taken (while it waited for the lock), and an
///    `UPDATE` cannot see a row newer than its snapshot.
/// 4. Units, new orders and reservations are written, each guarded by the state it
///    must be in (units and reservations, being older than the snapshot, are re-checked
///    at their newest version by the `UPDATE` itself).
/// 5. `tally`: every count must match, or the statement fails on purpose (a cast of the
///    explanation to `INTEGER`), so an autocommit statement is rolled back whole, exactly
///    as the general path drops its transaction.
///
/// `None`: nothing was written, the general path must take the batch.
async fn fast(pool: &PgPool, ops: &[OrderOp]) -> Result<Option<(Vec<Reply>, Counts)>> {
    let ids: Vec<Uuid> = ops.iter().map(id_of).collect();
    let kinds: Vec<&str> = ops
        .iter()
        .map(|op| match op {
            OrderOp::Confirm { .. } => "confirm",
            _ => "cancel",
        })
        .collect();
    // Made here, as the general path makes its own; unused for all but new sales.
    let order_ids: Vec<Uuid> = ops.iter().map(|_| Uuid::now_v7()).collect();
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query(
        r#"
        WITH req AS MATERIALIZED (
            SELECT q.id, q.op, q.new_order_id, q.ord
            FROM UNNEST($1::UUID[], $2::TEXT[], $3::UUID[]) WITH ORDINALITY AS q (id, op, new_order_id, ord)
        ), locked AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.unit_id, r.price, r.state, r.expires_at,
                   r.order_id, r.created_at, r.updated_at
            FROM reservations r
            WHERE r.id = ANY($1)
            ORDER BY r.id
            FOR UPDATE
        ), clock AS MATERIALIZED (
            SELECT clock_timestamp() AS checked_at, COUNT(*) AS n
            FROM locked
        ), plan AS MATERIALIZED (
            SELECT l.id, l.product_id, l.member_id, l.unit_id, l.price, q.new_order_id,
                   CASE
                       WHEN l.state = 'RESERVED' AND l.expires_at <= c.checked_at THEN 'EXPIRED'
                       WHEN l.state = 'RESERVED' AND q.op = 'confirm' THEN 'CONFIRMED'
                       WHEN l.state = 'RESERVED' AND q.op = 'cancel' THEN 'CANCELLED'
                       WHEN l.state = 'CONFIRMED' AND q.op = 'cancel' THEN 'REFUND'
                   END AS to_state
            FROM clock c
            CROSS JOIN locked l
            JOIN req q ON q.id = l.id
        ), moves AS MATERIALIZED (
            SELECT p.id, p.product_id, p.member_id, p.unit_id, p.price, p.new_order_id, p.to_state
            FROM plan p
            WHERE p.to_state IN ('EXPIRED', 'CONFIRMED', 'CANCELLED')
              AND NOT EXISTS (SELECT 1 FROM plan x WHERE x.to_state = 'REFUND')
        ), units AS (
            UPDATE product_stock s
            SET state = CASE m.to_state WHEN 'CONFIRMED' THEN 'SOLD' ELSE 'AVAILABLE' END,
                updated_at = now()
            FROM moves m
            WHERE s.id = m.unit_id AND s.state = 'RESERVED'
            RETURNING s.id, s.state
        ), sold AS (
            INSERT INTO orders (id, reservation_id, product_id, unit_id, member_id, price)
            SELECT m.new_order_id, m.id, m.product_id, m.unit_id, m.member_id, m.price
            FROM moves m
            WHERE m.to_state = 'CONFIRMED'
            RETURNING id
        ), moved AS (
            UPDATE reservations r
            SET state = m.to_state,
                order_id = CASE WHEN m.to_state = 'CONFIRMED' THEN m.new_order_id ELSE r.order_id END,
                updated_at = now()
            FROM moves m
            -- `r.id = ANY($1)` beside the join keeps the plan on the primary key: without
            -- it the generic plan read every live reservation through the partial index
            -- on `state = 'RESERVED'`.
            WHERE r.id = ANY($1) AND r.id = m.id AND r.state = 'RESERVED'
            RETURNING r.id, r.state, r.order_id, r.updated_at
        ), counted AS (
            SELECT (SELECT COUNT(*) FROM moves) AS planned,
                   (SELECT COUNT(*) FROM moves WHERE to_state = 'CONFIRMED') AS selling,
                   (SELECT COUNT(*) FROM units) AS units,
                   (SELECT COUNT(*) FROM sold) AS sold,
                   (SELECT COUNT(*) FROM moved) AS moved,
                   (SELECT COUNT(*) FROM plan WHERE to_state = 'REFUND') AS refunds,
                   (SELECT COUNT(*) FROM units WHERE state = 'OFFERED') AS offered
        ), tally AS MATERIALIZED (
            SELECT t.refunds, t.offered,
                   CASE WHEN t.units = t.planned AND t.sold = t.selling AND t.moved = t.planned THEN 0
                        ELSE CAST('order batch invariant breach: ' || t.planned || ' reservations to move, '
                                  || t.units || ' units moved, ' || t.selling || ' sales, '
                                  || t.sold || ' orders written, ' || t.moved || ' reservations moved'
                                  AS INTEGER)
                   END AS breach
            FROM counted t
        )
        SELECT q.ord, l.state AS initial, t.refunds, t.offered, t.breach,
               l.id, l.product_id, l.member_id, l.unit_id, l.price,
               COALESCE(m.state, l.state) AS state, l.expires_at,
               COALESCE(m.order_id, l.order_id) AS order_id, l.created_at,
               COALESCE(m.updated_at, l.updated_at) AS updated_at
        FROM req q
        CROSS JOIN tally t
        LEFT JOIN locked l ON l.id = q.id
        LEFT JOIN moved m ON m.id = q.id
        ORDER BY q.ord
        "#,
    )
    .bind(&ids)
    .bind(&kinds)
    .bind(&order_ids)
    .fetch_all(&mut *conn)
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            error::settle(&mut conn).await;
            return Err(error::from_statement(e));
        }
    };

    if rows.len() != ops.len() {
        return Err(Error::Invariant(format!(
            "batch: {} rows for {} operations",
            rows.len(),
            ops.len()
        )));
    }
    if rows[0].try_get::<i64, _>("refunds")? > 0 {
        return Ok(None);
    }
    let mut counts = Counts {
        offers_made: u64::try_from(rows[0].try_get::<i64, _>("offered")?).unwrap_or(0),
        ..Counts::default()
    };
    let mut replies = Vec::with_capacity(ops.len());
    for (at, (op, row)) in ops.iter().zip(&rows).enumerate() {
        let ord: i64 = row.try_get("ord")?;
        if usize::try_from(ord).ok() != Some(at + 1) {
            return Err(Error::Invariant(format!(
                "batch: row {ord} in place {}",
                at + 1
            )));
        }
        if row.try_get::<Option<Uuid>, _>("id")?.is_none() {
            replies.push(Error::ReservationNotFound.reply());
            continue;
        }
        let initial: String = row.try_get("initial")?;
        let r = Reservation::try_from(ReservationRow::from_row(row)?)?;
        match (initial.as_str(), r.state) {
            ("RESERVED", ReservationState::Confirmed) => counts.confirmed += 1,
            ("RESERVED", ReservationState::Expired) => counts.expired_on_touch += 1,
            ("RESERVED", ReservationState::Cancelled) => counts.cancelled += 1,
            _ => {}
        }
        replies.push(match (op, r.state) {
            (_, ReservationState::Reserved)
            | (OrderOp::Cancel { .. }, ReservationState::Confirmed) => {
                return Err(Error::Invariant(format!(
                    "batch: reservation {} left {} by {op:?}",
                    r.id, r.state
                )))
            }
            (OrderOp::Confirm { .. }, ReservationState::Cancelled) => {
                Error::ReservationCancelled.reply()
            }
            (OrderOp::Confirm { .. }, ReservationState::Expired) => {
                Error::ReservationExpired.reply()
            }
            _ => Reply::ok(200, &r),
        });
    }
    Ok(Some((replies, counts)))
}

/// The general path: one transaction, every operation decided in Rust in op order.
async fn general(pool: &PgPool, ops: &[OrderOp]) -> Result<(Vec<Reply>, Counts)> {
    let mut to_lock: Vec<Uuid> = ops
        .iter()
        .filter(|op| !matches!(op, OrderOp::Reservation { .. }))
        .map(id_of)
        .collect();
    to_lock.sort_unstable();
    to_lock.dedup();
    let mut to_read: Vec<Uuid> = ops
        .iter()
        .filter(|op| matches!(op, OrderOp::Reservation { .. }))
        .map(id_of)
        .filter(|id| to_lock.binary_search(id).is_err())
        .collect();
    to_read.sort_unstable();
    to_read.dedup();

    let mut tx = pool.begin().await?;
    let locked = select(&mut tx, &to_lock, true).await?;
    // Taken after every lock is held, so a deadline that passed while this batch
    // waited for a lock counts as passed; `now()` is what `updated_at = now()` writes.
    let (tx_now, checked_at): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as(r#"SELECT now(), clock_timestamp()"#)
            .fetch_one(&mut *tx)
            .await?;
    let read = select(&mut tx, &to_read, false).await?;

    let mut rows: HashMap<Uuid, Tracked> = HashMap::with_capacity(locked.len() + read.len());
    for r in locked.into_iter().chain(read) {
        rows.insert(
            r.id,
            Tracked {
                initial: r.state,
                due: r.expires_at <= checked_at,
                current: r,
                new_order: None,
                order_cancelled: false,
            },
        );
    }

    let mut counts = Counts::default();
    let replies: Vec<Reply> = ops
        .iter()
        .map(|op| decide(op, rows.get_mut(&id_of(op)), tx_now, &mut counts))
        .collect();

    counts.offers_made = write(&mut tx, rows.values()).await?;
    tx.commit().await?;
    Ok((replies, counts))
}

/// The named reservations, locked in id order when `lock` (two batches naming the same
/// rows then queue instead of deadlocking).
async fn select(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[Uuid],
    lock: bool,
) -> Result<Vec<Reservation>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = if lock {
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE id = ANY($1)
        ORDER BY id
        FOR UPDATE
        "#
    } else {
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE id = ANY($1)
        "#
    };
    sqlx::query_as::<_, ReservationRow>(sql)
        .bind(ids)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(Reservation::try_from)
        .collect()
}

/// One operation against the in-memory row, by the rules of `reservations::confirm`
/// and `reservations::cancel` (as a service) and of `GET /v1/reservations/{id}`.
fn decide(
    op: &OrderOp,
    row: Option<&mut Tracked>,
    tx_now: DateTime<Utc>,
    counts: &mut Counts,
) -> Reply {
    let Some(t) = row else {
        return Error::ReservationNotFound.reply();
    };
    let ok = |r: &Reservation| Reply::ok(200, r);
    match *op {
        OrderOp::Reservation { .. } => ok(&t.current),
        OrderOp::Confirm { .. } => match t.current.state {
            ReservationState::Confirmed => ok(&t.current),
            ReservationState::Cancelled => Error::ReservationCancelled.reply(),
            ReservationState::Expired => Error::ReservationExpired.reply(),
            ReservationState::Reserved if t.due => {
                t.current.state = ReservationState::Expired;
                t.current.updated_at = tx_now;
                counts.expired_on_touch += 1;
                Error::ReservationExpired.reply()
            }
            ReservationState::Reserved => {
                let order_id = Uuid::now_v7();
                t.new_order = Some(order_id);
                t.current.state = ReservationState::Confirmed;
                t.current.order_id = Some(order_id);
                t.current.updated_at = tx_now;
                counts.confirmed += 1;
                ok(&t.current)
            }
        },
        OrderOp::Cancel { .. } => {
            match t.current.state {
                ReservationState::Cancelled | ReservationState::Expired => {}
                ReservationState::Confirmed => {
                    t.order_cancelled = true;
                    t.current.state = ReservationState::Cancelled;
                    t.current.updated_at = tx_now;
                    counts.order_cancelled += 1;
                }
                ReservationState::Reserved if t.due => {
                    t.current.state = ReservationState::Expired;
                    t.current.updated_at = tx_now;
                    counts.expired_on_touch += 1;
                }
                ReservationState::Reserved => {
                    t.current.state = ReservationState::Cancelled;
                    t.current.updated_at = tx_now;
                    counts.cancelled += 1;
                }
            }
            ok(&t.current)
        }
    }
}

/// Writes the net change of every reservation the batch moved. Each statement must
/// touch exactly the rows expected, or the tables disagree with the locked rows and
/// the whole batch is abandoned, as `move_unit` abandons a single transition. Returns
/// how many returned units the handoff offered to a waitlist instead of the sale.
async fn write<'a>(
    tx: &mut Transaction<'_, Postgres>,
    rows: impl Iterator<Item = &'a Tracked>,
) -> Result<u64> {
    let changed: Vec<&Tracked> = rows.filter(|t| t.current.state != t.initial).collect();
    if changed.is_empty() {
        return Ok(0);
    }

    let landed: Vec<String> = sqlx::query_scalar(
        r#"
        UPDATE product_stock s
        SET state = m.to_state, updated_at = now()
        FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[]) AS m (id, from_state, to_state)
        WHERE s.id = m.id AND s.state = m.from_state
        RETURNING s.state
        "#,
    )
    .bind(
        changed
            .iter()
            .map(|t| t.current.unit_id)
            .collect::<Vec<_>>(),
    )
    .bind(
        changed
            .iter()
            .map(|t| unit_state(t.initial))
            .collect::<Vec<_>>(),
    )
    .bind(
        changed
            .iter()
            .map(|t| unit_state(t.current.state))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut **tx)
    .await?;
    expect_rows("units moved", landed.len() as u64, changed.len())?;
    let offers_made = landed.iter().filter(|s| *s == "OFFERED").count() as u64;

    let confirmed: Vec<(Uuid, &Reservation)> = changed
        .iter()
        .filter_map(|t| t.new_order.map(|o| (o, &t.current)))
        .collect();
    if !confirmed.is_empty() {
        let inserted = sqlx::query(
            r#"
            INSERT INTO orders (id, reservation_id, product_id, unit_id, member_id, price)
            SELECT * FROM UNNEST($1::UUID[], $2::UUID[], $3::BIGINT[], $4::BIGINT[], $5::TEXT[], $6::BIGINT[])
            "#,
        )
        .bind(confirmed.iter().map(|c| c.0).collect::<Vec<_>>())
        .bind(confirmed.iter().map(|c| c.1.id).collect::<Vec<_>>())
        .bind(confirmed.iter().map(|c| c.1.product_id).collect::<Vec<_>>())
        .bind(confirmed.iter().map(|c| c.1.unit_id).collect::<Vec<_>>())
        .bind(confirmed.iter().map(|c| c.1.member_id.as_str()).collect::<Vec<_>>())
        .bind(confirmed.iter().map(|c| c.1.price).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?
        .rows_affected();
        expect_rows("orders written", inserted, confirmed.len())?;
    }

    // After the insert, so an order confirmed and cancelled in one batch ends CANCELLED.
    let refunded: Vec<Uuid> = changed
        .iter()
        .filter(|t| t.order_cancelled)
        .map(|t| t.current.id)
        .collect();
    if !refunded.is_empty() {
        let cancelled = sqlx::query(
            r#"
            UPDATE orders
            SET state = 'CANCELLED', updated_at = now()
            WHERE reservation_id = ANY($1) AND state = 'CONFIRMED'
            "#,
        )
        .bind(&refunded)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        expect_rows("orders cancelled", cancelled, refunded.len())?;
    }

    let updated = sqlx::query(
        r#"
        UPDATE reservations r
        SET state = u.state, order_id = u.order_id, updated_at = now()
        FROM UNNEST($1::UUID[], $2::TEXT[], $3::UUID[]) AS u (id, state, order_id)
        WHERE r.id = u.id
        "#,
    )
    .bind(changed.iter().map(|t| t.current.id).collect::<Vec<_>>())
    .bind(
        changed
            .iter()
            .map(|t| t.current.state.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        changed
            .iter()
            .map(|t| t.current.order_id)
            .collect::<Vec<_>>(),
    )
    .execute(&mut **tx)
    .await?
    .rows_affected();
    expect_rows("reservations moved", updated, changed.len())?;
    Ok(offers_made)
}

fn expect_rows(what: &str, got: u64, expected: usize) -> Result<()> {
    if usize::try_from(got).ok() != Some(expected) {
        return Err(Error::Invariant(format!(
            "batch: {what}: {got} rows changed, {expected} expected"
        )));
    }
    Ok(())
}
