//! A verifier following a key set over real HTTP: a key rotated in is picked up on its
//! first token without a restart, the old key keeps working while it is published,
//! made-up key ids cannot make it fetch more than once per interval, and known keys
//! keep verifying while the key server is down.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{extract::State, routing::get, Json, Router};
use ed25519_dalek::SigningKey;
use paysaga_common::{
    auth::{BuyerKeySource, Minter, Verifier, BUYER_AUDIENCE},
    jwks::{JwkSet, JWKS_PATH},
};

#[derive(Clone)]
struct KeyServer {
    set: Arc<Mutex<JwkSet>>,
    fetches: Arc<AtomicUsize>,
}

async fn serve_set(State(s): State<KeyServer>) -> Json<JwkSet> {
    s.fetches.fetch_add(1, Ordering::SeqCst);
    Json(s.set.lock().unwrap().clone())
}

async fn start(server: KeyServer) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(JWKS_PATH, get(serve_set))
        .with_state(server);
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

fn key(n: u8) -> SigningKey {
    SigningKey::from_bytes(&[n; 32])
}

/// Who `token` names, verified with the keys `verifier` holds or fetches.
async fn subject(verifier: &Verifier, token: &str) -> Option<String> {
    verifier
        .verify_buyer_fetching(token)
        .await
        .map(|m| m.to_string())
}

#[tokio::test]
async fn a_rotated_key_is_picked_up_without_a_restart_and_the_old_one_keeps_working() {
    let (old, new) = (key(1), key(2));
    let server = KeyServer {
        set: Arc::new(Mutex::new(JwkSet::of(&[old.verifying_key()]))),
        fetches: Arc::new(AtomicUsize::new(0)),
    };
    let (addr, task) = start(server.clone()).await;
    let min_refresh = Duration::from_millis(300);
    let source = BuyerKeySource::Jwks {
        url: format!("http://{addr}{JWKS_PATH}"),
        min_refresh,
        refresh_every: Duration::from_secs(3600),
        trust: Default::default(),
    };
    let verifier = Verifier::from_source(
        &source,
        &paysaga_common::credentials::ServiceKeys::development(),
        paysaga_common::auth::Audience::Gate,
    );

    let old_minter = Minter::with_kid(&old, BUYER_AUDIENCE);
    let before = old_minter.mint("member-a", Duration::from_secs(60));
    assert_eq!(subject(&verifier, &before).await, Some("member-a".into()));

    // A token without a kid, or signed by a key the set does not publish, is refused.
    let unnamed = Minter::new(&old, BUYER_AUDIENCE).mint("member-a", Duration::from_secs(60));
    assert!(verifier.verify_buyer_fetching(&unnamed).await.is_none());

    // Rotation: the new key signs, the old one stays published until its tokens expire.
    *server.set.lock().unwrap() = JwkSet::of(&[new.verifying_key(), old.verifying_key()]);
    tokio::time::sleep(min_refresh).await;
    let after = Minter::with_kid(&new, BUYER_AUDIENCE).mint("member-b", Duration::from_secs(60));
    assert_eq!(
        subject(&verifier, &after).await,
        Some("member-b".into()),
        "the first token under the new key fetched the set"
    );
    assert!(
        verifier.verify_buyer(&before).is_some(),
        "old tokens still verify"
    );

    // A flood of made-up key ids: at most one fetch per interval.
    tokio::time::sleep(min_refresh).await;
    let fetched_before_flood = server.fetches.load(Ordering::SeqCst);
    let stranger = key(9);
    let flood = (0..200).map(|_| {
        let forged = Minter::with_kid(&stranger, BUYER_AUDIENCE).mint("x", Duration::from_secs(60));
        let v = verifier.clone();
        async move { v.verify_buyer_fetching(&forged).await }
    });
    let answers = futures::future::join_all(flood).await;
    assert!(
        answers.iter().all(Option::is_none),
        "no forged token verifies"
    );
    let flood_fetches = server.fetches.load(Ordering::SeqCst) - fetched_before_flood;
    assert!(flood_fetches <= 1, "{flood_fetches} fetches for one flood");

    // The key server goes away: the keys held still verify.
    task.abort();
    let _ = task.await;
    tokio::time::sleep(min_refresh).await;
    let later = Minter::with_kid(&new, BUYER_AUDIENCE).mint("member-c", Duration::from_secs(60));
    assert_eq!(subject(&verifier, &later).await, Some("member-c".into()));
    assert!(verifier.verify_buyer_fetching(&before).await.is_some());
    // And a fetch that fails keeps them.
    assert!(verifier
        .remote_keys()
        .expect("follows a key set")
        .refresh()
        .await
        .is_err());
    assert_eq!(verifier.remote_keys().unwrap().len(), 2);
    assert!(verifier.verify_buyer(&later).is_some());
}
