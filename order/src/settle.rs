//! The rule that moves a reservation on: confirm, cancel, and expiry (found on touch, or
//! swept), each reservation under its row lock, any number of them in one set-based
//! statement. A lone confirm or cancel is a statement of one; `POST /v1/batch` sends its
//! operations together; the sweep is the same statement with the due reservations as
//! its operations.
//!
//! | state | confirm | cancel (buyer: own only) | cancel (service) | sweep |
//! |---|---|---|---|---|
//! | `RESERVED`, due | → `EXPIRED`, 409 expired | → `EXPIRED`, 200 | the same | → `EXPIRED` |
//! | `RESERVED` | → `CONFIRMED`, unit `SOLD`, order; 200 | → `CANCELLED`, 200 | the same | — |
//! | `CONFIRMED` | 200, unchanged | 409 confirmed | → `CANCELLED`, order `CANCELLED`, 200 | — |
//! | `CANCELLED` | 409 cancelled | 200, unchanged | 200, unchanged | — |
//! | `EXPIRED` | 409 expired | 200, unchanged | 200, unchanged | — |
//!
//! A unit that comes back (any row above ending `CANCELLED` or `EXPIRED`) is set
//! `AVAILABLE` here and nowhere else for a reservation; the handoff trigger makes it
//! `OFFERED` instead when someone waits.
//!
//! A batch naming a reservation several times runs in rounds: round k carries the k-th
//! operation on each reservation, so each statement names a reservation at most once
//! and each operation sees the ones before it on its reservation. Each round is its own
//! statement and commit; the usual batch is one round.

use std::{collections::HashMap, sync::Arc, time::Instant};

use paysaga_common::{auth::MemberId, batch::BatchFailure, retry};
use paysaga_contracts::batch::Reply;
use sqlx::{postgres::PgRow, FromRow, PgPool, Row};
use uuid::Uuid;

use crate::{
    api::{OrderOp, Reservation, ReservationState},
    breach::Breach,
    error::{self, Error, Result},
    reservations::{self, ReservationRow},
    states::{Text, UnitState},
};

/// Who asks for a cancel decides what may be cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Canceller {
    /// The owning buyer: only their own, and only while unpaid.
    Buyer(MemberId),
    /// A service or operator: also a confirmed one (the order is cancelled, the unit
    /// goes back on sale, and the caller refunds the money).
    Service,
}

/// One operation on a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Confirm(Uuid),
    Cancel(Uuid, Canceller),
    /// The reservation as stored (a plain read, no lock).
    Lookup(Uuid),
}

impl Op {
    pub fn reservation_id(&self) -> Uuid {
        match self {
            Op::Confirm(id) | Op::Cancel(id, _) | Op::Lookup(id) => *id,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Op::Confirm(_) => "confirm",
            Op::Cancel(..) => "cancel",
            Op::Lookup(_) => "lookup",
        }
    }

    fn buyer(&self) -> Option<&str> {
        match self {
            Op::Cancel(_, Canceller::Buyer(m)) => Some(m.as_str()),
            _ => None,
        }
    }
}

/// A batch operation is the same operation by a service.
impl From<OrderOp> for Op {
    fn from(op: OrderOp) -> Self {
        match op {
            OrderOp::Confirm { reservation_id } => Op::Confirm(reservation_id),
            OrderOp::Cancel { reservation_id } => Op::Cancel(reservation_id, Canceller::Service),
            OrderOp::Reservation { reservation_id } => Op::Lookup(reservation_id),
        }
    }
}

/// One operation alone (a confirm or cancel endpoint): a statement of one.
pub async fn one(pool: &PgPool, op: Op) -> Result<Reservation> {
    apply(pool, std::slice::from_ref(&op))
        .await?
        .pop()
        .ok_or_else(|| Error::Invariant(Breach::count("settle", "answers", 1, 0)))?
}

