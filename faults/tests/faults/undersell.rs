//! A regression test for a bug the fault suite's drops found (docs/faults.md, regression
//! tests): buyers told SOLD_OUT while units are still AVAILABLE. Twenty funded buyers come one after another
//! for twenty units, each paying before the next arrives, and the gate's recompute job
//! runs between them. Every one of them should get a unit.

use std::time::{Duration, Instant};

use paysaga_drop::{Admin, Driver, Endpoints, Outcome};
use paysaga_e2e::{Stack, StackOptions};
use paysaga_supervisor::ServiceKind;

const UNITS: i64 = 20;
const PRICE: i64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyers_arriving_one_by_one_get_every_unit() -> anyhow::Result<()> {
    let stack = Stack::start(
        StackOptions::new("faults-undersell")
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 200)
            .env_all("DB_MAX_CONNECTIONS", 4),
    )
    .await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let admin = Admin::new(
        endpoints.clone(),
        paysaga_common::client::http_client(Duration::from_secs(10)),
    );
    let product = admin.create_product("one-by-one", PRICE, UNITS).await?;
    let buyers = admin
        .open_buyers("one-by-one", &[PRICE; UNITS as usize], 8)
        .await?;
    admin
        .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints, Duration::from_secs(10));
    let mut outcomes = Vec::new();
    for buyer in &buyers {
        let attempt = driver.buy(buyer, product.id).await;
        outcomes.push(attempt.outcome.clone());
        // Let the gate's recompute job see the sale before the next buyer arrives:
        // its rule is quota = max(0, available - in flight).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let q = admin.gate().quota(product.id).await?.body;
            let a = admin.order().product(product.id).await?.body;
            if q.quota == (a.available - q.in_flight).max(0) || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let pool = stack.admin_pool().await;
    let available: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'AVAILABLE'"#,
    )
    .bind(product.id)
    .fetch_one(&pool)
    .await?;
    let sold = outcomes
        .iter()
        .filter(|o| **o == Outcome::Completed)
        .count();
    let told_sold_out = outcomes.iter().filter(|o| o.is_sold_out()).count();
    let q = admin.gate().quota(product.id).await?.body;
    eprintln!(
        "sold {sold}/{UNITS}; {told_sold_out} buyers told SOLD_OUT with {available} units AVAILABLE; \
         gate quota {} in flight {}",
        q.quota, q.in_flight
    );
    assert_eq!(
        told_sold_out, 0,
        "nobody is told SOLD_OUT while {available} units are AVAILABLE"
    );
    assert_eq!(sold as i64, UNITS);
    Ok(())
}
