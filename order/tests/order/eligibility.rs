//! A product's eligibility rules: stored and listed with it, checked when it is
//! created, and judged before a member joins its waitlist (the gate judges passes).

use chrono::{Duration, Utc};
use paysaga_common::testkit::verified_buyer_token;
use paysaga_contracts::{
    eligibility::{codes, member_id_signed_up_at, EligibilityRule},
    order::{api::CreateProduct, client::OrderClient},
};

use crate::support::{count_by, Harness};

fn product(eligibility: Vec<EligibilityRule>) -> CreateProduct {
    CreateProduct {
        name: "members' drop".into(),
        price: 12_900,
        units: 2,
        reservation_ttl_secs: None,
        eligibility,
    }
}

#[tokio::test]
async fn accounts_made_after_the_announcement_cannot_join_the_waitlist() {
    let h = Harness::start().await;
    // PostgreSQL keeps microseconds.
    let announced =
        chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).expect("now");
    let rules = vec![EligibilityRule::AccountCreatedBefore { at: announced }];
    let created = h
        .operator()
        .create_product(&product(rules.clone()))
        .await
        .expect("created")
        .body;
    assert_eq!(created.eligibility, rules);
    let listed = h.operator().product(created.id).await.expect("read").body;
    assert_eq!(listed.eligibility, rules);
    let stored: Option<chrono::DateTime<Utc>> = sqlx::query_scalar(
        "SELECT accounts_created_before FROM order_service.products WHERE id = $1",
    )
    .bind(created.id)
    .fetch_one(&h.admin)
    .await
    .expect("product row");
    assert_eq!(stored, Some(announced));

    // Made after the announcement, or with no known sign-up time: refused by rule.
    for member in [
        member_id_signed_up_at(announced + Duration::seconds(1)),
        "member-without-a-sign-up-time".to_owned(),
    ] {
        let e = h
            .buyer(&member)
            .join_waitlist(created.id)
            .await
            .expect_err("ineligible");
        assert_eq!(e.refusal(), Some((403, codes::ACCOUNT_TOO_NEW)), "{member}");
    }
    // Made before it: past the rule, to the waitlist's own answer (units on sale).
    let veteran = member_id_signed_up_at(announced - Duration::days(30));
    let e = h
        .buyer(&veteran)
        .join_waitlist(created.id)
        .await
        .expect_err("units on sale");
    assert_eq!(e.code(), Some("NOT_SOLD_OUT"));
    assert_eq!(
        count_by(
            &h.admin,
            "SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1",
            created.id
        )
        .await,
        0
    );

    // A product without rules lists none; a rule given twice is refused.
    let open = h.product(1).await;
    assert!(open.eligibility.is_empty());
    let twice = vec![rules[0], rules[0]];
    let e = h
        .operator()
        .create_product(&product(twice))
        .await
        .expect_err("twice");
    assert_eq!(e.refusal(), Some((422, codes::INVALID_ELIGIBILITY)));
    h.stop_consistent().await;
}

#[tokio::test]
async fn members_whose_email_is_not_verified_cannot_join_the_waitlist() {
    let h = Harness::start().await;
    let rules = vec![EligibilityRule::EmailVerified];
    let created = h
        .operator()
        .create_product(&product(rules.clone()))
        .await
        .expect("created")
        .body;
    assert_eq!(created.eligibility, rules);
    let required: bool = sqlx::query_scalar(
        "SELECT email_verified_required FROM order_service.products WHERE id = $1",
    )
    .bind(created.id)
    .fetch_one(&h.admin)
    .await
    .expect("product row");
    assert!(required);

    // A token without the claim: refused by the rule.
    let member = member_id_signed_up_at(Utc::now());
    let e = h
        .buyer(&member)
        .join_waitlist(created.id)
        .await
        .expect_err("ineligible");
    assert_eq!(
        (e.status(), e.code()),
        (Some(403), Some(codes::EMAIL_NOT_VERIFIED))
    );
    // Verified: past the rule, to the waitlist's own answer (units on sale).
    let verified = OrderClient::with_http(h.http().clone(), &h.base, verified_buyer_token(&member));
    let e = verified
        .join_waitlist(created.id)
        .await
        .expect_err("units on sale");
    assert_eq!(e.code(), Some("NOT_SOLD_OUT"));
    assert_eq!(
        count_by(
            &h.admin,
            "SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1",
            created.id
        )
        .await,
        0
    );

    // Both kinds at once are one of each: accepted, listed in order.
    let both = vec![
        EligibilityRule::AccountCreatedBefore { at: Utc::now() },
        EligibilityRule::EmailVerified,
    ];
    let listed = h
        .operator()
        .create_product(&product(both.clone()))
        .await
        .expect("created")
        .body;
    assert_eq!(listed.eligibility.len(), 2);
    assert_eq!(listed.eligibility[1], EligibilityRule::EmailVerified);
    h.stop_consistent().await;
}
