//! One answer for "sold out", and units that come back go to the line in order. Every
//! unit is promised to a pass or reserved; buyers told `SOLD_OUT` by the gate join the
//! waitlist (while units are still AVAILABLE at the order service, promised to passes
//! in flight). Then passes expire unused and reservations are cancelled or expire: each
//! unit goes to the head of the line, never back to the gate's open sale, and none is
//! left AVAILABLE while someone waits. Read from PostgreSQL.

use std::time::{Duration, Instant};

use paysaga_common::client::CallError;
use paysaga_contracts::order::{
    api::{codes, WaitlistState},
    client::OrderClient,
};
use paysaga_e2e::{
    buyer::Buyer, invariants, waitlist, Admin, Driver, Endpoints, Stack, StackOptions,
};
use sqlx::PgPool;
use uuid::Uuid;

const PRICE: i64 = 1_000;
/// Units of the drop: two reserved, two promised to passes that are never used.
const UNITS: i64 = 4;
const WAITERS: usize = 5;

/// The members offered a unit of the product, in the order the offers were made.
async fn offered_to(pool: &PgPool, product_id: i64) -> anyhow::Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        r#"SELECT member_id FROM order_service.waitlist_offers WHERE product_id = $1 ORDER BY created_at, id"#,
    )
    .bind(product_id)
    .fetch_all(pool)
    .await?)
}

async fn available(pool: &PgPool, product_id: i64) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'AVAILABLE'"#,
    )
    .bind(product_id)
    .fetch_one(pool)
    .await?)
}

/// Waits until `n` offers of the product were made.
async fn offers(pool: &PgPool, product_id: i64, n: usize) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let to = offered_to(pool, product_id).await?;
        if to.len() >= n {
            return Ok(to);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {n} units came back to the line: {to:?}",
            to.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gate answers `SOLD_OUT` to a buyer without a pass.
async fn sold_out_at_gate(driver: &Driver, buyer: &Buyer, product_id: i64) {
    let mut retries = 0;
    match driver.pass(buyer, product_id, &mut retries).await {
        Err(CallError::Rejected { status: 409, body }) => assert_eq!(body.code, "SOLD_OUT"),
        other => panic!("{} must be told SOLD_OUT, got {other:?}", buyer.member),
    }
}

/// What must hold whenever units have come back: the line got them first come first
/// served, none is on sale while anyone waits (`promised` units are AVAILABLE, kept for
/// passes in flight), the checker agrees.
async fn fair(
    pool: &PgPool,
    product_id: i64,
    line: &[String],
    n: usize,
    promised: i64,
) -> anyhow::Result<()> {
    let to = offers(pool, product_id, n).await?;
    assert_eq!(
        to,
        line[..n],
        "units came back to the head of the line, in order"
    );
    assert_eq!(
        available(pool, product_id).await?,
        promised,
        "a unit on sale while members wait"
    );
    let report = invariants::check(pool).await?;
    assert_eq!(
        (
            report.unsold_while_waiters_went_without,
            report.units_to_later_arrivals,
            report.available_while_waiting,
        ),
        (0, 0, 0),
        "{report:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn units_that_come_back_go_to_the_waitlist_in_order_and_sold_out_buyers_can_join(
) -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::new("fairness").units_come_back(4, 300)).await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let admin = Admin::new(endpoints.clone(), http.clone());
    let product = admin.create_product("fair-drop", PRICE, UNITS).await?;
    let holders = admin
        .open_buyers("fair-holder", &[PRICE * 10; UNITS as usize], 4)
        .await?;
    let waiters = admin
        .open_buyers("fair-waiter", &[PRICE * 10; WAITERS], 4)
        .await?;
    let latecomer = admin.open_buyer("fair-latecomer", PRICE * 10).await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints.clone(), Duration::from_secs(10));
    let pool = stack.admin_pool().await;

    // Every unit promised: two passes used, two never used.
    let mut reservations: Vec<Uuid> = Vec::new();
    for (i, b) in holders.iter().enumerate() {
        let mut retries = 0;
        let pass = waitlist::setup_pass(&driver, b, product.id, &mut retries).await?;
        if i < 2 {
            reservations.push(
                driver
                    .reserve(b, product.id, &pass.pass, &mut retries)
                    .await?
                    .id,
            );
        }
    }
    assert_eq!(
        available(&pool, product.id).await?,
        2,
        "two units promised to passes in flight"
    );

    // Told SOLD_OUT by the gate, each joins the line, which accepts them though two
    // units are AVAILABLE at the order service: they are promised, not on sale.
    for w in &waiters {
        sold_out_at_gate(&driver, w, product.id).await;
    }
    let line = waitlist::join_in_order(&http, &endpoints, &waiters, product.id).await?;

    // A reservation cancelled by its buyer: its unit goes to the head of the line.
    OrderClient::with_http(http.clone(), &endpoints.order, &holders[0].token)
        .cancel(reservations[0])
        .await?;
    fair(&pool, product.id, &line, 1, 2).await?;

    // The two unused passes expire: their units go to the next two in line at the
    // gate's next report, not back to its open quota (the latecomer, asking all along,
    // gets none).
    let deadline = Instant::now() + Duration::from_secs(30);
    while offered_to(&pool, product.id).await?.len() < 3 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the expired passes' units never came back"
        );
        sold_out_at_gate(&driver, &latecomer, product.id).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fair(&pool, product.id, &line, 3, 0).await?;

    // A reservation that expires: its unit goes to the fourth in line.
    waitlist::make_due(&pool, Some(reservations[1])).await?;
    fair(&pool, product.id, &line, 4, 0).await?;

    // The latecomer is still told SOLD_OUT, and may join: behind the one still waiting.
    sold_out_at_gate(&driver, &latecomer, product.id).await;
    let entry = OrderClient::with_http(http.clone(), &endpoints.order, &latecomer.token)
        .join_waitlist(product.id)
        .await?
        .body;
    assert_eq!(
        (entry.state, entry.position),
        (WaitlistState::Waiting, Some(2))
    );
    assert_eq!(
        waitlist::place_of(&http, &endpoints, &waiters[4], product.id).await?,
        (WaitlistState::Waiting, Some(1))
    );

    // With every unit offered or reserved, a join is still accepted (a unit may come
    // back); a product nobody holds anything of refuses it.
    let empty = admin.create_product("fair-empty", PRICE, 1).await?;
    let refused = OrderClient::with_http(http.clone(), &endpoints.order, &latecomer.token)
        .join_waitlist(empty.id)
        .await;
    match refused {
        Err(CallError::Rejected { status: 409, body }) => {
            assert_eq!(body.code, codes::NOT_SOLD_OUT)
        }
        other => panic!("a unit on sale refuses the join, got {other:?}"),
    }
    invariants::settled(&pool, Duration::from_secs(30))
        .await?
        .assert_holds();
    Ok(())
}
