//! Redis dies mid-drop: the gate keeps answering with its fallback limiter, says it is
//! degraded, never answers SOLD_OUT for the outage, and when Redis comes back (empty)
//! the job restores the shared quota, counting the passes handed out meanwhile.

use std::time::Duration;

use crate::support::{create_product, free_port, start_gate, start_order, wait_ready_status};
use gate::Config;
use paysaga_common::testkit::{service_token, TestDb};
use paysaga_e2e::private_redis::PrivateRedis;

/// The degraded gauge is process-wide; these tests run one at a time so each sees its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_survives_a_lost_redis_and_restores_the_quota() {
    let _serial = SERIAL.lock().await;
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    let product = create_product(&order, 10).await;
    let port = free_port();
    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    let mut config = Config::local(&redis.url(), "outage:", &order.url);
    config.recompute_interval = Duration::from_secs(1);
    config.redis_timeout = Duration::from_secs(1);
    let gate = start_gate(config).await;
    let http = reqwest::Client::new();
    assert_eq!(
        wait_ready_status(gate.url(), "ready").await["status"],
        "ready"
    );

    // Three passes through the shared quota: 7 left.
    let mut before = Vec::new();
    for i in 0..3 {
        before.push(
            gate.buyer(&http, &format!("early-{i}"))
                .issue_pass(product)
                .await
                .expect("pass")
                .body,
        );
    }
    assert_eq!(
        gate.service_client()
            .quota(product)
            .await
            .expect("quota")
            .body
            .quota,
        7
    );

    redis.kill();

    // Still answered: the fallback admits up to the last known quota (7), then asks
    // buyers to retry; it never claims the product is sold out.
    let mut issued = Vec::new();
    let mut unavailable = 0;
    for i in 0..12 {
        match gate
            .buyer(&http, &format!("late-{i}"))
            .issue_pass(product)
            .await
        {
            Ok(p) => issued.push(p.body),
            Err(e) => {
                assert_eq!(e.status(), Some(503), "{e}");
                unavailable += 1;
            }
        }
    }
    assert_eq!((issued.len(), unavailable), (7, 5));
    let r = http
        .post(format!("{}/v1/passes", gate.url()))
        .bearer_auth(paysaga_common::testkit::buyer_token("late-11"))
        .json(&serde_json::json!({"product_id": product}))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], "QUOTA_UNAVAILABLE");

    // A member asking again gets the same pass, with or without Redis.
    let again = gate
        .buyer(&http, "early-0")
        .issue_pass(product)
        .await
        .expect("same pass")
        .body;
    assert_eq!(again, before[0]);
    let again = gate
        .buyer(&http, "late-0")
        .issue_pass(product)
        .await
        .expect("same pass")
        .body;
    assert_eq!(again, issued[0]);

    // Degraded, visibly: /readyz (still 200) and the metric.
    let ready = http
        .get(format!("{}/readyz", gate.url()))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.json::<serde_json::Value>().await.expect("json")["status"],
        "degraded"
    );
    let metrics = http
        .get(format!("{}/metrics", gate.url()))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("gate_redis_degraded 1"), "{metrics}");
    let quota = http
        .get(format!("{}/v1/quota/{product}", gate.url()))
        .bearer_auth(service_token("operator"))
        .send()
        .await
        .expect("answer");
    assert_eq!(quota.status(), 503);

    // Redis comes back empty. The job restores the quota: 10 units, 10 passes in
    // flight (3 from before the outage, 7 from the fallback), none left.
    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    wait_ready_status(gate.url(), "ready").await;
    let view = gate
        .service_client()
        .quota(product)
        .await
        .expect("quota")
        .body;
    assert_eq!((view.quota, view.in_flight), (0, 10));
    let e = gate
        .buyer(&http, "after")
        .issue_pass(product)
        .await
        .expect_err("sold out for real");
    assert_eq!(e.code(), Some("SOLD_OUT"));
    let metrics = http
        .get(format!("{}/metrics", gate.url()))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("gate_redis_degraded 0"), "{metrics}");
    redis.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_started_without_redis_answers_and_recovers_when_it_appears() {
    let _serial = SERIAL.lock().await;
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    let product = create_product(&order, 4).await;
    let port = free_port();
    let mut config = Config::local(&format!("redis://127.0.0.1:{port}/"), "cold:", &order.url);
    config.recompute_interval = Duration::from_secs(1);
    let gate = start_gate(config).await;
    let http = reqwest::Client::new();
    wait_ready_status(gate.url(), "degraded").await;

    // No quota ever seen: the fallback uses the order service's availability (4).
    let mut ok = 0;
    for i in 0..6 {
        match gate
            .buyer(&http, &format!("b{i}"))
            .issue_pass(product)
            .await
        {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e.status(), Some(503), "{e}"),
        }
    }
    assert_eq!(ok, 4);

    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    wait_ready_status(gate.url(), "ready").await;
    let view = gate
        .service_client()
        .quota(product)
        .await
        .expect("quota")
        .body;
    assert_eq!((view.quota, view.in_flight), (0, 4));
    redis.kill();
}
