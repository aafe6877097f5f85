//! A product's eligibility rules at the gate, one case per rule: a member the rule
//! refuses is refused with the rule's code before any quota is spent; one it admits
//! gets a pass and reserves with it.

use chrono::{DateTime, Duration, Utc};
use gate::Config;
use paysaga_common::{
    auth::Minter,
    testkit::{buyer_token, verified_buyer_token, TestDb, TestRedis},
};
use paysaga_contracts::{
    eligibility::{codes, member_id_signed_up_at, EligibilityRule},
    order::api::CreateProduct,
};

use crate::support::{order_buyer, order_client, start_gate, start_order};

/// A rule, the buyer tokens it refuses (each asked twice) and a member it admits.
struct Case {
    rule: EligibilityRule,
    /// Its label on `gate_ineligible_total`.
    label: &'static str,
    code: &'static str,
    refused: Vec<String>,
    /// The member and their token.
    admitted: (String, String),
}

fn cases(announced: DateTime<Utc>) -> [Case; 2] {
    let newcomer = member_id_signed_up_at(announced + Duration::milliseconds(5));
    let veteran = member_id_signed_up_at(announced - Duration::days(30));
    let unverified = member_id_signed_up_at(announced);
    let verified = member_id_signed_up_at(announced);
    [
        Case {
            rule: EligibilityRule::AccountCreatedBefore { at: announced },
            label: "account_created_before",
            code: codes::ACCOUNT_TOO_NEW,
            // Made after the announcement, or with no known sign-up time.
            refused: vec![
                buyer_token(&newcomer),
                buyer_token("member-without-a-sign-up-time"),
            ],
            admitted: (veteran.clone(), buyer_token(&veteran)),
        },
        Case {
            rule: EligibilityRule::EmailVerified,
            label: "email_verified",
            code: codes::EMAIL_NOT_VERIFIED,
            // A token without the claim, or saying false.
            refused: vec![
                buyer_token(&unverified),
                Minter::dev_buyer().mint_buyer(
                    &unverified,
                    false,
                    std::time::Duration::from_secs(600),
                ),
            ],
            admitted: (verified.clone(), verified_buyer_token(&verified)),
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_a_rule_refuses_take_no_pass_and_spend_no_quota() {
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    let mut products = Vec::new();
    // PostgreSQL keeps microseconds.
    let announced = DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).expect("now");
    for case in cases(announced) {
        let product = order_client(&order)
            .create_product(&CreateProduct {
                name: "members' drop".into(),
                price: 12_900,
                units: 2,
                reservation_ttl_secs: None,
                eligibility: vec![case.rule],
            })
            .await
            .expect("product")
            .body;
        assert_eq!(product.eligibility, vec![case.rule]);
        products.push((case, product.id));
    }
    let redis = TestRedis::new();
    let gate = start_gate(Config::local(&redis.url, &redis.prefix, &order.url)).await;

    for (case, product) in products {
        let label = case.label;
        for token in &case.refused {
            for _ in 0..2 {
                let e = gate
                    .with_token(token)
                    .issue_pass(product)
                    .await
                    .expect_err("ineligible");
                assert_eq!(e.refusal(), Some((403, case.code)), "{label}");
            }
        }
        let view = gate.quota(product).await;
        assert_eq!(
            (view.quota, view.in_flight),
            (2, 0),
            "{label}: no quota spent"
        );

        let (member, token) = &case.admitted;
        let pass = gate
            .with_token(token)
            .issue_pass(product)
            .await
            .unwrap_or_else(|e| panic!("{label}: the admitted member's pass: {e}"))
            .body;
        let view = gate.quota(product).await;
        assert_eq!(
            (view.quota, view.in_flight),
            (1, 1),
            "{label}: the pass took one"
        );
        order_buyer(&order, member)
            .await
            .reserve(product, &pass.pass)
            .await
            .unwrap_or_else(|e| panic!("{label}: the admitted member reserves: {e}"));
        let holders: Vec<String> = sqlx::query_scalar(
            "SELECT member_id FROM order_service.reservations WHERE product_id = $1",
        )
        .bind(product)
        .fetch_all(&db.admin_pool().await)
        .await
        .expect("reservations");
        assert_eq!(holders, [member.as_str()], "{label}");
        let metrics = gate.metrics().await;
        let refusals = 2 * case.refused.len();
        assert!(
            metrics.contains(&format!(
                r#"gate_ineligible_total{{rule="{label}"}} {refusals}"#
            )),
            "{metrics}"
        );
    }
}
