//! The operator console in a real browser: a small drop through the real processes, one payment needing attention and dead webhook deliveries, then headless Chromium (through chromedriver) signs in as the development staff admin (password, then a TOTP code), reads the drop page against PostgreSQL, filters payments, opens a timeline, resumes the flagged payment and replays a delivery, each checked in PostgreSQL.
//!
//! Skipped, with a message, where Chromium or chromedriver is not installed (see
//! [`crate::browser`]). Screenshots go to the directory named by
//! `CONSOLE_SCREENSHOT_DIR` (the documentation's are made with `docs/console`), else to
//! the harness's log directory (`target/e2e-logs/console-screenshots-…`).

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::browser::{self, click, screenshot, type_into, Visit};
use fantoccini::{Client, Locator};
use paysaga_contracts::{orchestrator::api::CreateWebhookEndpoint, OrchestratorClient};
use paysaga_e2e::db::{count_of, wait_for};
use paysaga_e2e::{drop_run, invariants, Driver, DropRun, Link, ServiceKind, Stack, StackOptions};
use paysaga_staff::dev;
use sqlx::PgPool;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};
use uuid::Uuid;

const UNITS: i64 = 8;
const BUYERS: usize = 16;
const PRICE: i64 = 4_900;
/// Why the operator resumes the flagged payment.
const RESUMED: &str = "account service back after the outage";

