//! Refresh-token rotation, reuse detection, concurrent use, sign-out, and the buyer's
//! own endpoint.

use crate::support::Stack;
use paysaga_common::auth::Audience;
use paysaga_contracts::member::api::codes;

#[tokio::test]
async fn rotation_issues_a_new_token_and_reuse_revokes_the_family() {
    let s = Stack::start().await;
    let (address, member, first) = s.signed_in("rotate").await;
    let second = s.refreshed(&first.refresh_token).await;
    assert_ne!(second.refresh_token, first.refresh_token);
    assert_eq!(second.member_id, member.id);
    // The new token works.
    let third = s.refreshed(&second.refresh_token).await;

    // The first token again: reuse. The family's newest token is revoked with it.
    let e = s.refresh_refused(&first.refresh_token).await;
    assert_eq!(e.status(), Some(401));
    assert_eq!(e.code(), Some(codes::REFRESH_TOKEN_REUSED));
    let e = s.refresh_refused(&third.refresh_token).await;
    assert_eq!(e.code(), Some(codes::INVALID_REFRESH_TOKEN));

    let (total, revoked, families, used): (i64, i64, i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*), COUNT(revoked_at), COUNT(DISTINCT family_id), COUNT(used_at)
           FROM member_service.refresh_tokens WHERE member_id = $1"#,
    )
    .bind(member.id)
    .fetch_one(&s.admin)
    .await
    .unwrap();
    assert_eq!(
        (total, revoked, families, used),
        (3, 3, 1, 2),
        "three tokens of one family, two spent, all revoked"
    );
    // Only hashes are stored.
    let stored: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT token_hash FROM member_service.refresh_tokens")
            .fetch_all(&s.admin)
            .await
            .unwrap();
    assert!(stored.iter().all(|h| h.len() == 32));
    assert!(!stored.contains(&third.refresh_token.as_bytes().to_vec()));

    // Another sign-in starts a new family that works.
    let fresh = s.sign_in(&address).await;
    s.refreshed(&fresh.refresh_token).await;
}

#[tokio::test]
async fn two_concurrent_uses_of_one_token_let_exactly_one_succeed() {
    let s = Stack::start().await;
    let address = s.signed_up("race").await;
    for _ in 0..5 {
        let session = s.sign_in(&address).await;
        let (a, b) = tokio::join!(
            s.client.refresh(&session.refresh_token),
            s.client.refresh(&session.refresh_token)
        );
        let ok = [a.is_ok(), b.is_ok()].iter().filter(|x| **x).count();
        assert_eq!(ok, 1, "exactly one of two concurrent uses succeeds");
        let loser = a.err().or(b.err()).unwrap();
        assert_eq!(loser.code(), Some(codes::REFRESH_TOKEN_REUSED));
    }
}

#[tokio::test]
async fn sign_out_revokes_and_reveals_nothing() {
    let s = Stack::start().await;
    let (_, _, session) = s.signed_in("out").await;
    let next = s.refreshed(&session.refresh_token).await;
    let out = s.client.sign_out(&next.refresh_token).await.expect("204");
    assert_eq!(out.status, 204);
    let e = s.refresh_refused(&next.refresh_token).await;
    assert_eq!(e.code(), Some(codes::INVALID_REFRESH_TOKEN));
    // Again, and unknown tokens: the same 204.
    for token in [next.refresh_token.as_str(), "no-such-token", ""] {
        assert_eq!(
            s.client.sign_out(token).await.unwrap().status,
            204,
            "{token}"
        );
    }
    let e = s.refresh_refused("no-such-token").await;
    assert_eq!(e.code(), Some(codes::INVALID_REFRESH_TOKEN));
}

#[tokio::test]
async fn an_expired_refresh_token_is_invalid() {
    let s = Stack::start_with(true, |c| c.refresh_ttl = std::time::Duration::from_secs(1)).await;
    let (_, _, session) = s.signed_in("expired").await;
    assert_eq!(session.refresh_expires_in, 1);
    // Its lifetime passes: moved back in the table rather than waited for.
    sqlx::query(
        "UPDATE member_service.refresh_tokens
         SET issued_at = issued_at - INTERVAL '1 hour', expires_at = expires_at - INTERVAL '1 hour'",
    )
    .execute(&s.admin)
    .await
    .unwrap();
    let e = s.refresh_refused(&session.refresh_token).await;
    assert_eq!(e.code(), Some(codes::INVALID_REFRESH_TOKEN));
}

#[tokio::test]
async fn me_needs_a_buyer_token_of_this_service() {
    let s = Stack::start().await;
    let (_, member, session) = s.signed_in("me").await;
    assert_eq!(
        s.client.me(&session.access_token).await.unwrap().body,
        member
    );
    let service = paysaga_common::testkit::service_token("operator", Audience::Member);
    assert_eq!(s.client.me(&service).await.unwrap_err().status(), Some(403));
    assert_eq!(
        s.client.me("garbage").await.unwrap_err().status(),
        Some(401)
    );
    // A buyer token for a member that does not exist.
    let ghost = paysaga_common::auth::Minter::with_kid(
        &paysaga_common::keys::DevKey::BuyerTokens.signing_key(),
        paysaga_common::auth::BUYER_AUDIENCE,
    )
    .mint(
        &uuid::Uuid::now_v7().to_string(),
        std::time::Duration::from_secs(60),
    );
    let e = s.client.me(&ghost).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::MEMBER_NOT_FOUND));
    let r = s.http.get(s.url("/v1/members/me")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
}
