//! Bad input of every kind gets a 4xx with a machine-readable code, never a 5xx, and
//! writes nothing.

use crate::support::{pass, token_for, Harness};
use paysaga_common::testkit::buyer_token;
use reqwest::Method;
use serde_json::{json, Value};

/// Stands for a credential of the role that calls the probed route ([`token_for`]).
const SERVICE: &str = "<service>";

struct Probe<'a> {
    method: Method,
    path: String,
    token: Option<String>,
    body: Option<&'a str>,
    content_type: Option<&'a str>,
}

const JSON: Option<&str> = Some("application/json");
const PRODUCTS: &str = "/v1/products";

fn probe<'a>(
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&'a str>,
    content_type: Option<&'a str>,
) -> Probe<'a> {
    Probe {
        method,
        path: path.to_owned(),
        token: token.map(str::to_owned),
        body,
        content_type,
    }
}

/// A JSON body sent with the given credential.
fn post<'a>(path: &str, token: Option<&str>, body: &'a str) -> Probe<'a> {
    probe(Method::POST, path, token, Some(body), JSON)
}

/// A bodiless read with the route's own credential.
fn get(path: &str) -> Probe<'static> {
    probe(Method::GET, path, Some(SERVICE), None, None)
}

async fn send(h: &Harness, p: Probe<'_>) -> (u16, Value) {
    let mut req = h.http().request(p.method, format!("{}{}", h.base, p.path));
    if let Some(t) = p.token {
        let t = if t == SERVICE { token_for(&p.path) } else { t };
        req = req.bearer_auth(t);
    }
    if let Some(ct) = p.content_type {
        req = req.header("content-type", ct);
    }
    if let Some(b) = p.body {
        req = req.body(b.to_owned());
    }
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn bad_requests_get_4xx_codes_and_change_nothing() {
    let (h, product) = Harness::with_product(3).await;
    let svc = Some(SERVICE);
    let buyer_credential = buyer_token("alice");
    let buyer = Some(buyer_credential.as_str());
    let huge = format!(r#"{{"name":"{}","price":1,"units":1}}"#, "x".repeat(70_000));
    let long_name = json!({"name": "n".repeat(201), "price": 100, "units": 1}).to_string();
    let good_pass = pass(product.id, "alice");
    let wrong_type_reservation = json!({"product_id": "one", "pass": good_pass}).to_string();
    let units_path = format!("/v1/products/{}/units", product.id);

    // One probe a row reads better than what rustfmt would make of it.
    #[rustfmt::skip]
    let cases: Vec<(u16, &str, Probe)> = vec![
        (400, "MALFORMED_JSON", post(PRODUCTS, svc, "{not json")),
        (422, "INVALID_BODY", post(PRODUCTS, svc, r#"{"name":"a"}"#)),
        (422, "INVALID_BODY", post(PRODUCTS, svc, r#"{"name":"a","price":1.5,"units":1}"#)),
        (422, "INVALID_PRICE", post(PRODUCTS, svc, r#"{"name":"a","price":0,"units":1}"#)),
        (422, "INVALID_PRICE", post(PRODUCTS, svc, r#"{"name":"a","price":-5,"units":1}"#)),
        (422, "INVALID_PRICE", post(PRODUCTS, svc, r#"{"name":"a","price":9999999999999999,"units":1}"#)),
        (422, "INVALID_UNITS", post(PRODUCTS, svc, r#"{"name":"a","price":100,"units":-1}"#)),
        (422, "INVALID_UNITS", post(PRODUCTS, svc, r#"{"name":"a","price":100,"units":2000000}"#)),
        (422, "INVALID_NAME", post(PRODUCTS, svc, r#"{"name":"   ","price":100,"units":1}"#)),
        (422, "INVALID_NAME", post(PRODUCTS, svc, &long_name)),
        (415, "UNSUPPORTED_MEDIA_TYPE", probe(Method::POST, PRODUCTS, svc, Some(r#"{"name":"a","price":100,"units":1}"#), None)),
        (413, "PAYLOAD_TOO_LARGE", post(PRODUCTS, svc, &huge)),
        (401, "UNAUTHENTICATED", post(PRODUCTS, None, r#"{"name":"a","price":100,"units":1}"#)),
        (401, "UNAUTHENTICATED", post(PRODUCTS, Some("garbage"), r#"{"name":"a","price":100,"units":1}"#)),
        (403, "FORBIDDEN", post(PRODUCTS, buyer, r#"{"name":"a","price":100,"units":1}"#)),
        (422, "INVALID_UNITS", post(&units_path, svc, r#"{"count":0}"#)),
        (404, "PRODUCT_NOT_FOUND", post("/v1/products/424242/units", svc, r#"{"count":1}"#)),
        (400, "INVALID_PATH", get("/v1/products/abc")),
        (400, "INVALID_PATH", get("/v1/products/99999999999999999999")),
        (404, "PRODUCT_NOT_FOUND", get("/v1/products/-1")),
        (404, "PRODUCT_NOT_FOUND", get("/v1/products/0/availability")),
        (400, "INVALID_PATH", get("/v1/reservations/not-a-uuid")),
        (400, "INVALID_PATH", post("/v1/reservations/not-a-uuid/confirm", svc, "{}")),
        (422, "INVALID_BODY", post("/v1/reservations", buyer, &wrong_type_reservation)),
        (422, "INVALID_BODY", post("/v1/reservations", buyer, r#"{"product_id":1}"#)),
        (422, "INVALID_BODY", post("/v1/reservations", buyer, "[]")),
        (401, "UNAUTHENTICATED", post("/v1/reservations", None, "{}")),
        (403, "FORBIDDEN", post("/v1/reservations/00000000-0000-0000-0000-000000000000/confirm", buyer, "{}")),
        (405, "METHOD_NOT_ALLOWED", probe(Method::DELETE, PRODUCTS, svc, None, None)),
        (404, "NOT_FOUND", get("/v1/nothing-here")),
    ];

    for (status, code, case) in cases {
        let what = format!("{} {}", case.method, case.path);
        let (got_status, body) = send(&h, case).await;
        assert_eq!(got_status, status, "{what}: {body}");
        assert_eq!(body["code"], code, "{what}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {body}"
        );
    }

    // Nothing written: the one product from set-up, its three units, no reservations.
    let counts: (i64, i64, i64) = sqlx::query_as(
        r#"
        SELECT (SELECT COUNT(*) FROM order_service.products),
               (SELECT COUNT(*) FROM order_service.product_stock),
               (SELECT COUNT(*) FROM order_service.reservations)
        "#,
    )
    .fetch_one(&h.admin)
    .await
    .unwrap();
    assert_eq!(counts, (1, 3, 0));
    h.stop().await;
}
