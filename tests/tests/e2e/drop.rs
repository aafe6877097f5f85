//! A drop through the real processes: 50 units, 500 buyers arriving at once, some of
//! them unable to pay (refused a unit: their account cannot hold the price). Checked
//! from the answers buyers got and from PostgreSQL.

use std::{collections::HashMap, time::Duration};

use paysaga_e2e::{invariants, Driver, Outcome, Stack, StackOptions};

const UNITS: i64 = 50;
const BUYERS: usize = 500;
const PRICE: i64 = 12_900;

/// Every fifth buyer holds one cent less than the price.
fn balance(i: usize) -> i64 {
    if i % 5 == 4 {
        PRICE - 1
    } else {
        PRICE * 2
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_units_five_hundred_buyers_some_underfunded() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::new("drop").quick_loops()).await?;
    let (endpoints, admin) = stack.operator();
    let product = admin.create_product("drop-50", PRICE, UNITS).await?;
    let balances: Vec<i64> = (0..BUYERS).map(balance).collect();
    let buyers = admin.open_buyers("drop-buyer", &balances, 16).await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let pool = stack.admin_pool().await;
    let deposits = invariants::check(&pool).await?.balance_total;

    let driver = Driver::new(endpoints, Duration::from_secs(10));
    let attempts = driver.run_drop(&buyers, product.id, 0, |_| {}).await;
    assert_eq!(attempts.len(), BUYERS);

    // What the buyers were told.
    let funded: HashMap<&str, bool> = buyers
        .iter()
        .map(|b| (b.member.as_str(), b.balance >= PRICE))
        .collect();
    let mut completed = 0i64;
    let mut unfunded = 0i64;
    let mut sold_out = 0i64;
    for a in &attempts {
        let is_funded = funded[a.member.as_str()];
        match &a.outcome {
            Outcome::Completed => {
                assert!(is_funded, "{} completed without the money", a.member);
                completed += 1;
            }
            Outcome::Rejected { step, code, .. } if code == "INSUFFICIENT_FUNDS" => {
                assert!(!is_funded, "{} was funded but refused ({step:?})", a.member);
                assert!(
                    a.reservation_id.is_none(),
                    "{} was refused, yet holds a reservation",
                    a.member
                );
                unfunded += 1;
            }
            Outcome::SoldOutAtGate | Outcome::SoldOutAtOrder => {
                assert!(
                    a.reservation_id.is_none(),
                    "{} was told sold out after reserving",
                    a.member
                );
                sold_out += 1;
            }
            other => panic!(
                "{} got no definite answer: {other:?}\nlogs:\n{}",
                a.member,
                stack.log_paths()
            ),
        }
    }
    // Exactly the funded winners reserved and completed: a buyer who could not pay never
    // took a unit.
    let reserved = attempts
        .iter()
        .filter(|a| a.reservation_id.is_some())
        .count() as i64;
    assert_eq!(
        completed, reserved,
        "every reservation ends COMPLETED: only buyers who can pay reserve"
    );
    assert!((1..=UNITS).contains(&completed), "completed {completed}");
    assert!(unfunded > 0, "some underfunded buyers got past the gate");
    assert_eq!(completed + unfunded + sold_out, BUYERS as i64);

    eprintln!(
        "completed {completed}, refused for funds {unfunded}, sold out {sold_out}, reserved {reserved}"
    );

    // What the tables say.
    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    eprintln!("{report:#?}");
    report.assert_holds();
    assert_eq!(
        report.units_sold, completed,
        "units SOLD = COMPLETED payments"
    );
    assert_eq!(report.payments_completed, completed);
    assert_eq!(report.payments_failed, 0);
    assert_eq!(report.payments, reserved, "one payment per reservation");
    assert_eq!(report.units_reserved, 0, "no unit left held");
    assert_eq!(
        (report.holds_captured, report.holds_live, report.money_held),
        (completed, 0, 0),
        "each sale captured its hold; nothing is held any more"
    );
    assert_eq!(
        report.balance_total, deposits,
        "the sum of all balances did not change"
    );
    assert_eq!(report.money_moved, completed * PRICE);

    // Nobody double-charged: each buyer's balance is their opening balance, less the price
    // once if (and only if) they completed.
    paysaga_e2e::drop_run::balances_match(&pool, &buyers, PRICE, &attempts).await?;
    // Losers learned SOLD_OUT from the gate or the order service, never by paying.
    let sold_rows: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1 AND state = 'CONFIRMED'"#,
    )
    .bind(product.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(sold_rows, completed);
    Ok(())
}
