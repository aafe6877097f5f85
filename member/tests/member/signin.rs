//! Sign-in: tokens verifiable from the published key set, one answer for every bad
//! credential, and throttling kept in PostgreSQL.

use std::time::Duration;

use crate::support::{assert_throttled, creds, email, jwks_verifier, Stack, PASSWORD};
use paysaga_contracts::member::api::{codes, TOKEN_TYPE};
use serde_json::json;

#[tokio::test]
async fn a_session_token_verifies_against_the_published_keys() {
    let s = Stack::start().await;
    let address = email("signin");
    let member = s.sign_up(&address).await;
    let session = s
        .client
        .sign_in(&creds(&format!("  {}", address.to_uppercase()), PASSWORD))
        .await
        .expect("signed in")
        .body;
    assert_eq!(session.member_id, member.id);
    assert_eq!(session.token_type, TOKEN_TYPE);
    assert_eq!(session.expires_in, 900);
    assert_eq!(session.refresh_expires_in, 30 * 86_400);
    let verifier = jwks_verifier(&s.base);
    let subject = verifier
        .verify_buyer_fetching(&session.access_token)
        .await
        .expect("verifies with the served JWKS");
    assert_eq!(subject.as_str(), member.id.to_string());
    let header = jsonwebtoken::decode_header(&session.access_token).unwrap();
    assert!(header.kid.is_some());
    let me = s.client.me(&session.access_token).await.expect("me");
    assert_eq!(me.body, member);
}

#[tokio::test]
async fn wrong_password_and_unknown_email_get_the_same_answer() {
    let s = Stack::start().await;
    let address = s.signed_up("same").await;
    let wrong = s.post_sign_in(&address, "not-the-password-1").await;
    let unknown = s.post_sign_in(&email("nobody"), "not-the-password-1").await;
    let malformed = s.post_sign_in("not-an-address", "x").await;
    for (status, _, body) in [&wrong, &unknown, &malformed] {
        assert_eq!(*status, 401);
        assert_eq!(body["code"], codes::INVALID_CREDENTIALS);
    }
    assert_eq!(wrong.2, unknown.2, "same code and message");
    assert_eq!(wrong.2, malformed.2);
}

/// A stack that refuses sign-ins after `per_email` failures for one email, or
/// `per_address` from one client address.
async fn throttled(per_email: u32, per_address: u32) -> Stack {
    Stack::start_with(true, |c| {
        c.throttle.per_email = per_email;
        c.throttle.per_address = per_address;
    })
    .await
}

