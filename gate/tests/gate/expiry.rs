//! The recompute job: a pass that expires unused gives its unit back; a pass that was
//! used does not (its unit is gone from the order service's availability instead).

use std::time::Duration;

use crate::support::{create_product, start_gate, start_order};
use gate::Config;
use paysaga_common::testkit::{buyer_token, TestDb, TestRedis};

/// Sleeps until the wall clock is past `exp` (unix seconds), so the pass is expired.
async fn until_past(exp: i64) {
    while chrono::Utc::now().timestamp() <= exp {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_expired_pass_returns_its_unit_and_a_used_one_does_not() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 2).await;
    let mut config = Config::local(&redis.url, &redis.prefix, &order.url);
    config.pass_ttl = Duration::from_secs(1);
    config.clock_skew = Duration::ZERO;
    // The test drives the job itself, so what it checks does not depend on timing.
    config.recompute_interval = Duration::from_secs(3600);
    let gate = start_gate(config).await;
    let http = reqwest::Client::new();
    let quota = || async {
        gate.service_client()
            .quota(product)
            .await
            .expect("quota")
            .body
    };

    let unused = gate
        .buyer(&http, "alice")
        .issue_pass(product)
        .await
        .expect("pass")
        .body;
    let used = gate
        .buyer(&http, "bob")
        .issue_pass(product)
        .await
        .expect("pass")
        .body;
    let e = gate
        .buyer(&http, "carol")
        .issue_pass(product)
        .await
        .expect_err("sold out");
    assert_eq!(e.code(), Some("SOLD_OUT"));
    assert_eq!((quota().await.quota, quota().await.in_flight), (0, 2));

    let bob = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("bob"),
        Duration::from_secs(10),
    );
    bob.reserve(product, &used.pass)
        .await
        .expect("bob reserves");

    until_past(
        unused
            .expires_at
            .timestamp()
            .max(used.expires_at.timestamp()),
    )
    .await;
    let report = gate.state.recompute.run_once().await;
    assert_eq!((report.recomputed, report.failed), (1, 0));
    let view = quota().await;
    assert_eq!(
        (view.quota, view.in_flight),
        (1, 0),
        "alice's unit is back, bob's is reserved"
    );

    let pass = gate
        .buyer(&http, "carol")
        .issue_pass(product)
        .await
        .expect("carol gets the returned unit")
        .body;
    let e = gate
        .buyer(&http, "dave")
        .issue_pass(product)
        .await
        .expect_err("sold out again");
    assert_eq!(e.code(), Some("SOLD_OUT"));
    let carol = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("carol"),
        Duration::from_secs(10),
    );
    carol
        .reserve(product, &pass.pass)
        .await
        .expect("carol reserves");

    let pool = db.admin_pool().await;
    let reserved: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1 AND state = 'RESERVED'"#,
    )
    .bind(product)
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(reserved, 2, "both units reserved, none twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduled_job_returns_units_of_expired_passes() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 1).await;
    let mut config = Config::local(&redis.url, &redis.prefix, &order.url);
    config.pass_ttl = Duration::from_secs(1);
    config.clock_skew = Duration::ZERO;
    config.recompute_interval = Duration::from_secs(1);
    let gate = start_gate(config).await;
    let http = reqwest::Client::new();

    let pass = gate
        .buyer(&http, "alice")
        .issue_pass(product)
        .await
        .expect("pass")
        .body;
    until_past(pass.expires_at.timestamp()).await;
    // No manual run: wait for the scheduler to return the unit.
    let mut got = None;
    for _ in 0..300 {
        match gate.buyer(&http, "bob").issue_pass(product).await {
            Ok(p) => {
                got = Some(p.body);
                break;
            }
            Err(e) => assert_eq!(e.code(), Some("SOLD_OUT"), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bob_pass = got.expect("the job returned alice's expired unit to the quota");
    assert_eq!(bob_pass.member_id.as_str(), "bob");
}
