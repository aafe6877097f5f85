//! Redis dies mid-drop: the gate keeps answering with its fallback limiter, says it is
//! degraded, never answers SOLD_OUT for the outage, and when Redis comes back (empty)
//! the job restores the shared quota, counting the passes handed out meanwhile.

use paysaga_common::auth::Audience;
use std::time::Duration;

use crate::support::{free_port, start_gate, start_ready_gate, wait_ready_status, Gate, Sale};
use paysaga_common::testkit::service_token;
use paysaga_e2e::private_redis::PrivateRedis;

/// The degraded gauge is process-wide; these tests run one at a time so each sees its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Asks for a pass for each of `members` while Redis is away: the passes the fallback
/// limiter issued, and how many were refused with 503 (never SOLD_OUT).
async fn without_redis(
    gate: &Gate,
    product: i64,
    members: impl Iterator<Item = String>,
) -> (Vec<gate::api::PassIssued>, usize) {
    let mut issued = Vec::new();
    let mut unavailable = 0;
    for member in members {
        match gate.buyer(&member).issue_pass(product).await {
            Ok(p) => issued.push(p.body),
            Err(e) => {
                assert_eq!(e.status(), Some(503), "{member}: {e}");
                unavailable += 1;
            }
        }
    }
    (issued, unavailable)
}

/// Waits for Redis to be used again, and checks the quota is rebuilt with every unit in
/// flight.
async fn quota_rebuilt(gate: &Gate, product: i64, units: i64) {
    wait_ready_status(gate.url(), "ready").await;
    let view = gate.quota(product).await;
    assert_eq!((view.quota, view.in_flight), (0, units));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_survives_a_lost_redis_and_restores_the_quota() {
    let _serial = SERIAL.lock().await;
    let sale = Sale::start(10).await;
    let port = free_port();
    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    let mut config = gate::Config::local(&redis.url(), "outage:", &sale.order.url);
    config.recompute_interval = Duration::from_secs(1);
    config.redis_timeout = Duration::from_secs(1);
    let gate = start_ready_gate(config).await;
    let http = &gate.http;

    // Three passes through the shared quota: 7 left.
    let mut before = Vec::new();
    for i in 0..3 {
        before.push(gate.pass(&format!("early-{i}"), sale.product).await);
    }
    assert_eq!(gate.quota(sale.product).await.quota, 7);

    redis.kill();

    // Still answered: the fallback admits up to the last known quota (7), then asks
    // buyers to retry; it never claims the sale.product is sold out.
    let (issued, unavailable) =
        without_redis(&gate, sale.product, (0..12).map(|i| format!("late-{i}"))).await;
    assert_eq!((issued.len(), unavailable), (7, 5));
    let r = http
        .post(format!("{}/v1/passes", gate.url()))
        .bearer_auth(paysaga_common::testkit::buyer_token("late-11"))
        .json(&serde_json::json!({"product_id": sale.product}))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["code"], "QUOTA_UNAVAILABLE");

    // A member asking again gets the same pass, with or without Redis.
    assert_eq!(gate.pass("early-0", sale.product).await, before[0]);
    assert_eq!(gate.pass("late-0", sale.product).await, issued[0]);

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
    let metrics = gate.metrics().await;
    assert!(metrics.contains("gate_redis_degraded 1"), "{metrics}");
    let quota = http
        .get(format!("{}/v1/quota/{}", gate.url(), sale.product))
        .bearer_auth(service_token("operator", Audience::Gate))
        .send()
        .await
        .expect("answer");
    assert_eq!(quota.status(), 503);

    // Redis comes back empty. The job restores the quota: 10 units, 10 passes in
    // flight (3 from before the outage, 7 from the fallback), none left.
    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    quota_rebuilt(&gate, sale.product, 10).await;
    gate.assert_sold_out("after", sale.product).await;
    let metrics = gate.metrics().await;
    assert!(metrics.contains("gate_redis_degraded 0"), "{metrics}");
    redis.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_started_without_redis_answers_and_recovers_when_it_appears() {
    let _serial = SERIAL.lock().await;
    let sale = Sale::start(4).await;
    let port = free_port();
    let mut config = gate::Config::local(
        &format!("redis://127.0.0.1:{port}/"),
        "cold:",
        &sale.order.url,
    );
    config.recompute_interval = Duration::from_secs(1);
    let gate = start_gate(config).await;
    wait_ready_status(gate.url(), "degraded").await;

    // No quota ever seen: the fallback uses the order service's availability (4).
    let (issued, _) = without_redis(&gate, sale.product, (0..6).map(|i| format!("b{i}"))).await;
    assert_eq!(issued.len(), 4);

    let mut redis = PrivateRedis::start_on(port).await.expect("private redis");
    quota_rebuilt(&gate, sale.product, 4).await;
    redis.kill();
}
