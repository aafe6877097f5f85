//! Sign-in: tokens verifiable from the published key set, one answer for every bad
//! credential, and throttling kept in PostgreSQL: per (email, address) pair, per
//! address, and per email only where the email was failed.

use std::time::Duration;

use crate::support::{
    assert_throttled, creds, email, jwks_verifier, pair_subject, subject, trusting, Stack, PASSWORD,
};
use paysaga_contracts::member::api::{codes, TOKEN_TYPE};

/// A stack trusting the proxies `trusted` names, its pair count high enough never to
/// refuse, its throttle otherwise as `limit` sets it.
async fn proxied(trusted: &str, limit: impl FnOnce(&mut member::config::Throttle)) -> Stack {
    Stack::start_with(true, |c| {
        c.throttle.per_pair = 100;
        limit(&mut c.throttle);
        trusting(c, trusted);
    })
    .await
}

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

/// A stack that refuses sign-ins after `per_pair` failures for one email from one
/// address, or `per_address` from one client address.
async fn throttled(per_pair: u32, per_address: u32) -> Stack {
    Stack::start_with(true, |c| {
        c.throttle.per_pair = per_pair;
        c.throttle.per_address = per_address;
    })
    .await
}

#[tokio::test]
async fn failures_per_email_and_address_are_throttled_across_instances() {
    let s = throttled(3, 1_000).await;
    let address = s.signed_up("throttled").await;
    for _ in 0..3 {
        let (status, _, body) = s.post_sign_in(&address, "wrong-password-123").await;
        assert_eq!(status, 401, "{body}");
    }
    // Refused now from this address, even with the right password, and with Retry-After.
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
    assert_eq!(
        s.failures("PAIR", &pair_subject(&address, "127.0.0.1"))
            .await,
        3
    );
    assert_eq!(s.failures("EMAIL", &subject(&address)).await, 3);
    assert_eq!(s.failures("ADDRESS", &subject("127.0.0.1")).await, 3);
    let rows = s
        .count("SELECT COUNT(*) FROM member_service.sign_in_failures WHERE scope = 'PAIR'")
        .await;
    assert_eq!(rows, 1, "the refusals counted nothing more");

    // Another email from the same address is unaffected.
    let other = s.signed_up("other").await;
    s.client
        .sign_in(&creds(&other, PASSWORD))
        .await
        .expect("other email signs in");
}

#[tokio::test]
async fn a_success_clears_the_pair_count_and_the_window_ends() {
    let s = Stack::start_with(true, |c| {
        c.throttle.per_pair = 2;
        c.throttle.window = Duration::from_secs(2);
    })
    .await;
    let address = s.signed_up("window").await;
    let wrong = creds(&address, "wrong-password-123");
    let right = creds(&address, PASSWORD);
    s.client.sign_in(&wrong).await.expect_err("wrong");
    s.client.sign_in(&right).await.expect("clears the count");
    let pair = pair_subject(&address, "127.0.0.1");
    assert_eq!(s.failures("PAIR", &pair).await, 0, "the pair's row is gone");
    assert_eq!(
        s.failures("EMAIL", &subject(&address)).await,
        1,
        "the email's count stays"
    );
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
    // No proxy is trusted by default: a made-up X-Forwarded-For changes nothing.
    for spoofed in ["203.0.113.9", "203.0.113.9, 10.0.0.1", "127.0.0.2"] {
        assert_throttled(&s.sign_in_forwarded(&victim, PASSWORD, spoofed).await);
    }
    // Counted against the connection's address, and only it.
    assert_eq!(s.failures("ADDRESS", &subject("127.0.0.1")).await, 4);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM member_service.sign_in_failures WHERE scope = 'ADDRESS'")
            .await,
        1
    );
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
async fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
    let s = proxied("10.0.0.0/8", |t| t.per_address = 2).await;
    let address = s.signed_up("proxied").await;
    // The client makes up a new leftmost hop each time; the proxies appended the
    // address it came from, 198.51.100.7, and their own.
    let attempt = |i: u32, hop: &'static str, password: &'static str| {
        let (s, address) = (&s, address.clone());
        async move {
            let forwarded = format!("6.6.6.{i}, {hop}, 10.0.0.1");
            s.sign_in_forwarded(&address, password, &forwarded).await.0
        }
    };
    assert_eq!(attempt(1, "198.51.100.7", "wrong-password-123").await, 401);
    assert_eq!(attempt(2, "198.51.100.7", "wrong-password-123").await, 401);
    assert_eq!(attempt(3, "198.51.100.7", PASSWORD).await, 429);
    // Another client behind the same proxies is not held back.
    assert_eq!(attempt(4, "198.51.100.8", PASSWORD).await, 200);
    assert_eq!(s.failures("ADDRESS", &subject("198.51.100.7")).await, 2);
    assert_eq!(
        s.count("SELECT COUNT(*) FROM member_service.sign_in_failures WHERE scope = 'ADDRESS'")
            .await,
        1,
        "neither the made-up hops nor the proxies were counted"
    );
}

