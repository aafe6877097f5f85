//! The invariants of DESIGN.md checked in PostgreSQL itself after a scenario: no unit sold
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

/// Invariant 2, system-wide: the sum of all balances equals the money ever deposited, no
/// debit is partly refunded, and the merchant holds exactly the price of the confirmed
/// orders (no money kept without an order, no order without money).
pub async fn check_money(report: &mut Report, scenario: &str, pool: &PgPool) -> Result<()> {
    let (balances, opened): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COALESCE(SUM(balance), 0)::BIGINT FROM account_service.balances),
                  (SELECT COALESCE(SUM(amount), 0)::BIGINT FROM account_service.transactions
                   WHERE kind = 'OPENING' AND status = 'APPLIED')"#,
    )
    .fetch_one(pool)
    .await?;
    report.invariant(
        scenario,
        "sum of balances unchanged",
        balances == opened,
        format!("sum of balances {balances}, deposited {opened}"),
    );
    let partial: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.transactions
           WHERE kind = 'DEBIT' AND status = 'APPLIED' AND refunded NOT IN (0, amount)"#,
    )
    .fetch_one(pool)
    .await?;
    report.invariant(
        scenario,
        "each payment nets 0 or its amount",
        partial == 0,
        format!("{partial} partly refunded debits"),
    );
    let (kept, ordered): (i64, i64) = sqlx::query_as(
        r#"SELECT (SELECT COALESCE(SUM(amount - refunded), 0)::BIGINT FROM account_service.transactions
                   WHERE kind = 'DEBIT' AND status = 'APPLIED'),
                  (SELECT COALESCE(SUM(price), 0)::BIGINT FROM order_service.orders WHERE state = 'CONFIRMED')"#,
    )
    .fetch_one(pool)
    .await?;
    report.invariant(
        scenario,
        "money kept = confirmed orders",
        kept == ordered,
        format!("debited net of refunds {kept}, confirmed orders worth {ordered}"),
    );
    Ok(())
}
