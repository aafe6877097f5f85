//! The FIFO waitlist: join rules and codes, positions, leaving; every path that brings
//! a unit back offers it to the head of the line in its own transaction (sweep, expiry
//! on touch, cancel, a batch of one and one of two rounds, refund, units added); offers
//! taken, expired, released; only the offered member can have the unit; events in the
//! outbox.

use std::time::Duration;

use crate::support::{offered_members, offered_units, pass, rows_by, unit_states, Harness};
use paysaga_contracts::order::api::{
    events, OfferMade, OfferState, OrderOp, Reservation, ReservationState, WaitlistEntry,
    WaitlistState,
};
use sqlx::PgPool;
use uuid::Uuid;

/// Sold out: `units` units, each held by a live reservation of `holder-{i}`.
async fn sold_out(h: &Harness, units: i64, prefix: &str) -> (i64, Vec<Reservation>) {
    let product = h.product(units).await;
    let held = h.reserve_many(product.id, units as usize, prefix).await;
    (product.id, held)
}

/// `members` join the product's line in order; their entries.
/// A product of two units, both reserved (by `holder-0` and `holder-1`), and `w-1` then
/// `w-2` waiting in line for it.
async fn two_held_two_waiting(h: &Harness) -> (i64, Vec<Reservation>) {
    let (pid, held) = sold_out(h, 2, "holder").await;
    join_all(h, pid, &names("w", 2)).await;
    (pid, held)
}

