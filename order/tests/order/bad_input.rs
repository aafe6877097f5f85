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
    let h = Harness::start().await;
    let product = h.product(3).await;
    let svc = Some(SERVICE.to_owned());
    let buyer = Some(buyer_token("alice"));
    let json_ct = Some("application/json");
    let huge = format!(r#"{{"name":"{}","price":1,"units":1}}"#, "x".repeat(70_000));
    let long_name = json!({"name": "n".repeat(201), "price": 100, "units": 1}).to_string();
    let good_pass = pass(product.id, "alice");
    let wrong_type_reservation = json!({"product_id": "one", "pass": good_pass}).to_string();
    let units_path = format!("/v1/products/{}/units", product.id);

    let cases: Vec<(Probe, u16, &str)> = vec![
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some("{not json"),
                content_type: json_ct,
            },
            400,
            "MALFORMED_JSON",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a"}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_BODY",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":1.5,"units":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_BODY",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":0,"units":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_PRICE",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":-5,"units":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_PRICE",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":9999999999999999,"units":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_PRICE",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":100,"units":-1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_UNITS",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":100,"units":2000000}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_UNITS",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"   ","price":100,"units":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_NAME",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(&long_name),
                content_type: json_ct,
            },
            422,
            "INVALID_NAME",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(r#"{"name":"a","price":100,"units":1}"#),
                content_type: None,
            },
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: Some(&huge),
                content_type: json_ct,
            },
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: None,
                body: Some(r#"{"name":"a","price":100,"units":1}"#),
                content_type: json_ct,
            },
            401,
            "UNAUTHENTICATED",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: Some("garbage".into()),
                body: Some(r#"{"name":"a","price":100,"units":1}"#),
                content_type: json_ct,
            },
            401,
            "UNAUTHENTICATED",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products".into(),
                token: buyer.clone(),
                body: Some(r#"{"name":"a","price":100,"units":1}"#),
                content_type: json_ct,
            },
            403,
            "FORBIDDEN",
        ),
        (
            Probe {
                method: Method::POST,
                path: units_path.clone(),
                token: svc.clone(),
                body: Some(r#"{"count":0}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_UNITS",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/products/424242/units".into(),
                token: svc.clone(),
                body: Some(r#"{"count":1}"#),
                content_type: json_ct,
            },
            404,
            "PRODUCT_NOT_FOUND",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/products/abc".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            400,
            "INVALID_PATH",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/products/99999999999999999999".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            400,
            "INVALID_PATH",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/products/-1".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            404,
            "PRODUCT_NOT_FOUND",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/products/0/availability".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            404,
            "PRODUCT_NOT_FOUND",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/reservations/not-a-uuid".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            400,
            "INVALID_PATH",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations/not-a-uuid/confirm".into(),
                token: svc.clone(),
                body: Some("{}"),
                content_type: json_ct,
            },
            400,
            "INVALID_PATH",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations".into(),
                token: buyer.clone(),
                body: Some(&wrong_type_reservation),
                content_type: json_ct,
            },
            422,
            "INVALID_BODY",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations".into(),
                token: buyer.clone(),
                body: Some(r#"{"product_id":1}"#),
                content_type: json_ct,
            },
            422,
            "INVALID_BODY",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations".into(),
                token: buyer.clone(),
                body: Some("[]"),
                content_type: json_ct,
            },
            422,
            "INVALID_BODY",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations".into(),
                token: None,
                body: Some("{}"),
                content_type: json_ct,
            },
            401,
            "UNAUTHENTICATED",
        ),
        (
            Probe {
                method: Method::POST,
                path: "/v1/reservations/00000000-0000-0000-0000-000000000000/confirm".into(),
                token: buyer.clone(),
                body: Some("{}"),
                content_type: json_ct,
            },
            403,
            "FORBIDDEN",
        ),
        (
            Probe {
                method: Method::DELETE,
                path: "/v1/products".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            Probe {
                method: Method::GET,
                path: "/v1/nothing-here".into(),
                token: svc.clone(),
                body: None,
                content_type: None,
            },
            404,
            "NOT_FOUND",
        ),
    ];

    for (probe, status, code) in cases {
        let what = format!("{} {}", probe.method, probe.path);
        let (got_status, body) = send(&h, probe).await;
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
