//! Email verification: a sign-up writes its `member.verification_requested` event with
//! a signed token in the same transaction, served to the orchestrator from the outbox;
//! the token marks the email verified once (read back from PostgreSQL), and the next
//! sign-in or refresh carries `email_verified`. Expired, forged and garbled tokens are
//! refused with their codes and change nothing.

use std::time::Duration;

use chrono::Utc;
use member::verification::VerificationKeys;
use paysaga_common::{
    auth::{Audience, BuyerIdentity},
    keys::DevKey,
    testkit::{buyer_token, service_token},
};
use paysaga_contracts::{
    events::MemberVerificationRequested,
    member::{
        api::{codes, events},
        client::MemberClient,
    },
    outbox::AckEvents,
};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::{jwks_verifier, Stack};

/// The `member.verification_requested` events of `member` in its outbox, read from
/// PostgreSQL: (type, data, relayed).
async fn events_of(s: &Stack, member: Uuid) -> Vec<(String, Value, bool)> {
    sqlx::query_as(
        r#"SELECT type, data, relayed_at IS NOT NULL
           FROM member_service.outbox_events WHERE subject = $1 ORDER BY seq"#,
    )
    .bind(member.to_string())
    .fetch_all(&s.admin)
    .await
    .expect("outbox events")
}

/// When the member's email was verified, from PostgreSQL.
async fn verified_at(s: &Stack, member: Uuid) -> Option<chrono::DateTime<Utc>> {
    sqlx::query_scalar("SELECT email_verified_at FROM member_service.members WHERE id = $1")
        .bind(member)
        .fetch_one(&s.admin)
        .await
        .expect("member")
}

/// What a buyer token says of its member, checked against the published keys.
async fn claims(s: &Stack, access_token: &str) -> BuyerIdentity {
    jwks_verifier(&s.base)
        .verify_buyer_identity_fetching(access_token)
        .await
        .expect("a valid buyer token")
}

#[tokio::test]
async fn sign_up_requests_verification_and_the_token_verifies_the_email_once() {
    let s = Stack::start().await;
    let (address, member, session) = s.signed_in("verify").await;
    assert!(!member.email_verified);
    assert!(!claims(&s, &session.access_token).await.email_verified);

    let written = events_of(&s, member.id).await;
    assert_eq!(written.len(), 1, "one event, written with the member");
    let (kind, data, relayed) = &written[0];
    assert_eq!(kind, events::VERIFICATION_REQUESTED);
    assert!(!relayed);
    let event: MemberVerificationRequested =
        serde_json::from_value(data.clone()).expect("the catalogue's payload");
    assert_eq!(event.member_id, member.id.to_string());
    assert_eq!(event.email, address);
    let left = event.expires_at - Utc::now();
    assert!(
        left > chrono::Duration::hours(23) && left <= chrono::Duration::hours(24),
        "{left}"
    );

    let verified = s
        .client
        .verify_email(&event.token)
        .await
        .expect("verified")
        .body;
    assert_eq!(verified.id, member.id);
    assert!(verified.email_verified);
    let first = verified_at(&s, member.id)
        .await
        .expect("verified in PostgreSQL");
    // Again: the same answer, and the first moment stays.
    let again = s.client.verify_email(&event.token).await.expect("again");
    assert_eq!((again.status, again.body.email_verified), (200, true));
    assert_eq!(verified_at(&s, member.id).await, Some(first));

    // The claim follows at the next sign-in, and at the refresh of an older session.
    let fresh = s.sign_in(&address).await;
    assert!(claims(&s, &fresh.access_token).await.email_verified);
    let refreshed = s.refreshed(&session.refresh_token).await;
    assert!(claims(&s, &refreshed.access_token).await.email_verified);
    let me = s.client.me(&fresh.access_token).await.expect("me").body;
    assert!(me.email_verified);
}

#[tokio::test]
async fn the_outbox_is_served_to_the_orchestrator_only_and_acknowledged_once() {
    let s = Stack::start().await;
    let member = s.sign_up(&crate::support::email("outbox")).await;
    let orchestrator = MemberClient::new(
        &s.base,
        service_token("orchestrator", Audience::Member),
        Duration::from_secs(10),
    )
    .events();
    let page = orchestrator.pending(100).await.expect("page").body.events;
    let mine: Vec<_> = page
        .iter()
        .filter(|e| e.subject == member.id.to_string())
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].kind, events::VERIFICATION_REQUESTED);
    let ids = vec![mine[0].id];
    for _ in 0..2 {
        let ack = orchestrator.ack(&AckEvents { ids: ids.clone() }).await;
        assert_eq!(ack.expect("ack").status, 204);
    }
    assert!(events_of(&s, member.id).await[0].2, "relayed in PostgreSQL");
    let rest = orchestrator.pending(100).await.expect("page").body.events;
    assert!(rest.iter().all(|e| e.id != ids[0]), "not served again");

    let operator = MemberClient::new(
        &s.base,
        service_token("operator", Audience::Member),
        Duration::from_secs(10),
    );
    let buyer = MemberClient::new(
        &s.base,
        buyer_token(&member.id.to_string()),
        Duration::from_secs(10),
    );
    for refused in [operator.events(), buyer.events()] {
        let e = refused.pending(10).await.expect_err("not the orchestrator");
        assert_eq!(e.status(), Some(403), "{e}");
    }
    let e = orchestrator
        .ack(&AckEvents { ids: vec![] })
        .await
        .expect_err("no ids");
    assert_eq!(
        (e.status(), e.code()),
        (Some(422), Some(codes::INVALID_EVENT_IDS))
    );
}

#[tokio::test]
async fn expired_forged_and_garbled_tokens_are_refused_and_change_nothing() {
    let s = Stack::start().await;
    let address = crate::support::email("refused");
    let member = s.sign_up(&address).await;
    let day = Duration::from_secs(86_400);
    let ours = VerificationKeys::new(&DevKey::EmailVerification.signing_key());
    let (expired, _) = ours.mint(
        member.id,
        &address,
        Utc::now() - chrono::Duration::days(2),
        day,
    );
    let forger = VerificationKeys::new(&DevKey::BuyerTokens.signing_key());
    let (forged, _) = forger.mint(member.id, &address, Utc::now(), day);
    let (someone_else, _) = ours.mint(Uuid::now_v7(), &address, Utc::now(), day);
    let (other_email, _) = ours.mint(member.id, "not-ada@example.com", Utc::now(), day);
    let session = s.sign_in(&address).await;
    let cases = [
        (expired.as_str(), codes::TOKEN_EXPIRED),
        (forged.as_str(), codes::INVALID_TOKEN),
        (someone_else.as_str(), codes::INVALID_TOKEN),
        (other_email.as_str(), codes::INVALID_TOKEN),
        (session.access_token.as_str(), codes::INVALID_TOKEN),
        ("", codes::INVALID_TOKEN),
        ("not.a.token", codes::INVALID_TOKEN),
    ];
    for (token, code) in cases {
        let e = s.client.verify_email(token).await.expect_err("refused");
        assert_eq!(
            (e.status(), e.code()),
            (Some(401), Some(code)),
            "{token:.24}"
        );
    }
    let huge = "x".repeat(100_000);
    for body in [json!({"token": huge}), json!({"token": 7}), json!({})] {
        let (status, _, answer) = s.post("/v1/members/verification", &body).await;
        assert!((400..500).contains(&status), "{status} {answer}");
    }
    assert_eq!(verified_at(&s, member.id).await, None, "nothing written");
}
