//! The FIFO waitlist: joining, reading and leaving a product's line, taking an offered
//! unit as a reservation, and the offer sweep. The handoff itself (a returned unit
//! offered to the head of the line) is PostgreSQL's, in the returning transaction (see
//! the `waitlist` migration); this module never moves a unit to OFFERED by hand.
//!
//! Lock order, on top of the reservations' (a reservation before its unit): a waitlist
//! entry before its offer before the offered unit. An offer and an OFFERED unit are only
//! changed by whoever holds the entry's lock; the handoff takes entries with `SKIP
//! LOCKED` and never waits for one, so it cannot close a cycle with them.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use paysaga_common::auth::MemberId;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::{
    api::{hold_key, OfferState, Reservation, WaitlistEntry, WaitlistOffer, WaitlistState},
    breach::{Breach, Holder},
    error::{Error, Result},
    funds::{Funded, Held, Source},
    reservations::{self, ReservationRow},
    states::{Text, UnitState},
    AppState,
};

/// Counts offers made by units coming back (the handoff turns a unit that was put back
/// on sale into `OFFERED` in the same row version; the returning statement counts the
/// units it left `OFFERED`).
pub(crate) fn count_offers_made(made: i64) {
    if let Ok(made @ 1..) = u64::try_from(made) {
        metrics::counter!("order_waitlist_offers_total", "outcome" => "made").increment(made);
    }
}

#[derive(sqlx::FromRow)]
struct EntryRow {
    id: Uuid,
    product_id: i64,
    #[sqlx(try_from = "String")]
    member_id: MemberId,
    state: Text<WaitlistState>,
    position: Option<i64>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    offer_id: Option<Uuid>,
    unit_id: Option<i64>,
    offer_state: Option<Text<OfferState>>,
    offer_expires_at: Option<DateTime<Utc>>,
    reservation_id: Option<Uuid>,
}

