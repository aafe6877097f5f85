//! A product's eligibility rules: stored and listed with it, checked when it is
//! created, and judged before a member joins its waitlist (the gate judges passes),
//! one case per rule.

use chrono::{DateTime, Duration, Utc};
use paysaga_common::testkit::{buyer_token, verified_buyer_token};
use paysaga_contracts::{
    eligibility::{codes, member_id_signed_up_at, EligibilityRule},
    order::api::CreateProduct,
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

/// A rule, its columns in the products table, the buyer tokens it refuses and one it
/// lets through.
struct Case {
    rule: EligibilityRule,
    /// `(accounts_created_before, email_verified_required)`.
    stored: (Option<DateTime<Utc>>, bool),
    code: &'static str,
    refused: Vec<String>,
    admitted: String,
}

fn cases(announced: DateTime<Utc>) -> [Case; 2] {
    let member = member_id_signed_up_at(announced);
    [
        Case {
            rule: EligibilityRule::AccountCreatedBefore { at: announced },
            stored: (Some(announced), false),
            code: codes::ACCOUNT_TOO_NEW,
            // Made after the announcement, or with no known sign-up time.
            refused: vec![
                buyer_token(&member_id_signed_up_at(announced + Duration::seconds(1))),
                buyer_token("member-without-a-sign-up-time"),
            ],
            admitted: buyer_token(&member_id_signed_up_at(announced - Duration::days(30))),
        },
        Case {
            rule: EligibilityRule::EmailVerified,
            stored: (None, true),
            code: codes::EMAIL_NOT_VERIFIED,
            // A token without the claim.
            refused: vec![buyer_token(&member)],
            admitted: verified_buyer_token(&member),
        },
    ]
}

#[tokio::test]
async fn members_a_rule_refuses_cannot_join_the_waitlist() {
    let h = Harness::start().await;
    // PostgreSQL keeps microseconds.
    let announced = DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).expect("now");
    for case in cases(announced) {
        let rules = vec![case.rule];
        let created = h
            .operator()
            .create_product(&product(rules.clone()))
            .await
            .expect("created")
            .body;
        assert_eq!(created.eligibility, rules);
        let listed = h.operator().product(created.id).await.expect("read").body;
        assert_eq!(listed.eligibility, rules);
        let stored: (Option<DateTime<Utc>>, bool) = sqlx::query_as(
            r#"SELECT accounts_created_before, email_verified_required
               FROM order_service.products WHERE id = $1"#,
        )
        .bind(created.id)
        .fetch_one(&h.admin)
        .await
        .expect("product row");
        assert_eq!(stored, case.stored, "{:?}", case.rule);

        for token in &case.refused {
            let e = h
                .with_token(token)
                .join_waitlist(created.id)
                .await
                .expect_err("ineligible");
            assert_eq!(e.refusal(), Some((403, case.code)), "{:?}", case.rule);
        }
        // Past the rule, to the waitlist's own answer (units on sale).
        let e = h
            .with_token(&case.admitted)
            .join_waitlist(created.id)
            .await
            .expect_err("units on sale");
        assert_eq!(e.code(), Some("NOT_SOLD_OUT"), "{:?}", case.rule);
        assert_eq!(
            count_by(
                &h.admin,
                "SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1",
                created.id
            )
            .await,
            0
        );
    }
    h.stop_consistent().await;
}

#[tokio::test]
async fn a_product_keeps_each_kind_of_rule_once() {
    let h = Harness::start().await;
    // A product without rules lists none.
    let open = h.product(1).await;
    assert!(open.eligibility.is_empty());
    // A kind given twice is kept once: every rule must hold, so two "created before"
    // rules are the earlier, and a repeated "email verified" is one.
    let before = EligibilityRule::AccountCreatedBefore { at: Utc::now() };
    // Whole seconds: the table keeps microseconds.
    let earlier = EligibilityRule::AccountCreatedBefore {
        at: chrono::DateTime::from_timestamp(Utc::now().timestamp() - 86_400, 0).unwrap(),
    };
    let folded = h
        .operator()
        .create_product(&product(vec![
            before,
            EligibilityRule::EmailVerified,
            earlier,
            EligibilityRule::EmailVerified,
        ]))
        .await
        .expect("created")
        .body;
    assert_eq!(
        folded.eligibility,
        vec![earlier, EligibilityRule::EmailVerified]
    );
    // More than sixteen given is refused, nothing made.
    let e = h
        .operator()
        .create_product(&product(vec![EligibilityRule::EmailVerified; 17]))
        .await
        .expect_err("too many");
    assert_eq!(e.refusal(), Some((422, codes::INVALID_ELIGIBILITY)));
    // Both kinds at once are one of each: accepted, listed in order.
    let listed = h
        .operator()
        .create_product(&product(vec![before, EligibilityRule::EmailVerified]))
        .await
        .expect("created")
        .body;
    assert_eq!(listed.eligibility.len(), 2);
    assert_eq!(listed.eligibility[1], EligibilityRule::EmailVerified);
    h.stop_consistent().await;
}
