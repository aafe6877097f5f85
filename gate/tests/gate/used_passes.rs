//! A pass that made a reservation stops counting as in flight at the next recompute,
//! long before it expires: its unit has already left the order service's availability,
//! and counting it twice would turn buyers away from units still on sale.

use std::time::Duration;

use crate::support::{start_gate, Sale};
use gate::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_pass_frees_the_quota_it_double_counted() {
    let sale = Sale::start(3).await;
    let gate = start_gate(Config {
        // Passes outlive the test: only the used-pass rule can give units back here.
        pass_ttl: Duration::from_secs(600),
        recompute_interval: Duration::from_secs(3600),
        ..sale.config()
    })
    .await;

    gate.pass("alice", sale.product).await;
    let bob_pass = gate.pass("bob", sale.product).await;
    sale.reserve("bob", &bob_pass.pass).await;

    let report = gate.state.recompute.run_once().await;
    assert_eq!((report.recomputed, report.failed), (1, 0));
    let view = gate.quota(sale.product).await;
    // 2 units available, alice's pass unused in flight, bob's used: quota 1.
    assert_eq!((view.quota, view.in_flight), (1, 1));

    // Bob still holds one live pass: asking again returns it, no second unit.
    let again = gate.pass("bob", sale.product).await;
    assert_eq!(again.pass_id, bob_pass.pass_id);
    assert_eq!(gate.quota(sale.product).await.quota, 1);

    // Carol gets the unit the old rule (available - all passes = 0) kept off sale.
    let carol_pass = gate.pass("carol", sale.product).await;
    sale.reserve("carol", &carol_pass.pass).await;
    gate.assert_sold_out("dave", sale.product).await;

    // Recomputing again with every pass known changes nothing: 1 available, alice in flight.
    gate.state.recompute.run_once().await;
    assert_eq!(
        (
            gate.quota(sale.product).await.quota,
            gate.quota(sale.product).await.in_flight
        ),
        (0, 1)
    );

    let pool = sale.db.admin_pool().await;
    let (reserved, available): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE state = 'RESERVED'), COUNT(*) FILTER (WHERE state = 'AVAILABLE')
           FROM order_service.product_stock WHERE product_id = $1"#,
    )
    .bind(sale.product)
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(
        (reserved, available),
        (2, 1),
        "alice's unit is still held for her"
    );
}