/// Applies `ops` and answers each, in order: the reservation as the operation left it,
/// or its refusal. `Err`: the first round failed and nothing was written. An operation
/// of a later round that failed gets that failure (its earlier rounds committed).
#[tracing::instrument(skip_all, fields(ops = ops.len()))]
pub async fn apply(pool: &PgPool, ops: &[Op]) -> Result<Vec<Result<Reservation>>> {
    let mut mentions: HashMap<Uuid, usize> = HashMap::with_capacity(ops.len());
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (at, op) in ops.iter().enumerate() {
        let seen = mentions.entry(op.reservation_id()).or_default();
        if rounds.len() <= *seen {
            rounds.push(Vec::new());
        }
        rounds[*seen].push(at);
        *seen += 1;
    }
    let mut answers: Vec<Option<Result<Reservation>>> = (0..ops.len()).map(|_| None).collect();
    for (k, round) in rounds.iter().enumerate() {
        let round_ops: Vec<&Op> = round.iter().map(|&at| &ops[at]).collect();
        match settle(pool, &round_ops).await {
            Ok(settled) => {
                for (&at, answer) in round.iter().zip(settled) {
                    answers[at] = Some(answer);
                }
            }
            Err(e) if k == 0 => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, cause = ?e, round = k + 1,
                    "a batch round failed; its operations and the later rounds' are answered with its error");
                let failure = BatchFailure::Flush {
                    batch: "settle",
                    error: Arc::new(e),
                };
                for &at in rounds[k..].iter().flatten() {
                    answers[at] = Some(Err(Error::Batch(failure.clone())));
                }
                break;
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.ok_or_else(|| Error::Invariant(Breach::count("settle", "answers", 1, 0))))
        .collect()
}

/// `POST /v1/batch`: [`apply`] by a service, each answer as its own endpoint's reply.
pub async fn batch(pool: &PgPool, ops: &[OrderOp]) -> Result<Vec<Reply>> {
    let start = Instant::now();
    let settle_ops: Vec<Op> = ops.iter().copied().map(Op::from).collect();
    let answers = apply(pool, &settle_ops).await?;
    for op in ops {
        let name = match op {
            OrderOp::Confirm { .. } => "confirm",
            OrderOp::Cancel { .. } => "cancel",
            OrderOp::Reservation { .. } => "reservation",
        };
        metrics::counter!("order_batch_ops_total", "op" => name).increment(1);
    }
    metrics::histogram!("order_batch_seconds").record(start.elapsed().as_secs_f64());
    Ok(answers
        .into_iter()
        .map(|a| match a {
            Ok(r) => Reply::ok(200, &r),
            Err(e) => e.reply(),
        })
        .collect())
}

/// Expires up to `limit` due reservations no one else holds (`SKIP LOCKED`: one being
/// confirmed or cancelled right now, or swept by another instance, is left to them)
/// and returns how many units came back.
#[tracing::instrument(skip_all, fields(limit))]
pub async fn sweep(pool: &PgPool, limit: i64) -> Result<u64> {
    let run = execute(pool, &[], limit).await?;
    crate::waitlist::count_offers_made(run.tally.offered);
    let returned = u64::try_from(run.tally.moved).unwrap_or(0);
    metrics::counter!("order_units_returned_total", "reason" => "expired").increment(returned);
    Ok(returned)
}

/// One round: every reservation named once.
async fn settle(pool: &PgPool, ops: &[&Op]) -> Result<Vec<Result<Reservation>>> {
    if ops.iter().all(|op| matches!(op, Op::Lookup(_))) {
        // Nothing to move: one plain read, a fifth of the statement's cost.
        let ids: Vec<Uuid> = ops.iter().map(|op| op.reservation_id()).collect();
        let found: HashMap<Uuid, Reservation> = reservations::by_ids(pool, &ids)
            .await?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        return Ok(ops
            .iter()
            .map(|op| answer(op, found.get(&op.reservation_id()).cloned()))
            .collect());
    }
    let run = execute(pool, ops, 0).await?;
    let mut counts = Counts::default();
    let answers = ops
        .iter()
        .zip(run.rows)
        .map(|(op, row)| {
            let (initial, now) = row?;
            counts.add(initial, now.as_ref().map(|r| r.state));
            answer(op, now)
        })
        .collect();
    counts.record(run.tally.offered);
    Ok(answers)
}

