//! Reservations that expire before they are paid: the buyer gets a definite answer,
//! keeps their money, and the unit is sold to someone else.

use std::time::{Duration, Instant};

use paysaga_common::client::CallError;
use paysaga_e2e::{
    buyer::{payment_outcome, Buyer},
    db, invariants, Driver, Link, Outcome, ServiceKind, Stack, StackOptions,
};
use sqlx::PgPool;
use uuid::Uuid;

const PRICE: i64 = 5_000;

async fn reservation_state(pool: &PgPool, id: Uuid) -> anyhow::Result<String> {
    let query = r#"SELECT state FROM order_service.reservations WHERE id = $1"#;
    db::value_of(pool, query, id).await
}

/// Reserves the product's unit for `buyer` (pass, then reservation).
async fn reserve(driver: &Driver, buyer: &Buyer, product_id: i64) -> anyhow::Result<Uuid> {
    let mut retries = 0;
    let pass = driver.pass(buyer, product_id, &mut retries).await?;
    Ok(driver
        .reserve(buyer, product_id, &pass.pass, &mut retries)
        .await?
        .id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_reservation_gets_a_definite_answer_and_the_unit_sells_to_someone_else(
) -> anyhow::Result<()> {
    let stack = Stack::start(
        StackOptions::new("expiry")
            .env(ServiceKind::Order, "RESERVATION_TTL_SECS", 1)
            .units_come_back(2, 1000)
            .env(ServiceKind::Orchestrator, "RECOVERY_INTERVAL_MS", 1000)
            .proxy(Link::OrchestratorToAccount),
    )
    .await?;
    let (endpoints, admin) = stack.operator();
    let product = admin.create_product("one-unit", PRICE, 1).await?;
    let late = admin.open_buyer("late-buyer", PRICE * 3).await?;
    let slow = admin.open_buyer("slow-buyer", PRICE * 3).await?;
    let next = admin.open_buyer("next-buyer", PRICE * 3).await?;
    let pool = stack.admin_pool().await;
    let driver = Driver::new(endpoints, Duration::from_secs(10));

    // 1. The late buyer reserves, and pays only after the sweep has expired the reservation.
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    let late_reservation = reserve(&driver, &late, product.id).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while reservation_state(&pool, late_reservation).await? != "EXPIRED" {
        assert!(
            Instant::now() < deadline,
            "the sweep never expired the reservation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = driver.post_payment(&late, late_reservation, "late-1").await;
    match answer {
        Err(CallError::Rejected { status: 409, body }) => {
            assert_eq!(body.code, "RESERVATION_NOT_PAYABLE")
        }
        other => {
            panic!("paying for an expired reservation must be refused outright, got {other:?}")
        }
    }
    assert_eq!(
        db::balance(&pool, late.account_id).await?,
        PRICE * 3,
        "the late buyer keeps their money"
    );

    // 2. The slow buyer pays in time, but the debit is slow enough that the reservation
    //    expires before the order can be confirmed: the saga refunds.
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    let slow_reservation = reserve(&driver, &slow, product.id).await?;
    let proxy = stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied link");
    proxy.set_latency(Duration::from_millis(700));
    let mut retries = 0;
    let paid = driver
        .pay(&slow, slow_reservation, "slow-1", &mut retries)
        .await;
    let slow_outcome = match paid {
        Ok(p) => {
            let p = driver
                .follow(&slow, p)
                .await
                .map_err(|(_, why)| anyhow::anyhow!(why))?;
            payment_outcome(&p)
        }
        // On a machine slow enough that the reservation had already expired when the
        // orchestrator looked, the refusal is the definite answer instead.
        Err(CallError::Rejected { status: 409, body })
            if body.code == "RESERVATION_NOT_PAYABLE" =>
        {
            Outcome::Rejected {
                step: paysaga_e2e::buyer::Step::Pay,
                status: 409,
                code: body.code,
            }
        }
        Err(e) => panic!("no definite answer for the slow buyer: {e}"),
    };
    proxy.heal();
    eprintln!("slow buyer: {slow_outcome:?}");
    assert!(
        matches!(slow_outcome, Outcome::Refunded | Outcome::Rejected { .. }),
        "a payment whose reservation expired before confirmation is refunded, got {slow_outcome:?}"
    );
    assert_eq!(
        db::balance(&pool, slow.account_id).await?,
        PRICE * 3,
        "the slow buyer's money came back"
    );
    assert_ne!(
        reservation_state(&pool, slow_reservation).await?,
        "CONFIRMED"
    );

    // 3. The unit is back on sale and the next buyer gets it.
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    let attempt = driver.buy(&next, product.id).await;
    assert_eq!(attempt.outcome, Outcome::Completed, "{attempt:?}");
    let owner: String = sqlx::query_scalar(
        r#"SELECT member_id FROM order_service.reservations WHERE product_id = $1 AND state = 'CONFIRMED'"#,
    )
    .bind(product.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(owner, next.member, "the unit was sold to the next buyer");
    assert_eq!(db::balance(&pool, next.account_id).await?, PRICE * 2);

    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    assert_eq!((report.units_sold, report.payments_completed), (1, 1));
    assert_eq!(report.money_moved, PRICE);
    Ok(())
}