#[tokio::test]
async fn a_guesser_is_refused_while_the_member_signs_in_from_elsewhere() {
    // The production limits: 5 per pair, 50 per address, 50 per email.
    let s = Stack::start_with(true, |c| trusting(c, "")).await;
    let (victim, member, _) = s.signed_in("victim").await;
    let attacker = "198.51.100.66";
    let mut answers = Vec::new();
    for i in 0..7 {
        answers.push(
            s.sign_in_forwarded(&victim, &format!("guess-number-{i}-abc"), attacker)
                .await,
        );
    }
    for (status, _, body) in &answers[..5] {
        assert_eq!(*status, 401, "{body}");
        assert_eq!(body["code"], codes::INVALID_CREDENTIALS);
    }
    for refused in &answers[5..] {
        assert_throttled(refused);
    }
    // The guesser is refused even with the right password.
    assert_throttled(&s.sign_in_forwarded(&victim, PASSWORD, attacker).await);
    assert_eq!(
        s.failures("PAIR", &pair_subject(&victim, attacker)).await,
        5
    );
    assert_eq!(s.failures("EMAIL", &subject(&victim)).await, 5);
    assert_eq!(s.failures("ADDRESS", &subject(attacker)).await, 5);

    // The member, from an address that has not been guessing, gets in.
    let (status, _, body) = s.sign_in_forwarded(&victim, PASSWORD, "203.0.113.5").await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().expect("an access token");
    let me = s.client.me(token).await.expect("the token works");
    assert_eq!(me.body.id, member.id);
    let sessions = s
        .count(&format!(
            "SELECT COUNT(*) FROM member_service.refresh_tokens WHERE member_id = '{}'",
            member.id
        ))
        .await;
    assert_eq!(sessions, 2, "the first sign-in's and this one's");
    // The guesser is still refused; the member's success excused none of its guesses.
    assert_throttled(&s.sign_in_forwarded(&victim, PASSWORD, attacker).await);
    assert_eq!(
        s.failures("PAIR", &pair_subject(&victim, attacker)).await,
        5
    );
}

#[tokio::test]
async fn an_email_guessed_at_from_many_addresses_is_refused_only_where_it_failed() {
    let s = proxied("", |t| t.per_email = 3).await;
    let victim = s.signed_up("spread").await;
    let wrong = "wrong-password-123";
    for bot in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        assert_eq!(s.sign_in_forwarded(&victim, wrong, bot).await.0, 401);
    }
    // The email is at its limit: an address that failed for it is refused it...
    assert_throttled(&s.sign_in_forwarded(&victim, PASSWORD, "198.51.100.1").await);
    // ... one that has not gets in with the right password...
    let (status, _, body) = s.sign_in_forwarded(&victim, PASSWORD, "203.0.113.5").await;
    assert_eq!(status, 200, "{body}");
    // ... and a new guesser gets one guess, then is refused too.
    assert_eq!(
        s.sign_in_forwarded(&victim, wrong, "198.51.100.4").await.0,
        401
    );
    assert_throttled(&s.sign_in_forwarded(&victim, wrong, "198.51.100.4").await);
    assert_eq!(s.failures("EMAIL", &subject(&victim)).await, 4);
    // Other emails from those addresses are not held back by this email's count.
    let other = s.signed_up("bystander").await;
    let (status, _, _) = s.sign_in_forwarded(&other, PASSWORD, "198.51.100.1").await;
    assert_eq!(status, 200);
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
