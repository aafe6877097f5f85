//! Confirm, cancel and expiry fired at the same reservations at once, many times:
//! exactly one wins each, every loser gets the answer that matches the winner, and the
//! reservation and unit tables always agree.

use std::collections::HashMap;

use crate::support::{inconsistencies, reservation_state, unit_states, Harness};
use futures::future::join_all;
use paysaga_common::client::CallError;
use paysaga_contracts::order::api::ReservationState;
use uuid::Uuid;

const ROUNDS: usize = 6;
const PER_ROUND: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirm_cancel_and_expiry_race_with_one_winner_each() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let mut finals: HashMap<String, usize> = HashMap::new();

    for round in 0..ROUNDS {
        let product = h.product(PER_ROUND as i64).await;
        let mut reservations = Vec::new();
        for i in 0..PER_ROUND {
            let member = format!("r{round}-m{i}");
            let r = h.reserve_as(&member, product.id).await;
            reservations.push((member, r.id));
        }
        // Just before the race, so expiry competes with confirm and cancel.
        h.scatter_deadlines(product.id).await;

        type Answers = (
            Uuid,
            Vec<Result<paysaga_contracts::order::api::Reservation, CallError>>,
            Result<paysaga_contracts::order::api::Reservation, CallError>,
        );
        let racers = reservations.iter().map(|(member, id)| {
            let service = h.service();
            let buyer = h.buyer(member);
            let id = *id;
            async move {
                let (c1, c2, cancel) =
                    tokio::join!(service.confirm(id), service.confirm(id), buyer.cancel(id));
                let confirms = vec![c1.map(|a| a.body), c2.map(|a| a.body)];
                (id, confirms, cancel.map(|a| a.body)) as Answers
            }
        });
        let sweeps = async {
            let (a, b) = tokio::join!(
                order::sweep::sweep(&pool, 5, 100),
                order::sweep::sweep(&pool, 5, 100)
            );
            a.unwrap() + b.unwrap()
        };
        let (answers, _swept) = tokio::join!(join_all(racers), sweeps);

        for (id, confirms, cancel) in answers {
            let state = reservation_state(&h.admin, id).await;
            *finals.entry(state.clone()).or_default() += 1;
            match state.as_str() {
                "CONFIRMED" => {
                    let orders: Vec<Uuid> = confirms
                        .iter()
                        .map(|c| {
                            c.as_ref()
                                .expect("confirm lost to a confirm")
                                .order_id
                                .expect("order id")
                        })
                        .collect();
                    assert_eq!(
                        orders[0], orders[1],
                        "two different orders for one reservation"
                    );
                    let e = cancel.expect_err("buyer cancel of a paid reservation must be refused");
                    assert_eq!(e.code(), Some("RESERVATION_CONFIRMED"));
                }
                ended @ ("CANCELLED" | "EXPIRED") => {
                    let (code, cancel_says, state) = if ended == "CANCELLED" {
                        (
                            "RESERVATION_CANCELLED",
                            "cancel won",
                            ReservationState::Cancelled,
                        )
                    } else {
                        (
                            "RESERVATION_EXPIRED",
                            "cancel answers the expiry",
                            ReservationState::Expired,
                        )
                    };
                    for c in &confirms {
                        assert_eq!(c.as_ref().err().and_then(|e| e.code()), Some(code));
                    }
                    assert_eq!(cancel.expect(cancel_says).state, state);
                }
                other => panic!("reservation {id} left in {other} after the race"),
            }
        }
        assert_eq!(
            inconsistencies(&h.admin).await,
            Vec::<String>::new(),
            "round {round}"
        );
        let (available, reserved, sold) = unit_states(&h.admin, product.id).await;
        assert_eq!(reserved, 0);
        assert_eq!(available + sold, PER_ROUND as i64);
    }
    // The scattered deadlines make every kind of winner show up; print them for the record.
    println!("winners over {} races: {finals:?}", ROUNDS * PER_ROUND);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_cancel_racing_confirm_leaves_tables_consistent() {
    let (h, product) = Harness::with_product(30).await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let member = format!("m{i}");
        ids.push(h.reserve_as(&member, product.id).await.id);
    }
    let races = ids.iter().map(|id| {
        let (a, b) = (h.service(), h.service());
        let id = *id;
        async move { tokio::join!(a.confirm(id), b.cancel(id)) }
    });
    for (confirm, cancel) in join_all(races).await {
        // The service cancel always ends CANCELLED (it may cancel a confirmed order);
        // a confirm either came first (200) or was told CANCELLED.
        assert_eq!(cancel.unwrap().body.state, ReservationState::Cancelled);
        if let Err(e) = confirm {
            assert_eq!(e.code(), Some("RESERVATION_CANCELLED"));
        }
    }
    assert_eq!(unit_states(&h.admin, product.id).await, (30, 0, 0));
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    let confirmed_orders = h
        .count(r#"SELECT COUNT(*) FROM order_service.orders WHERE state = 'CONFIRMED'"#)
        .await;
    assert_eq!(confirmed_orders, 0);
    h.stop().await;
}
