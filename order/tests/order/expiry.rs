//! Expiry: the sweep returns units to sale (once, even with several sweepers), confirm
//! of an expired reservation is refused and performs the expiry itself, and the
//! scheduled job runs on its own.

use std::time::Duration;

use crate::support::{inconsistencies, refused, reservation_state, unit_states, Harness};
use futures::future::join_all;
use paysaga_contracts::order::api::ReservationState;

#[tokio::test]
async fn swept_unit_goes_to_someone_else_and_the_late_confirm_is_rejected() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let product = h.product(1).await;
    let alice = h.reserve_as("alice", product.id).await;

    let bob_early = h.try_reserve_as("bob", product.id).await.unwrap_err();
    assert_eq!(bob_early.code(), Some("SOLD_OUT"));

    h.make_due(alice.id).await;
    assert_eq!(order::sweep::sweep(&pool, 100, 10).await.unwrap(), 1);
    assert_eq!(reservation_state(&h.admin, alice.id).await, "EXPIRED");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 0, 0));
    assert_eq!(
        h.gate()
            .availability(product.id)
            .await
            .unwrap()
            .body
            .available,
        1
    );

    let bob = h.try_reserve_as("bob", product.id).await.unwrap();
    assert_eq!(bob.status, 201);
    assert_eq!(
        bob.body.unit_id, alice.unit_id,
        "the same unit, back on sale"
    );

    let late = h.service().confirm(alice.id).await.unwrap_err();
    refused(&late, 409, "RESERVATION_EXPIRED");
    let confirmed = h.service().confirm(bob.body.id).await.unwrap().body;
    assert_eq!(confirmed.state, ReservationState::Confirmed);

    assert_eq!(unit_states(&h.admin, product.id).await, (0, 0, 1));
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    // A second sweep finds nothing left to do.
    assert_eq!(order::sweep::sweep(&pool, 100, 10).await.unwrap(), 0);
    h.stop().await;
}

#[tokio::test]
async fn confirm_after_the_deadline_expires_it_without_waiting_for_the_sweep() {
    let (h, product, r) = Harness::with_reservation(2).await;
    h.make_due(r.id).await;

    let e = h.service().confirm(r.id).await.unwrap_err();
    assert_eq!(e.code(), Some("RESERVATION_EXPIRED"));
    assert_eq!(reservation_state(&h.admin, r.id).await, "EXPIRED");
    assert_eq!(unit_states(&h.admin, product.id).await, (2, 0, 0));
    // The same definite answer every time, and a cancel reports the expiry.
    assert_eq!(
        h.service().confirm(r.id).await.unwrap_err().code(),
        Some("RESERVATION_EXPIRED")
    );
    assert_eq!(
        h.buyer("alice").cancel(r.id).await.unwrap().body.state,
        ReservationState::Expired
    );
    let orders = h
        .count(r#"SELECT COUNT(*) FROM order_service.orders"#)
        .await;
    assert_eq!(orders, 0);
    h.stop().await;
}

/// Every reservation's deadline moved into the past.
async fn expire_all(h: &Harness) {
    sqlx::query(
        r#"UPDATE order_service.reservations SET expires_at = now() - INTERVAL '1 second'"#,
    )
    .execute(&h.admin)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_sweepers_at_once_return_each_unit_exactly_once() {
    let (h, pool, product, _) = Harness::all_reserved(300, "m").await;
    expire_all(&h).await;
    // Four "instances", small batches, so they genuinely overlap.
    let sweepers = (0..4).map(|_| {
        let pool = pool.clone();
        async move { order::sweep::sweep(&pool, 20, 1000).await.unwrap() }
    });
    let total: u64 = join_all(sweepers).await.into_iter().sum();
    assert_eq!(total, 300, "every unit returned once, none twice");
    assert_eq!(unit_states(&h.admin, product.id).await, (300, 0, 0));
    let expired = h
        .count(r#"SELECT COUNT(*) FROM order_service.reservations WHERE state = 'EXPIRED'"#)
        .await;
    assert_eq!(expired, 300);
    h.stop_consistent().await;
}

#[tokio::test]
async fn one_sweep_run_is_bounded_by_its_batches() {
    let (h, pool, product, _) = Harness::all_reserved(25, "m").await;
    expire_all(&h).await;
    // 2 batches of 10 per run: the run stops at 20 and the next one finishes the rest.
    assert_eq!(order::sweep::sweep(&pool, 10, 2).await.unwrap(), 20);
    assert_eq!(unit_states(&h.admin, product.id).await, (20, 5, 0));
    assert_eq!(order::sweep::sweep(&pool, 10, 2).await.unwrap(), 5);
    assert_eq!(unit_states(&h.admin, product.id).await, (25, 0, 0));
    h.stop().await;
}

#[tokio::test]
async fn the_scheduled_sweep_runs_by_itself() {
    let h = Harness::start_with(|c| c.sweep_interval = Duration::from_millis(100)).await;
    let product = h.product(1).await;
    let r = h.reserve_as("alice", product.id).await;
    h.make_due(r.id).await;
    // Wait for the job to act (bounded; no assertion on how long it took).
    for _ in 0..300 {
        if reservation_state(&h.admin, r.id).await == "EXPIRED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reservation_state(&h.admin, r.id).await, "EXPIRED");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 0, 0));
    let metrics = h.metrics().await;
    assert!(metrics.contains("order_units_returned_total"), "{metrics}");
    h.stop().await;
}
