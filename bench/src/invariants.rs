//! The invariants (docs/ARCHITECTURE.md) checked in PostgreSQL after a scenario: no unit sold
//! twice or beyond stock, and money kept only for confirmed orders.

use sqlx::PgPool;

use crate::{error::Result, report::Report};

/// Invariant 1 for one product, and that the buyers' view (payments they saw COMPLETED)
/// matches the orders the order service confirmed.
pub async fn check_drop(
    report: &mut Report,
    scenario: &str,
    pool: &PgPool,
    product: i64,
    units: u64,
    completed_seen: u64,
) -> Result<()> {
    let (sold, reserved, total): (i64, i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE state = 'SOLD'),
                  COUNT(*) FILTER (WHERE state = 'RESERVED'),
                  COUNT(*)
           FROM order_service.product_stock WHERE product_id = $1"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    let (live, confirmed): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE state IN ('RESERVED', 'CONFIRMED')),
                  COUNT(*) FILTER (WHERE state = 'CONFIRMED')
           FROM order_service.reservations WHERE product_id = $1"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    let doubled: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM (
               SELECT unit_id FROM order_service.reservations
               WHERE product_id = $1 AND state IN ('RESERVED', 'CONFIRMED')
               GROUP BY unit_id HAVING COUNT(*) > 1
           ) AS d"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await?;
    let oversold = (live - units as i64).max(0) + (sold + reserved - total).max(0);
    report.invariant(
        scenario,
        "oversold = 0",
        oversold == 0 && total == units as i64,
        format!("units {total} (expected {units}), sold {sold}, reserved {reserved}, live reservations {live}; oversold {oversold}"),
    );
    report.invariant(
        scenario,
        "no unit in two live reservations",
        doubled == 0,
        format!("{doubled} units held twice"),
    );
    report.invariant(
        scenario,
        "COMPLETED seen by buyers = orders confirmed",
        confirmed as u64 == completed_seen && sold == confirmed,
        format!("buyers saw {completed_seen} COMPLETED; {confirmed} reservations confirmed; {sold} units SOLD"),
    );
    Ok(())
}

/// Every invariant of docs/ARCHITECTURE.md, system-wide, through `paysaga_drop`'s
/// checker (the same one the end-to-end and fault suites assert on).
pub async fn check_system(report: &mut Report, scenario: &str, pool: &PgPool) -> Result<()> {
    let r = paysaga_drop::invariants::check(pool)
        .await
        .map_err(|e| crate::error::Error::Setup(format!("invariant checker: {e:#}")))?;
    report.invariant(
        scenario,
        "system: oversold units = 0",
        r.oversold_units == 0 && r.units_in_two_live_reservations == 0 && r.unit_state_mismatches == 0,
        format!(
            "{} products, {} units: {} sold, {} reserved; oversold {}, held twice {}, state mismatches {}",
            r.products,
            r.units_total,
            r.units_sold,
            r.units_reserved,
            r.oversold_units,
            r.units_in_two_live_reservations,
            r.unit_state_mismatches
        ),
    );
    report.invariant(
        scenario,
        "system: money invariant",
        r.balance_drift == 0
            && r.ledger_mismatches == 0
            && r.operation_keys_applied_twice == 0
            && r.payments_bad_net == 0
            && r.completed_not_debited_or_confirmed == 0
            && r.closed_payments_keeping_money == 0
            && r.reservations_charged_twice == 0
            && r.orders_without_completed_payment == 0,
        format!(
            "balances {} = deposits {} (drift {}); {} moved to the merchant; {} payments: {} COMPLETED, {} FAILED, {} REFUNDED",
            r.balance_total,
            r.deposits_total,
            r.balance_drift,
            r.money_moved,
            r.payments,
            r.payments_completed,
            r.payments_failed,
            r.payments_refunded
        ),
    );
    let v = r.violations();
    report.invariant(
        scenario,
        "system: every invariant (e2e checker), every payment terminal",
        v.is_empty(),
        if v.is_empty() {
            "no violation".to_owned()
        } else {
            v.join("; ")
        },
    );
    Ok(())
}
