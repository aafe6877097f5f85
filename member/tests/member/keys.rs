//! The published key set and key rotation: the first key signs, every configured key
//! is published and still accepted.

use std::time::Duration;

use crate::support::{jwks_verifier, Stack};
use ed25519_dalek::SigningKey;
use member::config::SigningKeys;
use paysaga_common::{
    auth::{Minter, BUYER_AUDIENCE},
    jwks::{kid_of, JwkSet, JWKS_PATH},
    keys::DevKey,
};

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

#[tokio::test]
async fn the_key_set_publishes_the_current_and_previous_keys() {
    let (new, old) = (key(21), key(20));
    let s = Stack::start_with(true, |c| {
        c.signing_keys = SigningKeys::new(vec![new.clone(), old.clone()]);
    })
    .await;
    let r = s.http.get(s.url(JWKS_PATH)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cache = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cache.contains("max-age=60"), "{cache}");
    let set: JwkSet = r.json().await.unwrap();
    let kids: Vec<_> = set.keys.iter().map(|k| k.kid.clone().unwrap()).collect();
    assert_eq!(
        kids,
        vec![kid_of(&new.verifying_key()), kid_of(&old.verifying_key())],
        "current first"
    );
    assert_eq!(set.by_kid().len(), 2, "each kid is its key's thumbprint");
    assert_eq!(s.client.jwks().await.unwrap().body, set);

    // Sessions are signed with the current key.
    let (_, member, session) = s.signed_in("rotated").await;
    let header = jsonwebtoken::decode_header(&session.access_token).unwrap();
    assert_eq!(header.kid, Some(kid_of(&new.verifying_key())));

    // A token of the previous key is still accepted, here and by every verifier that
    // follows the key set; one of a key no longer configured is not.
    let by_old = Minter::with_kid(&old, BUYER_AUDIENCE)
        .mint(&member.id.to_string(), Duration::from_secs(60));
    assert_eq!(s.client.me(&by_old).await.unwrap().body.id, member.id);
    let verifier = jwks_verifier(&s.base);
    for token in [&session.access_token, &by_old] {
        let who = verifier
            .verify_buyer_fetching(token)
            .await
            .expect("verifies");
        assert_eq!(who.as_str(), member.id.to_string());
    }
    let retired = Minter::with_kid(&key(19), BUYER_AUDIENCE)
        .mint(&member.id.to_string(), Duration::from_secs(60));
    assert_eq!(s.client.me(&retired).await.unwrap_err().status(), Some(401));
    let dev = Minter::with_kid(&DevKey::BuyerTokens.signing_key(), BUYER_AUDIENCE)
        .mint(&member.id.to_string(), Duration::from_secs(60));
    assert_eq!(
        s.client.me(&dev).await.unwrap_err().status(),
        Some(401),
        "the development key is not trusted once keys are configured"
    );
}

#[tokio::test]
async fn a_rotation_is_a_restart_with_the_new_key_first() {
    let (old, new) = (key(30), key(31));
    let mut s = Stack::start_with(true, |c| {
        c.signing_keys = SigningKeys::new(vec![old.clone()]);
    })
    .await;
    let (_, _, before) = s.signed_in("rotation").await;
    s.member.stop().await.expect("stopped");

    let mut config = s.config.clone();
    config.signing_keys = SigningKeys::new(vec![new.clone(), old]);
    let (_restarted, client) = Stack::start_member(config).await;
    // Outstanding access and refresh tokens keep working; new ones use the new key.
    client
        .me(&before.access_token)
        .await
        .expect("old token accepted");
    let after = client
        .refresh(&before.refresh_token)
        .await
        .expect("refresh across the rotation")
        .body;
    let header = jsonwebtoken::decode_header(&after.access_token).unwrap();
    assert_eq!(header.kid, Some(kid_of(&new.verifying_key())));
}
