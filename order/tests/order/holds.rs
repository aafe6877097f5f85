//! Every reservation holds its price on the buyer's account first: an account that
//! cannot pay takes no unit, a cancel gives the money back, a hold no reservation was
//! made of is reconciled away, a product may set its own hold time, and taking a
//! waitlist offer holds like a claim. Units, reservations, holds and balances are read
//! from the tables.

use paysaga_common::auth::Audience;
use std::time::{Duration, Instant};

use paysaga_common::testkit::service_token;
use paysaga_common::{auth::MemberId, money::Amount};
use paysaga_contracts::{
    account::{
        api::{AccountBatch, AccountOp, HoldRequest, HoldTtl, OperationKey},
        client::AccountClient,
    },
    order::api::{hold_key, CreateProduct, Reservation, ReservationState},
};

use crate::support::{claims, inconsistencies, pass, refused, signer, unit_states, Harness, FUNDS};

const PRICE: i64 = 12_900;

/// Polls `probe` until it returns true, for up to ten seconds.
async fn until(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `member` reserves a unit of `product_id` with pass `token`, paying from the account as
/// it stands (nothing funded first): the reservation, which must be made.
async fn reserve(h: &Harness, member: &str, product_id: i64, token: &str) -> Reservation {
    h.buyer(member)
        .reserve(product_id, token)
        .await
        .expect("reserved")
        .body
}

/// The hold releases the order service owes, from the table: `(not yet marked done,
/// marked done)`.
async fn hold_releases(h: &Harness) -> (i64, i64) {
    sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE released_at IS NULL),
                  COUNT(*) FILTER (WHERE released_at IS NOT NULL)
           FROM order_service.hold_releases"#,
    )
    .fetch_one(&h.admin)
    .await
    .expect("hold releases")
}

/// Holds on accounts, by state, from the table.
async fn holds_by_state(h: &Harness, state: &str) -> i64 {
    h.count_by(
        r#"SELECT COUNT(*) FROM account_service.holds WHERE state = $1"#,
        state,
    )
    .await
}