/// What an operation answers, from the reservation as it left it.
fn answer(op: &Op, now: Option<Reservation>) -> Result<Reservation> {
    let Some(r) = now else {
        return Err(Error::ReservationNotFound);
    };
    let outcome = |r: &Reservation| {
        Error::Invariant(Breach::Outcome {
            reservation_id: r.id,
            op: op.kind().into(),
            state: r.state,
        })
    };
    match (op, r.state) {
        (Op::Lookup(_), _) => Ok(r),
        (Op::Cancel(_, Canceller::Buyer(m)), _) if &r.member_id != m => {
            Err(Error::ReservationNotFound)
        }
        (Op::Confirm(_), ReservationState::Confirmed) => Ok(r),
        (Op::Confirm(_), ReservationState::Cancelled) => Err(Error::ReservationCancelled),
        (Op::Confirm(_), ReservationState::Expired) => Err(Error::ReservationExpired),
        (Op::Cancel(..), ReservationState::Cancelled | ReservationState::Expired) => Ok(r),
        (Op::Cancel(_, Canceller::Buyer(_)), ReservationState::Confirmed) => {
            Err(Error::ReservationConfirmed)
        }
        (_, ReservationState::Reserved) | (Op::Cancel(_, Canceller::Service), _) => {
            Err(outcome(&r))
        }
    }
}

/// What a round moved, counted once it has committed.
#[derive(Default)]
struct Counts {
    confirmed: u64,
    expired_on_touch: u64,
    cancelled: u64,
    order_cancelled: u64,
}

impl Counts {
    fn add(&mut self, initial: Option<ReservationState>, now: Option<ReservationState>) {
        use ReservationState::{Cancelled, Confirmed, Expired, Reserved};
        match (initial, now) {
            (Some(Reserved), Some(Confirmed)) => self.confirmed += 1,
            (Some(Reserved), Some(Expired)) => self.expired_on_touch += 1,
            (Some(Reserved), Some(Cancelled)) => self.cancelled += 1,
            (Some(Confirmed), Some(Cancelled)) => self.order_cancelled += 1,
            _ => {}
        }
    }

    fn record(&self, offered: i64) {
        if self.confirmed > 0 {
            metrics::counter!("order_orders_confirmed_total").increment(self.confirmed);
        }
        for (reason, n) in [
            ("expired_on_touch", self.expired_on_touch),
            ("cancelled", self.cancelled),
            ("order_cancelled", self.order_cancelled),
        ] {
            if n > 0 {
                metrics::counter!("order_units_returned_total", "reason" => reason).increment(n);
            }
        }
        crate::waitlist::count_offers_made(offered);
    }
}

/// The statement's own counts, the same on every row.
#[derive(Debug, Clone, Copy)]
struct Tally {
    /// Refunds whose order row the statement could not see (it wrote nothing).
    stale: i64,
    /// Units that came back and were offered to a waitlist (the handoff trigger).
    offered: i64,
    /// Reservations moved on.
    moved: i64,
}

/// One operation's row: the reservation's state before, and the reservation now
/// (`None`: no such reservation).
type Settled = Result<(Option<ReservationState>, Option<Reservation>)>;

struct Run {
    tally: Tally,
    rows: Vec<Settled>,
}

/// Runs the statement: again on a deadlock PostgreSQL broke (it rolled back whole),
/// and again when a refund's order was out of its sight (it wrote nothing; a new
/// statement's snapshot, taken after the lock holder committed, sees it).
async fn execute(pool: &PgPool, ops: &[&Op], sweep: i64) -> Result<Run> {
    // Made here for every operation; unused for all but new sales.
    let order_ids: Vec<Uuid> = ops.iter().map(|_| Uuid::now_v7()).collect();
    let mut stale = 0;
    for _ in 0..STALE_RUNS {
        let run = retry::on_conflict(Error::is_conflict, || {
            statement(pool, ops, &order_ids, sweep)
        })
        .await?;
        if run.tally.stale == 0 {
            return Ok(run);
        }
        stale = run.tally.stale;
    }
    Err(Error::Invariant(Breach::count(
        "settle",
        "refunds whose order stayed out of sight",
        0,
        stale,
    )))
}

/// A refund's order row is visible to the second statement at the latest; the third
/// run is margin.
const STALE_RUNS: usize = 3;

