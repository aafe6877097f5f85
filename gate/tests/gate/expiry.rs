//! The recompute job: a pass that expires unused gives its unit back; a pass that was
//! used does not (its unit is gone from the order service's availability instead).

use std::time::Duration;

use crate::support::{count, start_gate, Gate, Sale};

/// Sleeps until the wall clock is past `exp` (unix seconds), so the pass is expired.
async fn until_past(exp: i64) {
    while chrono::Utc::now().timestamp() <= exp {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gate whose passes expire `ttl` after issue, with no allowance for clock skew, and
/// whose recompute job runs every `recompute_every`.
async fn expiring_gate(sale: &Sale, ttl: Duration, recompute_every: Duration) -> Gate {
    let mut config = sale.config();
    config.pass_ttl = ttl;
    config.clock_skew = Duration::ZERO;
    config.recompute_interval = recompute_every;
    start_gate(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_expired_pass_returns_its_unit_and_a_used_one_does_not() {
    let sale = Sale::start(2).await;
    // The test drives the job itself, so what it checks does not depend on timing. Bob
    // must still reserve with his pass after three more requests, so passes live long
    // enough for that on a loaded machine.
    let gate = expiring_gate(&sale, Duration::from_secs(5), Duration::from_secs(3600)).await;

    let unused = gate.pass("alice", sale.product).await;
    let used = gate.pass("bob", sale.product).await;
    gate.assert_sold_out("carol", sale.product).await;
    assert_eq!(
        (
            gate.quota(sale.product).await.quota,
            gate.quota(sale.product).await.in_flight
        ),
        (0, 2)
    );
    sale.reserve("bob", &used.pass).await;

    until_past(
        unused
            .expires_at
            .timestamp()
            .max(used.expires_at.timestamp()),
    )
    .await;
    let report = gate.state.recompute.run_once().await;
    assert_eq!((report.recomputed, report.failed), (1, 0));
    let view = gate.quota(sale.product).await;
    assert_eq!(
        (view.quota, view.in_flight),
        (1, 0),
        "alice's unit is back, bob's is reserved"
    );

    let pass = gate.pass("carol", sale.product).await;
    gate.assert_sold_out("dave", sale.product).await;
    sale.reserve("carol", &pass.pass).await;

    let reserved = count(
        &sale,
        r#"SELECT COUNT(*) FROM order_service.reservations WHERE product_id = $1 AND state = 'RESERVED'"#,
    )
    .await;
    assert_eq!(reserved, 2, "both units reserved, none twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduled_job_returns_units_of_expired_passes() {
    let sale = Sale::start(1).await;
    let gate = expiring_gate(&sale, Duration::from_secs(1), Duration::from_secs(1)).await;

    let pass = gate.pass("alice", sale.product).await;
    until_past(pass.expires_at.timestamp()).await;
    // No manual run: wait for the scheduler to return the unit.
    let mut got = None;
    for _ in 0..300 {
        match gate.buyer("bob").issue_pass(sale.product).await {
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
