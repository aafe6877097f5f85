//! Staff as people, in a real browser: a viewer signs in with password and TOTP and is
//! refused a refund; an admin signs in and refunds a payment with a reason; the audit
//! trail, the payment's step log and the ledger agree in PostgreSQL. A top-up another
//! admin asked for above the four-eyes amount waits, and is deposited once the admin in
//! the browser approves it, naming both people.
//!
//! Skipped, with a message, where Chromium or chromedriver is not installed (see
//! [`crate::browser`]).

use std::time::Duration;

use crate::{
    browser::{self, click, screenshot, sign_in, type_into, Visit},
    console::assert_on_record,
};
use fantoccini::Locator;
use paysaga_common::money::Amount;
use paysaga_contracts::staff::{
    api::{CreateStaff, SignIn, StaffRole, TopUp, TopUpAnswer},
    client::StaffClient,
};
use paysaga_e2e::db::{balance, count_of};
use paysaga_e2e::{invariants, Driver, Stack, StackOptions};
use paysaga_staff::{dev, totp};
use sqlx::PgPool;
use uuid::Uuid;

const PRICE: i64 = 4_900;
const OPENING: i64 = PRICE * 2;
const VIEWER: &str = "viewer@example.com";
const VIEWER_PASSWORD: &str = "plum-orbit-canyon-47";
const REASON: &str = "buyer returned the pair unworn";
const ALICE: &str = "alice@example.com";
/// Above `STAFF_TOP_UP_FOUR_EYES_ABOVE` (100000 by default).
const TOP_UP: i64 = 150_000;

