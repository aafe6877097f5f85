//! Group commit of confirms, cancels and lookups: one transaction and a constant number
//! of set-based statements per batch, each operation answered as its own endpoint would.
//!
//! The plan: lock every reservation a confirm or cancel names (one `SELECT ... = ANY
//! ... ORDER BY id FOR UPDATE`), take the database clock once every lock is held, read
//! the reservations only looked up, then decide every operation in Rust, in op order,
//! on an in-memory copy of each row (so an id named twice sees its own earlier
//! operation), and finally write the net change of each reservation with at most four
//! statements: units, new orders, cancelled orders, reservations. Any failure drops the
//! transaction, so a batch is applied whole or not at all.

use std::{collections::HashMap, time::Instant};

use chrono::{DateTime, Utc};
use paysaga_contracts::batch::Reply;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::{
    api::{OrderOp, Reservation, ReservationState},
    error::{Error, Result},
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

/// Applies `ops` in one transaction and answers each, in order. `Err` means nothing
/// was written and the whole request fails.
#[tracing::instrument(skip_all, fields(ops = ops.len()))]
pub async fn apply(pool: &PgPool, ops: &[OrderOp]) -> Result<Vec<Reply>> {
    let start = Instant::now();
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

    write(&mut tx, rows.values()).await?;
    tx.commit().await?;

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
    for op in ops {
        let name = match op {
            OrderOp::Confirm { .. } => "confirm",
            OrderOp::Cancel { .. } => "cancel",
            OrderOp::Reservation { .. } => "reservation",
        };
        metrics::counter!("order_batch_ops_total", "op" => name).increment(1);
    }
    metrics::histogram!("order_batch_seconds").record(start.elapsed().as_secs_f64());
    Ok(replies)
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
/// the whole batch is abandoned, as `move_unit` abandons a single transition.
async fn write<'a>(
    tx: &mut Transaction<'_, Postgres>,
    rows: impl Iterator<Item = &'a Tracked>,
) -> Result<()> {
    let changed: Vec<&Tracked> = rows.filter(|t| t.current.state != t.initial).collect();
    if changed.is_empty() {
        return Ok(());
    }

    let moved = sqlx::query(
        r#"
        UPDATE product_stock s
        SET state = m.to_state, updated_at = now()
        FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[]) AS m (id, from_state, to_state)
        WHERE s.id = m.id AND s.state = m.from_state
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
    .execute(&mut **tx)
    .await?
    .rows_affected();
    expect_rows("units moved", moved, changed.len())?;

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
    expect_rows("reservations moved", updated, changed.len())
}

fn expect_rows(what: &str, got: u64, expected: usize) -> Result<()> {
    if usize::try_from(got).ok() != Some(expected) {
        return Err(Error::Invariant(format!(
            "batch: {what}: {got} rows changed, {expected} expected"
        )));
    }
    Ok(())
}
