//! 200 buyers at once for 100 units: exactly 100 reservations, 100 definite SOLD_OUT,
//! no unit held twice, and the unit table agrees with the reservations.

use std::collections::HashSet;

use crate::support::{inconsistencies, live_spread, pass, refused, unit_states, Harness};
use futures::future::join_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_buyers_for_one_hundred_units() {
    let (h, product) = Harness::with_product(100).await;
    let members: Vec<String> = (0..200).map(|i| format!("member-{i}")).collect();
    h.fund(&members).await;

    let results = h.reserve_all(product.id, &members).await;

    let mut created = Vec::new();
    let mut sold_out = 0;
    for r in results {
        match r {
            Ok(a) => {
                assert_eq!(a.status, 201);
                created.push(a.body);
            }
            Err(e) => {
                refused(&e, 409, "SOLD_OUT");
                sold_out += 1;
            }
        }
    }
    assert_eq!(created.len(), 100);
    assert_eq!(sold_out, 100);
    let units: HashSet<i64> = created.iter().map(|r| r.unit_id).collect();
    assert_eq!(units.len(), 100, "a unit was handed out twice");

    // From the tables themselves.
    let (available, reserved, sold) = unit_states(&h.admin, product.id).await;
    assert_eq!((available, reserved, sold), (0, 100, 0));
    let (live, distinct_units, _) = live_spread(&h.admin, product.id).await;
    assert_eq!((live, distinct_units), (100, 100));
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    let view = h.gate().availability(product.id).await.unwrap().body;
    assert_eq!(view.available, 0);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_firing_many_passes_at_once_hold_one_unit_each() {
    // Ten units, fifty passes spread over five members, each member firing all of
    // theirs at once and replaying each pass twice: each member ends with one
    // reservation (replays of its pass get it back), every other pass is refused as
    // over the member's limit, and five units stay on sale.
    let (h, product) = Harness::with_product(10).await;
    h.fund(&["m0", "m1", "m2", "m3", "m4"]).await;
    let mut calls = Vec::new();
    for i in 0..50 {
        let member = format!("m{}", i % 5);
        let token = pass(product.id, &member);
        for _ in 0..2 {
            let client = h.buyer(&member);
            let token = token.clone();
            calls.push(async move { client.reserve(product.id, &token).await });
        }
    }
    let results = join_all(calls).await;
    let ids: HashSet<uuid::Uuid> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|a| a.body.id)
        .collect();
    assert_eq!(ids.len(), 5, "one reservation per member");
    // Each member's winning pass is answered twice (made, then replayed); the other
    // nine passes of each member, both times, are refused.
    let (mut created, mut replayed, mut over_limit) = (0, 0, 0);
    for r in &results {
        match r {
            Ok(a) if a.status == 201 => created += 1,
            Ok(a) => {
                assert_eq!(a.status, 200, "a replay");
                replayed += 1;
            }
            Err(e) => {
                refused(e, 409, "MEMBER_LIMIT_REACHED");
                over_limit += 1;
            }
        }
    }
    assert_eq!((created, replayed, over_limit), (5, 5, 90));
    let members = h.count(r#"SELECT COUNT(DISTINCT member_id) FROM order_service.reservations WHERE state = 'RESERVED'"#).await;
    assert_eq!(members, 5);
    assert_eq!(unit_states(&h.admin, product.id).await, (5, 5, 0));
    h.stop_consistent().await;
}
