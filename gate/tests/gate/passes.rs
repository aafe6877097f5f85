//! A pass as buyers and the order service see it: the same member gets the same pass,
//! forged, tampered and expired passes fail verification, and bad requests get 4xx.

use crate::support::{order_buyer, start_gate, Sale};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use paysaga_common::auth::Audience;
use paysaga_common::{
    keys::DevKey,
    pass::{PassClaims, PassError, PassSigner, PassVerifier},
    testkit::{buyer_token, service_token},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_member_same_pass_and_bad_passes_fail_verification() {
    let sale = Sale::start(5).await;
    let gate = start_gate(sale.config()).await;

    let first = gate.pass("alice", sale.product).await;
    let again = gate.pass("alice", sale.product).await;
    assert_eq!(
        first, again,
        "asking twice returns the same pass, not a second unit"
    );
    let view = gate.quota(sale.product).await;
    assert_eq!((view.quota, view.in_flight), (4, 1));

    let verifier = PassVerifier::new(DevKey::Passes.verifying_key());
    let now = chrono::Utc::now().timestamp();
    let claims = verifier.verify(&first.pass, now).expect("valid");
    assert_eq!(
        (claims.prd, claims.mem.as_str(), claims.pid),
        (sale.product, "alice", first.pass_id)
    );

    // Expired: the same pass once its expiry has come.
    assert_eq!(
        verifier.verify(&first.pass, claims.exp),
        Err(PassError::Expired)
    );
    // Forged: the same claims signed with another key.
    let forged = PassSigner::new(DevKey::BuyerTokens.signing_key()).sign(&claims);
    assert_eq!(verifier.verify(&forged, now), Err(PassError::BadSignature));
    // Tampered: another member's name under alice's signature.
    let (_, sig) = first.pass.rsplit_once('.').expect("three parts");
    let other = PassClaims {
        mem: "mallory".into(),
        ..claims.clone()
    };
    let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).expect("json"));
    assert_eq!(
        verifier.verify(&format!("v1.{body}.{sig}"), now),
        Err(PassError::BadSignature)
    );

    // The real order service agrees.
    let mallory = order_buyer(&sale.order, "mallory").await;
    let e = mallory
        .reserve(sale.product, &forged)
        .await
        .expect_err("forged pass refused");
    assert_eq!(e.code(), Some("PASS_INVALID_SIGNATURE"));
    let e = mallory
        .reserve(sale.product, &format!("v1.{body}.{sig}"))
        .await
        .expect_err("tampered pass refused");
    assert_eq!(e.code(), Some("PASS_INVALID_SIGNATURE"));
    let e = mallory
        .reserve(sale.product, &first.pass)
        .await
        .expect_err("alice's pass is not mallory's");
    assert_eq!(e.code(), Some("PASS_WRONG_MEMBER"));
    sale.reserve("alice", &first.pass).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_with_a_code() {
    let sale = Sale::start(1).await;
    let gate = start_gate(sale.config()).await;
    let http = &gate.http;
    let url = format!("{}/v1/passes", gate.url());

    let send = |token: Option<String>, body: &'static str| {
        let mut req = http
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let r = req.send().await.expect("answer");
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.expect("json error body");
            (status, body["code"].as_str().unwrap_or_default().to_owned())
        }
    };
    let buyer = Some(buyer_token("bob"));
    for (token, body, (status, code)) in [
        (None, r#"{"product_id":1}"#, (401, "UNAUTHENTICATED")),
        (
            Some("nonsense".to_owned()),
            r#"{"product_id":1}"#,
            (401, "UNAUTHENTICATED"),
        ),
        (
            Some(service_token("orchestrator", Audience::Gate)),
            r#"{"product_id":1}"#,
            (403, "FORBIDDEN"),
        ),
        (buyer.clone(), r#"{"product_id":"#, (400, "MALFORMED_JSON")),
        (buyer.clone(), r#"{"product":1}"#, (422, "INVALID_BODY")),
        (
            buyer.clone(),
            r#"{"product_id":0}"#,
            (422, "INVALID_PRODUCT_ID"),
        ),
        (
            buyer.clone(),
            r#"{"product_id":-4}"#,
            (422, "INVALID_PRODUCT_ID"),
        ),
        (
            buyer.clone(),
            r#"{"product_id":999999}"#,
            (404, "PRODUCT_NOT_FOUND"),
        ),
    ] {
        assert_eq!(send(token, body).await, (status, code.into()), "{body}");
    }

    let body = format!(r#"{{"product_id":{}}}"#, sale.product).leak() as &'static str;
    assert_eq!(send(buyer.clone(), body).await.0, 201);
    // The second refusal may come from the local sold-out mark the first one left, or
    // from Redis: the same answer either way.
    for member in ["carol", "dave"] {
        assert_eq!(
            send(Some(buyer_token(member)), body).await,
            (409, "SOLD_OUT".into()),
            "{member}"
        );
    }
    // bob still gets his own pass while the sale.product is sold out.
    assert_eq!(send(buyer, body).await.0, 201);

    let quota = |token: String, path: String| {
        let req = http.get(format!("{}{path}", gate.url())).bearer_auth(token);
        async move {
            let r = req.send().await.expect("answer");
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.expect("json");
            (status, body)
        }
    };
    for (token, path, (status, code)) in [
        (
            buyer_token("bob"),
            format!("/v1/quota/{}", sale.product),
            (403, "FORBIDDEN"),
        ),
        (
            service_token("operator", Audience::Gate),
            "/v1/quota/abc".into(),
            (400, "INVALID_PATH"),
        ),
        (
            service_token("operator", Audience::Gate),
            "/v1/quota/424242".into(),
            (404, "PRODUCT_NOT_FOUND"),
        ),
    ] {
        let (got, body) = quota(token, path.clone()).await;
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{path}");
    }
    let (status, body) = quota(
        service_token("operator", Audience::Gate),
        format!("/v1/quota/{}", sale.product),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (body["quota"].as_i64(), body["in_flight"].as_i64()),
        (Some(0), Some(1))
    );
}
