//! The gate's promises: how many of a product's AVAILABLE units are promised to passes
//! in flight. The gate reports them at every quota recompute and before its first
//! `SOLD_OUT` of a product; the units it no longer promises (a pass expired, or its
//! holder could not pay) go to the head of the waitlist in the same transaction, before
//! the gate's quota can count them again. The rule itself ("units free" = AVAILABLE
//! beyond the promised) is the `gate_promises` migration's `units_free`, which the join,
//! the handoff and the catch-up all read.

use sqlx::PgPool;

use crate::{error::Result, waitlist::count_offers_made};

/// What the product looks like after a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// AVAILABLE units (promised or free) after the handoff.
    pub available: i64,
    /// Members still waiting.
    pub waiting: i64,
    /// Offers the report made.
    pub offered: i64,
}

/// Records `in_flight` passes of `product_id` and hands the units they do not cover to
/// the line. `None` when the product does not exist.
#[tracing::instrument(skip_all, fields(product_id, in_flight))]
pub async fn report(pool: &PgPool, product_id: i64, in_flight: i64) -> Result<Option<Reported>> {
    let mut tx = pool.begin().await?;
    let exists: Option<i64> =
        sqlx::query_scalar(r#"SELECT id FROM products WHERE id = $1 FOR KEY SHARE"#)
            .bind(product_id)
            .fetch_optional(&mut *tx)
            .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let offered: i32 = sqlx::query_scalar(r#"SELECT gate_report_promises($1, $2)"#)
        .bind(product_id)
        .bind(in_flight.max(0))
        .fetch_one(&mut *tx)
        .await?;
    // A statement of its own: one statement reads one snapshot, which would not show
    // the units the report just offered.
    let (available, waiting): (i64, i64) = sqlx::query_as(
        r#"
        SELECT (SELECT COUNT(*) FROM product_stock s
                WHERE s.product_id = $1 AND s.state = 'AVAILABLE') AS available,
               (SELECT COUNT(*) FROM waitlist_entries w
                WHERE w.product_id = $1 AND w.state = 'WAITING') AS waiting
        "#,
    )
    .bind(product_id)
    .fetch_one(&mut *tx)
    .await?;
    let reported = Reported {
        available,
        waiting,
        offered: i64::from(offered),
    };
    tx.commit().await?;
    count_offers_made(reported.offered);
    if reported.offered > 0 {
        tracing::info!(
            product_id,
            offers = reported.offered,
            "units no longer promised to passes offered to the waitlist"
        );
    }
    Ok(Some(reported))
}