/// Makes the staff account `email` (with the test's one password) through `operator`;
/// its second factor's secret.
async fn create_staff(
    operator: &StaffClient,
    email: &str,
    role: StaffRole,
    reason: &str,
) -> anyhow::Result<Vec<u8>> {
    let created = operator
        .create(&CreateStaff {
            email: email.into(),
            password: VIEWER_PASSWORD.into(),
            role,
            reason: reason.into(),
        })
        .await?
        .body;
    Ok(totp::from_base32(&created.totp_secret).expect("base32 secret"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_viewer_is_refused_and_an_admin_refunds_with_a_reason_in_headless_chromium(
) -> anyhow::Result<()> {
    let Some(browser) = browser::Installed::find(
        "a_viewer_is_refused_and_an_admin_refunds_with_a_reason_in_headless_chromium",
    ) else {
        return Ok(());
    };
    let stack = Stack::start(StackOptions::new("console-staff")).await?;
    let (endpoints, admin) = stack.operator();
    let pool = stack.admin_pool().await;

    // One completed payment.
    let product = admin.create_product("staff-refund", PRICE, 1).await?;
    let buyer = admin.open_buyer("staff-refund-buyer", OPENING).await?;
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints.clone(), Duration::from_secs(10));
    driver
        .run_drop(std::slice::from_ref(&buyer), product.id, 0, |_| {})
        .await;
    invariants::settled(&pool, Duration::from_secs(60))
        .await?
        .assert_holds();
    let payment: Uuid = sqlx::query_scalar(
        r#"SELECT id FROM payment_service.payments WHERE state = 'COMPLETED' AND account_id = $1"#,
    )
    .bind(buyer.account_id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(balance(&pool, buyer.account_id).await?, OPENING - PRICE);

    // A viewer, made by the operator tools (as a system's first people are).
    let operator = StaffClient::new(
        &endpoints.orchestrator,
        admin.token.clone(),
        Duration::from_secs(10),
    );
    let viewer_secret =
        create_staff(&operator, VIEWER, StaffRole::Viewer, "watches the drop").await?;

    // Alice, an admin, asks for a top-up above the four-eyes amount: it waits.
    let alice_secret = create_staff(&operator, ALICE, StaffRole::Admin, "runs the drops").await?;
    let session = StaffClient::new(&endpoints.orchestrator, "none", Duration::from_secs(10))
        .sign_in(&SignIn {
            email: ALICE.into(),
            password: VIEWER_PASSWORD.into(),
            code: totp::code_at(&alice_secret, chrono::Utc::now().timestamp() as u64)
                .expect("code"),
        })
        .await?
        .body;
    let asked = StaffClient::new(
        &endpoints.orchestrator,
        session.token,
        Duration::from_secs(10),
    )
    .top_up(&TopUp {
        member_id: buyer.member.parse()?,
        amount: Amount::new(TOP_UP)?,
        reason: "goodwill after the outage".into(),
        key: "goodwill-1".into(),
    })
    .await?;
    assert_eq!(asked.status, 202);
    let TopUpAnswer::AwaitingApproval(approval) = asked.body else {
        panic!(
            "above the four-eyes amount a top-up waits: {:?}",
            asked.body
        );
    };
    assert_eq!(
        deposits(&pool, buyer.account_id).await?,
        vec![],
        "nothing deposited yet"
    );

    let shots = paysaga_e2e::binaries::log_dir("console-staff-screenshots")?;
    std::fs::create_dir_all(&shots)?;
    let secret = &viewer_secret;
    browser
        .browse(&stack, &pool, &shots, |visit| async move {
            browse(&visit, payment, secret).await?;
            approve_top_up(&visit, approval.id).await
        })
        .await?;

    // The ledger paid the buyer back, once, and holds the top-up, naming both people.
    assert_eq!(balance(&pool, buyer.account_id).await?, OPENING + TOP_UP);
    assert_eq!(
        deposits(&pool, buyer.account_id).await?,
        vec![(
            TOP_UP,
            Some(ALICE.to_owned()),
            Some(dev::ADMIN_EMAIL.to_owned())
        )]
    );
    let decided: (String, Option<String>) = sqlx::query_as(
        r#"SELECT state, decided_by_name FROM payment_service.approvals WHERE id = $1"#,
    )
    .bind(approval.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(
        decided,
        ("APPROVED".to_owned(), Some(dev::ADMIN_EMAIL.to_owned()))
    );
    let credits: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.transactions
           WHERE account_id = $1 AND kind = 'CREDIT' AND status = 'APPLIED' AND amount = $2"#,
    )
    .bind(buyer.account_id)
    .bind(PRICE)
    .fetch_one(&pool)
    .await?;
    assert_eq!(credits, 1, "one credit of the price");
    invariants::settled(&pool, Duration::from_secs(60))
        .await?
        .assert_holds();
    Ok(())
}

/// (amount, requested_by, approved_by) of the account's deposits.
async fn deposits(
    pool: &PgPool,
    account: i64,
) -> anyhow::Result<Vec<(i64, Option<String>, Option<String>)>> {
    Ok(sqlx::query_as(
        r#"SELECT amount, requested_by, approved_by FROM account_service.transactions
           WHERE account_id = $1 AND kind = 'DEPOSIT' ORDER BY created_at"#,
    )
    .bind(account)
    .fetch_all(pool)
    .await?)
}

/// The admin in the browser (not the one who asked) approves the pending top-up.
async fn approve_top_up(visit: &Visit<'_>, approval: i64) -> anyhow::Result<()> {
    let (client, shots) = (&visit.client, visit.shots);
    client.goto(&format!("{}/approvals", visit.console)).await?;
    let row = client
        .wait()
        .for_element(Locator::Css(&format!("tr.approval[data-id='{approval}']")))
        .await?;
    assert_eq!(row.attr("data-kind").await?.as_deref(), Some("TOP_UP"));
    type_into(
        client,
        &format!("form[action='/console/approvals/{approval}/approve'] textarea"),
        "checked with the buyer",
    )
    .await?;
    screenshot(client, shots, "top-up-approval").await?;
    click(client, &format!("#approve-{approval}")).await?;
    client
        .wait()
        .for_element(Locator::Css(&format!(
            "tr.approval[data-id='{approval}'][data-state='APPROVED']"
        )))
        .await?;
    Ok(())
}

/// (payment state, PAYMENT_REFUNDED audit rows).
async fn refund_state(pool: &PgPool, payment: Uuid) -> anyhow::Result<(String, i64)> {
    Ok(sqlx::query_as(
        r#"SELECT p.state,
                  (SELECT COUNT(*) FROM payment_service.audit_log a
                   WHERE a.action = 'PAYMENT_REFUNDED' AND a.target = p.id::TEXT)
           FROM payment_service.payments p WHERE p.id = $1"#,
    )
    .bind(payment)
    .fetch_one(pool)
    .await?)
}

async fn browse(visit: &Visit<'_>, payment: Uuid, viewer_secret: &[u8]) -> anyhow::Result<()> {
    let (client, console) = (&visit.client, &visit.console);
    let (pool, shots) = (visit.pool, visit.shots);
    let refund_page = format!("{console}/payments/{payment}/refund");

    // The viewer signs in (password, then the code of their own secret) and may read
    // the payment but not refund it.
    let code = totp::code_at(viewer_secret, chrono::Utc::now().timestamp() as u64).expect("code");
    sign_in(client, console, VIEWER, VIEWER_PASSWORD, &code).await?;
    client
        .goto(&format!("{console}/payments/{payment}"))
        .await?;
    client.wait().for_element(Locator::Css("#facts")).await?;
    assert!(
        client.find(Locator::Css("#refund")).await.is_err(),
        "no refund button offered to a viewer"
    );
    client.goto(&refund_page).await?;
    let refused = client.find(Locator::Css("main")).await?.text().await?;
    screenshot(client, shots, "viewer-refused").await?;
    assert!(refused.contains("FORBIDDEN_ROLE"), "{refused}");
    assert!(
        client.find(Locator::Css("#reason")).await.is_err(),
        "no refund form for a viewer"
    );
    assert_eq!(
        refund_state(pool, payment).await?,
        ("COMPLETED".into(), 0),
        "the viewer's visit changed nothing"
    );

    // Signing out ends the viewer's session at once.
    click(client, "form[action='/console/logout'] button").await?;
    client.wait().for_element(Locator::Css("#email")).await?;
    let sessions = count_of(
        pool,
        r#"SELECT COUNT(*) FROM payment_service.staff_sessions s
           JOIN payment_service.staff st ON st.id = s.staff_id WHERE st.email = $1"#,
        VIEWER,
    )
    .await?;
    assert_eq!(sessions, 0, "the viewer's session is gone");

    // The admin signs in and refunds it, with a reason.
    sign_in(
        client,
        console,
        dev::ADMIN_EMAIL,
        dev::ADMIN_PASSWORD,
        &dev::admin_code_now(),
    )
    .await?;
    client.goto(&refund_page).await?;
    type_into(client, "#reason", REASON).await?;
    screenshot(client, shots, "admin-refund").await?;
    browser::confirm(client).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while refund_state(pool, payment).await?.0 != "REFUNDED" {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the payment was not refunded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    screenshot(client, shots, "admin-refunded").await?;

    // The audit trail and the step log name the person and the reason.
    assert_on_record(
        pool,
        payment,
        "PAYMENT_REFUNDED",
        "refund requested",
        REASON,
    )
    .await?;
    let viewer_tried = count_of(
        pool,
        r#"SELECT COUNT(*) FROM payment_service.audit_log WHERE actor = $1 AND action <> 'SIGN_IN' AND action <> 'SIGN_OUT'"#,
        VIEWER,
    )
    .await?;
    assert_eq!(
        viewer_tried, 0,
        "the viewer did nothing that changed anything"
    );
    Ok(())
}
