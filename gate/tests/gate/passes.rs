//! A pass as buyers and the order service see it: the same member gets the same pass,
//! forged, tampered and expired passes fail verification, and bad requests get 4xx.

use std::time::Duration;

use crate::support::{create_product, start_gate, start_order};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use gate::Config;
use paysaga_common::{
    keys::DevKey,
    pass::{PassClaims, PassError, PassSigner, PassVerifier},
    testkit::{buyer_token, service_token, TestDb, TestRedis},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_member_same_pass_and_bad_passes_fail_verification() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 5).await;
    let gate = start_gate(Config::local(&redis.url, &redis.prefix, &order.url)).await;
    let http = reqwest::Client::new();

    let alice = gate.buyer(&http, "alice");
    let first = alice.issue_pass(product).await.expect("pass").body;
    let again = alice.issue_pass(product).await.expect("same pass").body;
    assert_eq!(
        first, again,
        "asking twice returns the same pass, not a second unit"
    );
    let view = gate
        .service_client()
        .quota(product)
        .await
        .expect("quota")
        .body;
    assert_eq!((view.quota, view.in_flight), (4, 1));

    let verifier = PassVerifier::new(DevKey::Passes.verifying_key());
    let now = chrono::Utc::now().timestamp();
    let claims = verifier.verify(&first.pass, now).expect("valid");
    assert_eq!(
        (claims.prd, claims.mem.as_str(), claims.pid),
        (product, "alice", first.pass_id)
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
    let mallory = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("mallory"),
        Duration::from_secs(10),
    );
    let e = mallory
        .reserve(product, &forged)
        .await
        .expect_err("forged pass refused");
    assert_eq!(e.code(), Some("PASS_INVALID_SIGNATURE"));
    let e = mallory
        .reserve(product, &format!("v1.{body}.{sig}"))
        .await
        .expect_err("tampered pass refused");
    assert_eq!(e.code(), Some("PASS_INVALID_SIGNATURE"));
    let e = mallory
        .reserve(product, &first.pass)
        .await
        .expect_err("alice's pass is not mallory's");
    assert_eq!(e.code(), Some("PASS_WRONG_MEMBER"));
    let alice_order = paysaga_contracts::order::client::OrderClient::new(
        order.url.clone(),
        buyer_token("alice"),
        Duration::from_secs(10),
    );
    alice_order
        .reserve(product, &first.pass)
        .await
        .expect("alice reserves with her pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_4xx_with_a_code() {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let order = start_order(&db).await;
    let product = create_product(&order, 1).await;
    let gate = start_gate(Config::local(&redis.url, &redis.prefix, &order.url)).await;
    let http = reqwest::Client::new();
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
    assert_eq!(
        send(None, r#"{"product_id":1}"#).await,
        (401, "UNAUTHENTICATED".into())
    );
    assert_eq!(
        send(Some("nonsense".into()), r#"{"product_id":1}"#).await,
        (401, "UNAUTHENTICATED".into())
    );
    assert_eq!(
        send(Some(service_token("orchestrator")), r#"{"product_id":1}"#).await,
        (403, "FORBIDDEN".into())
    );
    assert_eq!(
        send(buyer.clone(), r#"{"product_id":"#).await,
        (400, "MALFORMED_JSON".into())
    );
    assert_eq!(
        send(buyer.clone(), r#"{"product":1}"#).await,
        (422, "INVALID_BODY".into())
    );
    assert_eq!(
        send(buyer.clone(), r#"{"product_id":0}"#).await,
        (422, "INVALID_PRODUCT_ID".into())
    );
    assert_eq!(
        send(buyer.clone(), r#"{"product_id":-4}"#).await,
        (422, "INVALID_PRODUCT_ID".into())
    );
    assert_eq!(
        send(buyer.clone(), r#"{"product_id":999999}"#).await,
        (404, "PRODUCT_NOT_FOUND".into())
    );

    let body = format!(r#"{{"product_id":{product}}}"#).leak() as &'static str;
    assert_eq!(send(buyer.clone(), body).await.0, 201);
    assert_eq!(
        send(Some(buyer_token("carol")), body).await,
        (409, "SOLD_OUT".into())
    );
    // Answered from the local sold-out mark or from Redis: the same answer either way.
    assert_eq!(
        send(Some(buyer_token("dave")), body).await,
        (409, "SOLD_OUT".into())
    );
    // bob still gets his own pass while the product is sold out.
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
    let (status, body) = quota(buyer_token("bob"), format!("/v1/quota/{product}")).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("FORBIDDEN")));
    let (status, body) = quota(service_token("operator"), "/v1/quota/abc".into()).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_PATH")));
    let (status, body) = quota(service_token("operator"), "/v1/quota/424242".into()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("PRODUCT_NOT_FOUND"))
    );
    let (status, body) = quota(service_token("operator"), format!("/v1/quota/{product}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (body["quota"].as_i64(), body["in_flight"].as_i64()),
        (Some(0), Some(1))
    );
}
