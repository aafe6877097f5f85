//! A stuck database answers fast and definitely (503, nothing half-written), and a
//! client that hangs up does not cut a state change short.

use paysaga_common::auth::Audience;
use std::time::Duration;

use crate::support::{orders_of, reservation_state, unit_states, Harness};
use paysaga_common::testkit::service_token;
use paysaga_contracts::order::{api::ReservationState, client::OrderClient};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// Another session holding the reservation's row lock until the returned transaction
/// ends.
async fn lock_reservation(h: &Harness, id: Uuid) -> Transaction<'static, Postgres> {
    let mut tx = h.admin.begin().await.unwrap();
    sqlx::query(r#"SELECT 1 FROM order_service.reservations WHERE id = $1 FOR UPDATE"#)
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

#[tokio::test]
async fn a_lock_held_too_long_becomes_a_503_and_changes_nothing() {
    let h = Harness::start_with(|c| {
        c.sweep_interval = Duration::from_secs(3600);
        c.database.limits.statement_timeout_ms = 300;
    })
    .await;
    let product = h.product(1).await;
    let r = h.reserve_as("alice", product.id).await;

    // Another session holds the reservation's row lock and does not let go.
    let tx = lock_reservation(&h, r.id).await;

    let e = h.service().confirm(r.id).await.unwrap_err();
    assert_eq!(e.status(), Some(503), "{e}");
    assert_eq!(reservation_state(&h.admin, r.id).await, "RESERVED");
    assert_eq!(unit_states(&h.admin, product.id).await, (0, 1, 0));

    tx.rollback().await.unwrap();
    let confirmed = h.service().confirm(r.id).await.unwrap().body;
    assert_eq!(confirmed.state, ReservationState::Confirmed);
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_confirm_whose_caller_gave_up_still_completes() {
    let (h, _, r) = Harness::with_reservation(1).await;

    let tx = lock_reservation(&h, r.id).await;

    // The caller times out and hangs up while the confirm waits for the lock.
    let impatient = OrderClient::new(
        &h.base,
        service_token("orchestrator", Audience::Order),
        Duration::from_millis(200),
    );
    let e = impatient.confirm(r.id).await.unwrap_err();
    assert_eq!(e.status(), None, "expected a client-side timeout: {e}");
    tx.rollback().await.unwrap();

    // The confirm goes on without its caller; wait for it (bounded), then check it
    // did exactly one thing and a retry sees that same outcome.
    for _ in 0..100 {
        if reservation_state(&h.admin, r.id).await == "CONFIRMED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reservation_state(&h.admin, r.id).await, "CONFIRMED");
    let retry = h.service().confirm(r.id).await.unwrap().body;
    assert_eq!(retry.state, ReservationState::Confirmed);
    assert_eq!(
        orders_of(&h.admin, r.id).await,
        vec!["CONFIRMED"],
        "one order"
    );
    h.stop_consistent().await;
}
