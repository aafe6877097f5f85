//! Two gate instances on one Redis, 1,000 buyers at once for 100 units: exactly 100
//! passes, each one accepted by the real order service's verifier and reservation.

use std::{collections::HashSet, time::Duration};

use crate::support::{create_product, order_client, start_gate, start_order};
use gate::Config;
use paysaga_common::{
    keys::DevKey,
    pass::PassVerifier,
    testkit::{buyer_token, TestDb, TestRedis},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_buyers_on_two_gates_get_exactly_one_hundred_passes() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 100).await;

    let mut config = Config::local(&redis.url, &redis.prefix, &order.url);
    config.recompute_interval = Duration::from_secs(3600);
    // Exactly the stock holds while Redis answers; a Redis call slower than the timeout
    // puts a gate in degraded mode, whose fallback passes are advisory (the order
    // service still never oversells; gate/tests/outage.rs covers that). On a loaded CI
    // machine 1,000 concurrent calls can exceed the 250 ms default, so this test waits.
    config.redis_timeout = Duration::from_secs(10);
    let gates = [start_gate(config.clone()).await, start_gate(config).await];

    let http = reqwest::Client::new();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let client = gates[i % 2].buyer(&http, &format!("buyer-{i}"));
            tokio::spawn(async move { (i, client.issue_pass(product).await) })
        })
        .collect();
    let mut passes = Vec::new();
    let mut sold_out = 0;
    for t in tasks {
        let (i, result) = t.await.expect("task");
        match result {
            Ok(answer) => {
                assert_eq!(answer.status, 201);
                passes.push((i, answer.body));
            }
            Err(e) => {
                assert_eq!(e.code(), Some("SOLD_OUT"), "buyer {i}: {e}");
                sold_out += 1;
            }
        }
    }
    assert_eq!(passes.len(), 100, "exactly the stock");
    assert_eq!(sold_out, 900);

    let verifier = PassVerifier::new(DevKey::Passes.verifying_key());
    let now = chrono::Utc::now().timestamp();
    let mut ids = HashSet::new();
    for (i, p) in &passes {
        let claims = verifier
            .verify(&p.pass, now)
            .expect("pass verifies with the public key");
        assert_eq!(claims.prd, product);
        assert_eq!(claims.mem, format!("buyer-{i}"));
        assert_eq!(claims.pid, p.pass_id);
        assert!(ids.insert(p.pass_id), "pass ids are unique");
    }

    // Redis agrees: no quota left, 100 passes in flight.
    let view = gates[0]
        .service_client()
        .quota(product)
        .await
        .expect("quota")
        .body;
    assert_eq!((view.quota, view.in_flight), (0, 100));

    // The real order service accepts every pass; PostgreSQL holds exactly 100
    // reservations and no unit is left.
    for (i, p) in &passes {
        let buyer = paysaga_contracts::order::client::OrderClient::new(
            order.url.clone(),
            buyer_token(&format!("buyer-{i}")),
            Duration::from_secs(10),
        );
        let r = buyer
            .reserve(product, &p.pass)
            .await
            .expect("reservation with a gate pass");
        assert_eq!(r.body.product_id, product);
    }
    let pool = db.admin_pool().await;
    let (reservations, distinct_passes): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*), COUNT(DISTINCT pass_id) FROM order_service.reservations WHERE product_id = $1"#,
    )
    .bind(product)
    .fetch_one(&pool)
    .await
    .expect("count reservations");
    assert_eq!((reservations, distinct_passes), (100, 100));
    let available: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'AVAILABLE'"#,
    )
    .bind(product)
    .fetch_one(&pool)
    .await
    .expect("count units");
    assert_eq!(available, 0);

    // A recompute now still finds nothing to give: the used passes are counted once.
    let report = gates[1].state.recompute.run_once().await;
    assert_eq!(report.recomputed, 1);
    let view = gates[1]
        .service_client()
        .quota(product)
        .await
        .expect("quota")
        .body;
    assert_eq!(view.quota, 0);
    let _ = order_client(&order);
}
