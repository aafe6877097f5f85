//! Bad input gets a 4xx with a code, never a 500, and writes nothing; service endpoints
//! need a service credential; members list in id order, a page at a time.

use paysaga_common::auth::Audience;
use std::time::Duration;

use crate::support::{answer, creds, email, Stack, PASSWORD};
use paysaga_common::testkit::{buyer_token, service_token};
use paysaga_contracts::member::{api::ListMembers, client::MemberClient};
use serde_json::json;

/// Each table a refused body could have written (a member, a session's refresh token,
/// a failed sign-in, the account a sign-up opens, a sign-up's count), with its row count
/// and the md5 of its rows.
async fn written(s: &Stack) -> Vec<(&'static str, i64, String)> {
    let mut out = Vec::new();
    for table in [
        "member_service.members",
        "member_service.refresh_tokens",
        "member_service.sign_in_failures",
        "account_service.accounts",
        "member_service.sign_up_attempts",
    ] {
        let (rows, digest): (i64, Option<String>) = sqlx::query_as(&format!(
            "SELECT COUNT(*), md5(string_agg(t::TEXT, '|' ORDER BY t::TEXT)) FROM {table} t"
        ))
        .fetch_one(&s.admin)
        .await
        .expect(table);
        out.push((table, rows, digest.unwrap_or_default()));
    }
    out
}

#[tokio::test]
async fn malformed_bodies_are_refused_with_codes() {
    let s = Stack::start().await;
    // A member with a live session: bodies that name them would sign in, rotate or
    // revoke if they were read leniently.
    let known = email("known");
    s.sign_up(&known).await;
    let session = s
        .client
        .sign_in(&creds(&known, PASSWORD))
        .await
        .expect("sign-in")
        .body;
    let refresh = session.refresh_token;
    let before = written(&s).await;
    let rows: Vec<i64> = before.iter().map(|(_, n, _)| *n).collect();
    assert_eq!(
        rows[..3],
        [1, 1, 0],
        "one member, one refresh token, no failed sign-in"
    );
    assert_eq!(
        rows[4], 2,
        "the sign-up's counts: its address's and the total"
    );

    // Over 64 KiB: a huge password.
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
            json!({"email": known, "password": PASSWORD, "remember": 1}),
        ),
        (
            "/v1/sessions",
            json!({"email": known, "password": "wrong-password-1", "remember": 1}),
        ),
        (
            "/v1/sessions/refresh",
            json!({"refresh_token": refresh, "extra": 1}),
        ),
        (
            "/v1/sessions/sign-out",
            json!({"refresh_token": refresh, "extra": 1}),
        ),
        ("/v1/members", json!({"email": email("u")})),
        ("/v1/members", json!({"email": 7, "password": PASSWORD})),
    ] {
        let (status, _, body) = s.post(path, &payload).await;
        assert_eq!(status, 422, "{path} {payload}: {body}");
        assert_eq!(body["code"], "INVALID_BODY");
    }
    // Bodies that are not JSON as declared: a valid sign-up padded with whitespace past
    // 64 KiB, broken JSON, and valid credentials sent without a JSON content type.
    let padded = format!(
        "{}{}",
        json!({"email": email("padded"), "password": PASSWORD}),
        " ".repeat(70 * 1024)
    );
    for (path, content_type, raw, want) in [
        (
            "/v1/members",
            Some("application/json"),
            padded,
            (413, "PAYLOAD_TOO_LARGE"),
        ),
        (
            "/v1/sessions",
            Some("application/json"),
            "{not json".to_owned(),
            (400, "MALFORMED_JSON"),
        ),
        (
            "/v1/sessions",
            None,
            json!({"email": known, "password": PASSWORD}).to_string(),
            (415, "UNSUPPORTED_MEDIA_TYPE"),
        ),
    ] {
        let mut req = s.http.post(s.url(path)).body(raw);
        if let Some(content_type) = content_type {
            req = req.header("content-type", content_type);
        }
        let (status, _, body) = answer(req.send().await.unwrap()).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (want.0, Some(want.1)),
            "{path}"
        );
    }

    assert_eq!(written(&s).await, before, "a refused body wrote something");
    // The session is untouched: its refresh token still works, once.
    s.client.refresh(&refresh).await.expect("refresh");
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
        .bearer_auth(service_token("operator", Audience::Member))
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
            .bearer_auth(service_token("operator", Audience::Member))
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
    // The password field states the service's own rules, so a client that follows the
    // schema is not refused for length or a common password.
    let password = &doc["components"]["schemas"]["Credentials"]["properties"]["password"];
    assert_eq!(password["type"], "string", "{password}");
    assert_eq!(password["minLength"], 12, "{password}");
    assert_eq!(password["maxLength"], 128, "{password}");
    let pattern = password["pattern"].as_str().expect("a pattern");
    assert!(pattern.starts_with("^(?!(?:"), "{pattern}");
    assert!(
        pattern.contains("|[pP][aA][sS][sS][wW][oO][rR][dD]1234|"),
        "{pattern}"
    );
}
