//! Who may call what: the schema wall between service roles, service-only endpoints,
//! and members who see only their own accounts.

use crate::support::{number, sqlstate, Svc};
use paysaga_common::testkit::buyer_token;
use reqwest::Method;
use sqlx::postgres::PgPoolOptions;

/// A request to the service with `token` (none: anonymous) and maybe a JSON body.
async fn send(
    svc: &Svc,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> reqwest::Response {
    let mut req = svc.http.request(method, svc.url(path));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(body);
    }
    req.send().await.expect("answer")
}

#[tokio::test]
async fn account_app_cannot_read_another_services_schema() {
    let svc = Svc::start().await;
    sqlx::query("CREATE TABLE order_service.wall_probe (id INT)")
        .execute(&svc.admin)
        .await
        .expect("create as admin");
    sqlx::query("INSERT INTO order_service.wall_probe VALUES (1)")
        .execute(&svc.admin)
        .await
        .expect("insert");

    let as_account = PgPoolOptions::new()
        .max_connections(1)
        .connect(&svc.db.role_url("account_app"))
        .await
        .expect("connect as account_app");
    let err = sqlx::query("SELECT id FROM order_service.wall_probe")
        .fetch_all(&as_account)
        .await
        .expect_err("the wall holds");
    assert_eq!(
        sqlstate(&err).as_deref(),
        Some("42501"),
        "permission denied, got {err}"
    );

    // And its own schema is reachable, so the refusal above is the wall, not a broken login.
    let own = number(&as_account, "SELECT COUNT(*) FROM account_service.accounts").await;
    assert_eq!(own, 1, "just the merchant account");
}

#[tokio::test]
async fn buyers_cannot_move_money_and_see_only_their_own_account() {
    let (svc, mine, theirs) = Svc::with_two_members(1_000, 1_000).await;
    svc.pay("pay:a:debit", mine.id, 100).await;

    let buyer = buyer_token("member-1");
    let body = serde_json::json!({"operation_key": "pay:evil:debit", "account_id": theirs.id, "amount": 500});
    for (path, body) in [
        ("/v1/debits", body.clone()),
        (
            "/v1/credits",
            serde_json::json!({"operation_key": "x", "account_id": mine.id, "amount": 1, "refund_of": "pay:a:debit"}),
        ),
        (
            "/v1/accounts",
            serde_json::json!({"member_id": "member-1", "opening_balance": 1_000_000}),
        ),
    ] {
        let r = send(&svc, Method::POST, path, Some(&buyer), Some(&body)).await;
        assert_eq!(r.status(), 403, "{path}");
        let e: serde_json::Value = r.json().await.expect("json");
        assert_eq!(e["code"], "FORBIDDEN");
    }
    let r = send(
        &svc,
        Method::GET,
        "/v1/transactions/pay:a:debit",
        Some(&buyer),
        None,
    )
    .await;
    assert_eq!(r.status(), 403);

    let r = send(&svc, Method::POST, "/v1/debits", None, Some(&body)).await;
    assert_eq!(r.status(), 401);
    let e: serde_json::Value = r.json().await.expect("json");
    assert_eq!(e["code"], "UNAUTHENTICATED");
    let mine_path = format!("/v1/accounts/{}", mine.id);
    let r = send(&svc, Method::GET, &mine_path, None, None).await;
    assert_eq!(r.status(), 401);

    // Own account: visible, with its history.
    let r = send(&svc, Method::GET, &mine_path, Some(&buyer), None).await;
    assert_eq!(r.status(), 200);
    let view: paysaga_contracts::account::api::AccountView = r.json().await.expect("view");
    assert_eq!(view.account.balance, 900);
    assert_eq!(view.recent_transactions.len(), 1);
    assert_eq!(view.recent_transactions[0].operation_key, "pay:a:debit");

    // Someone else's, and the merchant's: exactly like a missing account.
    let merchant_id = svc.merchant_id().await;
    for id in [theirs.id, merchant_id, 987_654] {
        let path = format!("/v1/accounts/{id}");
        let r = send(&svc, Method::GET, &path, Some(&buyer), None).await;
        assert_eq!(r.status(), 404, "account {id}");
        let e: serde_json::Value = r.json().await.expect("json");
        assert_eq!(e["code"], "ACCOUNT_NOT_FOUND");
    }

    // A service sees the merchant account, whose balance is the sum of its shards.
    let view = svc
        .client
        .get_account(merchant_id)
        .await
        .expect("merchant view")
        .body;
    assert_eq!(view.account.balance, 100);
    assert_eq!(view.recent_transactions.len(), 1);

    // Nothing the buyer attempted moved money.
    assert_eq!(svc.balance(theirs.id).await, 1_000);
    assert_eq!(
        svc.count_where("TRUE").await,
        3,
        "two openings and one debit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_migrating_a_fresh_database_at_once_both_serve() {
    let db = paysaga_common::testkit::TestDb::new().await;
    let http = reqwest::Client::new();
    let mut stops = Vec::new();
    let mut bases = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        bases.push(format!("http://{}", listener.local_addr().expect("addr")));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        stops.push(stop);
        let config = account::Config::local(db.role_url("account_app"));
        tasks.push(tokio::spawn(account::run(
            config,
            listener,
            Box::pin(async move {
                let _ = stopped.await;
            }),
        )));
    }
    for base in &bases {
        let r = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status(), 200);
    }
    let admin = db.admin_pool().await;
    let applied = number(
        &admin,
        "SELECT COUNT(*) FROM account_service._sqlx_migrations WHERE success",
    )
    .await;
    assert_eq!(
        applied,
        account::MIGRATOR.iter().count() as i64,
        "each migration applied once"
    );
    for (sql, want) in [
        (
            "SELECT COUNT(*) FROM account_service.accounts WHERE kind = 'MERCHANT'",
            1,
        ),
        ("SELECT COUNT(*) FROM account_service.merchant_shards", 16),
    ] {
        assert_eq!(number(&admin, sql).await, want, "{sql}");
    }
    for stop in stops {
        let _ = stop.send(());
    }
    for task in tasks {
        task.await.expect("joined").expect("clean shutdown");
    }
    admin.close().await;
}