/// A webhook receiver that answers 500 until told to accept, then 204.
async fn receiver(accept: Arc<AtomicBool>) -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let accept = accept.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head and the body it announces, then answer.
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + length {
                        break;
                    }
                }
                let status = if accept.load(Ordering::SeqCst) {
                    "204 No Content"
                } else {
                    "500 Internal Server Error"
                };
                let _ = socket
                    .write_all(
                        format!(
                            "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    Ok(port)
}

/// The text of the element with `id`, read in one script call (the drop page replaces
/// its figures every few seconds, so a held element reference could go stale).
async fn text_of(client: &Client, id: &str) -> anyhow::Result<String> {
    let v = client
        .execute(
            "const e = document.getElementById(arguments[0]); return e ? e.textContent.trim() : null;",
            vec![serde_json::json!(id)],
        )
        .await?;
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no element #{id} on {}", "the page"))
}

async fn number_of(client: &Client, id: &str) -> anyhow::Result<i64> {
    let t = text_of(client, id).await?;
    t.parse()
        .map_err(|_| anyhow::anyhow!("#{id} is {t:?}, not a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_console_in_headless_chromium() -> anyhow::Result<()> {
    let Some(browser) = browser::Installed::find("operator_console_in_headless_chromium") else {
        return Ok(());
    };

    let mut stack_options = StackOptions::new("console")
        .quick_loops()
        // One failed attempt makes a delivery DEAD, so the test has some to replay.
        .env(ServiceKind::Orchestrator, "WEBHOOK_MAX_ATTEMPTS", 1)
        // The receiver listens on 127.0.0.1.
        .env(
            ServiceKind::Orchestrator,
            "WEBHOOK_ALLOW_PRIVATE_TARGETS",
            1,
        )
        .proxy(Link::OrchestratorToAccount);
    stack_options = stack_options.env(ServiceKind::Orchestrator, "WEBHOOK_POLL_INTERVAL_MS", 200);
    let stack = Stack::start(stack_options).await?;
    // A small drop: every fourth buyer cannot pay.
    let balances = drop_run::every_nth_short(BUYERS, 4, PRICE);
    let run = DropRun::open(&stack, "console", PRICE, UNITS, &balances, 8).await?;
    let (admin, endpoints, pool) = (&run.admin, &run.endpoints, run.pool.clone());

    // A webhook endpoint that refuses at first: each payment event's delivery goes DEAD.
    let accept = Arc::new(AtomicBool::new(false));
    let hook_port = receiver(accept.clone()).await?;
    OrchestratorClient::new(
        &endpoints.orchestrator,
        &admin.token,
        Duration::from_secs(10),
    )
    .create_webhook_endpoint(&CreateWebhookEndpoint {
        url: format!("http://127.0.0.1:{hook_port}/hook"),
        event_types: vec!["payment.completed".into()],
        description: Some("console test".into()),
    })
    .await?;

    let driver = Driver::new(endpoints.clone(), Duration::from_secs(10));
    let attempts = driver
        .run_drop(&run.buyers, run.product.id, 0, |_| {})
        .await;
    assert_eq!(attempts.len(), BUYERS);
    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    assert!(report.payments_completed > 0, "{report:#?}");

    // One payment needing attention: a buyer's reservation whose payment was left at
    // its debit by a crashed instance, with one attempt left, while the account
    // service cannot be reached; recovery's last attempt fails and flags it.
    let stuck_product = admin.create_product("console-stuck", PRICE, 1).await?;
    admin
        .wait_for_quota(stuck_product.id, 1, Duration::from_secs(30))
        .await?;
    let stuck_buyer = admin.open_buyer("console-stuck-buyer", PRICE * 2).await?;
    let mut retries = 0;
    let pass = driver
        .pass(&stuck_buyer, stuck_product.id, &mut retries)
        .await?;
    let reservation = driver
        .reserve(&stuck_buyer, stuck_product.id, &pass.pass, &mut retries)
        .await?;
    let account = stack.proxy(Link::OrchestratorToAccount).expect("proxied");
    // Open connections too: the orchestrator keeps its pooled ones to account.
    account.cut();
    let max_attempts =
        workflows::RetryPolicy::for_action(workflows::Action::Debit).max_attempts as i32;
    let stuck = Uuid::now_v7();
    sqlx::query(
        r#"
        INSERT INTO payment_service.payments
            (id, member_id, account_id, reservation_id, amount, state, pending_action, attempts,
             next_attempt_at, lease_owner, lease_until, product_id)
        VALUES ($1, $2, $3, $4, $5, 'PROCESSING', 'DEBIT', $6, now(), $7, now() - INTERVAL '1 second', $8)
        "#,
    )
    .bind(stuck)
    .bind(&stuck_buyer.member)
    .bind(stuck_buyer.account_id)
    .bind(reservation.id)
    .bind(PRICE)
    .bind(max_attempts - 1)
    .bind(Uuid::new_v4())
    .bind(stuck_product.id)
    .execute(&pool)
    .await?;
    wait_for(
        &pool,
        "the stuck payment flagged",
        &format!("SELECT COUNT(*) FROM payment_service.payments WHERE id = '{stuck}' AND needs_attention"),
        1,
    )
    .await?;
    // One delivery per completion, each DEAD after its one refused attempt.
    wait_for(
        &pool,
        "dead deliveries",
        r#"SELECT COUNT(*) FROM payment_service.webhook_deliveries WHERE state = 'DEAD'"#,
        report.payments_completed,
    )
    .await?;
    let dead = report.payments_completed;
    eprintln!("stuck payment {stuck}; {dead} dead deliveries so far");

    let shots = browser::screenshot_dir("console-screenshots")?;
    let figures = Figures {
        product: run.product.id,
        stuck_product: stuck_product.id,
        stuck,
    };
    browser
        .browse(&stack, &pool, &shots, |visit| {
            let accept_webhooks = || accept.store(true, Ordering::SeqCst);
            browse(visit, figures, || account.heal(), accept_webhooks)
        })
        .await?;
    eprintln!("screenshots: {}", shots.display());
    let report = invariants::settled(&pool, Duration::from_secs(60)).await?;
    report.assert_holds();
    Ok(())
}

struct Figures {
    product: i64,
    stuck_product: i64,
    stuck: Uuid,
}

/// Sends the sign-in form as the development admin, with `password`.
async fn sign_in_as_admin(client: &Client, password: &str) -> anyhow::Result<()> {
    type_into(client, "#email", dev::ADMIN_EMAIL).await?;
    type_into(client, "#password", password).await?;
    click(client, "#sign-in").await
}

/// Signs in as the development admin: the password, then the current TOTP code.
pub(crate) async fn sign_in_with_code(client: &Client) -> anyhow::Result<()> {
    sign_in_as_admin(client, dev::ADMIN_PASSWORD).await?;
    client.wait().for_element(Locator::Css("#code")).await?;
    type_into(client, "#code", &dev::admin_code_now()).await?;
    click(client, "#verify").await
}

/// The development admin's `action` on `payment`, for `reason`, is on the record: the
/// payment's step log notes it as `<noted> by <admin>: <reason>`, and the audit trail's
/// entry names the admin and the reason, DONE.
pub(crate) async fn assert_on_record(
    pool: &PgPool,
    payment: Uuid,
    action: &str,
    noted: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let notes: Vec<Option<String>> = sqlx::query_scalar(
        r#"SELECT error FROM payment_service.payment_steps WHERE payment_id = $1 AND outcome = 'OPERATOR'"#,
    )
    .bind(payment)
    .fetch_all(pool)
    .await?;
    assert_eq!(
        notes,
        vec![Some(format!("{noted} by {}: {reason}", dev::ADMIN_EMAIL))],
        "{action} is on the payment's record, naming the person"
    );
    let audited: (String, Option<String>, String) = sqlx::query_as(
        r#"SELECT actor, reason, outcome FROM payment_service.audit_log
           WHERE action = $1 AND target = $2"#,
    )
    .bind(action)
    .bind(payment.to_string())
    .fetch_one(pool)
    .await?;
    assert_eq!(
        audited,
        (
            dev::ADMIN_EMAIL.to_owned(),
            Some(reason.to_owned()),
            "DONE".to_owned()
        ),
        "{action} in the audit trail"
    );
    Ok(())
}

/// What the operator does in the browser, each effect checked in PostgreSQL.
async fn browse(
    visit: Visit<'_>,
    f: Figures,
    heal_account: impl FnOnce(),
    accept_webhooks: impl FnOnce(),
) -> anyhow::Result<()> {
    let Visit {
        client,
        console,
        pool,
        shots,
    } = visit;
    let client = &client;

    // Not signed in: the console sends the browser to the sign-in page.
    client.goto(&console).await?;
    client.wait().for_element(Locator::Css("#email")).await?;
    assert!(client
        .current_url()
        .await?
        .path()
        .ends_with("/console/login"));
    screenshot(client, shots, "sign-in").await?;
    // A wrong password is refused, without saying which part was wrong.
    sign_in_as_admin(client, "not-the-password").await?;
    let refused = client
        .wait()
        .for_element(Locator::Css("#sign-in-error"))
        .await?
        .text()
        .await?;
    assert!(
        refused.contains("Wrong email, password or code"),
        "{refused}"
    );
    // The development admin (this is a development system): password, then the code of
    // its public TOTP secret.
    sign_in_as_admin(client, dev::ADMIN_PASSWORD).await?;
    client.wait().for_element(Locator::Css("#code")).await?;
    screenshot(client, shots, "sign-in-code").await?;
    type_into(client, "#code", &dev::admin_code_now()).await?;
    click(client, "#verify").await?;
    // The drop page: its figures are PostgreSQL's.
    client.wait().for_element(Locator::Css("#live")).await?;
    for (action, want) in [("SIGN_IN_FAILED", 1), ("SIGN_IN", 1)] {
        let n = count_of(
            pool,
            &format!(
                "SELECT COUNT(*) FROM payment_service.audit_log WHERE action = '{action}' AND actor = $1"
            ),
            dev::ADMIN_EMAIL,
        )
        .await?;
        assert_eq!(n, want, "{action} in the audit trail");
    }
    let (available, reserved, offered, sold, total): (i64, i64, i64, i64, i64) = sqlx::query_as(
        r#"
        SELECT COUNT(*) FILTER (WHERE state = 'AVAILABLE'), COUNT(*) FILTER (WHERE state = 'RESERVED'),
               COUNT(*) FILTER (WHERE state = 'OFFERED'), COUNT(*) FILTER (WHERE state = 'SOLD'), COUNT(*)
        FROM order_service.product_stock WHERE product_id = $1
        "#,
    )
    .bind(f.product)
    .fetch_one(pool)
    .await?;
    let waiting = count_of(pool, r#"SELECT COUNT(*) FROM order_service.waitlist_entries WHERE product_id = $1 AND state = 'WAITING'"#, f.product).await?;
    let p = f.product;
    for (name, want) in [
        ("units_total", total),
        ("available", available),
        ("reserved", reserved),
        ("offered", offered),
        ("sold", sold),
        ("waiting", waiting),
    ] {
        assert_eq!(
            number_of(client, &format!("product-{p}-{name}")).await?,
            want,
            "{name} of product {p}"
        );
    }
    // The gate is configured (the harness sets GATE_URL) and answers.
    number_of(client, &format!("product-{p}-quota")).await?;
    number_of(client, &format!("product-{p}-in_flight")).await?;
    for product in [f.product, f.stuck_product] {
        let by_state: Vec<(String, i64)> = sqlx::query_as(
            r#"SELECT state, COUNT(*) FROM payment_service.payments WHERE product_id = $1 GROUP BY state"#,
        )
        .bind(product)
        .fetch_all(pool)
        .await?;
        for state in [
            "PROCESSING",
            "ACCOUNT_DEBITED",
            "ORDER_CONFIRMED",
            "COMPLETED",
            "FAILED",
            "REFUND_PROCESSING",
            "REFUNDED",
        ] {
            let want = by_state
                .iter()
                .find(|(s, _)| s == state)
                .map_or(0, |(_, n)| *n);
            assert_eq!(
                number_of(client, &format!("payments-{product}-{state}")).await?,
                want,
                "{state} payments of product {product}"
            );
        }
        let attention = count_of(pool, r#"SELECT COUNT(*) FROM payment_service.payments WHERE product_id = $1 AND needs_attention"#, product).await?;
        assert_eq!(
            number_of(client, &format!("payments-{product}-attention")).await?,
            attention
        );
    }
    assert_eq!(
        number_of(client, &format!("payments-{}-attention", f.stuck_product)).await?,
        1
    );
    assert!(client
        .find(Locator::Css(&format!(
            "#attention a[href='/console/payments/{}']",
            f.stuck
        )))
        .await
        .is_ok());
    // The charts too (the drop page's screenshot is the charts test's, taken mid-drop).
    for product in [f.product, f.stuck_product] {
        crate::charts::check(client, pool, product, true).await?;
    }

    // Payments, filtered by state through the form.
    client.goto(&format!("{console}/payments")).await?;
    client
        .find(Locator::Css("#filter-state"))
        .await?
        .select_by_value("FAILED")
        .await?;
    click(client, "#filter-apply").await?;
    // The page the form loads marks the filter it applied; the page it leaves does
    // not (choosing an option sets the property, not the attribute).
    client
        .wait()
        .for_element(Locator::Css(
            "#filter-state option[value='FAILED'][selected]",
        ))
        .await?;
    assert!(client
        .current_url()
        .await?
        .query()
        .unwrap_or_default()
        .contains("state=FAILED"));
    let failed: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM payment_service.payments WHERE state = 'FAILED'"#,
    )
    .fetch_one(pool)
    .await?;
    let rows = client.find_all(Locator::Css("tr.payment")).await?;
    assert_eq!(rows.len() as i64, failed, "FAILED rows listed");
    for row in &rows {
        assert_eq!(row.attr("data-state").await?.as_deref(), Some("FAILED"));
    }
    screenshot(client, shots, "payments").await?;

    // The flagged payment's timeline.
    client
        .goto(&format!("{console}/payments?attention=yes"))
        .await?;
    click(client, &format!("a[href='/console/payments/{}']", f.stuck)).await?;
    client.wait().for_element(Locator::Css("#facts")).await?;
    assert_eq!(text_of(client, "needs-attention").await?, "yes");
    let keys = client
        .execute(
            "return Array.from(document.querySelectorAll('#steps tr.step td.mono')).map(e => e.textContent)",
            vec![],
        )
        .await?;
    let debit_key = format!("pay:{}:debit", f.stuck);
    assert!(
        keys.as_array()
            .is_some_and(|k| k.iter().any(|v| v.as_str() == Some(debit_key.as_str()))),
        "the timeline shows the debit's operation key: {keys}"
    );
    screenshot(client, shots, "timeline").await?;

    // Resume, with its confirmation, once the account service is back.
    heal_account();
    click(client, "#resume").await?;
    client.wait().for_element(Locator::Css("#confirm")).await?;
    type_into(client, "#reason", RESUMED).await?;
    screenshot(client, shots, "resume-confirm").await?;
    let still: (String, bool) = sqlx::query_as(
        r#"SELECT state, needs_attention FROM payment_service.payments WHERE id = $1"#,
    )
    .bind(f.stuck)
    .fetch_one(pool)
    .await?;
    assert_eq!(
        still,
        ("PROCESSING".into(), true),
        "nothing moved before the confirmation"
    );
    browser::confirm(client).await?;
    let completed = format!(
        "SELECT COUNT(*) FROM payment_service.payments WHERE id = '{}' AND state = 'COMPLETED' AND NOT needs_attention",
        f.stuck
    );
    wait_for(pool, "the resumed payment completed", &completed, 1).await?;
    assert_on_record(pool, f.stuck, "PAYMENT_RESUMED", "resumed", RESUMED).await?;
    client.refresh().await?;
    client.wait().for_element(Locator::Css("#facts")).await?;
    screenshot(client, shots, "timeline-resumed").await?;

    // A dead webhook delivery, replayed once the receiver accepts.
    accept_webhooks();
    client.goto(&format!("{console}/webhooks")).await?;
    let first = client.find(Locator::Css("tr.delivery")).await?;
    let delivery: Uuid = first
        .attr("data-id")
        .await?
        .ok_or_else(|| anyhow::anyhow!("a delivery row without its id"))?
        .parse()?;
    screenshot(client, shots, "webhooks").await?;
    click(
        client,
        &format!("a[href='/console/webhooks/{delivery}/replay']"),
    )
    .await?;
    client.wait().for_element(Locator::Css("#confirm")).await?;
    type_into(client, "#reason", "receiver fixed").await?;
    browser::confirm(client).await?;
    let delivered = format!(
        "SELECT COUNT(*) FROM payment_service.webhook_deliveries WHERE id = '{delivery}' AND state = 'DELIVERED'"
    );
    wait_for(pool, "the replayed delivery delivered", &delivered, 1).await?;
    Ok(())
}