/// The statement, in autocommit: one round trip.
///
/// 1. `named`: the reservations the confirms and cancels name, `ORDER BY id FOR UPDATE`
///    (two statements naming the same ones queue instead of deadlocking); `due`: the
///    sweep's, `SKIP LOCKED`; `looked`: the lookups, a plain read.
/// 2. `clock`: `clock_timestamp()` read by aggregates over the locking scans, so only
///    once every lock is held (a deadline that passed while it waited counts).
/// 3. `plan`: each reservation's target by the table above; `stale`: a refund whose
///    order row was committed after this statement's snapshot (while it waited for the
///    lock): an `UPDATE` cannot see it, so nothing is written and the caller runs the
///    statement again.
/// 4. Units, new orders, cancelled orders and reservations are written, each guarded by
///    the state it must be in.
/// 5. `tally`: every count must match the plan, or `invariant_breach` aborts the
///    statement whole with what disagreed (the unit at fault is read afterwards: a
///    subquery for it here would cost every statement its setup).
async fn statement(pool: &PgPool, ops: &[&Op], order_ids: &[Uuid], sweep: i64) -> Result<Run> {
    let ids: Vec<Uuid> = ops.iter().map(|op| op.reservation_id()).collect();
    let kinds: Vec<&str> = ops.iter().map(|op| op.kind()).collect();
    let buyers: Vec<Option<&str>> = ops.iter().map(|op| op.buyer()).collect();
    let (looked, written): (Vec<&&Op>, Vec<&&Op>) =
        ops.iter().partition(|op| matches!(op, Op::Lookup(_)));
    let written: Vec<Uuid> = written.iter().map(|op| op.reservation_id()).collect();
    let looked: Vec<Uuid> = looked.iter().map(|op| op.reservation_id()).collect();
    let mut conn = pool.acquire().await?;
    let rows = sqlx::query(
        r#"
        WITH req AS MATERIALIZED (
            SELECT q.id, q.op, q.buyer, q.new_order_id, q.ord
            FROM UNNEST($1::UUID[], $2::TEXT[], $3::TEXT[], $4::UUID[])
                 WITH ORDINALITY AS q (id, op, buyer, new_order_id, ord)
        ), named AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.unit_id, r.price, r.state, r.expires_at,
                   r.order_id, r.account_id, r.created_at, r.updated_at
            FROM reservations r
            WHERE r.id = ANY($5)
            ORDER BY r.id
            FOR UPDATE
        ), due AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.unit_id, r.price, r.state, r.expires_at,
                   r.order_id, r.account_id, r.created_at, r.updated_at
            FROM reservations r
            WHERE r.state = 'RESERVED' AND r.expires_at <= now()
            ORDER BY r.expires_at
            LIMIT $7
            FOR UPDATE SKIP LOCKED
        ), looked AS MATERIALIZED (
            SELECT r.id, r.product_id, r.member_id, r.unit_id, r.price, r.state, r.expires_at,
                   r.order_id, r.account_id, r.created_at, r.updated_at
            FROM reservations r
            WHERE r.id = ANY($6)
        ), clock AS MATERIALIZED (
            SELECT clock_timestamp() AS checked_at
            FROM (SELECT COUNT(*) FROM named) n
            CROSS JOIN (SELECT COUNT(*) FROM due) d
        ), plan AS MATERIALIZED (
            SELECT l.id, l.product_id, l.member_id, l.unit_id, l.price, l.state, l.new_order_id,
                   CASE
                       WHEN l.buyer IS NOT NULL AND l.buyer <> l.member_id THEN NULL
                       WHEN l.state = 'RESERVED' AND (l.op = 'expire' OR l.expires_at <= c.checked_at)
                           THEN 'EXPIRED'
                       WHEN l.state = 'RESERVED' AND l.op = 'confirm' THEN 'CONFIRMED'
                       WHEN l.state = 'RESERVED' AND l.op = 'cancel' THEN 'CANCELLED'
                       WHEN l.state = 'CONFIRMED' AND l.op = 'cancel' AND l.buyer IS NULL THEN 'CANCELLED'
                   END AS to_state
            FROM clock c
            CROSS JOIN (
                SELECT n.id, n.product_id, n.member_id, n.unit_id, n.price, n.state, n.expires_at,
                       q.op, q.buyer, q.new_order_id
                FROM named n
                JOIN req q ON q.id = n.id
                UNION ALL
                SELECT d.id, d.product_id, d.member_id, d.unit_id, d.price, d.state, d.expires_at,
                       'expire', NULL, NULL
                FROM due d
            ) l
        ), stale AS MATERIALIZED (
            SELECT p.id
            FROM plan p
            WHERE p.state = 'CONFIRMED' AND p.to_state = 'CANCELLED'
              AND NOT EXISTS (
                  SELECT 1 FROM orders o WHERE o.reservation_id = p.id AND o.state = 'CONFIRMED')
        ), moves AS MATERIALIZED (
            SELECT p.id, p.product_id, p.member_id, p.unit_id, p.price, p.state, p.to_state,
                   p.new_order_id,
                   CASE p.state WHEN 'CONFIRMED' THEN 'SOLD' ELSE 'RESERVED' END AS unit_from,
                   CASE p.to_state WHEN 'CONFIRMED' THEN 'SOLD' ELSE 'AVAILABLE' END AS unit_to
            FROM plan p
            WHERE p.to_state IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM stale)
        ), units AS (
            UPDATE product_stock s
            SET state = m.unit_to, updated_at = now()
            FROM moves m
            -- By the array of unit ids, as `moved` below and for the same reason.
            WHERE s.id = ANY(ARRAY(SELECT x.unit_id FROM moves x)) AND s.id = m.unit_id
              AND s.state = m.unit_from
            RETURNING s.id, s.state
        ), sold AS (
            INSERT INTO orders (id, reservation_id, product_id, unit_id, member_id, price)
            SELECT m.new_order_id, m.id, m.product_id, m.unit_id, m.member_id, m.price
            FROM moves m
            WHERE m.to_state = 'CONFIRMED'
            RETURNING id
        ), refunded AS (
            UPDATE orders o
            SET state = 'CANCELLED', updated_at = now()
            WHERE o.reservation_id = ANY(ARRAY(SELECT m.id FROM moves m WHERE m.state = 'CONFIRMED'))
              AND o.state = 'CONFIRMED'
            RETURNING o.id
        ), moved AS (
            UPDATE reservations r
            SET state = m.to_state,
                order_id = CASE WHEN m.to_state = 'CONFIRMED' THEN m.new_order_id ELSE r.order_id END,
                updated_at = now()
            FROM moves m
            -- The array of ids beside the join keeps the plan on the primary key whatever
            -- the estimates (the sweep's `LIMIT $7` makes the planner expect thousands of
            -- moves, and a hash join over the whole table).
            WHERE r.id = ANY(ARRAY(SELECT x.id FROM moves x)) AND r.id = m.id AND r.state = m.state
            RETURNING r.id, r.state, r.order_id, r.updated_at
        ), counted AS (
            SELECT (SELECT COUNT(*) FROM moves) AS planned,
                   (SELECT COUNT(*) FROM moves WHERE to_state = 'CONFIRMED') AS selling,
                   (SELECT COUNT(*) FROM moves WHERE state = 'CONFIRMED') AS refunding,
                   (SELECT COUNT(*) FROM units) AS units,
                   (SELECT COUNT(*) FROM sold) AS sold,
                   (SELECT COUNT(*) FROM refunded) AS refunded,
                   (SELECT COUNT(*) FROM moved) AS moved,
                   (SELECT COUNT(*) FROM stale) AS stale,
                   (SELECT COUNT(*) FROM units WHERE state = 'OFFERED') AS offered
        ), tally AS MATERIALIZED (
            SELECT t.stale, t.offered, t.moved,
                   CASE WHEN t.units = t.planned AND t.sold = t.selling
                             AND t.refunded = t.refunding AND t.moved = t.planned THEN 0
                        ELSE invariant_breach(jsonb_build_object(
                            'kind', 'count', 'statement', 'settle',
                            'what', CASE WHEN t.units <> t.planned THEN 'units moved'
                                         WHEN t.moved <> t.planned THEN 'reservations moved'
                                         WHEN t.sold <> t.selling THEN 'orders written'
                                         ELSE 'orders cancelled' END,
                            'expected', CASE WHEN t.units <> t.planned OR t.moved <> t.planned
                                                 THEN t.planned
                                             WHEN t.sold <> t.selling THEN t.selling
                                             ELSE t.refunding END,
                            'found', CASE WHEN t.units <> t.planned THEN t.units
                                          WHEN t.moved <> t.planned THEN t.moved
                                          WHEN t.sold <> t.selling THEN t.sold
                                          ELSE t.refunded END))
                   END AS breach
            FROM counted t
        )
        SELECT q.ord, l.state AS initial, t.stale, t.offered, t.moved, t.breach,
               l.id, l.product_id, l.member_id, l.unit_id, l.price,
               COALESCE(m.state, l.state) AS state, l.expires_at,
               COALESCE(m.order_id, l.order_id) AS order_id, l.account_id, l.created_at,
               COALESCE(m.updated_at, l.updated_at) AS updated_at
        FROM tally t
        LEFT JOIN req q ON TRUE
        LEFT JOIN (SELECT * FROM named UNION ALL SELECT * FROM looked) l ON l.id = q.id
        LEFT JOIN moved m ON m.id = q.id
        ORDER BY q.ord
        "#,
    )
    .bind(&ids)
    .bind(&kinds)
    .bind(&buyers)
    .bind(order_ids)
    .bind(&written)
    .bind(&looked)
    .bind(sweep)
    .fetch_all(&mut *conn)
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            error::settle(&mut conn).await;
            return Err(match error::from_statement(e) {
                Error::Invariant(count @ Breach::Count { .. }) => {
                    Error::Invariant(unit_breach(&mut conn, &written).await.unwrap_or(count))
                }
                e => e,
            });
        }
    };
    decode(ops.len(), &rows)
}