#[tokio::test]
async fn failures_per_email_are_throttled_across_instances() {
    let s = throttled(3, 1_000).await;
    let address = s.signed_up("throttled").await;
    for _ in 0..3 {
        let (status, _, body) = s.post_sign_in(&address, "wrong-password-123").await;
        assert_eq!(status, 401, "{body}");
    }
    // Refused now, even with the right password, and with Retry-After.
    let refused = s.post_sign_in(&address.to_uppercase(), PASSWORD).await;
    assert_throttled(&refused);
    let retry: u64 = refused.1["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=900).contains(&retry), "{retry}");

    // The count lives in PostgreSQL: a second instance refuses too.
    let (_second, client) = Stack::start_member(s.config.clone()).await;
    let e = client
        .sign_in(&creds(&address, PASSWORD))
        .await
        .expect_err("throttled");
    assert_eq!(e.status(), Some(429));
    let rows = s
        .count(
            "SELECT COUNT(*) FROM member_service.sign_in_failures WHERE scope = 'EMAIL' AND failures >= 3",
        )
        .await;
    assert_eq!(rows, 1);

    // Another email is unaffected.
    let other = s.signed_up("other").await;
    s.client
        .sign_in(&creds(&other, PASSWORD))
        .await
        .expect("other email signs in");
}

#[tokio::test]
async fn a_success_clears_the_email_count_and_the_window_ends() {
    let s = Stack::start_with(true, |c| {
        c.throttle.per_email = 2;
        c.throttle.window = Duration::from_secs(2);
    })
    .await;
    let address = s.signed_up("window").await;
    let wrong = creds(&address, "wrong-password-123");
    let right = creds(&address, PASSWORD);
    s.client.sign_in(&wrong).await.expect_err("wrong");
    s.client.sign_in(&right).await.expect("clears the count");
    s.client.sign_in(&wrong).await.expect_err("wrong");
    let e = s.client.sign_in(&wrong).await.expect_err("wrong");
    assert_eq!(
        e.status(),
        Some(401),
        "the count started over after the success"
    );
    let e = s.client.sign_in(&right).await.expect_err("throttled");
    assert_eq!(e.status(), Some(429));
    // The window passes: moved back in the table rather than waited for.
    sqlx::query(
        "UPDATE member_service.sign_in_failures SET window_start = window_start - INTERVAL '1 hour'",
    )
    .execute(&s.admin)
    .await
    .unwrap();
    s.client
        .sign_in(&right)
        .await
        .expect("allowed again once the window has passed");
}

#[tokio::test]
async fn failures_per_address_are_throttled_by_the_connection_address() {
    let s = throttled(100, 4).await;
    let victim = s.signed_up("victim").await;
    // Spraying different emails from one address.
    for i in 0..4 {
        let e = s
            .client
            .sign_in(&creds(&email(&format!("spray{i}")), "wrong-password-123"))
            .await
            .expect_err("unknown");
        assert_eq!(e.status(), Some(401));
    }
    assert_throttled(&s.post_sign_in(&victim, PASSWORD).await);
    // X-Forwarded-For is not trusted by default: a made-up hop changes nothing.
    let r = s
        .http
        .post(s.url("/v1/sessions"))
        .header("x-forwarded-for", "203.0.113.9")
        .json(&json!({"email": victim, "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let (_second, client) = Stack::start_member(s.config.clone()).await;
    assert_eq!(
        client
            .sign_in(&creds(&victim, PASSWORD))
            .await
            .expect_err("throttled")
            .status(),
        Some(429)
    );
}

#[tokio::test]
async fn a_trusted_forwarded_for_names_the_address() {
    let s = Stack::start_with(true, |c| {
        c.throttle.per_email = 100;
        c.throttle.per_address = 2;
        c.trust_forwarded_for = true;
    })
    .await;
    let address = s.signed_up("proxied").await;
    let attempt = |hop: &'static str, password: &'static str| {
        let s = &s;
        let address = address.clone();
        async move {
            s.http
                .post(s.url("/v1/sessions"))
                .header("x-forwarded-for", format!("{hop}, 10.0.0.1"))
                .json(&json!({"email": address, "password": password}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(attempt("198.51.100.7", "wrong-password-123").await, 401);
    assert_eq!(attempt("198.51.100.7", "wrong-password-123").await, 401);
    assert_eq!(attempt("198.51.100.7", PASSWORD).await, 429);
    // Another client behind the same proxy is not held back.
    assert_eq!(attempt("198.51.100.8", PASSWORD).await, 200);
}

#[tokio::test]
async fn owasp_default_parameters_are_what_is_stored() {
    let s = Stack::start_with(true, |c| {
        c.argon2 = member::config::Argon2Params::OWASP;
    })
    .await;
    let address = email("owasp");
    let member = s.sign_up(&address).await;
    let phc = s.password_hash(member.id).await;
    assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
    let session = s
        .client
        .sign_in(&creds(&address, PASSWORD))
        .await
        .expect("signed in");
    assert_eq!(session.body.member_id, member.id);
    let e = s
        .client
        .sign_in(&creds(&address, "not-the-password-1"))
        .await
        .expect_err("wrong password");
    assert_eq!(e.code(), Some(codes::INVALID_CREDENTIALS));
}
