//! Staff as people, in a real browser: a viewer signs in with password and TOTP and is
//! refused a refund; an admin signs in and refunds a payment with a reason; the audit
//! trail, the payment's step log and the ledger agree in PostgreSQL.
//!
//! Skipped, with a message, where Chromium or chromedriver is not installed (see
//! [`crate::browser`]).

use std::{path::Path, time::Duration};

use crate::browser::{self, click, screenshot, sign_in, type_into};
use fantoccini::{Client, Locator};
use paysaga_contracts::staff::{
    api::{CreateStaff, StaffRole},
    client::StaffClient,
};
use paysaga_e2e::{invariants, Driver, Stack, StackOptions};
use paysaga_staff::{dev, totp};
use sqlx::PgPool;
use uuid::Uuid;

const PRICE: i64 = 4_900;
const OPENING: i64 = PRICE * 2;
const VIEWER: &str = "viewer@example.com";
const VIEWER_PASSWORD: &str = "plum-orbit-canyon-47";
const REASON: &str = "buyer returned the pair unworn";

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
    let viewer = StaffClient::new(
        &endpoints.orchestrator,
        admin.token.clone(),
        Duration::from_secs(10),
    )
    .create(&CreateStaff {
        email: VIEWER.into(),
        password: VIEWER_PASSWORD.into(),
        role: StaffRole::Viewer,
        reason: "watches the drop".into(),
    })
    .await?
    .body;
    let viewer_secret = totp::from_base32(&viewer.totp_secret).expect("base32 secret");

    let shots = paysaga_e2e::binaries::log_dir("console-staff-screenshots")?;
    std::fs::create_dir_all(&shots)?;
    let (pool_in, shots_in) = (&pool, &shots);
    let (orchestrator, secret) = (&endpoints.orchestrator, &viewer_secret);
    browser
        .browse(&stack, &shots, |client| async move {
            browse(&client, pool_in, orchestrator, shots_in, payment, secret).await
        })
        .await?;

    // The ledger paid the buyer back, once.
    assert_eq!(balance(&pool, buyer.account_id).await?, OPENING);
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

async fn balance(pool: &PgPool, account: i64) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar(r#"SELECT balance FROM account_service.accounts WHERE id = $1"#)
            .bind(account)
            .fetch_one(pool)
            .await?,
    )
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

async fn browse(
    client: &Client,
    pool: &PgPool,
    orchestrator: &str,
    shots: &Path,
    payment: Uuid,
    viewer_secret: &[u8],
) -> anyhow::Result<()> {
    let console = format!("{orchestrator}/console");
    let refund_page = format!("{console}/payments/{payment}/refund");

    // The viewer signs in (password, then the code of their own secret) and may read
    // the payment but not refund it.
    let code = totp::code_at(viewer_secret, chrono::Utc::now().timestamp() as u64).expect("code");
    sign_in(client, &console, VIEWER, VIEWER_PASSWORD, &code).await?;
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
    let sessions: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.staff_sessions s
           JOIN payment_service.staff st ON st.id = s.staff_id WHERE st.email = $1"#,
    )
    .bind(VIEWER)
    .fetch_one(pool)
    .await?;
    assert_eq!(sessions, 0, "the viewer's session is gone");

    // The admin signs in and refunds it, with a reason.
    sign_in(
        client,
        &console,
        dev::ADMIN_EMAIL,
        dev::ADMIN_PASSWORD,
        &dev::admin_code_now(),
    )
    .await?;
    client.goto(&refund_page).await?;
    type_into(client, "#reason", REASON).await?;
    screenshot(client, shots, "admin-refund").await?;
    click(client, "#confirm").await?;
    client.wait().for_element(Locator::Css("#flash")).await?;
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
    let audited: (String, Option<String>, String) = sqlx::query_as(
        r#"SELECT actor, reason, outcome FROM payment_service.audit_log
           WHERE action = 'PAYMENT_REFUNDED' AND target = $1"#,
    )
    .bind(payment.to_string())
    .fetch_one(pool)
    .await?;
    assert_eq!(
        audited,
        (
            dev::ADMIN_EMAIL.to_owned(),
            Some(REASON.to_owned()),
            "DONE".to_owned()
        )
    );
    let notes: Vec<Option<String>> = sqlx::query_scalar(
        r#"SELECT error FROM payment_service.payment_steps
           WHERE payment_id = $1 AND outcome = 'OPERATOR'"#,
    )
    .bind(payment)
    .fetch_all(pool)
    .await?;
    assert_eq!(
        notes,
        vec![Some(format!(
            "refund requested by {}: {REASON}",
            dev::ADMIN_EMAIL
        ))]
    );
    let viewer_tried: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.audit_log WHERE actor = $1 AND action <> 'SIGN_IN' AND action <> 'SIGN_OUT'"#,
    )
    .bind(VIEWER)
    .fetch_one(pool)
    .await?;
    assert_eq!(
        viewer_tried, 0,
        "the viewer did nothing that changed anything"
    );
    Ok(())
}