async fn join_all(h: &Harness, product_id: i64, members: &[String]) -> Vec<WaitlistEntry> {
    let mut out = Vec::new();
    for m in members {
        let a = h.buyer(m).join_waitlist(product_id).await.expect("join");
        assert_eq!(a.status, 201, "{m}");
        out.push(a.body);
    }
    out
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The member a unit is on offer to, if any.
async fn offered_to(admin: &PgPool, unit_id: i64) -> Option<String> {
    sqlx::query_scalar(
        r#"SELECT member_id FROM order_service.waitlist_offers WHERE unit_id = $1 AND state = 'OFFERED'"#,
    )
    .bind(unit_id)
    .fetch_optional(admin)
    .await
    .unwrap()
}

async fn entry_state(admin: &PgPool, product_id: i64, member: &str) -> String {
    sqlx::query_scalar(
        r#"SELECT state FROM order_service.waitlist_entries
           WHERE product_id = $1 AND member_id = $2 ORDER BY seq DESC LIMIT 1"#,
    )
    .bind(product_id)
    .bind(member)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Outbox events of a type, oldest first: (subject, data).
async fn outbox(admin: &PgPool, kind: &str) -> Vec<(String, serde_json::Value)> {
    rows_by(
        admin,
        r#"SELECT subject, data FROM order_service.outbox_events WHERE type = $1 ORDER BY seq"#,
        kind,
    )
    .await
}

/// Moves every live offer's deadline into the past.
async fn offers_due(admin: &PgPool) {
    sqlx::query(
        r#"UPDATE order_service.waitlist_offers SET expires_at = now() - INTERVAL '1 second' WHERE state = 'OFFERED'"#,
    )
    .execute(admin)
    .await
    .unwrap();
}

/// The member's entry of the product, as the member reads it.
async fn entry(h: &Harness, product_id: i64, member: &str) -> WaitlistEntry {
    h.buyer(member)
        .waitlist_entry(product_id)
        .await
        .unwrap()
        .body
}

/// The offer the member's entry holds.
async fn offer_of(h: &Harness, product_id: i64, member: &str) -> Uuid {
    let e = entry(h, product_id, member).await;
    assert_eq!(e.state, WaitlistState::Offered, "{e:?}");
    let o = e.offer.expect("offer");
    assert_eq!(o.state, OfferState::Offered);
    o.offer_id
}

#[tokio::test]
async fn join_rules_codes_positions_and_leaving() {
    let h = Harness::start().await;
    // Units on sale: buy instead.
    let open = h.product(2).await;
    let e = h.buyer("early").join_waitlist(open.id).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(409), Some("NOT_SOLD_OUT")));
    // Every unit paid for: nothing is on sale, so the member may wait (the gate answers
    // SOLD_OUT here too), and a unit a refund brings back (the service cancels the
    // confirmed reservation) is offered to the line, not put back on sale.
    let gone = h.product(1).await;
    let r = h.reserve_many(gone.id, 1, "gone").await;
    h.service().confirm(r[0].id).await.unwrap();
    let joined = h.buyer("late").join_waitlist(gone.id).await.unwrap();
    assert_eq!(
        (joined.status, joined.body.state, joined.body.position),
        (201, WaitlistState::Waiting, Some(1))
    );
    h.service().cancel(r[0].id).await.unwrap();
    assert_eq!(
        offered_to(&h.admin, r[0].unit_id).await.as_deref(),
        Some("late")
    );
    // Unknown product, a service credential.
    let e = h.buyer("early").join_waitlist(999_999).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(404), Some("PRODUCT_NOT_FOUND"))
    );
    let e = h.operator().join_waitlist(gone.id).await.unwrap_err();
    assert_eq!(e.status(), Some(403));

    let (pid, held) = sold_out(&h, 2, "holder").await;
    // A member holding a unit is at the cap (1): no waiting for a second.
    let e = h.buyer("holder-0").join_waitlist(pid).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(409), Some("MEMBER_LIMIT_REACHED"))
    );

    let members = names("w", 3);
    let entries = join_all(&h, pid, &members).await;
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.state, WaitlistState::Waiting);
        assert_eq!(e.position, Some(i as i64 + 1));
        assert_eq!(e.member_id.as_str(), members[i]);
        assert_eq!(e.offer, None);
    }
    // Joining again is the same entry, 200.
    let again = h.buyer("w-2").join_waitlist(pid).await.unwrap();
    assert_eq!((again.status, &again.body), (200, &entries[1]));
    let product = h.operator().product(pid).await.unwrap().body;
    assert_eq!(
        (product.waiting, product.offered, product.reserved),
        (3, 0, 2)
    );

    // The first leaves: the others move up. Leaving twice: not on the list.
    let left = h.buyer("w-1").leave_waitlist(pid).await.unwrap().body;
    assert_eq!((left.state, left.position), (WaitlistState::Left, None));
    let e = h.buyer("w-1").leave_waitlist(pid).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(404), Some("NOT_ON_WAITLIST")));
    let e = h.buyer("nobody").waitlist_entry(pid).await.unwrap_err();
    assert_eq!(e.code(), Some("NOT_ON_WAITLIST"));
    assert_eq!(entry(&h, pid, "w-1").await.state, WaitlistState::Left);
    assert_eq!(entry(&h, pid, "w-2").await.position, Some(1));
    assert_eq!(entry(&h, pid, "w-3").await.position, Some(2));
    // Re-joining after leaving goes to the back of the line.
    let back = h.buyer("w-1").join_waitlist(pid).await.unwrap();
    assert_eq!(back.status, 201);
    assert_ne!(back.body.id, entries[0].id);
    assert_eq!(back.body.position, Some(3));

    // The line is served in order: w-2 first.
    h.buyer("holder-0").cancel(held[0].id).await.unwrap();
    assert_eq!(
        offered_to(&h.admin, held[0].unit_id).await.as_deref(),
        Some("w-2")
    );
    assert_eq!(entry(&h, pid, "w-3").await.position, Some(1));
    h.stop_consistent().await;
}

