//! Hoarding: a member holds at most one live reservation of a product, and reserves and
//! buys at most `PURCHASE_CAP` units of it, whatever passes they bring, fresh or expired.
//! Refusals write nothing, checked in the tables.

use std::time::Duration;

use crate::support::{
    claims, pass, refused, reservation_state, signer, snapshot, unit_states, Harness,
};

/// The hoarder sends `token` for the product: the answer, which must be a success.
async fn hoarder_sends(
    h: &Harness,
    product_id: i64,
    token: &str,
) -> paysaga_common::client::Answer<paysaga_contracts::order::api::Reservation> {
    h.funded("hoarder")
        .await
        .reserve(product_id, token)
        .await
        .expect("reservation answered")
}

async fn refused_without_writing(h: &Harness, product_id: i64, member: &str) {
    let before = snapshot(&h.admin).await;
    let err = h
        .funded(member)
        .await
        .reserve(product_id, &pass(product_id, member))
        .await
        .expect_err("over the member's limit");
    refused(&err, 409, "MEMBER_LIMIT_REACHED");
    assert_eq!(snapshot(&h.admin).await, before, "a refusal writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pass_cannot_hold_a_second_unit_until_the_first_reservation_ends() {
    let (h, product) = Harness::with_product(5).await;
    let first_pass = pass(product.id, "hoarder");
    let first = hoarder_sends(&h, product.id, &first_pass).await.body;

    // While it lives, any new pass is refused; the same pass replays the reservation.
    refused_without_writing(&h, product.id, "hoarder").await;
    let again = hoarder_sends(&h, product.id, &first_pass).await;
    assert_eq!(again.body.id, first.id);
    assert_eq!(unit_states(&h.admin, product.id).await, (4, 1, 0));

    // Expired: the unit is back and the member may reserve again.
    h.make_due(first.id).await;
    h.service().cancel(first.id).await.unwrap();
    let second = h.reserve_as("hoarder", product.id).await;
    assert_ne!(second.id, first.id);

    // Cancelled: the same.
    h.service().cancel(second.id).await.unwrap();
    let third = h.reserve_as("hoarder", product.id).await;

    // Bought: with the default cap of one, no further unit.
    h.service().confirm(third.id).await.unwrap();
    refused_without_writing(&h, product.id, "hoarder").await;
    assert_eq!(unit_states(&h.admin, product.id).await, (4, 0, 1));

    // Another product is another limit.
    let other = h.product(1).await;
    h.try_reserve_as("hoarder", other.id).await.unwrap();
    h.stop_consistent().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_of_two_allows_a_second_purchase_but_never_two_live_reservations() {
    let h = Harness::start_with(|c| c.purchase_cap = 2).await;
    let product = h.product(5).await;
    let first = h.reserve_as("fan", product.id).await;
    refused_without_writing(&h, product.id, "fan").await;
    h.service().confirm(first.id).await.unwrap();
    let second = h.reserve_as("fan", product.id).await;
    refused_without_writing(&h, product.id, "fan").await;
    h.service().confirm(second.id).await.unwrap();
    refused_without_writing(&h, product.id, "fan").await;
    assert_eq!(unit_states(&h.admin, product.id).await, (3, 0, 2));
    let orders = h.count(r#"SELECT COUNT(*) FROM order_service.orders WHERE member_id = 'fan' AND state = 'CONFIRMED'"#).await;
    assert_eq!(orders, 2);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_expired_under_a_live_reservation_frees_nothing() {
    // A cap of two, so "only up to the cap" is seen after the first reservation ends.
    let h = Harness::start_with(|c| {
        c.sweep_interval = Duration::from_secs(3600);
        c.purchase_cap = 2;
    })
    .await;
    let product = h.product(5).await;
    let mut short = claims(product.id, "hoarder");
    short.exp = chrono::Utc::now().timestamp() + 2;
    let first_pass = signer().sign(&short);
    let first = hoarder_sends(&h, product.id, &first_pass).await;
    assert_eq!(first.status, 201);
    let first = first.body;

    // The pass expires while its reservation lives; the service sees it expired: the
    // same expiry on a pass that reserved nothing is refused as expired.
    while chrono::Utc::now().timestamp() < short.exp {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut twin = claims(product.id, "bystander");
    twin.exp = short.exp;
    let before = snapshot(&h.admin).await;
    let expired = h
        .reserve_with("bystander", product.id, &signer().sign(&twin))
        .await
        .expect_err("an expired pass");
    assert_eq!(expired.code(), Some("PASS_EXPIRED"), "{expired}");
    assert_eq!(snapshot(&h.admin).await, before, "a refusal writes nothing");

    // A fresh pass does not get round the live reservation, and writes nothing.
    refused_without_writing(&h, product.id, "hoarder").await;
    // The expired pass itself still answers with the reservation it made.
    let again = hoarder_sends(&h, product.id, &first_pass).await;
    assert_eq!((again.status, again.body.id), (200, first.id));
    assert_eq!(unit_states(&h.admin, product.id).await, (4, 1, 0));

    // The reservation expires: the member may reserve again.
    h.make_due(first.id).await;
    assert_eq!(
        order::sweep::sweep(&h.service_pool().await, 100, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(reservation_state(&h.admin, first.id).await, "EXPIRED");
    let second = h.reserve_as("hoarder", product.id).await;
    refused_without_writing(&h, product.id, "hoarder").await;

    // Cancelled: again; then bought twice, up to the cap and no further.
    h.service().cancel(second.id).await.unwrap();
    let mut bought = Vec::new();
    for _ in 0..2 {
        let r = h.reserve_as("hoarder", product.id).await;
        refused_without_writing(&h, product.id, "hoarder").await;
        h.service().confirm(r.id).await.unwrap();
        bought.push(r.id);
    }
    refused_without_writing(&h, product.id, "hoarder").await;

    let states: Vec<(String, i64)> = sqlx::query_as(
        r#"
        SELECT state, COUNT(*) FROM order_service.reservations
        WHERE member_id = 'hoarder' GROUP BY state ORDER BY state
        "#,
    )
    .fetch_all(&h.admin)
    .await
    .unwrap();
    assert_eq!(
        states,
        [("CANCELLED", 1), ("CONFIRMED", 2), ("EXPIRED", 1)].map(|(s, n)| (s.to_owned(), n))
    );
    let orders = h.count(r#"SELECT COUNT(*) FROM order_service.orders WHERE member_id = 'hoarder' AND state = 'CONFIRMED'"#).await;
    assert_eq!(orders, 2);
    assert_eq!(unit_states(&h.admin, product.id).await, (3, 0, 2));
    h.stop_consistent().await;
}
