//! A product that admits only accounts made before its announcement: a newer member
//! (or one with no known sign-up time) is refused with the rule's code before any quota
//! is spent; an older one gets a pass and reserves with it. The same for a product that
//! admits only members whose email is verified, as their token says.

use chrono::{Duration, Utc};
use gate::Config;
use paysaga_common::{
    auth::Minter,
    testkit::{buyer_token, verified_buyer_token, TestDb, TestRedis},
};
use paysaga_contracts::{
    eligibility::{codes, member_id_signed_up_at, EligibilityRule},
    gate::client::GateClient,
    order::api::CreateProduct,
};

use crate::support::{order_buyer, order_client, start_gate, start_order};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_made_after_the_announcement_take_no_pass_and_spend_no_quota() {
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    let announced = Utc::now();
    let product = order_client(&order)
        .create_product(&CreateProduct {
            name: "members' drop".into(),
            price: 12_900,
            units: 3,
            reservation_ttl_secs: None,
            eligibility: vec![EligibilityRule::AccountCreatedBefore { at: announced }],
        })
        .await
        .expect("product")
        .body
        .id;
    let redis = TestRedis::new();
    let gate = start_gate(Config::local(&redis.url, &redis.prefix, &order.url)).await;

    let newcomer = member_id_signed_up_at(announced + Duration::milliseconds(5));
    for member in [newcomer.as_str(), "member-without-a-sign-up-time"] {
        for _ in 0..3 {
            let e = gate
                .buyer(member)
                .issue_pass(product)
                .await
                .expect_err("ineligible");
            assert_eq!(e.refusal(), Some((403, codes::ACCOUNT_TOO_NEW)), "{member}");
        }
    }
    let view = gate.quota(product).await;
    assert_eq!((view.quota, view.in_flight), (3, 0), "no quota spent");

    let veteran = member_id_signed_up_at(announced - Duration::days(30));
    let pass = gate.pass(&veteran, product).await;
    order_buyer(&order, &veteran)
        .await
        .reserve(product, &pass.pass)
        .await
        .expect("the veteran reserves");
    let holders: Vec<String> = sqlx::query_scalar(
        "SELECT member_id FROM order_service.reservations WHERE product_id = $1",
    )
    .bind(product)
    .fetch_all(&db.admin_pool().await)
    .await
    .expect("reservations");
    assert_eq!(holders, vec![veteran]);
    let metrics = gate.metrics().await;
    assert!(
        metrics.contains(r#"gate_ineligible_total{rule="account_created_before"} 6"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_email_is_not_verified_takes_no_pass_and_spends_no_quota() {
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    let product = order_client(&order)
        .create_product(&CreateProduct {
            name: "verified members' drop".into(),
            price: 12_900,
            units: 2,
            reservation_ttl_secs: None,
            eligibility: vec![EligibilityRule::EmailVerified],
        })
        .await
        .expect("product")
        .body;
    assert_eq!(product.eligibility, vec![EligibilityRule::EmailVerified]);
    let product = product.id;
    let redis = TestRedis::new();
    let gate = start_gate(Config::local(&redis.url, &redis.prefix, &order.url)).await;

    // A token without the claim, or saying false: refused before any quota is taken.
    let unverified = member_id_signed_up_at(Utc::now());
    let tokens = [
        buyer_token(&unverified),
        Minter::dev_buyer().mint_buyer(&unverified, false, std::time::Duration::from_secs(600)),
    ];
    for token in &tokens {
        for _ in 0..2 {
            let e = GateClient::new(
                gate.url(),
                token.clone(),
                std::time::Duration::from_secs(10),
            )
            .issue_pass(product)
            .await
            .expect_err("ineligible");
            assert_eq!(
                (e.status(), e.code()),
                (Some(403), Some(codes::EMAIL_NOT_VERIFIED))
            );
        }
    }
    let view = gate.quota(product).await;
    assert_eq!((view.quota, view.in_flight), (2, 0), "no quota spent");

    let verified = member_id_signed_up_at(Utc::now());
    let pass = GateClient::new(
        gate.url(),
        verified_buyer_token(&verified),
        std::time::Duration::from_secs(10),
    )
    .issue_pass(product)
    .await
    .expect("a verified member's pass")
    .body;
    let view = gate.quota(product).await;
    assert_eq!((view.quota, view.in_flight), (1, 1), "the pass took one");
    order_buyer(&order, &verified)
        .await
        .reserve(product, &pass.pass)
        .await
        .expect("the verified member reserves");
    let holders: Vec<String> = sqlx::query_scalar(
        "SELECT member_id FROM order_service.reservations WHERE product_id = $1",
    )
    .bind(product)
    .fetch_all(&db.admin_pool().await)
    .await
    .expect("reservations");
    assert_eq!(holders, vec![verified]);
    let metrics = gate.metrics().await;
    assert!(
        metrics.contains(r#"gate_ineligible_total{rule="email_verified"} 4"#),
        "{metrics}"
    );
}