/// A reservation, its unit and their states.
type UnitOf = (Uuid, i64, Text<ReservationState>, Option<Text<UnitState>>);

/// After the statement aborted on its counts: the first of `ids` whose unit is not in
/// the state the reservation implies, read from the tables as they stand (the
/// statement wrote nothing), for the breach's context.
async fn unit_breach(conn: &mut sqlx::PgConnection, ids: &[Uuid]) -> Option<Breach> {
    let found: Option<UnitOf> = sqlx::query_as(
            r#"
            SELECT r.id, r.unit_id, r.state, s.state
            FROM reservations r
            LEFT JOIN product_stock s ON s.id = r.unit_id
            WHERE r.id = ANY($1) AND r.state IN ('RESERVED', 'CONFIRMED')
              AND s.state IS DISTINCT FROM CASE r.state WHEN 'CONFIRMED' THEN 'SOLD' ELSE 'RESERVED' END
            ORDER BY r.id
            LIMIT 1
            "#,
        )
        .bind(ids)
        .fetch_optional(conn)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "reading the breach's unit"))
        .ok()?;
    let (reservation_id, unit_id, Text(state), found) = found?;
    Some(Breach::Unit {
        unit_id,
        holder: Some(crate::breach::Holder::Reservation(reservation_id)),
        expected: match state {
            ReservationState::Confirmed => UnitState::Sold,
            _ => UnitState::Reserved,
        },
        found: found.map(|Text(s)| s),
    })
}

