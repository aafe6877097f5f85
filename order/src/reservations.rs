//! Reservations in PostgreSQL: the claim of one unit, lookup, and the confirm / cancel /
//! expire transitions, each one short transaction under the reservation's row lock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::{
    api::{Reservation, ReservationState},
    error::{Error, Result},
};

/// A `reservations` row as selected by every query here (and by `crate::batch`).
#[derive(sqlx::FromRow)]
pub(crate) struct ReservationRow {
    id: Uuid,
    product_id: i64,
    member_id: String,
    unit_id: i64,
    price: i64,
    state: String,
    expires_at: DateTime<Utc>,
    order_id: Option<Uuid>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<ReservationRow> for Reservation {
    type Error = Error;
    fn try_from(r: ReservationRow) -> Result<Self> {
        let state = ReservationState::parse(&r.state).ok_or_else(|| {
            Error::Invariant(format!(
                "reservation {} has unknown state {}",
                r.id, r.state
            ))
        })?;
        let member_id = MemberId::parse(r.member_id).map_err(|e| {
            Error::Invariant(format!("reservation {} has a bad member id: {e}", r.id))
        })?;
        Ok(Reservation {
            id: r.id,
            product_id: r.product_id,
            member_id,
            unit_id: r.unit_id,
            price: r.price,
            state,
            expires_at: r.expires_at,
            order_id: r.order_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// What a new claim needs.
pub struct ClaimRequest<'a> {
    pub product_id: i64,
    pub member: &'a MemberId,
    pub pass_id: Uuid,
    pub ttl: Duration,
    /// How many units of the product a member may hold or have bought at once (their
    /// `RESERVED` and `CONFIRMED` reservations).
    pub cap: i64,
}

/// How a claim ended.
pub enum Claim {
    Created(Reservation),
    /// No AVAILABLE unit could be locked (sold out, unknown product, or all remaining
    /// units momentarily locked by other transactions).
    NothingClaimable,
    /// The pass id is already on a reservation (a replay racing its original).
    PassUsed,
    /// The member already holds a live reservation of the product, or has reserved and
    /// bought as many units as the cap allows.
    MemberLimit,
}

/// Claims one AVAILABLE unit and records the reservation, in one statement (so one
/// short transaction and one round trip). `SKIP LOCKED` makes concurrent claimers take
/// different units instead of queueing on one; the re-check of `state` under the lock
/// means a unit taken meanwhile is skipped, never claimed twice.
#[tracing::instrument(skip_all, fields(product_id = req.product_id))]
pub async fn claim(pool: &PgPool, req: &ClaimRequest<'_>) -> Result<Claim> {
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        WITH unit AS (
            SELECT s.id
            FROM product_stock s
            WHERE s.product_id = $1 AND s.state = 'AVAILABLE'
              -- Counted up to the cap only, along the member's own reservations in the
              -- order of their index: one short probe on any plan (see claims.rs).
              AND (SELECT COUNT(*) FROM (
                       SELECT 1 FROM reservations x
                       WHERE x.product_id = $1 AND x.member_id = $3
                         AND x.state IN ('RESERVED', 'CONFIRMED')
                       ORDER BY x.member_id, x.created_at
                       LIMIT $6) y) < $6
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE product_stock s
            SET state = 'RESERVED', updated_at = now()
            FROM unit
            WHERE s.id = unit.id
            RETURNING s.id
        )
        INSERT INTO reservations (id, product_id, unit_id, member_id, pass_id, price, state, expires_at)
        SELECT $2, p.id, claimed.id, $3, $4, p.price, 'RESERVED', now() + make_interval(secs => $5)
        FROM claimed
        JOIN products p ON p.id = $1
        RETURNING id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        "#,
    )
    .bind(req.product_id)
    .bind(Uuid::now_v7())
    .bind(req.member.as_str())
    .bind(req.pass_id)
    .bind(req.ttl.as_secs_f64())
    .bind(req.cap)
    .fetch_optional(pool)
    .await;
    match row {
        Ok(Some(row)) => Ok(Claim::Created(row.try_into()?)),
        Ok(None) if at_limit(pool, req).await? => Ok(Claim::MemberLimit),
        Ok(None) => Ok(Claim::NothingClaimable),
        Err(sqlx::Error::Database(e)) if e.constraint() == Some("reservations_pass_id_unique") => {
            Ok(Claim::PassUsed)
        }
        // Another claim of the same member committed a live reservation first.
        Err(sqlx::Error::Database(e))
            if e.constraint() == Some("reservations_one_live_per_member") =>
        {
            Ok(Claim::MemberLimit)
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the member holds or has bought as many units of the product as the cap
/// allows (asked only when a claim found nothing, to tell this from sold out).
async fn at_limit(pool: &PgPool, req: &ClaimRequest<'_>) -> Result<bool> {
    Ok(sqlx::query_scalar(
        r#"
        SELECT COUNT(*) >= $3
        FROM reservations
        WHERE product_id = $1 AND member_id = $2 AND state IN ('RESERVED', 'CONFIRMED')
        "#,
    )
    .bind(req.product_id)
    .bind(req.member.as_str())
    .bind(req.cap)
    .fetch_one(pool)
    .await?)
}

/// The reservation made by taking an offer, if any.
pub(crate) async fn by_offer(
    tx: &mut Transaction<'_, Postgres>,
    offer_id: Uuid,
) -> Result<Option<Reservation>> {
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE offer_id = $1
        "#,
    )
    .bind(offer_id)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(Reservation::try_from).transpose()
}

/// The reservation made with a pass, if any.
pub async fn by_pass(pool: &PgPool, pass_id: Uuid) -> Result<Option<Reservation>> {
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE pass_id = $1
        "#,
    )
    .bind(pass_id)
    .fetch_optional(pool)
    .await?;
    row.map(Reservation::try_from).transpose()
}

pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<Reservation>> {
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        FROM reservations
        WHERE id = $1
        "#,
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    row.map(Reservation::try_from).transpose()
}

/// The reservation, locked for the rest of the transaction, with whether its deadline
/// has passed by the database's clock (the one that set it). `clock_timestamp()`, not
/// `now()`: the transaction may have waited for the lock, and `now()` is its start.
#[derive(sqlx::FromRow)]
struct Locked {
    #[sqlx(flatten)]
    row: ReservationRow,
    due: bool,
}

async fn lock(tx: &mut Transaction<'_, Postgres>, id: Uuid) -> Result<Option<(Reservation, bool)>> {
    let locked = sqlx::query_as::<_, Locked>(
        r#"
        SELECT id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at,
               expires_at <= clock_timestamp() AS due
        FROM reservations
        WHERE id = $1
        FOR UPDATE
        "#,
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    match locked {
        Some(l) => Ok(Some((l.row.try_into()?, l.due))),
        None => Ok(None),
    }
}

/// Moves the unit of a reservation from `from` to `to`; exactly one row must change,
/// or the reservation and its unit disagree and the transaction is abandoned.
async fn move_unit(
    tx: &mut Transaction<'_, Postgres>,
    unit_id: i64,
    from: &str,
    to: &str,
) -> Result<()> {
    let changed = sqlx::query(
        r#"
        UPDATE product_stock
        SET state = $3, updated_at = now()
        WHERE id = $1 AND state = $2
        "#,
    )
    .bind(unit_id)
    .bind(from)
    .bind(to)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if changed != 1 {
        return Err(Error::Invariant(format!(
            "unit {unit_id} was not {from} when moving it to {to}"
        )));
    }
    Ok(())
}

/// Puts a reservation's unit back on sale (from `from`), as [`move_unit`]. With someone
/// waiting for the product the unit lands `OFFERED` instead (the waitlist's handoff, in
/// the same row version and transaction), counted here.
async fn return_unit(tx: &mut Transaction<'_, Postgres>, unit_id: i64, from: &str) -> Result<()> {
    let landed: Option<String> = sqlx::query_scalar(
        r#"
        UPDATE product_stock
        SET state = 'AVAILABLE', updated_at = now()
        WHERE id = $1 AND state = $2
        RETURNING state
        "#,
    )
    .bind(unit_id)
    .bind(from)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(landed) = landed else {
        return Err(Error::Invariant(format!(
            "unit {unit_id} was not {from} when putting it back on sale"
        )));
    };
    crate::waitlist::count_handoffs([landed.as_str()]);
    Ok(())
}

async fn set_state(
    tx: &mut Transaction<'_, Postgres>,
    id: Uuid,
    state: ReservationState,
    order_id: Option<Uuid>,
) -> Result<Reservation> {
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        UPDATE reservations
        SET state = $2, order_id = COALESCE($3, order_id), updated_at = now()
        WHERE id = $1
        RETURNING id, product_id, member_id, unit_id, price, state, expires_at, order_id, created_at, updated_at
        "#,
    )
    .bind(id)
    .bind(state.as_str())
    .bind(order_id)
    .fetch_one(&mut **tx)
    .await?;
    row.try_into()
}

/// A live reservation whose deadline passed: expire it here and now, so the answer and
/// the tables agree without waiting for the sweep.
async fn expire_locked(tx: &mut Transaction<'_, Postgres>, r: &Reservation) -> Result<Reservation> {
    return_unit(tx, r.unit_id, "RESERVED").await?;
    let expired = set_state(tx, r.id, ReservationState::Expired, None).await?;
    metrics::counter!("order_units_returned_total", "reason" => "expired_on_touch").increment(1);
    Ok(expired)
}

/// How a confirm ended; the transaction is committed either way, since an expiry found
/// on the way is itself a change worth keeping.
pub enum ConfirmOutcome {
    Confirmed(Reservation),
    Expired,
    Cancelled,
    NotFound,
}

/// RESERVED and unexpired -> CONFIRMED, unit SOLD, one order row. Repeating it finds
/// CONFIRMED and answers the same reservation.
#[tracing::instrument(skip_all, fields(reservation_id = %id))]
pub async fn confirm(pool: &PgPool, id: Uuid) -> Result<ConfirmOutcome> {
    let mut tx = pool.begin().await?;
    let Some((r, due)) = lock(&mut tx, id).await? else {
        return Ok(ConfirmOutcome::NotFound);
    };
    let outcome = match r.state {
        ReservationState::Confirmed => ConfirmOutcome::Confirmed(r),
        ReservationState::Cancelled => ConfirmOutcome::Cancelled,
        ReservationState::Expired => ConfirmOutcome::Expired,
        ReservationState::Reserved if due => {
            expire_locked(&mut tx, &r).await?;
            ConfirmOutcome::Expired
        }
        ReservationState::Reserved => {
            move_unit(&mut tx, r.unit_id, "RESERVED", "SOLD").await?;
            let order_id = Uuid::now_v7();
            sqlx::query(
                r#"
                INSERT INTO orders (id, reservation_id, product_id, unit_id, member_id, price)
                VALUES ($1, $2, $3, $4, $5, $6)
                "#,
            )
            .bind(order_id)
            .bind(r.id)
            .bind(r.product_id)
            .bind(r.unit_id)
            .bind(r.member_id.as_str())
            .bind(r.price)
            .execute(&mut *tx)
            .await?;
            let confirmed =
                set_state(&mut tx, r.id, ReservationState::Confirmed, Some(order_id)).await?;
            metrics::counter!("order_orders_confirmed_total").increment(1);
            ConfirmOutcome::Confirmed(confirmed)
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

/// Who asks for a cancel decides what may be cancelled.
pub enum Canceller<'a> {
    /// The owning buyer: only while unpaid.
    Buyer(&'a MemberId),
    /// A service or operator: also a confirmed one (the order is cancelled, the unit
    /// goes back on sale, and the caller refunds the money).
    Service,
}

pub enum CancelOutcome {
    /// The reservation in its final state: CANCELLED, or EXPIRED if expiry won.
    Done(Reservation),
    /// A buyer asked to cancel a paid reservation.
    Confirmed,
    NotFound,
}

#[tracing::instrument(skip_all, fields(reservation_id = %id))]
pub async fn cancel(pool: &PgPool, id: Uuid, who: Canceller<'_>) -> Result<CancelOutcome> {
    let mut tx = pool.begin().await?;
    let Some((r, due)) = lock(&mut tx, id).await? else {
        return Ok(CancelOutcome::NotFound);
    };
    if let Canceller::Buyer(member) = who {
        if &r.member_id != member {
            return Ok(CancelOutcome::NotFound);
        }
    }
    let outcome = match (r.state, &who) {
        (ReservationState::Cancelled | ReservationState::Expired, _) => CancelOutcome::Done(r),
        (ReservationState::Confirmed, Canceller::Buyer(_)) => CancelOutcome::Confirmed,
        (ReservationState::Confirmed, Canceller::Service) => {
            return_unit(&mut tx, r.unit_id, "SOLD").await?;
            sqlx::query(
                r#"
                UPDATE orders
                SET state = 'CANCELLED', updated_at = now()
                WHERE reservation_id = $1 AND state = 'CONFIRMED'
                "#,
            )
            .bind(r.id)
            .execute(&mut *tx)
            .await?;
            let cancelled = set_state(&mut tx, r.id, ReservationState::Cancelled, None).await?;
            metrics::counter!("order_units_returned_total", "reason" => "order_cancelled")
                .increment(1);
            CancelOutcome::Done(cancelled)
        }
        (ReservationState::Reserved, _) if due => {
            CancelOutcome::Done(expire_locked(&mut tx, &r).await?)
        }
        (ReservationState::Reserved, _) => {
            return_unit(&mut tx, r.unit_id, "RESERVED").await?;
            let cancelled = set_state(&mut tx, r.id, ReservationState::Cancelled, None).await?;
            metrics::counter!("order_units_returned_total", "reason" => "cancelled").increment(1);
            CancelOutcome::Done(cancelled)
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

/// Which of `pass_ids` are on a reservation (through `reservations_pass_id_unique`).
pub async fn used_passes(pool: &PgPool, pass_ids: &[Uuid]) -> Result<Vec<Uuid>> {
    let used = sqlx::query_scalar(
        r#"
        SELECT pass_id
        FROM reservations
        WHERE pass_id = ANY($1)
        "#,
    )
    .bind(pass_ids)
    .fetch_all(pool)
    .await?;
    Ok(used)
}
