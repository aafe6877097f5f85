//! Product and stock changes by staff: an admin makes a product and adds units through
//! the orchestrator, the order service holds them, and the audit trail names the person,
//! the reason and the outcome of each, refusals too.

use orchestrator::Hooks;
use paysaga_common::client::CallError;
use paysaga_contracts::{
    order::api::CreateProduct,
    staff::{
        api::{StaffAddUnits, StaffCreateProduct, StaffRole},
        client::StaffClient,
    },
};
use sqlx::PgPool;

use crate::{
    staff::{code_now, create, sign_in},
    support::{Orchestrator, Stack},
};

const T: std::time::Duration = std::time::Duration::from_secs(30);

async fn signed_in(o: &Orchestrator, email: &str, role: StaffRole) -> StaffClient {
    let created = create(o, email, role).await;
    let token = sign_in(o, email, &code_now(&created))
        .await
        .expect("sign in");
    StaffClient::new(&o.url, token, T)
}

/// A product of `units` at `price` to make, for `reason`.
fn new_product(name: &str, price: i64, units: i64, reason: &str) -> StaffCreateProduct {
    StaffCreateProduct {
        product: CreateProduct {
            name: name.into(),
            price,
            units,
            reservation_ttl_secs: None,
            eligibility: Vec::new(),
        },
        reason: reason.into(),
    }
}

/// `count` units to add, for `reason`.
fn more_units(count: i64, reason: &str) -> StaffAddUnits {
    StaffAddUnits {
        count,
        reason: reason.into(),
    }
}

/// (actor, action, target, reason, outcome, detail) of every PRODUCT_CHANGED row, oldest
/// first.
type Row = (
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
);

async fn product_rows(pool: &PgPool) -> Vec<Row> {
    sqlx::query_as(
        r#"SELECT actor, action, target, reason, outcome, detail FROM payment_service.audit_log
           WHERE action = 'PRODUCT_CHANGED' ORDER BY id"#,
    )
    .fetch_all(pool)
    .await
    .expect("audit rows")
}

/// (name, price, units) of every product, by id.
async fn products(pool: &PgPool) -> Vec<(i64, String, i64, i64)> {
    sqlx::query_as(
        r#"SELECT p.id, p.name, p.price, (SELECT COUNT(*) FROM order_service.product_stock s WHERE s.product_id = p.id)
           FROM order_service.products p ORDER BY p.id"#,
    )
    .fetch_all(pool)
    .await
    .expect("products")
}

fn rejected(r: &Result<impl std::fmt::Debug, CallError>, status: u16, code: &str) -> bool {
    matches!(r, Err(CallError::Rejected { status: s, body }) if *s == status && body.code == code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_changes_what_is_on_sale_and_each_change_is_audited() {
    let s = Stack::start().await;
    let o = s.orchestrator(s.config(), Hooks::default()).await;
    let admin = signed_in(&o, "admin@example.com", StaffRole::Admin).await;

    let made = admin
        .create_product(&new_product(
            "Spring drop",
            12_900,
            3,
            "the spring drop goes live at noon",
        ))
        .await
        .expect("create")
        .body;
    assert_eq!(made.units_total, 3);
    let grown = admin
        .add_units(made.id, &more_units(2, "two returned pairs"))
        .await
        .expect("add units")
        .body;
    assert_eq!(grown.units_total, 5);
    assert_eq!(
        products(&s.admin).await,
        vec![(made.id, "Spring drop".to_owned(), 12_900, 5)],
        "the order service holds the product and its five units"
    );

    // Refused by the order service: its code passed on, nothing made, the refusal audited.
    let bad = admin
        .create_product(&new_product("Free lunch", 0, 1, "testing"))
        .await;
    assert!(rejected(&bad, 422, "INVALID_PRICE"), "{bad:?}");
    let missing = admin.add_units(999_999, &more_units(1, "typo")).await;
    assert!(rejected(&missing, 404, "PRODUCT_NOT_FOUND"), "{missing:?}");
    // No reason: refused before anything is asked of the order service.
    let unexplained = admin.add_units(made.id, &more_units(1, "  ")).await;
    assert!(
        rejected(&unexplained, 422, "REASON_INVALID"),
        "{unexplained:?}"
    );
    assert_eq!(products(&s.admin).await.len(), 1);
    assert_eq!(
        products(&s.admin).await[0].3,
        5,
        "no unit added unexplained"
    );

    let who = "admin@example.com".to_owned();
    let target = Some(format!("product:{}", made.id));
    assert_eq!(
        product_rows(&s.admin).await,
        vec![
            (
                who.clone(),
                "PRODUCT_CHANGED".into(),
                target.clone(),
                Some("the spring drop goes live at noon".into()),
                "DONE".into(),
                Some("created \"Spring drop\": 3 units at 12900".into()),
            ),
            (
                who.clone(),
                "PRODUCT_CHANGED".into(),
                target,
                Some("two returned pairs".into()),
                "DONE".into(),
                Some("added 2 units (5 in all)".into()),
            ),
            (
                who.clone(),
                "PRODUCT_CHANGED".into(),
                Some("product:Free lunch".into()),
                Some("testing".into()),
                "REFUSED".into(),
                Some("INVALID_PRICE".into()),
            ),
            (
                who,
                "PRODUCT_CHANGED".into(),
                Some("product:999999".into()),
                Some("typo".into()),
                "REFUSED".into(),
                Some("PRODUCT_NOT_FOUND".into()),
            ),
        ]
    );

    // An operator may not change what is on sale: refused, nothing made, nothing audited.
    let operator = signed_in(&o, "operator@example.com", StaffRole::Operator).await;
    let refused = operator
        .create_product(&new_product("Side drop", 5_000, 1, "mine"))
        .await;
    assert!(rejected(&refused, 403, "FORBIDDEN_ROLE"), "{refused:?}");
    assert_eq!(products(&s.admin).await.len(), 1);
    assert_eq!(product_rows(&s.admin).await.len(), 4);
}
