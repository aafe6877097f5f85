//! The shared quota in a Redis that speaks TLS only (`rediss://`): a gate trusting the
//! Redis certificate's CA (`TLS_CA_FILE`) sells through it, and one that does not trust
//! it never reaches it (degraded: its answers come from the fallback limiter, the quota
//! in Redis untouched).

use paysaga_common::testkit::TestPki;
use paysaga_e2e::{private_redis::PrivateRedis, tls_files};

use crate::support::{count, start_gate, start_ready_gate, wait_ready_status, Sale};

/// The quota left for `product` under `prefix`, read from Redis itself.
async fn quota_in_redis(redis: &PrivateRedis, prefix: &str, product: i64) -> Option<i64> {
    let mut conn = redis.connection().await.expect("a TLS connection to Redis");
    redis::cmd("GET")
        .arg(gate::keys::ProductKeys::new(prefix, product).quota)
        .query_async(&mut conn)
        .await
        .expect("GET the quota")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_lives_in_a_tls_redis_reached_only_through_a_trusted_ca() {
    let pki = TestPki::for_names(&["127.0.0.1"]);
    let files = pki.files();
    let redis = PrivateRedis::start_tls(tls_files(&files))
        .await
        .expect("a Redis serving TLS only");
    assert!(
        redis.url().starts_with("rediss://127.0.0.1:"),
        "{}",
        redis.url()
    );
    let sale = Sale::start(3).await;

    // The gate trusts the test's CA: its recompute writes the quota into Redis over TLS,
    // and every pass is taken from it there.
    let mut config = gate::Config::local(&redis.url(), "tls:", &sale.order.url);
    config.process.trust = pki.trust();
    let gate = start_ready_gate(config).await;
    assert_eq!(quota_in_redis(&redis, "tls:", sale.product).await, Some(3));
    let pass = gate.pass("tls-buyer", sale.product).await;
    assert_eq!(quota_in_redis(&redis, "tls:", sale.product).await, Some(2));
    sale.reserve("tls-buyer", &pass.pass).await;
    let reserved = count(
        &sale,
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1 AND state = 'RESERVED'"#,
    )
    .await;
    assert_eq!(reserved, 1);

    // A gate with the platform's roots only: the handshake fails (unknown issuer), so
    // it never reaches Redis; it says it is degraded and spends nothing there.
    let stranger = start_gate(gate::Config::local(
        &redis.url(),
        "tls-stranger:",
        &sale.order.url,
    ))
    .await;
    wait_ready_status(stranger.url(), "degraded").await;
    assert_eq!(
        quota_in_redis(&redis, "tls-stranger:", sale.product).await,
        None
    );
    assert_eq!(quota_in_redis(&redis, "tls:", sale.product).await, Some(2));

    // The server has no plain port: a `redis://` client on it gets no answer.
    let plain = redis::Client::open(redis.url().replacen("rediss://", "redis://", 1))
        .expect("a plain client");
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        plain.get_multiplexed_async_connection(),
    )
    .await;
    assert!(
        !matches!(answer, Ok(Ok(_))),
        "a plain connection to the TLS port was accepted"
    );
}
