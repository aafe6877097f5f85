//! A holder renews its own credential: a client whose tokens live 2 seconds keeps
//! calling a real server (verifying as every service does) across several lifetimes,
//! the source never hands out a token past its expiry, and the server sees a new token
//! every lifetime rather than one per request.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    extract::{FromRef, State},
    http::{header::AUTHORIZATION, HeaderMap},
    routing::get,
    Router,
};
use paysaga_common::{
    auth::{allow, Audience, Claims, Service, ServiceRole, Verifier},
    client::{Credential, ServiceClient},
    credentials::TokenSource,
    keys::DevKey,
};

/// Each token the server admitted, with how many requests carried it.
type Seen = Arc<Mutex<BTreeMap<String, usize>>>;

#[derive(Clone)]
struct App {
    verifier: Arc<Verifier>,
    seen: Seen,
}

impl FromRef<App> for Arc<Verifier> {
    fn from_ref(app: &App) -> Self {
        app.verifier.clone()
    }
}

async fn who(
    Service(role): Service<{ allow::GATE }>,
    State(app): State<App>,
    headers: HeaderMap,
) -> axum::Json<String> {
    let token = headers[AUTHORIZATION].to_str().unwrap()["Bearer ".len()..].to_owned();
    *app.seen.lock().unwrap().entry(token).or_default() += 1;
    axum::Json(role.name().to_owned())
}

/// The holder's pace: one call every 100 ms. Deliberate, not a wait for a condition:
/// the test is about time passing (tokens living 2 s), so the calls must be spread over
/// several lifetimes at the rate a steady client makes them. Many calls per lifetime
/// show the token is cached between renewals; calling flat out instead would only spin
/// the CPU for the same nine seconds.
const CALL_INTERVAL: Duration = Duration::from_millis(100);

fn unverified_claims(token: &str) -> Claims {
    jsonwebtoken::dangerous::insecure_decode::<Claims>(token)
        .unwrap()
        .claims
}

#[tokio::test]
async fn a_holder_with_a_short_lifetime_keeps_working_across_many_lifetimes() {
    let seen: Seen = Arc::default();
    let app = App {
        verifier: Arc::new(Verifier::development(Audience::Gate)),
        seen: seen.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/who", get(who)).with_state(app);
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let source = Arc::new(TokenSource::new(
        ServiceRole::Gate,
        &DevKey::Service(ServiceRole::Gate).signing_key(),
        Duration::from_secs(2),
    ));
    let client = ServiceClient::new(
        Audience::Gate,
        format!("http://{addr}"),
        Credential::from(&source),
        Duration::from_secs(10),
    );

    // Past the lifetime plus the verifiers' 5 s of leeway, so a holder that did not
    // renew would be refused, and until several tokens have been used.
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(9) || seen.lock().unwrap().len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never saw four tokens"
        );
        let before_ms = chrono::Utc::now().timestamp_millis();
        let handed = unverified_claims(&source.token(Audience::Gate));
        assert!(
            handed.exp * 1000 > before_ms,
            "the source handed out an expired token"
        );
        let answer = client
            .get::<String>("/who")
            .await
            .unwrap_or_else(|e| panic!("call {calls} after {:?} refused: {e}", start.elapsed()));
        assert_eq!(answer.body, "gate");
        calls += 1;
        tokio::time::sleep(CALL_INTERVAL).await;
    }

    let seen = seen.lock().unwrap();
    for token in seen.keys() {
        let claims = unverified_claims(token);
        assert_eq!((claims.sub.as_str(), claims.exp - claims.iat), ("gate", 2));
    }
    assert!(
        seen.len() < calls,
        "{} tokens for {calls} calls: not cached between renewals",
        seen.len()
    );
    server.abort();
}
