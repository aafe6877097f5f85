//! A pass that made a reservation stops counting as in flight at the next recompute,
//! long before it expires: its unit has already left the order service's availability,
//! and counting it twice would turn buyers away from units still on sale.

use std::time::Duration;

use crate::support::{create_product, start_gate, start_order};
use gate::Config;
use paysaga_common::testkit::{buyer_token, TestDb, TestRedis};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_pass_frees_the_quota_it_double_counted() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 3).await;
    let mut config = Config::local(&redis.url, &redis.prefix, &order.url);
    // Passes outlive the test: only the used-pass rule can give units back here.
    config.pass_ttl = Duration::from_secs(600);
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

    gate.buyer(&http, "alice")
        .issue_pass(product)
        .await
        .expect("alice's pass");
    let bob_pass = gate
        .buyer(&http, "bob")
        .issue_pass(product)
        .await
        .expect("bob's pass")
        .body;
    let bob = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("bob"),
        Duration::from_secs(10),
    );
    bob.reserve(product, &bob_pass.pass)
        .await
        .expect("bob reserves");

    let report = gate.state.recompute.run_once().await;
    assert_eq!((report.recomputed, report.failed), (1, 0));
    let view = quota().await;
    // 2 units available, alice's pass unused in flight, bob's used: quota 1.
    assert_eq!((view.quota, view.in_flight), (1, 1));

    // Bob still holds one live pass: asking again returns it, no second unit.
    let again = gate
        .buyer(&http, "bob")
        .issue_pass(product)
        .await
        .expect("bob again")
        .body;
    assert_eq!(again.pass_id, bob_pass.pass_id);
    assert_eq!(quota().await.quota, 1);

    // Carol gets the unit the old rule (available - all passes = 0) kept off sale.
    let carol_pass = gate
        .buyer(&http, "carol")
        .issue_pass(product)
        .await
        .expect("carol's pass")
        .body;
    let carol = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("carol"),
        Duration::from_secs(10),
    );
    carol
        .reserve(product, &carol_pass.pass)
        .await
        .expect("carol reserves");

    let e = gate
        .buyer(&http, "dave")
        .issue_pass(product)
        .await
        .expect_err("sold out");
    assert_eq!(e.code(), Some("SOLD_OUT"));

    // Recomputing again with every pass known changes nothing: 1 available, alice in flight.
    gate.state.recompute.run_once().await;
    assert_eq!((quota().await.quota, quota().await.in_flight), (0, 1));

    let pool = db.admin_pool().await;
    let (reserved, available): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE state = 'RESERVED'), COUNT(*) FILTER (WHERE state = 'AVAILABLE')
           FROM order_service.product_stock WHERE product_id = $1"#,
    )
    .bind(product)
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(
        (reserved, available),
        (2, 1),
        "alice's unit is still held for her"
    );
}