#[tokio::test]
async fn every_return_path_offers_the_unit_to_the_head_of_the_line() {
    let h = Harness::start().await;
    let pool = h.service_pool().await;
    let (pid, held) = sold_out(&h, 7, "holder").await;
    let members = names("w", 9);
    join_all(&h, pid, &members).await;

    // 1. The sweep.
    h.make_due(held[0].id).await;
    assert_eq!(order::sweep::sweep(&pool, 100, 10).await.unwrap(), 1);
    // 2. Expiry on touch (a late confirm).
    h.make_due(held[1].id).await;
    let e = h.service().confirm(held[1].id).await.unwrap_err();
    assert_eq!(e.code(), Some("RESERVATION_EXPIRED"));
    // 3. The owner's cancel.
    h.buyer("holder-2").cancel(held[2].id).await.unwrap();
    // 4. A batch of one cancel: the handoff runs inside its statement.
    let replies = order::settle::batch(
        &pool,
        &[OrderOp::Cancel {
            reservation_id: held[3].id,
        }],
    )
    .await
    .unwrap();
    assert_eq!(replies[0].status, 200);
    // 5. A batch naming the reservation twice (a cancel, then a lookup): two rounds.
    let replies = order::settle::batch(
        &pool,
        &[
            OrderOp::Cancel {
                reservation_id: held[4].id,
            },
            OrderOp::Reservation {
                reservation_id: held[4].id,
            },
        ],
    )
    .await
    .unwrap();
    assert_eq!(replies[1].status, 200);
    // 6. A refund: a confirmed order cancelled by a service.
    h.service().confirm(held[5].id).await.unwrap();
    let refunded = h.service().cancel(held[5].id).await.unwrap().body;
    assert_eq!(refunded.state, ReservationState::Cancelled);

    // Each unit went to the next in line, in order, and none is on sale.
    for (i, r) in held[..6].iter().enumerate() {
        assert_eq!(
            offered_to(&h.admin, r.unit_id).await.as_deref(),
            Some(members[i].as_str()),
            "unit of path {}",
            i + 1
        );
        assert_eq!(entry_state(&h.admin, pid, &members[i]).await, "OFFERED");
    }
    assert_eq!(unit_states(&h.admin, pid).await, (0, 1, 0));
    assert_eq!(offered_units(&h.admin, pid).await, 6);
    let avail = h.gate().availability(pid).await.unwrap().body.available;
    assert_eq!(avail, 0, "the gate never counts an offered unit");
    let product = h.operator().product(pid).await.unwrap().body;
    assert_eq!(
        (
            product.available,
            product.reserved,
            product.offered,
            product.sold,
            product.waiting
        ),
        (0, 1, 6, 0, 3)
    );
    assert_eq!(product.units_total, 7);

    // 7. Units added by an operator: as many as there are waiters are offered, in
    //    order; the rest go on sale.
    let added = h.operator().add_units(pid, 5).await.unwrap().body;
    assert_eq!(
        (added.available, added.offered, added.waiting),
        (2, 9, 0),
        "{added:?}"
    );
    let mut offered = offered_members(&h.admin, pid).await;
    offered.sort();
    let mut expected = members.clone();
    expected.sort();
    assert_eq!(offered, expected);

    // The outbox told it all: two expiries, nine offers, each with its subject.
    let expired = outbox(&h.admin, events::RESERVATION_EXPIRED).await;
    let expired_ids: Vec<String> = expired.iter().map(|e| e.0.clone()).collect();
    assert_eq!(
        expired_ids,
        [held[0].id.to_string(), held[1].id.to_string()]
    );
    let made = outbox(&h.admin, events::OFFER_MADE).await;
    assert_eq!(made.len(), 9);
    for (i, (subject, data)) in made.iter().enumerate() {
        let data: OfferMade = serde_json::from_value(data.clone()).unwrap();
        assert_eq!(&data.offer_id, subject);
        assert_eq!(data.member_id, members[i], "offers made in line order");
        assert_eq!(data.product_id, pid.to_string());
        let e = entry(&h, pid, &members[i]).await;
        let o = e.offer.unwrap();
        assert_eq!(
            (o.offer_id.to_string(), o.unit_id.to_string()),
            (data.offer_id, data.unit_id)
        );
        assert_eq!(o.expires_at, data.expires_at);
    }
    h.stop_consistent().await;
}

