//! What became of one product's units and of its waitlist, read from PostgreSQL: units
//! sold of units on sale, sales through an offer, offers by state, failed payments, and
//! how long a unit that came back took to be paid for by the next waiter.
//!
//! The clock of a return starts at the offer's `created_at`: a returned unit is offered
//! to the head of the line by a trigger in the very transaction that returns it, so the
//! offer's creation is the unit's return. It stops at the payment's step into
//! `COMPLETED`. A unit whose first taker cannot pay comes back again and starts a new
//! clock with its next offer; [`SellThrough::unit_return_to_completed`] measures the
//! whole way instead, from a sold unit's first offer.

use anyhow::Context;
use sqlx::{PgPool, Row};

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
    /// Per offer that ended in a COMPLETED payment: from the offer (the unit's return)
    /// to that payment's COMPLETED.
    pub return_to_completed: Latency,
    /// Per unit sold through an offer: from its first offer to its COMPLETED sale,
    /// through any offers whose taker could not pay.
    pub unit_return_to_completed: Latency,
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
    let row = sqlx::query(
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
    .bind(product_id)
    .fetch_one(pool)
    .await
    .context("reading the product's units")?;
    s.units_total = row.try_get("total")?;
    s.units_sold = row.try_get("sold")?;
    s.units_available = row.try_get("available")?;
    s.units_reserved = row.try_get("reserved")?;
    s.units_offered = row.try_get("offered")?;

    let row = sqlx::query(
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
    .bind(product_id)
    .fetch_one(pool)
    .await
    .context("reading the product's waitlist")?;
    s.entries = row.try_get("entries")?;
    s.entries_waiting = row.try_get("waiting")?;
    s.offers_made = row.try_get("made")?;
    s.offers_taken = row.try_get("taken")?;
    s.offers_expired = row.try_get("expired")?;
    s.offers_released = row.try_get("released")?;
    s.offers_live = row.try_get("live")?;
    s.sold_via_waitlist = row.try_get("sold_via_waitlist")?;

    let row = sqlx::query(
        r#"
        SELECT COUNT(*) FILTER (WHERE p.state = 'COMPLETED') AS completed,
               COUNT(*) FILTER (WHERE p.state = 'FAILED') AS failed,
               COUNT(*) FILTER (WHERE p.state = 'REFUNDED') AS refunded
        FROM payment_service.payments AS p
        JOIN order_service.reservations AS r ON r.id = p.reservation_id
        WHERE r.product_id = $1
        "#,
    )
    .bind(product_id)
    .fetch_one(pool)
    .await
    .context("reading the product's payments")?;
    s.payments_completed = row.try_get("completed")?;
    s.payments_failed = row.try_get("failed")?;
    s.payments_refunded = row.try_get("refunded")?;

    // (offer made, first offer of its unit, payment COMPLETED) per sale through an offer.
    let rows = sqlx::query(
        r#"
        SELECT (EXTRACT(EPOCH FROM (done.at - o.created_at)) * 1000000)::BIGINT AS from_offer,
               (EXTRACT(EPOCH FROM (done.at - first.at)) * 1000000)::BIGINT AS from_first
        FROM order_service.waitlist_offers AS o
        JOIN order_service.reservations AS r ON r.offer_id = o.id
        JOIN payment_service.payments AS p ON p.reservation_id = r.id AND p.state = 'COMPLETED'
        CROSS JOIN LATERAL (
            SELECT MIN(st.created_at) AS at
            FROM payment_service.payment_steps AS st
            WHERE st.payment_id = p.id AND st.to_state = 'COMPLETED'
        ) AS done
        CROSS JOIN LATERAL (
            SELECT MIN(f.created_at) AS at
            FROM order_service.waitlist_offers AS f
            WHERE f.unit_id = o.unit_id
        ) AS first
        WHERE o.product_id = $1 AND done.at IS NOT NULL
        "#,
    )
    .bind(product_id)
    .fetch_all(pool)
    .await
    .context("timing returns to sales")?;
    let micros = |name: &str| -> anyhow::Result<Vec<std::time::Duration>> {
        rows.iter()
            .map(|r| {
                let us: i64 = r.try_get(name)?;
                Ok(std::time::Duration::from_micros(
                    u64::try_from(us).unwrap_or(0),
                ))
            })
            .collect()
    };
    s.return_to_completed = Latency::of_durations(&micros("from_offer")?);
    s.unit_return_to_completed = Latency::of_durations(&micros("from_first")?);
    Ok(s)
}
