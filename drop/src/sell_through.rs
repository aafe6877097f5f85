//! What became of one product's units and of its waitlist, read from PostgreSQL: units
//! sold of units on sale, sales through an offer, offers by state, failed payments, and
//! how long a unit that came back took to be paid for by the next buyer.
//!
//! A unit comes back when a reservation of it ends unpaid (CANCELLED, e.g. its payment
//! failed, or EXPIRED): the clock starts at that reservation's `updated_at`. With
//! someone waiting, the unit is offered to the head of the line by a trigger in that
//! same transaction, so the offer's `created_at` is the same instant. The next
//! reservation of the unit is the next buyer's (taken from the offer, or made with a
//! pass once the unit was back on sale); the clock stops at its payment's step into
//! `COMPLETED`. If that buyer cannot pay, the unit comes back again and the next return
//! starts a new clock, so each unit sold after a return counts once, from its last
//! return.

use anyhow::Context;
use sqlx::{PgPool, Row};

use crate::invariants::counts;
use crate::stats::Latency;

/// One product's sell-through.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SellThrough {
    pub units_total: i64,
    pub units_sold: i64,
    pub units_available: i64,
    pub units_reserved: i64,
    pub units_offered: i64,
    /// Units sold through a reservation taken from an offer.
    pub sold_via_waitlist: i64,
    /// Waitlist entries ever made for the product, and those still WAITING.
    pub entries: i64,
    pub entries_waiting: i64,
    /// Offers by state.
    pub offers_made: i64,
    pub offers_taken: i64,
    pub offers_expired: i64,
    pub offers_released: i64,
    pub offers_live: i64,
    /// The product's payments by final state.
    pub payments_completed: i64,
    pub payments_failed: i64,
    pub payments_refunded: i64,
    /// Units that came back (reservations of the product ended unpaid).
    pub returns: i64,
    /// Returns whose next reservation was taken from a waitlist offer, and those whose
    /// next reservation was made with a pass (the unit was back on sale).
    pub returns_next_via_offer: i64,
    pub returns_next_on_sale: i64,
    /// Per unit sold after a return: from its last return to the next buyer's
    /// COMPLETED, however that buyer got it.
    pub return_to_completed: Latency,
    /// The same, for the units the next buyer took from a waitlist offer.
    pub return_to_completed_via_offer: Latency,
}

impl SellThrough {
    /// Units neither sold nor held at the end: on sale or on offer.
    pub fn units_unsold(&self) -> i64 {
        self.units_available + self.units_offered
    }
}

/// Reads `product_id`'s sell-through. `pool` is an administrator's pool on the system's
/// database (it reads `order_service` and `payment_service`).
pub async fn read(pool: &PgPool, product_id: i64) -> anyhow::Result<SellThrough> {
    let mut s = SellThrough::default();
    [
        s.units_total,
        s.units_sold,
        s.units_available,
        s.units_reserved,
        s.units_offered,
    ] = counts(
        pool,
        sqlx::query(
            r#"
        SELECT COUNT(*) AS total,
               COUNT(*) FILTER (WHERE state = 'SOLD') AS sold,
               COUNT(*) FILTER (WHERE state = 'AVAILABLE') AS available,
               COUNT(*) FILTER (WHERE state = 'RESERVED') AS reserved,
               COUNT(*) FILTER (WHERE state = 'OFFERED') AS offered
        FROM order_service.product_stock
        WHERE product_id = $1
        "#,
        )
        .bind(product_id),
        "reading the product's units",
    )
    .await?;

    [s.entries, s.entries_waiting, s.offers_made, s.offers_taken, s.offers_expired, s.offers_released, s.offers_live, s.sold_via_waitlist] = counts(
        pool,
        sqlx::query(
        r#"
        SELECT (SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1) AS entries,
               (SELECT COUNT(*) FROM order_service.waitlist_entries
                WHERE product_id = $1 AND state = 'WAITING') AS waiting,
               COUNT(*) AS made,
               COUNT(*) FILTER (WHERE o.state = 'TAKEN') AS taken,
               COUNT(*) FILTER (WHERE o.state = 'EXPIRED') AS expired,
               COUNT(*) FILTER (WHERE o.state = 'RELEASED') AS released,
               COUNT(*) FILTER (WHERE o.state = 'OFFERED') AS live,
               COUNT(*) FILTER (WHERE r.state = 'CONFIRMED') AS sold_via_waitlist
        FROM order_service.waitlist_offers AS o
        LEFT JOIN order_service.reservations AS r ON r.offer_id = o.id
        WHERE o.product_id = $1
        "#,
    )
    .bind(product_id),
        "reading the product's waitlist",
    )
    .await?;

    [s.payments_completed, s.payments_failed, s.payments_refunded] = counts(
        pool,
        sqlx::query(
            r#"
        SELECT COUNT(*) FILTER (WHERE p.state = 'COMPLETED') AS completed,
               COUNT(*) FILTER (WHERE p.state = 'FAILED') AS failed,
               COUNT(*) FILTER (WHERE p.state = 'REFUNDED') AS refunded
        FROM payment_service.payments AS p
        JOIN order_service.reservations AS r ON r.id = p.reservation_id
        WHERE r.product_id = $1
        "#,
        )
        .bind(product_id),
        "reading the product's payments",
    )
    .await?;

    // Per return: the unit's next reservation, and when its payment COMPLETED if it did.
    let rows = sqlx::query(
        r#"
        SELECT CASE WHEN nxt.id IS NOT NULL THEN nxt.offer_id IS NOT NULL END AS via_offer,
               (EXTRACT(EPOCH FROM (done.at - e.updated_at)) * 1000000)::BIGINT AS micros
        FROM order_service.reservations AS e
        LEFT JOIN LATERAL (
            SELECT n.id, n.offer_id
            FROM order_service.reservations AS n
            WHERE n.unit_id = e.unit_id AND n.created_at > e.created_at
            ORDER BY n.created_at
            LIMIT 1
        ) AS nxt ON TRUE
        LEFT JOIN payment_service.payments AS p
            ON p.reservation_id = nxt.id AND p.state = 'COMPLETED'
        LEFT JOIN LATERAL (
            SELECT MIN(st.created_at) AS at
            FROM payment_service.payment_steps AS st
            WHERE st.payment_id = p.id AND st.to_state = 'COMPLETED'
        ) AS done ON TRUE
        WHERE e.product_id = $1 AND e.state IN ('CANCELLED', 'EXPIRED')
        "#,
    )
    .bind(product_id)
    .fetch_all(pool)
    .await
    .context("timing returns to sales")?;
    let (mut all, mut via_offer) = (Vec::new(), Vec::new());
    for row in &rows {
        s.returns += 1;
        let offered: Option<bool> = row.try_get("via_offer")?;
        match offered {
            Some(true) => s.returns_next_via_offer += 1,
            Some(false) => s.returns_next_on_sale += 1,
            None => {}
        }
        let micros: Option<i64> = row.try_get("micros")?;
        if let Some(us) = micros {
            let d = std::time::Duration::from_micros(u64::try_from(us).unwrap_or(0));
            all.push(d);
            if offered == Some(true) {
                via_offer.push(d);
            }
        }
    }
    s.return_to_completed = Latency::of_durations(&all);
    s.return_to_completed_via_offer = Latency::of_durations(&via_offer);
    Ok(s)
}
