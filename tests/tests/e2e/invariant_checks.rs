//! The invariant checker catches what it claims to: after a clean drop it reports no
//! violation, and each deliberate corruption of the tables (written as an administrator,
//! then undone) shows up in the count meant for it.

use std::time::Duration;

use paysaga_e2e::{invariants, tamper, Driver, Outcome, Stack, StackOptions};
use sqlx::PgPool;
use uuid::Uuid;

/// The checker's report on the tables with `corrupt` applied, read before `undo` puts
/// them back (both written past the database's own guards: `tamper`).
async fn corrupted(
    pool: &PgPool,
    corrupt: &[String],
    undo: &[String],
) -> anyhow::Result<invariants::InvariantReport> {
    tamper(pool, corrupt).await?;
    let report = invariants::check(pool).await?;
    tamper(pool, undo).await?;
    Ok(report)
}

fn drop_transaction(operation_key: &str) -> String {
    format!("DELETE FROM account_service.transactions WHERE operation_key = '{operation_key}'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_corruption_is_reported() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::new("invariants").quick_quota()).await?;
    let (endpoints, admin) = stack.operator();
    let product = admin.create_product("checked", 1_000, 3).await?;
    let buyers = admin
        .open_buyers("checked-buyer", &[5_000, 5_000, 10], 4)
        .await?;
    admin
        .wait_for_quota(product.id, 3, Duration::from_secs(30))
        .await?;
    // The third buyer cannot pay: refused a unit.
    let attempts = Driver::new(endpoints, Duration::from_secs(10))
        .run_drop(&buyers, product.id, 0, |_| {})
        .await;
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome.clone()).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Completed)
            .count(),
        2,
        "{outcomes:?}"
    );

    let pool = stack.admin_pool().await;
    let clean = invariants::settled(&pool, Duration::from_secs(60)).await?;
    clean.assert_holds();
    let member: i64 = sqlx::query_scalar(
        r#"SELECT id FROM account_service.accounts WHERE kind = 'MEMBER' ORDER BY id LIMIT 1"#,
    )
    .fetch_one(&pool)
    .await?;
    let completed: Uuid = sqlx::query_scalar(
        r#"SELECT id FROM payment_service.payments WHERE state = 'COMPLETED' LIMIT 1"#,
    )
    .fetch_one(&pool)
    .await?;
    let unit: i64 = sqlx::query_scalar(
        r#"SELECT id FROM order_service.product_stock WHERE state = 'AVAILABLE' LIMIT 1"#,
    )
    .fetch_one(&pool)
    .await?;

    // Money appearing from nowhere.
    let r = corrupted(
        &pool,
        &[format!(
            "UPDATE account_service.accounts SET balance = balance + 1 WHERE id = {member}"
        )],
        &[format!(
            "UPDATE account_service.accounts SET balance = balance - 1 WHERE id = {member}"
        )],
    )
    .await?;
    assert_eq!((r.balance_drift, r.ledger_mismatches), (1, 1), "{r:#?}");
    assert!(!r.holds());

    // A unit sold with no confirmed reservation behind it.
    let sold = format!("UPDATE order_service.product_stock SET state = 'SOLD' WHERE id = {unit}");
    let back =
        format!("UPDATE order_service.product_stock SET state = 'AVAILABLE' WHERE id = {unit}");
    let r = corrupted(&pool, &[sold], &[back]).await?;
    assert_eq!(r.unit_state_mismatches, 1, "{r:#?}");

    // An order naming a unit that does not exist, and a step naming a payment that does
    // not: references kept by their statements, not by foreign keys.
    let order_unit = format!(
        "UPDATE order_service.orders SET unit_id = -unit_id WHERE reservation_id = \
         (SELECT reservation_id FROM payment_service.payments WHERE id = '{completed}')"
    );
    let stray = Uuid::new_v4();
    let step_of = |from: &str, to: &str| {
        format!("UPDATE payment_service.payment_steps SET payment_id = '{to}' WHERE payment_id = '{from}' AND seq = (SELECT MIN(seq) FROM payment_service.payment_steps WHERE payment_id = '{from}')")
    };
    let r = corrupted(
        &pool,
        &[
            order_unit.clone(),
            step_of(&completed.to_string(), &stray.to_string()),
        ],
        &[
            order_unit,
            step_of(&stray.to_string(), &completed.to_string()),
        ],
    )
    .await?;
    assert_eq!(r.rows_without_parent, 2, "{r:#?}");
    assert!(!r.holds());

    // A payment left half-way.
    let payment =
        |set: &str| format!("UPDATE payment_service.payments SET {set} WHERE id = '{completed}'");
    let halfway = payment("state = 'ACCOUNT_DEBITED', pending_action = 'CONFIRM'");
    let done = payment("state = 'COMPLETED', pending_action = NULL");
    let r = corrupted(&pool, &[halfway], &[done]).await?;
    assert_eq!(r.payments_not_terminal, 1, "{r:#?}");

    // A payment that says FAILED but kept the money (and its order has no completed payment).
    let r = corrupted(
        &pool,
        &[payment("state = 'FAILED'")],
        &[payment("state = 'COMPLETED'")],
    )
    .await?;
    let failed_kept = (
        r.closed_payments_keeping_money,
        r.orders_without_completed_payment,
    );
    assert_eq!(failed_kept, (1, 1), "{r:#?}");

    // A second debit for a payment that does not exist: money taken with nothing to show.
    let orphan = format!("pay:{}:debit", Uuid::new_v4());
    let r = corrupted(
        &pool,
        &[format!(
            "INSERT INTO account_service.transactions (id, operation_key, kind, status, account_id, amount, merchant_shard) \
             VALUES ('{}', '{orphan}', 'DEBIT', 'APPLIED', {member}, 1000, 0)",
            Uuid::new_v4()
        )],
        &[drop_transaction(&orphan)],
    )
    .await?;
    assert_eq!(r.reservations_charged_twice, 1, "{r:#?}");
    assert_eq!(
        r.ledger_mismatches, 1,
        "the ledger no longer explains the balance: {r:#?}"
    );

    // A refund of half a COMPLETED payment: debited − refunded is neither 0 nor the amount.
    let partial = format!("pay:{completed}:partial");
    let half_refund = format!(
        "INSERT INTO account_service.transactions (id, operation_key, kind, status, account_id, amount, merchant_shard, refund_of) \
         SELECT '{}', '{partial}', 'CREDIT', 'APPLIED', account_id, amount / 2, merchant_shard, operation_key \
         FROM account_service.transactions WHERE operation_key = 'pay:{completed}:debit'",
        Uuid::new_v4()
    );
    let r = corrupted(&pool, &[half_refund], &[drop_transaction(&partial)]).await?;
    let bad_net = (r.payments_bad_net, r.completed_not_debited_or_confirmed);
    assert_eq!(bad_net, (1, 1), "{r:#?}");

    // Held money the account's holds do not explain.
    let held = |by: &str| {
        format!("UPDATE account_service.accounts SET held = held {by} WHERE id = {member}")
    };
    let r = corrupted(&pool, &[held("+ 1")], &[held("- 1")]).await?;
    assert_eq!(r.held_mismatches, 1, "{r:#?}");

    // Money held for a reservation that was never made.
    let ghost = format!("res:{}:hold", Uuid::new_v4());
    let r = corrupted(
        &pool,
        &[
            format!(
                "INSERT INTO account_service.holds (id, operation_key, account_id, amount, expires_at) \
                 VALUES ('{}', '{ghost}', {member}, 10, now() + INTERVAL '1 hour')",
                Uuid::new_v4()
            ),
            held("+ 10"),
        ],
        &[
            held("- 10"),
            format!("DELETE FROM account_service.holds WHERE operation_key = '{ghost}'"),
        ],
    )
    .await?;
    assert_eq!(
        (
            r.live_holds_without_live_reservation,
            r.held_mismatches,
            r.money_held
        ),
        (1, 0, 10),
        "{r:#?}"
    );

    // A debit that says it captured a hold nobody placed.
    let claimed = format!("pay:{}:debit", Uuid::new_v4());
    let capture = format!(
        "INSERT INTO account_service.transactions (id, operation_key, kind, status, account_id, amount, merchant_shard, hold_key) \
         VALUES ('{}', '{claimed}', 'DEBIT', 'APPLIED', {member}, 1000, 0, '{ghost}')",
        Uuid::new_v4()
    );
    let r = corrupted(&pool, &[capture], &[drop_transaction(&claimed)]).await?;
    assert_eq!(r.holds_captured_wrongly, 1, "{r:#?}");

    // A unit sold whose price was never held: its hold is out of the reservation's sight.
    let sold: Uuid = sqlx::query_scalar(
        r#"SELECT id FROM order_service.reservations WHERE state = 'CONFIRMED' ORDER BY id LIMIT 1"#,
    )
    .fetch_one(&pool)
    .await?;
    let hold = paysaga_contracts::order::api::hold_key(sold);
    let hidden = format!("{hold}:hidden");
    let rename = |from: &str, to: &str| {
        format!(
            "UPDATE account_service.holds SET operation_key = '{to}' WHERE operation_key = '{from}'"
        )
    };
    let r = corrupted(&pool, &[rename(&hold, &hidden)], &[rename(&hidden, &hold)]).await?;
    assert_eq!(r.sales_without_their_captured_hold, 1, "{r:#?}");

    // A live reservation whose price is not held: the sale put back to RESERVED, with a
    // deadline its hold does not share.
    let reopen = format!(
        "UPDATE order_service.reservations SET state = 'RESERVED', expires_at = now() + interval '1 day' \
         WHERE id = '{sold}'"
    );
    let deadline: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar(r#"SELECT expires_at FROM order_service.reservations WHERE id = $1"#)
            .bind(sold)
            .fetch_one(&pool)
            .await?;
    let close = format!(
        "UPDATE order_service.reservations SET state = 'CONFIRMED', expires_at = '{}' WHERE id = '{sold}'",
        deadline.to_rfc3339()
    );
    let r = corrupted(&pool, &[reopen], &[close]).await?;
    assert_eq!(r.live_reservations_without_their_hold, 1, "{r:#?}");

    // A unit offered to a member behind one who had waited since before the offer, left
    // after it and went without: counted once, and explained naming the member passed
    // over. (A member left waiting here would be offered the product's free unit by the
    // running service's offer sweep before the undo.)
    let (ahead, behind) = (Uuid::new_v4(), Uuid::new_v4());
    let entry = |id: Uuid, member: &str, state: &str, joined: u32, ended: u32| {
        format!(
            "INSERT INTO order_service.waitlist_entries (id, product_id, member_id, state, purchase_cap, offer_ttl_secs, created_at, updated_at) \
             VALUES ('{id}', {}, '{member}', '{state}', 1, 60, now() - make_interval(secs => {joined}), now() - make_interval(secs => {ended}))",
            product.id
        )
    };
    let served = format!(
        "INSERT INTO order_service.waitlist_offers (id, entry_id, product_id, member_id, unit_id, state, expires_at, created_at) \
         VALUES ('{}', '{behind}', {}, 'served-behind', {unit}, 'EXPIRED', now(), now() - make_interval(secs => 5))",
        Uuid::new_v4(),
        product.id
    );
    tamper(
        &pool,
        &[
            entry(ahead, "passed-over", "LEFT", 20, 1),
            entry(behind, "served-behind", "EXPIRED", 10, 2),
            served,
        ],
    )
    .await?;
    let r = invariants::check(&pool).await?;
    let explained = invariants::later_arrivals_explained(&pool).await?;
    tamper(
        &pool,
        &[
            format!("DELETE FROM order_service.waitlist_offers WHERE entry_id = '{behind}'"),
            format!(
                "DELETE FROM order_service.waitlist_entries WHERE id IN ('{ahead}', '{behind}')"
            ),
        ],
    )
    .await?;
    assert_eq!(r.units_to_later_arrivals, 1, "{r:#?}");
    assert_eq!(explained.len(), 1, "{explained:?}");
    assert!(
        explained[0].contains("member passed-over") && explained[0].contains("LEFT"),
        "{explained:?}"
    );

    // Undone: clean again.
    assert_eq!(invariants::check(&pool).await?, clean);
    Ok(())
}
