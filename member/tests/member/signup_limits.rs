//! Sign-up limits: per client address and in total, shared by every instance through
//! PostgreSQL, refused with 429 `TOO_MANY_SIGN_UPS` before anything is looked up, hashed
//! or stored.

use std::time::Duration;

use crate::support::{assert_sign_up_refused, email, subject, trusting, Stack, PASSWORD};
use serde_json::json;

/// A stack admitting `per_address` sign-ups from one address in a window far longer
/// than the test; with the account service answering or not (`account`).
async fn per_address_limit(account: bool, per_address: u32) -> Stack {
    Stack::start_with(account, |c| {
        c.sign_up.per_address = per_address;
        c.sign_up.address_window = Duration::from_secs(600);
    })
    .await
}

#[tokio::test]
async fn a_sign_up_flood_from_one_address_is_refused_and_stores_nothing() {
    let s = Stack::start_with(true, |c| {
        c.sign_up.per_address = 3;
        // Windows far longer than the test, so every count below is in one.
        c.sign_up.address_window = Duration::from_secs(600);
        c.sign_up.total_window = Duration::from_secs(600);
        trusting(c, "");
    })
    .await;
    let flooder = "198.51.100.20";
    let mut accepted = Vec::new();
    for i in 0..3 {
        let address = email(&format!("flood{i}"));
        let (status, _, body) = s.sign_up_forwarded(&address, flooder).await;
        assert_eq!(status, 201, "{body}");
        accepted.push(address);
    }
    let mut refused = Vec::new();
    for i in 3..8 {
        let address = email(&format!("flood{i}"));
        let retry = assert_sign_up_refused(&s.sign_up_forwarded(&address, flooder).await);
        assert!((1..=600).contains(&retry), "{retry}");
        refused.push(address);
    }
    for address in &accepted {
        assert!(s.stored(address).await);
    }
    for address in &refused {
        assert!(
            !s.stored(address).await,
            "{address} was refused, not stored"
        );
    }
    assert_eq!(s.members().await, 3);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM account_service.accounts WHERE kind = 'MEMBER'")
            .await,
        3,
        "no account opened for a refusal"
    );
    // The refusals counted nothing, here or in the total.
    assert_eq!(s.sign_up_attempts("ADDRESS", &subject(flooder)).await, 3);
    assert_eq!(s.sign_up_attempts("TOTAL", &[]).await, 3);

    // Another address signs up; a second instance refuses the flooder too.
    let (status, _, body) = s
        .sign_up_forwarded(&email("neighbour"), "198.51.100.21")
        .await;
    assert_eq!(status, 201, "{body}");
    let (second, _) = Stack::start_member(s.config.clone()).await;
    let r = s
        .http
        .post(format!("{}/v1/members", second.url()))
        .header("x-forwarded-for", flooder)
        .json(&json!({"email": email("flood-second"), "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_sign_up_refused(&crate::support::answer(r).await);

    // Once the window has passed (moved back rather than waited for), the address may
    // sign up again.
    sqlx::query(
        "UPDATE member_service.sign_up_attempts SET window_start = window_start - INTERVAL '1 hour'",
    )
    .execute(&s.admin)
    .await
    .unwrap();
    let (status, _, body) = s.sign_up_forwarded(&email("flood-later"), flooder).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_made_up_forwarded_for_from_an_untrusted_peer_changes_nothing() {
    // No proxy is trusted: the connection's peer (127.0.0.1) is the client.
    let s = per_address_limit(true, 2).await;
    for i in 0..2 {
        let (status, _, body) = s
            .sign_up_forwarded(&email(&format!("spoof{i}")), &format!("203.0.113.{i}"))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let late = email("spoof-late");
    assert_sign_up_refused(&s.sign_up_forwarded(&late, "203.0.113.99").await);
    assert!(!s.stored(&late).await);
    assert_eq!(
        s.sign_up_attempts("ADDRESS", &subject("127.0.0.1")).await,
        2
    );
    assert_eq!(
        s.count("SELECT COUNT(*) FROM member_service.sign_up_attempts WHERE scope = 'ADDRESS'")
            .await,
        1,
        "the made-up hops were never counted"
    );
}

#[tokio::test]
async fn a_refused_sign_up_does_no_password_work() {
    // The account service is away: a sign-up leaves its member pending, and retrying it
    // with a wrong password would verify the password and count a failed sign-in.
    let s = per_address_limit(false, 1).await;
    let pending = email("pending");
    s.sign_up_pending(&pending).await;
    let retry = s
        .post(
            "/v1/members",
            &json!({"email": pending, "password": "a-wrong-password-1"}),
        )
        .await;
    assert_sign_up_refused(&retry);
    let fresh = email("fresh");
    assert_sign_up_refused(
        &s.post(
            "/v1/members",
            &json!({"email": fresh, "password": PASSWORD}),
        )
        .await,
    );
    assert_eq!(s.members().await, 1);
    assert!(!s.stored(&fresh).await);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM member_service.sign_in_failures")
            .await,
        0,
        "no password was verified"
    );
    // Bodies the rules refuse are answered 422 before the limits and take nothing.
    let (status, _, body) = s
        .post(
            "/v1/members",
            &json!({"email": email("weak"), "password": "short"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        s.sign_up_attempts("ADDRESS", &subject("127.0.0.1")).await,
        1
    );
}

#[tokio::test]
async fn sign_ups_in_total_are_limited_across_addresses_and_instances() {
    let s = Stack::start_with(true, |c| {
        c.sign_up.total = 3;
        c.sign_up.total_window = Duration::from_secs(300);
        trusting(c, "");
    })
    .await;
    for i in 1..=3 {
        let (status, _, body) = s
            .sign_up_forwarded(&email(&format!("total{i}")), &format!("198.51.100.{i}"))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // A fourth address, never seen: refused, since all are counted together.
    let fourth = email("total4");
    let retry = assert_sign_up_refused(&s.sign_up_forwarded(&fourth, "198.51.100.4").await);
    assert!((1..=300).contains(&retry), "{retry}");
    // And on another instance.
    let (second, _) = Stack::start_member(s.config.clone()).await;
    let r = s
        .http
        .post(format!("{}/v1/members", second.url()))
        .header("x-forwarded-for", "198.51.100.5")
        .json(&json!({"email": email("total5"), "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_sign_up_refused(&crate::support::answer(r).await);
    assert_eq!(s.members().await, 3);
    assert!(!s.stored(&fourth).await);
    assert_eq!(s.sign_up_attempts("TOTAL", &[]).await, 3);
    // Each refused address still counted its own attempt.
    assert_eq!(
        s.sign_up_attempts("ADDRESS", &subject("198.51.100.4"))
            .await,
        1
    );

    sqlx::query(
        "UPDATE member_service.sign_up_attempts SET window_start = window_start - INTERVAL '1 hour' WHERE scope = 'TOTAL'",
    )
    .execute(&s.admin)
    .await
    .unwrap();
    let (status, _, body) = s.sign_up_forwarded(&fourth, "198.51.100.4").await;
    assert_eq!(status, 201, "{body}");
}
