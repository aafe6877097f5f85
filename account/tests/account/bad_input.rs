//! Bad requests get a 4xx with a code, never a 5xx, and never write anything.

use crate::support::{refusals, token_for, Refusal, Svc};
use paysaga_common::auth::Audience;
use paysaga_common::testkit::service_token;

#[tokio::test]
async fn malformed_requests_are_answered_with_codes() {
    let (svc, a) = Svc::with_member(1_000).await;
    let merchant_id = svc.merchant_id().await;
    let rows_before = svc.count_where("TRUE").await;
    let token = service_token("orchestrator", Audience::Account);

    let raw = |path: &'static str, body: String| {
        svc.http
            .post(svc.url(path))
            .bearer_auth(token_for(path))
            .header("content-type", "application/json")
            .body(body)
    };
    let get = |path: &str| svc.http.get(svc.url(path)).bearer_auth(&token);
    let id = a.id;
    // One request a row reads better than what rustfmt would make of it.
    #[rustfmt::skip]
    let cases: Vec<Refusal> = vec![
        (raw("/v1/debits", "{not json".into()), 400, "MALFORMED_JSON"),
        // A valid debit, refused only for its size: whitespace past 64 KiB.
        (raw("/v1/debits", format!(r#"{{"operation_key": "padded", "account_id": {id}, "amount": 5}}{}"#, " ".repeat(70_000))), 413, "PAYLOAD_TOO_LARGE"),
        (raw("/v1/debits", format!(r#"{{"account_id": {id}, "amount": 5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": "{id}", "amount": 5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": {id}, "amount": -5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": {id}, "amount": 0}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": {id}, "amount": 1.5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "a b", "account_id": {id}, "amount": 5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": {id}, "amount": 5, "extra": 1}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/debits", r#"{"operation_key": "k", "account_id": 424242, "amount": 5}"#.into()), 404, "ACCOUNT_NOT_FOUND"),
        (raw("/v1/debits", format!(r#"{{"operation_key": "k", "account_id": {merchant_id}, "amount": 5}}"#)), 422, "ACCOUNT_NOT_MEMBER"),
        (raw("/v1/credits", format!(r#"{{"operation_key": "k", "account_id": {id}, "amount": 5}}"#)), 422, "INVALID_BODY"),
        (raw("/v1/accounts", r#"{"member_id": "m", "opening_balance": -1}"#.into()), 422, "INVALID_OPENING_BALANCE"),
        (raw("/v1/accounts", r#"{"member_id": "m", "opening_balance": 1000000000000000}"#.into()), 422, "INVALID_OPENING_BALANCE"),
        (raw("/v1/accounts", r#"{"member_id": "has space", "opening_balance": 1}"#.into()), 422, "INVALID_BODY"),
        (raw("/v1/accounts", r#"{"member_id": "m"}"#.into()), 422, "INVALID_BODY"),
        (svc.http.post(svc.url("/v1/debits")).bearer_auth(&token).body("{}"), 415, "UNSUPPORTED_MEDIA_TYPE"),
        (get("/v1/accounts/abc"), 400, "INVALID_PATH"),
        (get("/v1/accounts/99999999999999999999"), 400, "INVALID_PATH"),
        (get("/v1/accounts/424242"), 404, "ACCOUNT_NOT_FOUND"),
        (get(&format!("/v1/transactions/{}", "x".repeat(200))), 400, "INVALID_OPERATION_KEY"),
        (svc.http.delete(svc.url("/v1/debits")).bearer_auth(&token), 405, "METHOD_NOT_ALLOWED"),
        (get("/v1/nothing"), 404, "NOT_FOUND"),
    ];
    refusals(cases).await;

    assert_eq!(
        svc.count_where("TRUE").await,
        rows_before,
        "no refused request wrote a row"
    );
    assert_eq!(svc.balance(a.id).await, 1_000);
    let accounts = svc
        .number("SELECT COUNT(*) FROM account_service.accounts")
        .await;
    assert_eq!(accounts, 2, "the merchant and member-1 only");
}

#[tokio::test]
async fn shared_endpoints_answer() {
    let svc = Svc::start().await;
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        let r = svc.http.get(svc.url(path)).send().await.expect("answer");
        assert_eq!(r.status(), 200, "{path}");
    }
    // Metrics are on a listener of their own (METRICS_ADDR), never the API's.
    let r = svc
        .http
        .get(svc.url("/metrics"))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 404, "/metrics on the API listener");
    let metrics = paysaga_common::testkit::scrape_metrics().await;
    assert!(metrics.contains("http_requests_total"), "{metrics}");
    let spec: serde_json::Value = svc
        .http
        .get(svc.url("/openapi.json"))
        .send()
        .await
        .expect("spec")
        .json()
        .await
        .expect("json");
    for path in [
        "/v1/accounts",
        "/v1/accounts/{id}",
        "/v1/debits",
        "/v1/credits",
        "/v1/transactions/{operation_key}",
    ] {
        assert!(spec["paths"][path].is_object(), "{path} documented");
    }
}
