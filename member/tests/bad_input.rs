//! Bad input gets a 4xx with a code, never a 500; service endpoints need a service
//! credential; members list in id order, a page at a time.

mod support;

use std::time::Duration;

use paysaga_common::testkit::{buyer_token, service_token};
use paysaga_contracts::member::{api::ListMembers, client::MemberClient};
use serde_json::json;
use support::{email, Stack, PASSWORD};

#[tokio::test]
async fn malformed_bodies_are_refused_with_codes() {
    let s = Stack::start().await;
    let huge = "x".repeat(70 * 1024);
    let (status, _, body) = s
        .post(
            "/v1/members",
            &json!({"email": email("big"), "password": huge}),
        )
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "PAYLOAD_TOO_LARGE");

    for (path, payload) in [
        (
            "/v1/members",
            json!({"email": email("u"), "password": PASSWORD, "admin": true}),
        ),
        (
            "/v1/sessions",
            json!({"email": email("u"), "password": PASSWORD, "remember": 1}),
        ),
        (
            "/v1/sessions/refresh",
            json!({"refresh_token": "t", "extra": 1}),
        ),
        (
            "/v1/sessions/sign-out",
            json!({"refresh_token": "t", "extra": 1}),
        ),
        ("/v1/members", json!({"email": email("u")})),
        ("/v1/members", json!({"email": 7, "password": PASSWORD})),
    ] {
        let (status, _, body) = s.post(path, &payload).await;
        assert_eq!(status, 422, "{path} {payload}: {body}");
        assert_eq!(body["code"], "INVALID_BODY");
    }
    let r = s
        .http
        .post(s.url("/v1/sessions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = s
        .http
        .post(s.url("/v1/sessions"))
        .body("email=a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
}

#[tokio::test]
async fn service_endpoints_need_a_service_credential() {
    let s = Stack::start().await;
    let member = s.sign_up(&email("svc")).await;
    let id = member.id;
    let anonymous = s
        .http
        .get(s.url(&format!("/v1/members/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let buyer = MemberClient::new(
        &s.base,
        buyer_token(&id.to_string()),
        Duration::from_secs(5),
    );
    assert_eq!(buyer.get_member(id).await.unwrap_err().status(), Some(403));
    assert_eq!(
        buyer
            .list_members(&ListMembers::default())
            .await
            .unwrap_err()
            .status(),
        Some(403)
    );
    assert_eq!(s.client.get_member(id).await.unwrap().body, member);
    let e = s.client.get_member(uuid::Uuid::now_v7()).await.unwrap_err();
    assert_eq!(e.code(), Some("MEMBER_NOT_FOUND"));
    let r = s
        .http
        .get(s.url("/v1/members/not-a-uuid"))
        .bearer_auth(service_token("operator"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    for query in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "after=nope",
        "colour=red",
    ] {
        let r = s
            .http
            .get(s.url(&format!("/v1/members?{query}")))
            .bearer_auth(service_token("operator"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{query}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_QUERY", "{query}");
    }
}

#[tokio::test]
async fn members_list_in_id_order_a_page_at_a_time() {
    let s = Stack::start().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(s.sign_up(&email(&format!("page{i}"))).await.id);
    }
    ids.sort();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .client
            .list_members(&ListMembers {
                limit: Some(2),
                after,
            })
            .await
            .unwrap()
            .body;
        seen.extend(page.members.iter().map(|m| m.id));
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let all = s
        .client
        .list_members(&ListMembers::default())
        .await
        .unwrap()
        .body;
    assert_eq!(all.members.len(), 5);
    assert_eq!(all.next_after, None);
}

#[tokio::test]
async fn the_openapi_document_lists_every_route() {
    let s = Stack::start().await;
    let doc: serde_json::Value = s
        .http
        .get(s.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/members",
        "/v1/members/me",
        "/v1/members/{id}",
        "/v1/members/{id}/top-ups",
        "/v1/members/bulk",
        "/v1/sessions",
        "/v1/sessions/refresh",
        "/v1/sessions/sign-out",
        "/.well-known/jwks.json",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} documented");
    }
}