/// The account reservation `id` names as the one its price is held on, from the table.
async fn held_on(h: &Harness, id: uuid::Uuid) -> Option<i64> {
    sqlx::query_scalar(r#"SELECT account_id FROM order_service.reservations WHERE id = $1"#)
        .bind(id)
        .fetch_one(&h.admin)
        .await
        .expect("the reservation")
}

fn as_order(h: &Harness) -> AccountClient {
    AccountClient::new(
        &h.account_url,
        service_token("order", Audience::Account),
        Duration::from_secs(10),
    )
}

/// The hold of pass `pid`'s first attempt, of `PRICE` on `member`'s account, placed as
/// the order service places it: the id of the reservation it is for.
async fn place_first_hold(h: &Harness, pid: uuid::Uuid, member: &str) -> uuid::Uuid {
    let first = order::funds::reservation_id(order::funds::Source::Pass(pid), 0);
    let hold = HoldRequest {
        operation_key: OperationKey::parse(hold_key(first)).unwrap(),
        member_id: MemberId::parse(member).unwrap(),
        amount: Amount::new(PRICE).unwrap(),
        ttl_secs: HoldTtl::new(600).unwrap(),
    };
    as_order(h).place_hold(&hold).await.expect("placed");
    first
}

#[tokio::test]
async fn an_account_that_cannot_pay_takes_no_unit() {
    let (h, product) = Harness::with_product(3).await;
    h.open_account("poor", PRICE - 1).await;

    let poor_pass = claims(product.id, "poor");
    let e = h
        .buyer("poor")
        .reserve(product.id, &signer().sign(&poor_pass))
        .await
        .expect_err("refused");
    refused(&e, 422, "INSUFFICIENT_FUNDS");
    // The gate stops counting the pass in flight: its unit is for someone who can pay.
    let used = h
        .gate()
        .used_passes(&[poor_pass.pid])
        .await
        .expect("used passes")
        .body
        .used;
    assert_eq!(used, vec![poor_pass.pid]);
    let e = h
        .buyer("nobody")
        .reserve(product.id, &pass(product.id, "nobody"))
        .await
        .expect_err("refused");
    refused(&e, 422, "NO_ACCOUNT");

    assert_eq!(unit_states(&h.admin, product.id).await, (3, 0, 0));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM order_service.reservations")
            .await,
        0
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM account_service.holds").await,
        0,
        "nothing held"
    );
    assert_eq!(h.funds_of("poor").await, (PRICE - 1, 0));

    // Topped up, the same pass reserves.
    let poor = h.open_account("poor", PRICE - 1).await;
    h.deposit("topup:poor", "poor", poor, 1).await;
    let r = reserve(&h, "poor", product.id, &pass(product.id, "poor")).await;
    assert_eq!(h.funds_of("poor").await, (PRICE, PRICE));
    assert_eq!(h.hold_state(r.id).await.as_deref(), Some("HELD"));
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_reservation_holds_its_price_until_its_own_deadline() {
    let (h, product, r) = Harness::with_reservation(2).await;
    assert_eq!(h.funds_of("alice").await, (FUNDS, PRICE));
    let (amount, deadline, account): (i64, chrono::DateTime<chrono::Utc>, i64) = sqlx::query_as(
        r#"SELECT amount, expires_at, account_id FROM account_service.holds WHERE operation_key = $1 AND state = 'HELD'"#,
    )
    .bind(hold_key(r.id))
    .fetch_one(&h.admin)
    .await
    .expect("its hold");
    assert_eq!(amount, r.price);
    assert_eq!(
        deadline, r.expires_at,
        "the hold lapses with the reservation"
    );
    // The reservation names the account its price is held on, stored and answered.
    assert_eq!(held_on(&h, r.id).await, Some(account));
    assert_eq!(r.account_id, Some(account));

    // A second pass of a member with a live reservation is refused, and the hold it
    // placed given back.
    let again = h
        .buyer("alice")
        .reserve(product.id, &pass(product.id, "alice"))
        .await
        .expect_err("one live reservation per member");
    assert_eq!(again.code(), Some("MEMBER_LIMIT_REACHED"));
    assert_eq!(h.funds_of("alice").await, (FUNDS, PRICE));
    h.stop_consistent().await;
}

#[tokio::test]
async fn two_reservations_never_count_the_same_money() {
    let (h, a) = Harness::with_product(5).await;
    let b = h.product(5).await;
    h.open_account("once", PRICE).await;
    let buyer = h.buyer("once");
    let (pa, pb) = (pass(a.id, "once"), pass(b.id, "once"));
    let (ra, rb) = tokio::join!(buyer.reserve(a.id, &pa), buyer.reserve(b.id, &pb));
    let refused = match (ra, rb) {
        (Ok(_), Err(e)) | (Err(e), Ok(_)) => e,
        other => panic!("exactly one reservation: {other:?}"),
    };
    assert_eq!(refused.code(), Some("INSUFFICIENT_FUNDS"));
    assert_eq!(h.funds_of("once").await, (PRICE, PRICE));
    let taken = unit_states(&h.admin, a.id).await.1 + unit_states(&h.admin, b.id).await.1;
    assert_eq!(taken, 1, "no unit stays taken for the refused one");
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_cancel_gives_the_money_back_with_the_unit() {
    let (h, product, r) = Harness::with_reservation(1).await;
    h.buyer("alice").cancel(r.id).await.expect("cancelled");
    assert_eq!(unit_states(&h.admin, product.id).await, (1, 0, 0));
    // The account service releases the hold, then the order service marks the release
    // it owed as done once it has the answer: wait for both.
    until("the hold's release, and its mark", async || {
        h.hold_state(r.id).await.as_deref() == Some("RELEASED") && hold_releases(&h).await.0 == 0
    })
    .await;
    assert_eq!(h.funds_of("alice").await, (FUNDS, 0));
    assert_eq!(
        hold_releases(&h).await,
        (0, 1),
        "owed by the cancel's own transaction, once, and marked done"
    );
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_claim_that_gets_no_unit_gives_its_hold_back_and_the_pass_tries_again() {
    let (h, product) = Harness::with_product(1).await;
    let holder = h.reserve_as("holder", product.id).await;
    h.fund(&["late"]).await;
    let c = claims(product.id, "late");
    let token = signer().sign(&c);
    let e = h
        .buyer("late")
        .reserve(product.id, &token)
        .await
        .expect_err("sold out");
    assert_eq!(e.code(), Some("SOLD_OUT"));
    assert_eq!(
        h.funds_of("late").await,
        (FUNDS, 0),
        "its hold given back at once"
    );
    assert_eq!(holds_by_state(&h, "RELEASED").await, 1);

    // The unit comes back; the same pass now makes a reservation, funded by a hold of
    // its own (the first attempt's is spent).
    h.service().cancel(holder.id).await.expect("cancelled");
    let r = reserve(&h, "late", product.id, &token).await;
    assert_eq!(r.member_id.as_str(), "late");
    assert_eq!(h.hold_state(r.id).await.as_deref(), Some("HELD"));
    assert_eq!(h.funds_of("late").await, (FUNDS, PRICE));
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_retry_after_a_crash_between_hold_and_claim_uses_the_same_hold() {
    let (h, product) = Harness::with_product(2).await;
    h.open_account("alice", PRICE).await;
    let c = claims(product.id, "alice");
    // The first attempt's hold, as the order service placed it before dying.
    let first = place_first_hold(&h, c.pid, "alice").await;
    // The retry: the balance covers one hold only, and it is this one.
    let r = reserve(&h, "alice", product.id, &signer().sign(&c)).await;
    assert_eq!(r.id, first);
    assert_eq!(h.funds_of("alice").await, (PRICE, PRICE));
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_hold_no_reservation_was_made_of_is_released_after_the_grace() {
    let h = Harness::start_with(|c| c.hold_orphan_grace = Duration::from_millis(600)).await;
    let product = h.product(2).await;
    h.open_account("ghost", PRICE).await;
    let c = claims(product.id, "ghost");
    let first = place_first_hold(&h, c.pid, "ghost").await;
    // A live reservation's hold stays.
    let kept = h.reserve_as("alice", product.id).await;
    until("the orphan's release", async || {
        h.hold_state(first).await.as_deref() == Some("RELEASED")
    })
    .await;
    assert_eq!(h.funds_of("ghost").await, (PRICE, 0));
    // Past its window, the pass's first attempt is spent and it reserves with a new one.
    let r = reserve(&h, "ghost", product.id, &signer().sign(&c)).await;
    assert_ne!(r.id, first);
    assert_eq!(h.hold_state(kept.id).await.as_deref(), Some("HELD"));
    assert_eq!(h.hold_state(r.id).await.as_deref(), Some("HELD"));
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_product_may_hold_for_a_time_of_its_own() {
    let h = Harness::start().await;
    let short = h
        .operator()
        .create_product(&CreateProduct {
            name: "two-minute drop".into(),
            price: PRICE,
            units: 2,
            reservation_ttl_secs: Some(120),
            eligibility: Vec::new(),
        })
        .await
        .expect("created")
        .body;
    assert_eq!(short.reservation_ttl_secs, Some(120));
    let r = h.reserve_as("alice", short.id).await;
    let (held_for, reserved_for): (f64, f64) = sqlx::query_as(
        r#"SELECT EXTRACT(EPOCH FROM h.expires_at - h.created_at)::FLOAT8,
                  EXTRACT(EPOCH FROM r.expires_at - h.created_at)::FLOAT8
           FROM account_service.holds h
           JOIN order_service.reservations r ON r.id = $2
           WHERE h.operation_key = $1"#,
    )
    .bind(hold_key(r.id))
    .bind(r.id)
    .fetch_one(&h.admin)
    .await
    .expect("hold and reservation");
    assert_eq!((held_for, reserved_for), (120.0, 120.0));
    let default = h.product(1).await;
    assert_eq!(default.reservation_ttl_secs, None);
    let d = h.reserve_as("bob", default.id).await;
    let secs = (d.expires_at - d.created_at).num_seconds();
    assert!((595..=600).contains(&secs), "the service's 600 s: {secs}");

    for bad in [0, 86_401] {
        let e = h
            .operator()
            .create_product(&CreateProduct {
                name: "bad".into(),
                price: PRICE,
                units: 1,
                reservation_ttl_secs: Some(bad),
                eligibility: Vec::new(),
            })
            .await
            .expect_err("out of range");
        refused(&e, 422, "INVALID_RESERVATION_TTL");
    }
    h.stop_consistent().await;
}

#[tokio::test]
async fn taking_a_waitlist_offer_holds_the_price_like_a_claim() {
    let (h, product) = Harness::with_product(1).await;
    let holder = h.reserve_as("holder", product.id).await;
    h.open_account("waiter", PRICE - 1).await;
    h.buyer("waiter")
        .join_waitlist(product.id)
        .await
        .expect("joined");
    h.buyer("holder")
        .cancel(holder.id)
        .await
        .expect("cancelled");
    let entry = h
        .buyer("waiter")
        .waitlist_entry(product.id)
        .await
        .expect("entry")
        .body;
    let offer = entry.offer.expect("offered").offer_id;

    let e = h
        .buyer("waiter")
        .take_offer(offer)
        .await
        .expect_err("cannot pay");
    refused(&e, 422, "INSUFFICIENT_FUNDS");
    assert_eq!(crate::support::offered_units(&h.admin, product.id).await, 1);
    assert_eq!(h.funds_of("waiter").await, (PRICE - 1, 0));

    let account = h.open_account("waiter", PRICE - 1).await;
    h.deposit("topup:waiter", "waiter", account, 1).await;
    let taken = h.buyer("waiter").take_offer(offer).await.expect("taken");
    assert_eq!(taken.status, 201);
    assert_eq!(taken.body.state, ReservationState::Reserved);
    assert_eq!(
        taken.body.id,
        order::funds::reservation_id(order::funds::Source::Offer(offer), 0)
    );
    assert_eq!(h.hold_state(taken.body.id).await.as_deref(), Some("HELD"));
    assert_eq!(h.funds_of("waiter").await, (PRICE, PRICE));
    assert_eq!(held_on(&h, taken.body.id).await, Some(account));
    assert_eq!(taken.body.account_id, Some(account));
    let again = h.buyer("waiter").take_offer(offer).await.expect("replay");
    assert_eq!((again.status, again.body.id), (200, taken.body.id));
    assert_eq!(h.funds_of("waiter").await, (PRICE, PRICE), "held once");
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());
    h.stop().await;
}

#[tokio::test]
async fn the_order_service_sends_no_money_movements() {
    let h = Harness::start().await;
    let e = as_order(&h)
        .batch(&AccountBatch::new(vec![AccountOp::Account {
            account_id: 1,
        }]))
        .await
        .expect_err("not its operation");
    assert_eq!(e.code(), Some("FORBIDDEN_CALLER"));
    h.stop().await;
}