impl From<EntryRow> for WaitlistEntry {
    fn from(r: EntryRow) -> Self {
        let offer = match (r.offer_id, r.unit_id, r.offer_state, r.offer_expires_at) {
            (Some(offer_id), Some(unit_id), Some(Text(state)), Some(expires_at)) => {
                Some(WaitlistOffer {
                    offer_id,
                    unit_id,
                    state,
                    expires_at,
                    reservation_id: r.reservation_id,
                })
            }
            _ => None,
        };
        WaitlistEntry {
            id: r.id,
            product_id: r.product_id,
            member_id: r.member_id,
            state: r.state.0,
            position: r.position,
            offer,
            joined_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// The member's latest entry of the product (the live one if any, since a member has at
/// most one and it is the newest), with its position while waiting and its offer.
async fn latest(
    conn: &mut sqlx::PgConnection,
    product_id: i64,
    member: &MemberId,
) -> Result<Option<WaitlistEntry>> {
    let row = sqlx::query_as::<_, EntryRow>(
        r#"
        SELECT e.id, e.product_id, e.member_id, e.state, e.created_at, e.updated_at,
               CASE WHEN e.state = 'WAITING' THEN (
                   SELECT COUNT(*) FROM waitlist_entries w
                   WHERE w.product_id = e.product_id AND w.state = 'WAITING' AND w.seq <= e.seq)
               END AS position,
               o.id AS offer_id, o.unit_id, o.state AS offer_state, o.expires_at AS offer_expires_at,
               r.id AS reservation_id
        FROM waitlist_entries e
        LEFT JOIN waitlist_offers o ON o.entry_id = e.id
        LEFT JOIN reservations r ON r.offer_id = o.id
        WHERE e.product_id = $1 AND e.member_id = $2
        ORDER BY e.seq DESC
        LIMIT 1
        "#,
    )
    .bind(product_id)
    .bind(member.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(WaitlistEntry::from))
}

/// `GET /v1/products/{id}/waitlist/me`.
pub async fn entry(
    pool: &PgPool,
    product_id: i64,
    member: &MemberId,
) -> Result<Option<WaitlistEntry>> {
    let mut conn = pool.acquire().await?;
    latest(&mut conn, product_id, member).await
}

/// What a join needs from the service's settings, kept with the entry.
pub struct JoinRequest<'a> {
    pub product_id: i64,
    pub member: &'a MemberId,
    pub cap: i64,
    pub offer_ttl: Duration,
}

pub enum Joined {
    /// A new entry (201).
    Created(WaitlistEntry),
    /// The member's live entry, unchanged (200).
    Existing(WaitlistEntry),
}

/// What a join is judged on. "Sold out for joining" is the gate's "sold out": no unit
/// free (every AVAILABLE unit promised to a pass in flight, by the gate's report).
#[derive(sqlx::FromRow)]
struct JoinCheck {
    /// Units free for a new buyer: AVAILABLE beyond the gate's passes in flight.
    available: bool,
    mine: i64,
}

/// Joins the product's line, or finds the member already in it. Under the product's
/// waitlist lock (exclusive; every handoff shares it), so no return of a unit can slip
/// between "nothing is AVAILABLE" and the entry becoming visible: either the return
/// commits first and the join sees its unit, or the join commits first and the return
/// offers the unit to the line.
#[tracing::instrument(skip_all, fields(product_id = req.product_id))]
pub async fn join(pool: &PgPool, req: &JoinRequest<'_>) -> Result<Joined> {
    // First without the lock: in a crowd many joins are refused (units still on sale)
    // or find the member already in line, and answering those under the
    // product's exclusive lock made every join wait for every other, each holding a
    // pooled connection that claims and confirms then lacked. A refusal read a moment
    // early is as good as one read under the lock (the buyer asks again); only a join
    // that would insert takes the lock and checks again.
    let mut conn = pool.acquire().await?;
    if let Some(answer) = judge(&mut conn, req).await? {
        return answer;
    }
    drop(conn);
    let mut tx = pool.begin().await?;
    sqlx::query(r#"SELECT waitlist_lock($1, TRUE)"#)
        .bind(req.product_id)
        .execute(&mut *tx)
        .await?;
    if let Some(answer) = judge(&mut tx, req).await? {
        return answer;
    }
    // Stamped when written, under the lock, not when the transaction began: a unit that
    // came back before the join took the lock came back before the member waited (the
    // fairness checks compare these times).
    sqlx::query(
        r#"
        INSERT INTO waitlist_entries (id, product_id, member_id, purchase_cap, offer_ttl_secs, created_at)
        VALUES ($1, $2, $3, $4, $5, clock_timestamp())
        "#,
    )
    .bind(Uuid::now_v7())
    .bind(req.product_id)
    .bind(req.member.as_str())
    .bind(req.cap)
    .bind(i32::try_from(req.offer_ttl.as_secs().max(1)).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?;
    let created = latest(&mut tx, req.product_id, req.member)
        .await?
        .ok_or_else(|| {
            Error::Invariant(Breach::missing("new waitlist entry of member", req.member))
        })?;
    tx.commit().await?;
    metrics::counter!("order_waitlist_joins_total").increment(1);
    Ok(Joined::Created(created))
}

/// The answer to a join that does not insert: the member's live entry, or a refusal.
/// `None`: the member may join.
async fn judge(
    conn: &mut sqlx::PgConnection,
    req: &JoinRequest<'_>,
) -> Result<Option<Result<Joined>>> {
    let check = sqlx::query_as::<_, JoinCheck>(
        r#"
        SELECT units_free(p.id) > 0 AS available,
               (SELECT COUNT(*) FROM reservations r
                WHERE r.product_id = p.id AND r.member_id = $2
                  AND r.state IN ('RESERVED', 'CONFIRMED')) AS mine
        FROM products p
        WHERE p.id = $1
        "#,
    )
    .bind(req.product_id)
    .bind(req.member.as_str())
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::ProductNotFound(req.product_id))?;
    if let Some(existing) = latest(conn, req.product_id, req.member).await? {
        if matches!(
            existing.state,
            WaitlistState::Waiting | WaitlistState::Offered
        ) {
            return Ok(Some(Ok(Joined::Existing(existing))));
        }
    }
    if check.mine >= req.cap {
        return Ok(Some(Err(Error::MemberLimit)));
    }
    // Nothing on sale: the member may wait, even with every unit paid for, since a
    // refund or a cancellation brings a unit back to the head of the line. (Refusing
    // then would tell a buyer the gate had just answered SOLD_OUT that there is no
    // line, and leave a returned unit to whoever asks the gate first.)
    if check.available {
        return Ok(Some(Err(Error::NotSoldOut)));
    }
    Ok(None)
}

/// Leaves the line. An offer the member holds is released and its unit passes on (to
/// the next in line, or back on sale) in the same transaction. `None`: no live entry.
#[tracing::instrument(skip_all, fields(product_id))]
pub async fn leave(
    pool: &PgPool,
    product_id: i64,
    member: &MemberId,
) -> Result<Option<WaitlistEntry>> {
    let mut tx = pool.begin().await?;
    let live: Option<(Uuid, Text<WaitlistState>)> = sqlx::query_as(
        r#"
        SELECT id, state
        FROM waitlist_entries
        WHERE product_id = $1 AND member_id = $2 AND state IN ('WAITING', 'OFFERED')
        FOR UPDATE
        "#,
    )
    .bind(product_id)
    .bind(member.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some((entry_id, Text(state))) = live else {
        return Ok(None);
    };
    if state == WaitlistState::Offered {
        let unit: i64 = sqlx::query_scalar(
            r#"
            UPDATE waitlist_offers
            SET state = 'RELEASED', updated_at = now()
            WHERE entry_id = $1 AND state = 'OFFERED'
            RETURNING unit_id
            "#,
        )
        .bind(entry_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            Error::Invariant(Breach::missing("live offer of waitlist entry", entry_id))
        })?;
        pass_on(&mut tx, &[unit]).await?;
        metrics::counter!("order_waitlist_offers_total", "outcome" => "released").increment(1);
    }
    sqlx::query(r#"UPDATE waitlist_entries SET state = 'LEFT', updated_at = now() WHERE id = $1"#)
        .bind(entry_id)
        .execute(&mut *tx)
        .await?;
    let left = latest(&mut tx, product_id, member).await?;
    tx.commit().await?;
    Ok(left)
}

/// Puts offered units back on sale, which hands each to the next in line (the
/// migration's trigger) or leaves it AVAILABLE. Every unit must have been OFFERED.
async fn pass_on(tx: &mut Transaction<'_, Postgres>, units: &[i64]) -> Result<()> {
    let states: Vec<Text<UnitState>> = sqlx::query_scalar(
        r#"
        UPDATE product_stock
        SET state = 'AVAILABLE', updated_at = now()
        WHERE id = ANY($1) AND state = 'OFFERED'
        RETURNING state
        "#,
    )
    .bind(units)
    .fetch_all(&mut **tx)
    .await?;
    Breach::check_count(
        "pass on",
        "offered units put back on sale",
        units.len(),
        states.len(),
    )
    .map_err(Error::Invariant)?;
    count_offers_made(states.iter().filter(|s| s.0 == UnitState::Offered).count() as i64);
    Ok(())
}

#[derive(sqlx::FromRow)]
struct LockedOffer {
    entry_id: Uuid,
    member_id: String,
    product_id: i64,
    unit_id: i64,
    state: Text<OfferState>,
    due: bool,
}

pub enum Take {
    /// The unit is the member's reservation (201).
    Created(Reservation),
    /// Taken before: the same reservation (200).
    Taken(Reservation),
}

/// What taking an offer needs from the service's settings.
pub struct TakeRequest<'a> {
    pub offer_id: Uuid,
    pub member: &'a MemberId,
    /// The service's reservation hold time, for a product without its own.
    pub ttl: Duration,
    pub cap: i64,
}

/// The offered unit becomes the member's reservation, at the price and hold time of a
/// claim, no gate pass (the offer stands in for it), and, like a claim, only once the
/// price is held on the member's account ([`crate::funds`]): a member who cannot pay is
/// refused and the offer stays theirs until its deadline. The purchase cap and the
/// one-live-reservation rule hold as for a claim. An offer past its deadline is
/// expired here and now (its unit passes on) and refused.
#[tracing::instrument(skip_all, fields(offer_id = %req.offer_id))]
pub async fn take(state: &AppState, req: &TakeRequest<'_>) -> Result<Take> {
    let pool = &state.pool;
    // Read first, without a lock: whose offer it is, and of which product.
    let offer: Option<(String, i64, Text<OfferState>)> =
        sqlx::query_as(r#"SELECT member_id, product_id, state FROM waitlist_offers WHERE id = $1"#)
            .bind(req.offer_id)
            .fetch_optional(pool)
            .await?;
    let Some((owner, product_id, Text(state_now))) = offer else {
        return Err(Error::OfferNotFound);
    };
    if owner != req.member.as_str() {
        return Err(Error::OfferNotFound);
    }
    let source = Source::Offer(req.offer_id);
    if state_now != OfferState::Offered {
        // Nothing to hold: the transaction answers (taken before, expired, released).
        return take_held(pool, req, None).await;
    }
    let terms = state
        .terms
        .get(pool, product_id)
        .await?
        .ok_or(Error::ProductNotFound(product_id))?;
    let held = match state
        .funds
        .hold_for(pool, source, req.member, terms.price, terms.ttl(req.ttl))
        .await?
    {
        Funded::Held(held) => held,
        Funded::Reserved(r) => return Ok(Take::Taken(r)),
    };
    let key = hold_key(held.reservation_id);
    let taken = take_held(pool, req, Some(&held)).await;
    match &taken {
        Ok(Take::Created(_)) => {}
        Ok(Take::Taken(r)) if r.id == held.reservation_id => {}
        Ok(Take::Taken(_)) | Err(_) => state.funds.abandon(&key).await,
    }
    taken
}

/// The take itself, in one transaction, funded by `held` (`None`: answers only an offer
/// no longer on offer).
async fn take_held(pool: &PgPool, req: &TakeRequest<'_>, held: Option<&Held>) -> Result<Take> {
    let mut tx = pool.begin().await?;
    // The entry first (the lock order), then the offer.
    let entry: Option<Uuid> = sqlx::query_scalar(
        r#"
        SELECT e.id
        FROM waitlist_entries e
        JOIN waitlist_offers o ON o.entry_id = e.id
        WHERE o.id = $1
        FOR UPDATE OF e
        "#,
    )
    .bind(req.offer_id)
    .fetch_optional(&mut *tx)
    .await?;
    if entry.is_none() {
        return Err(Error::OfferNotFound);
    }
    let offer = sqlx::query_as::<_, LockedOffer>(
        r#"
        SELECT entry_id, member_id, product_id, unit_id, state,
               expires_at <= clock_timestamp() AS due
        FROM waitlist_offers
        WHERE id = $1
        FOR UPDATE
        "#,
    )
    .bind(req.offer_id)
    .fetch_one(&mut *tx)
    .await?;
    if offer.member_id != req.member.as_str() {
        return Err(Error::OfferNotFound);
    }
    match offer.state.0 {
        OfferState::Taken => {
            let r = reservations::by_offer(&mut tx, req.offer_id)
                .await?
                .ok_or_else(|| {
                    Error::Invariant(Breach::missing("reservation of taken offer", req.offer_id))
                })?;
            return Ok(Take::Taken(r));
        }
        OfferState::Expired => return Err(Error::OfferExpired),
        OfferState::Released => return Err(Error::OfferReleased),
        OfferState::Offered => {}
    }
    if offer.due {
        expire_offers(&mut tx, &[req.offer_id]).await?;
        tx.commit().await?;
        return Err(Error::OfferExpired);
    }
    let Some(held) = held else {
        // On offer again since it was read: the caller holds nothing for it yet.
        return Err(Error::ClaimTooLate);
    };
    let mine: i64 = sqlx::query_scalar(
        r#"
        SELECT COUNT(*)
        FROM reservations
        WHERE product_id = $1 AND member_id = $2 AND state IN ('RESERVED', 'CONFIRMED')
        "#,
    )
    .bind(offer.product_id)
    .bind(req.member.as_str())
    .fetch_one(&mut *tx)
    .await?;
    if mine >= req.cap {
        return Err(Error::MemberLimit);
    }
    let moved = sqlx::query(
        r#"
        UPDATE product_stock
        SET state = 'RESERVED', updated_at = now()
        WHERE id = $1 AND state = 'OFFERED'
        "#,
    )
    .bind(offer.unit_id)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if moved != 1 {
        return Err(Error::Invariant(Breach::Unit {
            unit_id: offer.unit_id,
            holder: Some(Holder::Offer(req.offer_id)),
            expected: UnitState::Offered,
            found: None,
        }));
    }
    // The reservation takes its hold's id and deadline, and is made only within the
    // window its hold allows (by this database's clock, as a claim's).
    let row = sqlx::query_as::<_, ReservationRow>(
        r#"
        INSERT INTO reservations (id, product_id, unit_id, member_id, offer_id, price, state, expires_at,
                                  account_id)
        SELECT $1, p.id, $3, $4, $5, p.price, 'RESERVED', $6, $8
        FROM products p
        WHERE p.id = $2 AND clock_timestamp() < $7
        RETURNING id, product_id, member_id, unit_id, price, state, expires_at, order_id, account_id,
                  created_at, updated_at
        "#,
    )
    .bind(held.reservation_id)
    .bind(offer.product_id)
    .bind(offer.unit_id)
    .bind(req.member.as_str())
    .bind(req.offer_id)
    .bind(held.hold.expires_at)
    .bind(held.claim_by)
    .bind(held.hold.account_id)
    .fetch_optional(&mut *tx)
    .await;
    let row = match row {
        Ok(Some(row)) => row,
        Ok(None) => return Err(Error::ClaimTooLate),
        // A live reservation of the product is already the member's (a claim with a
        // pass, committed since the count above or allowed by a cap above one).
        Err(sqlx::Error::Database(e))
            if e.constraint() == Some("reservations_one_live_per_member") =>
        {
            return Err(Error::MemberLimit)
        }
        Err(e) => return Err(e.into()),
    };
    sqlx::query(r#"UPDATE waitlist_offers SET state = 'TAKEN', updated_at = now() WHERE id = $1"#)
        .bind(req.offer_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(r#"UPDATE waitlist_entries SET state = 'TAKEN', updated_at = now() WHERE id = $1"#)
        .bind(offer.entry_id)
        .execute(&mut *tx)
        .await?;
    let reservation = Reservation::from(row);
    tx.commit().await?;
    metrics::counter!("order_waitlist_offers_total", "outcome" => "taken").increment(1);
    metrics::counter!("order_reservations_total", "outcome" => "offer_taken").increment(1);
    Ok(Take::Created(reservation))
}

/// Expires live offers whose entries the caller holds locked: offers and entries
/// EXPIRED (the offer's trigger writes `waitlist.offer_expired`), then their units
/// passed on.
async fn expire_offers(tx: &mut Transaction<'_, Postgres>, offers: &[Uuid]) -> Result<u64> {
    let units: Vec<i64> = sqlx::query_scalar(
        r#"
        WITH expired AS (
            UPDATE waitlist_offers
            SET state = 'EXPIRED', updated_at = now()
            WHERE id = ANY($1) AND state = 'OFFERED'
            RETURNING entry_id, unit_id
        ), entries AS (
            UPDATE waitlist_entries e
            SET state = 'EXPIRED', updated_at = now()
            FROM expired x
            WHERE e.id = x.entry_id AND e.state = 'OFFERED'
            RETURNING e.id
        )
        SELECT x.unit_id
        FROM expired x
        WHERE (SELECT COUNT(*) FROM entries) = (SELECT COUNT(*) FROM expired)
        "#,
    )
    .bind(offers)
    .fetch_all(&mut **tx)
    .await?;
    Breach::check_count(
        "expire offers",
        "due offers expired with their entries",
        offers.len(),
        units.len(),
    )
    .map_err(Error::Invariant)?;
    pass_on(tx, &units).await?;
    let n = units.len() as u64;
    metrics::counter!("order_waitlist_offers_total", "outcome" => "expired").increment(n);
    Ok(n)
}

/// Expires up to `batch` offers past their deadline in one transaction; returns how
/// many. Entries are taken with `SKIP LOCKED`: an offer being taken or released right
/// now, or swept by another instance, is left to them.
#[tracing::instrument(skip_all, fields(batch))]
pub async fn expire_batch(pool: &PgPool, batch: i64) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let due: Vec<Uuid> = sqlx::query_scalar(
        r#"
        SELECT o.id
        FROM waitlist_offers o
        JOIN waitlist_entries e ON e.id = o.entry_id
        WHERE o.state = 'OFFERED' AND o.expires_at <= now() AND e.state = 'OFFERED'
        ORDER BY o.expires_at
        LIMIT $1
        FOR UPDATE OF e SKIP LOCKED
        "#,
    )
    .bind(batch)
    .fetch_all(&mut *tx)
    .await?;
    if due.is_empty() {
        return Ok(0);
    }
    let n = expire_offers(&mut tx, &due).await?;
    tx.commit().await?;
    Ok(n)
}

/// Offers AVAILABLE units of products with someone waiting (the migration's
/// `waitlist_catch_up`); returns the offers made. Normally none: the handoff happens
/// as units come back; this is the net under any path that leaves a unit on sale while
/// someone waits.
pub async fn catch_up(pool: &PgPool) -> Result<u64> {
    let made: i32 = sqlx::query_scalar(r#"SELECT waitlist_catch_up()"#)
        .fetch_one(pool)
        .await?;
    count_offers_made(i64::from(made));
    if made > 0 {
        tracing::info!(offers = made, "waiters caught up with units on sale");
    }
    Ok(u64::try_from(made).unwrap_or(0))
}

/// One offer sweep run: due offers in batches (at most `max_batches`), then the
/// catch-up, then the waiting gauge.
pub async fn sweep(pool: &PgPool, batch: i64, max_batches: u32) -> Result<u64> {
    let start = Instant::now();
    let total =
        paysaga_common::jobs::in_batches(batch, max_batches, || expire_batch(pool, batch)).await?;
    catch_up(pool).await?;
    let waiting: i64 =
        sqlx::query_scalar(r#"SELECT COUNT(*) FROM waitlist_entries WHERE state = 'WAITING'"#)
            .fetch_one(pool)
            .await?;
    metrics::gauge!("order_waitlist_waiting").set(waiting as f64);
    metrics::histogram!("order_offer_sweep_seconds").record(start.elapsed().as_secs_f64());
    if total > 0 {
        tracing::info!(offers_expired = total, "expired offers swept");
    }
    Ok(total)
}
