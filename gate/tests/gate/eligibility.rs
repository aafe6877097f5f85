//! A product that admits only accounts made before its announcement: a newer member
//! (or one with no known sign-up time) is refused with the rule's code before any quota
//! is spent; an older one gets a pass and reserves with it.

use chrono::{Duration, Utc};
use gate::Config;
use paysaga_common::testkit::{TestDb, TestRedis};
use paysaga_contracts::{
    eligibility::{codes, member_id_signed_up_at, EligibilityRule},
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