/// The statement's rows: one per operation in order (one row of the tally alone when
/// there are none).
fn decode(ops: usize, rows: &[PgRow]) -> Result<Run> {
    let first = rows
        .first()
        .ok_or_else(|| Error::Invariant(Breach::count("settle", "rows", 1, 0)))?;
    let tally = Tally {
        stale: first.try_get("stale")?,
        offered: first.try_get("offered")?,
        moved: first.try_get("moved")?,
    };
    if ops == 0 {
        return Ok(Run {
            tally,
            rows: Vec::new(),
        });
    }
    Breach::check_count("settle", "answers", ops, rows.len()).map_err(Error::Invariant)?;
    let rows = rows
        .iter()
        .enumerate()
        .map(|(at, row)| {
            let ord: Option<i64> = row.try_get("ord")?;
            if ord.and_then(|o| usize::try_from(o).ok()) != Some(at + 1) {
                return Err(Error::Invariant(Breach::count(
                    "settle",
                    "answer in place",
                    at as i64 + 1,
                    ord.unwrap_or(0),
                )));
            }
            if row.try_get::<Option<Uuid>, _>("id")?.is_none() {
                return Ok((None, None));
            }
            let initial: Text<ReservationState> = row.try_get("initial")?;
            let now = Reservation::from(ReservationRow::from_row(row)?);
            Ok((Some(initial.0), Some(now)))
        })
        .collect();
    Ok(Run { tally, rows })
}
