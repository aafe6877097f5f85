//! Two gate instances on one Redis, 1,000 buyers at once for 100 units: exactly 100
//! passes, each one accepted by the real order service's verifier and reservation.

use std::{collections::HashSet, time::Duration};

use crate::support::{count, order_buyer, start_gate, Sale};
use paysaga_common::{keys::DevKey, pass::PassVerifier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_buyers_on_two_gates_get_exactly_one_hundred_passes() {
    let sale = Sale::start(100).await;

    let mut config = sale.config();
    config.recompute_interval = Duration::from_secs(3600);
    // Exactly the stock holds while Redis answers; a Redis call slower than the timeout
    // puts a gate in degraded mode, whose fallback passes are advisory (the order
    // service still never oversells; gate/tests/outage.rs covers that). On a loaded CI
    // machine 1,000 concurrent calls can exceed the 250 ms default, so this test waits.
    config.redis_timeout = Duration::from_secs(10);
    let gates = [start_gate(config.clone()).await, start_gate(config).await];

    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let client = gates[i % 2].buyer(&format!("buyer-{i}"));
            tokio::spawn(async move { (i, client.issue_pass(sale.product).await) })
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
        assert_eq!(claims.prd, sale.product);
        assert_eq!(claims.mem, format!("buyer-{i}"));
        assert_eq!(claims.pid, p.pass_id);
        assert!(ids.insert(p.pass_id), "pass ids are unique");
    }

    // Redis agrees: no quota left, 100 passes in flight.
    let view = gates[0].quota(sale.product).await;
    assert_eq!((view.quota, view.in_flight), (0, 100));

    // The real order service accepts every pass; PostgreSQL holds exactly 100
    // reservations and no unit is left.
    for (i, p) in &passes {
        let r = order_buyer(&sale.order, &format!("buyer-{i}"))
            .await
            .reserve(sale.product, &p.pass)
            .await
            .expect("reservation with a gate pass");
        assert_eq!(r.body.product_id, sale.product);
    }
    let pool = sale.db.admin_pool().await;
    let (reservations, distinct_passes): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*), COUNT(DISTINCT pass_id) FROM order_service.reservations WHERE product_id = $1"#,
    )
    .bind(sale.product)
    .fetch_one(&pool)
    .await
    .expect("count reservations");
    assert_eq!((reservations, distinct_passes), (100, 100));
    let available = count(
        &sale,
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'AVAILABLE'"#,
    )
    .await;
    assert_eq!(available, 0);

    // A recompute now still finds nothing to give: the used passes are counted once.
    let report = gates[1].state.recompute.run_once().await;
    assert_eq!(report.recomputed, 1);
    assert_eq!(gates[1].quota(sale.product).await.quota, 0);
}