#[tokio::test]
async fn with_nobody_waiting_a_returned_unit_goes_back_on_sale() {
    let h = Harness::start().await;
    let (pid, held) = sold_out(&h, 2, "holder").await;
    h.buyer("holder-0").cancel(held[0].id).await.unwrap();
    assert_eq!(unit_states(&h.admin, pid).await, (1, 1, 0));
    assert_eq!(h.gate().availability(pid).await.unwrap().body.available, 1);
    assert!(outbox(&h.admin, events::OFFER_MADE).await.is_empty());
    h.stop_consistent().await;
}

#[tokio::test]
async fn only_the_offered_member_takes_the_unit_before_the_deadline() {
    let h = Harness::start().await;
    let (pid, held) = two_held_two_waiting(&h).await;
    h.buyer("holder-0").cancel(held[0].id).await.unwrap();
    let offer = offer_of(&h, pid, "w-1").await;

    // A pass never takes an offered unit; another member, a waiter behind, a service
    // cannot take the offer.
    let e = h
        .funded("passer")
        .await
        .reserve(pid, &pass(pid, "passer"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("SOLD_OUT"));
    for who in ["w-2", "stranger"] {
        let e = h.funded(who).await.take_offer(offer).await.unwrap_err();
        assert_eq!(
            (e.status(), e.code()),
            (Some(404), Some("OFFER_NOT_FOUND")),
            "{who}"
        );
    }
    let e = h.service().take_offer(offer).await.unwrap_err();
    assert_eq!(e.status(), Some(403));
    let e = h
        .funded("w-1")
        .await
        .take_offer(Uuid::now_v7())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("OFFER_NOT_FOUND"));

    // The member takes it: a reservation of that unit, paid like any other.
    let taken = h.funded("w-1").await.take_offer(offer).await.unwrap();
    assert_eq!(taken.status, 201);
    let r = taken.body;
    assert_eq!(
        (r.unit_id, r.state, r.member_id.as_str()),
        (held[0].unit_id, ReservationState::Reserved, "w-1")
    );
    assert_eq!(r.price, held[0].price);
    let again = h.funded("w-1").await.take_offer(offer).await.unwrap();
    assert_eq!((again.status, &again.body), (200, &r));
    let (pass_id, offer_id): (Option<Uuid>, Option<Uuid>) =
        sqlx::query_as(r#"SELECT pass_id, offer_id FROM order_service.reservations WHERE id = $1"#)
            .bind(r.id)
            .fetch_one(&h.admin)
            .await
            .unwrap();
    assert_eq!((pass_id, offer_id), (None, Some(offer)));
    let e = entry(&h, pid, "w-1").await;
    assert_eq!(e.state, WaitlistState::Taken);
    let o = e.offer.unwrap();
    assert_eq!((o.state, o.reservation_id), (OfferState::Taken, Some(r.id)));
    // The orchestrator finds it by id and confirms it as usual.
    assert_eq!(h.service().reservation(r.id).await.unwrap().body, r);
    let confirmed = h.service().confirm(r.id).await.unwrap().body;
    assert_eq!(confirmed.state, ReservationState::Confirmed);

    // The next offer runs out: refused after its deadline, the unit passes on (nobody
    // left: back on sale).
    h.buyer("holder-1").cancel(held[1].id).await.unwrap();
    let late = offer_of(&h, pid, "w-2").await;
    offers_due(&h.admin).await;
    let e = h.funded("w-2").await.take_offer(late).await.unwrap_err();
    assert_eq!((e.status(), e.code()), (Some(409), Some("OFFER_EXPIRED")));
    assert_eq!(entry_state(&h.admin, pid, "w-2").await, "EXPIRED");
    assert_eq!(unit_states(&h.admin, pid).await, (1, 0, 1));
    assert_eq!(outbox(&h.admin, events::OFFER_EXPIRED).await.len(), 1);
    let e = h.funded("w-2").await.take_offer(late).await.unwrap_err();
    assert_eq!(e.code(), Some("OFFER_EXPIRED"));
    h.stop_consistent().await;
}

#[tokio::test]
async fn an_expired_offer_passes_to_the_next_and_is_never_made_again() {
    let h = Harness::start_with(|c| {
        c.sweep_interval = Duration::from_secs(3600);
        c.waitlist_offer_ttl = Duration::from_secs(30);
    })
    .await;
    let pool = h.service_pool().await;
    let (pid, held) = sold_out(&h, 1, "holder").await;
    join_all(&h, pid, &names("w", 3)).await;
    h.buyer("holder-0").cancel(held[0].id).await.unwrap();
    let first = offer_of(&h, pid, "w-1").await;
    let e = entry(&h, pid, "w-1").await;
    let ttl = e.offer.unwrap().expires_at - e.updated_at;
    assert_eq!(
        ttl.num_seconds(),
        30,
        "the entry keeps the joining service's offer TTL"
    );

    // Not due: the sweep leaves it.
    assert_eq!(order::waitlist::sweep(&pool, 100, 10).await.unwrap(), 0);
    offers_due(&h.admin).await;
    assert_eq!(order::waitlist::sweep(&pool, 100, 10).await.unwrap(), 1);
    assert_eq!(entry_state(&h.admin, pid, "w-1").await, "EXPIRED");
    offer_of(&h, pid, "w-2").await;
    let expired = outbox(&h.admin, events::OFFER_EXPIRED).await;
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].0, first.to_string());
    assert_eq!(expired[0].1["member_id"], "w-1");
    assert_eq!(expired[0].1["unit_id"], held[0].unit_id.to_string());

    // w-2 leaves while holding the offer: it passes to w-3.
    let left = h.buyer("w-2").leave_waitlist(pid).await.unwrap().body;
    assert_eq!(left.state, WaitlistState::Left);
    assert_eq!(left.offer.unwrap().state, OfferState::Released);
    offer_of(&h, pid, "w-3").await;
    // w-3's runs out too; nobody left: on sale. Nobody was offered twice.
    offers_due(&h.admin).await;
    assert_eq!(order::waitlist::sweep(&pool, 100, 10).await.unwrap(), 1);
    assert_eq!(unit_states(&h.admin, pid).await, (1, 0, 0));
    let per_member: Vec<(String, i64)> = sqlx::query_as(
        r#"SELECT member_id, COUNT(*) FROM order_service.waitlist_offers GROUP BY member_id ORDER BY member_id"#,
    )
    .fetch_all(&h.admin)
    .await
    .unwrap();
    assert_eq!(
        per_member,
        [("w-1".into(), 1), ("w-2".into(), 1), ("w-3".into(), 1)]
    );
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_member_at_the_cap_when_a_unit_comes_back_is_skipped() {
    let h = Harness::start().await;
    let (pid, held) = two_held_two_waiting(&h).await;
    // w-1 reaches the cap (1) while waiting: only a claim racing the join can do that,
    // so it is made here by hand, holder-1's reservation becoming w-1's.
    sqlx::query(r#"UPDATE order_service.reservations SET member_id = 'w-1' WHERE id = $1"#)
        .bind(held[1].id)
        .execute(&h.admin)
        .await
        .unwrap();
    h.buyer("holder-0").cancel(held[0].id).await.unwrap();
    assert_eq!(entry_state(&h.admin, pid, "w-1").await, "SKIPPED");
    assert_eq!(
        offered_to(&h.admin, held[0].unit_id).await.as_deref(),
        Some("w-2")
    );
    // Skipped is final: the next unit does not go to w-1 either (nobody waits: on sale).
    h.service().cancel(held[1].id).await.unwrap();
    assert_eq!(unit_states(&h.admin, pid).await, (1, 0, 0));
    assert_eq!(offered_units(&h.admin, pid).await, 1);
    h.stop_consistent().await;
}
