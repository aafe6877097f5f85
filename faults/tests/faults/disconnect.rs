//! A buyer whose client gives up on `POST /v1/payments` after the payment was created
//! (a mobile client losing its connection): the payment must still finish, and the
//! Idempotency-Key must then hold its answer, so the buyer's retry is a replay, not an
//! `IDEMPOTENCY_KEY_IN_PROGRESS` for as long as the request's lease lasts.
//!
//! A regression test for a bug this suite found (docs/faults.md, regression tests): the
//! orchestrator now runs the owned request in its own task.
//!
//! The account service's PostgreSQL link is slowed so the debit (several round trips)
//! takes over a second while the payment's creation is quick; the client drops its
//! request as soon as the payment row exists in PostgreSQL.

use std::time::{Duration, Instant};

use paysaga_drop::{Admin, Driver, Endpoints};
use paysaga_e2e::{Link, Stack, StackOptions};
use paysaga_supervisor::ServiceKind;

const PRICE: i64 = 5_000;
/// Long enough that the request's lease cannot be what settles the key within the wait.
const LEASE_MS: u64 = 60_000;

async fn poll<T>(
    what: &str,
    bound: Duration,
    mut probe: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{what}: not within {bound:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_disconnects_mid_request_gets_a_replay_on_retry() -> anyhow::Result<()> {
    let stack = Stack::start(
        StackOptions::new("faults-disconnect")
            .proxy(Link::Database(ServiceKind::Account))
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 200)
            .env(ServiceKind::Orchestrator, "DOWNSTREAM_TIMEOUT_MS", 10_000)
            .env(ServiceKind::Orchestrator, "RESPONSE_WAIT_MS", 20_000)
            .env(ServiceKind::Orchestrator, "LEASE_MS", LEASE_MS)
            .env_all("DB_MAX_CONNECTIONS", 4),
    )
    .await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(Duration::from_secs(30));
    let admin = Admin::new(endpoints.clone(), http);
    let product = admin.create_product("disconnect", PRICE, 1).await?;
    let buyer = admin.open_buyer("disconnect-buyer", PRICE * 2).await?;
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints, Duration::from_secs(30));
    let mut retries = 0;
    let pass = driver.pass(&buyer, product.id, &mut retries).await?;
    let reservation = driver
        .reserve(&buyer, product.id, &pass.pass, &mut retries)
        .await?;
    let pool = stack.admin_pool().await;
    let key = format!("disconnect-{}", reservation.id);

    stack
        .proxy(Link::Database(ServiceKind::Account))
        .expect("proxied")
        .set_latency(Duration::from_millis(150));
    let request = {
        let (driver, buyer, key) = (driver.clone(), buyer.clone(), key.clone());
        tokio::spawn(async move { driver.post_payment(&buyer, reservation.id, &key).await })
    };
    let payment_id: uuid::Uuid = poll("the payment row", Duration::from_secs(30), async || {
        Ok(sqlx::query_scalar(
            r#"SELECT id FROM payment_service.payments WHERE reservation_id = $1"#,
        )
        .bind(reservation.id)
        .fetch_optional(&pool)
        .await?)
    })
    .await?;
    // The client goes away while the debit is still in flight.
    request.abort();
    let state_at_disconnect: String =
        sqlx::query_scalar(r#"SELECT state FROM payment_service.payments WHERE id = $1"#)
            .bind(payment_id)
            .fetch_one(&pool)
            .await?;
    let _ = request.await;

    let state: String = poll("a terminal payment", Duration::from_secs(60), async || {
        Ok(sqlx::query_scalar(
            r#"SELECT state FROM payment_service.payments WHERE id = $1 AND state IN ('COMPLETED', 'FAILED', 'REFUNDED')"#,
        )
        .bind(payment_id)
        .fetch_optional(&pool)
        .await?)
    })
    .await?;
    stack
        .proxy(Link::Database(ServiceKind::Account))
        .expect("proxied")
        .heal();
    assert_eq!(
        state, "COMPLETED",
        "the payment finished without its client"
    );

    // The request that created it owns the key until it stores an answer; with no
    // client left it must still store one. Waited for well inside the lease, so a
    // later takeover cannot be what settles it.
    let record = poll(
        "the Idempotency-Key's answer",
        Duration::from_secs(20),
        async || {
            let status: String = sqlx::query_scalar(
                r#"SELECT status FROM payment_service.idempotency_keys WHERE idem_key = $1"#,
            )
            .bind(&key)
            .fetch_one(&pool)
            .await?;
            Ok((status == "COMPLETED").then_some(status))
        },
    )
    .await;
    let retry = driver.post_payment(&buyer, reservation.id, &key).await;
    eprintln!(
        "payment {payment_id} was {state_at_disconnect} at the disconnect, then {state}; \
         key record completed: {}; retry answered: {:?}",
        record.is_ok(),
        retry.as_ref().map(|a| (a.status, a.replayed, a.payment.id))
    );
    record?;
    let retry = retry?;
    assert!(retry.replayed, "the retry is a replay of the stored answer");
    assert_eq!(retry.payment.id, payment_id);
    Ok(())
}
