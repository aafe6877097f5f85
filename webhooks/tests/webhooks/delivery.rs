//! The delivery worker against real receivers on 127.0.0.1 and real PostgreSQL: internal
//! addresses refused at registration (nothing written) and when connecting (a name that
//! resolves to 127.0.0.1 and a literal one: failed as `forbidden_address`, the receiver
//! never reached); failures recorded by class only; secrets sealed at rest, plaintext
//! ones sealed at start-up; a rotated secret signing beside the new one through its
//! grace, and only the new one after it; an `https` endpoint delivered to only when its
//! certificate chains to a trusted root (`WEBHOOK_CA_FILE`) and names its host, under
//! the same egress rule.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU16, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
    Router,
};
use chrono::Utc;
use paysaga_common::{
    limits::ServerLimits,
    server,
    testkit::TestPki,
    tls::{ServerTls, Trust},
};
use paysaga_contracts::{
    events::{self, SignatureError},
    orchestrator::api::{CreateWebhookEndpoint, DeliveryFailure, ListDeliveries},
};
use paysaga_webhooks::{
    egress::Egress,
    ingest::Source,
    sealing::SealingKey,
    store::{self, Incoming},
    worker::{self, Worker},
    Error, WebhookConfig, Webhooks,
};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::support::payments_db;

/// What a receiver got: the signature header and the raw body of each request.
#[derive(Clone, Default)]
struct Got(Arc<Mutex<Vec<(String, Bytes)>>>);

impl Got {
    fn all(&self) -> Vec<(String, Bytes)> {
        self.0.lock().expect("lock").clone()
    }
}

#[derive(Clone)]
struct Receiver {
    /// `http`, or `https` ([`Receiver::start_tls`]).
    scheme: &'static str,
    port: u16,
    got: Got,
    /// The status it answers.
    status: Arc<AtomicU16>,
}

async fn hook(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let signature = headers
        .get(events::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    r.got.0.lock().expect("lock").push((signature, body));
    let status = StatusCode::from_u16(r.status.load(Ordering::SeqCst)).expect("status");
    // An answer an operator must never be shown.
    (status, "internal detail: db=10.1.2.3 password=hunter2")
}

impl Receiver {
    async fn start() -> Self {
        Self::serving(None).await
    }

    /// A receiver serving HTTPS with `tls`, as a service's own listener does.
    async fn start_tls(tls: ServerTls) -> Self {
        Self::serving(Some(tls)).await
    }

    async fn serving(tls: Option<ServerTls>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let r = Receiver {
            scheme: if tls.is_some() { "https" } else { "http" },
            port: listener.local_addr().expect("addr").port(),
            got: Got::default(),
            status: Arc::new(AtomicU16::new(200)),
        };
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(r.clone());
        tokio::spawn(async move {
            let never = std::future::pending::<()>();
            let limits = ServerLimits::default();
            let _ = server::serve_with_tls(listener, app, never, limits, tls.as_ref()).await;
        });
        r
    }

    /// Its URL under `host` (an address, or a name that resolves to 127.0.0.1).
    fn url(&self, host: &str) -> String {
        format!("{}://{host}:{}/hook", self.scheme, self.port)
    }
}

/// Quick settings for a test: short polls and backoffs, `attempts` attempts.
fn config(allow_private: bool, attempts: i32) -> WebhookConfig {
    WebhookConfig {
        egress: Egress { allow_private },
        poll_interval: Duration::from_millis(50),
        backoff_base: Duration::from_millis(10),
        backoff_cap: Duration::from_millis(20),
        max_attempts: attempts,
        timeout: Duration::from_secs(2),
        lease: Duration::from_secs(4),
        ..WebhookConfig::default()
    }
}

/// A running delivery worker; stopped when dropped.
struct Running {
    task: JoinHandle<()>,
    alive: Arc<AtomicBool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Release);
        self.task.abort();
    }
}

fn start_worker(pool: &PgPool, config: WebhookConfig) -> Running {
    let alive = Arc::new(AtomicBool::new(true));
    let task = worker::spawn(Worker {
        http: worker::http_client(&config),
        pool: pool.clone(),
        instance: Uuid::now_v7(),
        config,
        alive: alive.clone(),
    });
    Running { task, alive }
}

/// One event in the log, as if pulled from the order service.
/// A new event, delivered to `endpoint`: the `nth` request `receiver` got (its
/// signature header and body).
async fn delivered(
    pool: &PgPool,
    endpoint: Uuid,
    receiver: &Receiver,
    nth: usize,
) -> (String, Bytes) {
    let id = event(pool).await;
    assert_eq!(settled(pool, endpoint, id).await.state, "DELIVERED");
    let got = receiver.got.all();
    assert_eq!(got.len(), nth);
    got[nth - 1].clone()
}

async fn event(pool: &PgPool) -> Uuid {
    let id = Uuid::now_v7();
    store::ingest(
        pool,
        Source::Order,
        &[Incoming {
            id,
            event_type: "reservation.expired".into(),
            subject: Uuid::now_v7().to_string(),
            data: serde_json::json!({"reservation_id": id.to_string()}),
            occurred_at: Utc::now(),
        }],
    )
    .await
    .expect("ingest");
    id
}

async fn create(webhooks: &Webhooks, url: &str) -> Result<(Uuid, String), Error> {
    webhooks
        .create_endpoint(CreateWebhookEndpoint {
            url: url.to_owned(),
            event_types: vec![],
            description: None,
        })
        .await
        .map(|c| (c.endpoint.id, c.secret))
}

/// A delivery as stored.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    state: String,
    attempts: i32,
    last_status: Option<i32>,
    last_error: Option<String>,
}

/// Waits (bounded: against a hang, not a timing assertion) until `endpoint`'s delivery
/// of `event` is no longer PENDING, and returns it.
async fn settled(pool: &PgPool, endpoint: Uuid, event: Uuid) -> Row {
    paysaga_common::testkit::until_some(
        &format!("{event} to {endpoint} settled"),
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            sqlx::query_as(
                r#"SELECT state, attempts, last_status, last_error FROM webhook_deliveries
                   WHERE endpoint_id = $1 AND event_id = $2 AND state <> 'PENDING'"#,
            )
            .bind(endpoint)
            .bind(event)
            .fetch_optional(pool)
            .await
            .expect("delivery")
        },
    )
    .await
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// The `v1` entries of a signature header.
fn signatures(header: &str) -> usize {
    header.split(',').filter(|p| p.starts_with("v1=")).count()
}

fn verify(secret: &str, header: &str, body: &[u8]) -> Result<i64, SignatureError> {
    events::verify(
        secret,
        header,
        body,
        Utc::now().timestamp(),
        events::DEFAULT_TOLERANCE_SECS,
    )
}

#[tokio::test]
async fn internal_targets_are_refused_at_registration_and_when_connecting() {
    let (_db, pool) = payments_db(6).await;
    let strict = Webhooks::new(pool.clone(), &config(false, 1));

    // Literal internal addresses: 422 with their own code, nothing written.
    for url in [
        "http://127.0.0.1:5432/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.1:8080/hook",
        "http://100.64.0.1/",
    ] {
        let refused = create(&strict, url).await.expect_err("refused");
        assert!(matches!(refused, Error::AddressForbidden(_)), "{url}");
        let api = refused.api().expect("a client error");
        assert_eq!(
            (api.status, api.code),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "WEBHOOK_ADDRESS_FORBIDDEN"
            ),
            "{url}"
        );
    }
    assert_eq!(
        count(&pool, "SELECT COUNT(*) FROM webhook_endpoints").await,
        0
    );

    // A name is taken (what it resolves to may change); `localhost` resolves to the
    // loopback. And an endpoint written as 127.0.0.1 while private targets were allowed.
    let by_name = Receiver::start().await;
    let (named, _) = create(&strict, &by_name.url("localhost"))
        .await
        .expect("a name is registered");
    let by_address = Receiver::start().await;
    let lenient = Webhooks::new(pool.clone(), &config(true, 1));
    let (literal, _) = create(&lenient, &by_address.url("127.0.0.1"))
        .await
        .expect("allowed when private targets are");

    // Delivered with private targets forbidden: refused before any connection,
    // recorded as a failure of that class, the receivers never reached.
    let e = event(&pool).await;
    let running = start_worker(&pool, config(false, 1));
    for endpoint in [named, literal] {
        let row = settled(&pool, endpoint, e).await;
        assert_eq!(
            (row.state.as_str(), row.attempts, row.last_status),
            ("DEAD", 1, None),
            "{row:?}"
        );
        assert_eq!(row.last_error.as_deref(), Some("forbidden_address"));
    }
    assert!(by_name.got.all().is_empty(), "the receiver was reached");
    assert!(by_address.got.all().is_empty(), "the receiver was reached");
    let shown = strict
        .deliveries(&ListDeliveries {
            state: Some("DEAD".into()),
            endpoint_id: Some(named),
            limit: None,
        })
        .await
        .expect("deliveries");
    assert_eq!(
        shown.deliveries[0].last_error,
        Some(DeliveryFailure::ForbiddenAddress)
    );
    drop(running);

    // The same deliveries replayed with private targets allowed reach both receivers:
    // it was the rule that stopped them.
    let listed = strict
        .deliveries(&ListDeliveries::default())
        .await
        .expect("deliveries");
    for d in &listed.deliveries {
        strict.replay(d.id).await.expect("replayed");
    }
    let _running = start_worker(&pool, config(true, 1));
    for endpoint in [named, literal] {
        assert_eq!(settled(&pool, endpoint, e).await.state, "DELIVERED");
    }
    assert_eq!(by_name.got.all().len(), 1);
    assert_eq!(by_address.got.all().len(), 1);
}

#[tokio::test]
async fn failures_are_recorded_by_class_never_by_what_the_remote_said() {
    let (_db, pool) = payments_db(6).await;
    let webhooks = Webhooks::new(pool.clone(), &config(true, 1));
    let failing = Receiver::start().await;
    failing.status.store(500, Ordering::SeqCst);
    let (answered, _) = create(&webhooks, &failing.url("127.0.0.1"))
        .await
        .expect("endpoint");
    // Nothing listens there: the listener is bound, its port noted, and dropped.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let (refused, _) = create(&webhooks, &format!("http://127.0.0.1:{closed}/hook"))
        .await
        .expect("endpoint");
    // `.invalid` never resolves (RFC 6761).
    let (unresolved, _) = create(&webhooks, "http://no-such-host.invalid/hook")
        .await
        .expect("endpoint");

    let e = event(&pool).await;
    let _running = start_worker(&pool, config(true, 1));
    let expected = [
        (answered, Some(500), "http_status"),
        (refused, None, "connect"),
        (unresolved, None, "dns"),
    ];
    for (endpoint, status, class) in expected {
        let row = settled(&pool, endpoint, e).await;
        assert_eq!(
            (row.last_status, row.last_error.as_deref()),
            (status, Some(class)),
            "{row:?}"
        );
    }
    assert_eq!(failing.got.all().len(), 1);
    // What the receiver answered is nowhere in the deliveries.
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM webhook_deliveries d WHERE d::TEXT LIKE '%hunter2%' OR d::TEXT LIKE '%10.1.2.3%'",
        )
        .await,
        0
    );
    let shown: Vec<_> = webhooks
        .deliveries(&ListDeliveries::default())
        .await
        .expect("deliveries")
        .deliveries
        .into_iter()
        .map(|d| (d.endpoint_id, d.last_status, d.last_error))
        .collect();
    assert!(shown.contains(&(answered, Some(500), Some(DeliveryFailure::HttpStatus))));
    assert!(shown.contains(&(unresolved, None, Some(DeliveryFailure::Dns))));
}

#[tokio::test]
async fn secrets_are_sealed_at_rest_and_plaintext_ones_sealed_at_start_up() {
    let (_db, pool) = payments_db(6).await;
    let key = SealingKey::generate();
    let config = WebhookConfig {
        secret_key: key.clone(),
        ..config(true, 3)
    };
    let webhooks = Webhooks::new(pool.clone(), &config);
    let fresh = Receiver::start().await;
    let (made, secret) = create(&webhooks, &fresh.url("127.0.0.1"))
        .await
        .expect("endpoint");

    // An endpoint stored before secrets were sealed: its secret in plaintext.
    let old = Receiver::start().await;
    let legacy = Uuid::now_v7();
    let legacy_secret = "whsec_0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";
    sqlx::query(r#"INSERT INTO webhook_endpoints (id, url, secret) VALUES ($1, $2, $3)"#)
        .bind(legacy)
        .bind(old.url("127.0.0.1"))
        .bind(legacy_secret)
        .execute(&pool)
        .await
        .expect("a plaintext endpoint");

    // A service started with another key refuses: it could open none of them.
    assert!(
        paysaga_webhooks::seal_secrets(&pool, &SealingKey::generate())
            .await
            .is_err()
    );
    paysaga_webhooks::seal_secrets(&pool, &key)
        .await
        .expect("sealed at start-up");

    let stored: Vec<(Uuid, Option<String>, Vec<u8>)> =
        sqlx::query_as(r#"SELECT id, secret, secret_sealed FROM webhook_endpoints ORDER BY id"#)
            .fetch_all(&pool)
            .await
            .expect("endpoints");
    assert_eq!(stored.len(), 2);
    for (id, plain, sealed) in &stored {
        let expected = if *id == made { &secret } else { legacy_secret };
        assert_eq!(plain, &None, "the plaintext is cleared");
        assert!(
            !sealed
                .windows(expected.len())
                .any(|w| w == expected.as_bytes()),
            "the sealed column holds the plaintext"
        );
        assert!(!sealed.windows(6).any(|w| w == b"whsec_"));
        assert_eq!(key.open(*id, sealed).as_deref(), Ok(expected));
    }
    assert_eq!(
        count(
            &pool,
            "SELECT COUNT(*) FROM webhook_endpoints WHERE secret IS NOT NULL"
        )
        .await,
        0
    );

    // Deliveries are still signed with the secrets the receivers hold.
    let e = event(&pool).await;
    let _running = start_worker(&pool, config);
    for (endpoint, receiver, secret) in [
        (made, &fresh, secret.as_str()),
        (legacy, &old, legacy_secret),
    ] {
        assert_eq!(settled(&pool, endpoint, e).await.state, "DELIVERED");
        let got = receiver.got.all();
        assert_eq!(got.len(), 1);
        let (header, body) = &got[0];
        assert_eq!(signatures(header), 1, "{header}");
        assert!(verify(secret, header, body).is_ok(), "{header}");
    }
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_through_its_grace_and_not_after() {
    let (_db, pool) = payments_db(6).await;
    let receiver = Receiver::start().await;
    let long_grace = Webhooks::new(
        pool.clone(),
        &WebhookConfig {
            secret_grace: Duration::from_secs(3600),
            ..config(true, 3)
        },
    );
    let (endpoint, first) = create(&long_grace, &receiver.url("127.0.0.1"))
        .await
        .expect("endpoint");
    let rotated = long_grace.rotate_secret(endpoint).await.expect("rotated");
    let second = rotated.secret;
    assert_ne!(first, second);
    assert_eq!(rotated.endpoint_id, endpoint);
    assert!(rotated.previous_expires_at > Utc::now() + chrono::Duration::minutes(59));
    assert!(matches!(
        long_grace.rotate_secret(Uuid::now_v7()).await,
        Err(Error::EndpointNotFound)
    ));
    let (plain, previous): (Option<String>, Vec<u8>) = sqlx::query_as(
        r#"SELECT secret, previous_secret_sealed FROM webhook_endpoints WHERE id = $1"#,
    )
    .bind(endpoint)
    .fetch_one(&pool)
    .await
    .expect("endpoint");
    assert_eq!(plain, None);
    assert!(!previous.windows(first.len()).any(|w| w == first.as_bytes()));

    // In the grace: two signatures; a receiver holding either secret verifies.
    let running = start_worker(&pool, config(true, 3));
    let (header, body) = &delivered(&pool, endpoint, &receiver, 1).await;
    assert_eq!(signatures(header), 2, "{header}");
    assert!(
        verify(&first, header, body).is_ok(),
        "the old secret: {header}"
    );
    assert!(
        verify(&second, header, body).is_ok(),
        "the new secret: {header}"
    );

    // A rotation with a short grace; once the database's clock is past it, only the
    // newest secret signs.
    let short_grace = Webhooks::new(
        pool.clone(),
        &WebhookConfig {
            secret_grace: Duration::from_secs(1),
            ..config(true, 3)
        },
    );
    let third = short_grace
        .rotate_secret(endpoint)
        .await
        .expect("rotated again")
        .secret;
    paysaga_common::testkit::until_some(
        "the grace's end on the database's clock",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            let in_grace = count(
                &pool,
                "SELECT COUNT(*) FROM webhook_endpoints WHERE previous_secret_expires_at > now()",
            )
            .await;
            (in_grace == 0).then_some(())
        },
    )
    .await;
    let (header, body) = &delivered(&pool, endpoint, &receiver, 2).await;
    assert_eq!(signatures(header), 1, "{header}");
    assert!(
        verify(&third, header, body).is_ok(),
        "the newest secret: {header}"
    );
    for stale in [&first, &second] {
        assert_eq!(
            verify(stale, header, body),
            Err(SignatureError::Mismatch),
            "{header}"
        );
    }
    drop(running);
}

#[tokio::test]
async fn an_https_endpoint_is_delivered_to_through_a_verified_certificate_only() {
    let (_db, pool) = payments_db(6).await;
    // One receiver with a certificate for `localhost`, one whose certificate names
    // another host; each from a CA of its own.
    let pki = TestPki::for_names(&["localhost"]);
    let receiver = Receiver::start_tls(pki.server()).await;
    let elsewhere_pki = TestPki::for_names(&["hooks.example.com"]);
    let elsewhere = Receiver::start_tls(elsewhere_pki.server()).await;
    let both_cas = Trust::from_pem(format!("{}{}", pki.ca_pem, elsewhere_pki.ca_pem).as_bytes())
        .expect("a bundle of two roots");
    let trusting = |allow_private: bool, trust: &Trust| WebhookConfig {
        trust: trust.clone(),
        ..config(allow_private, 1)
    };

    // An https URL is taken; one whose host is an internal address is refused as for
    // http.
    let strict = Webhooks::new(pool.clone(), &config(false, 1));
    let refused = create(&strict, "https://127.0.0.1:8443/hook")
        .await
        .expect_err("refused");
    assert!(matches!(refused, Error::AddressForbidden(_)), "{refused:?}");
    let (endpoint, secret) = create(&strict, &receiver.url("localhost"))
        .await
        .expect("an https endpoint is registered");
    let (misnamed, _) = create(&strict, &elsewhere.url("localhost"))
        .await
        .expect("an https endpoint is registered");

    // The egress rule holds over https: `localhost` resolves to the loopback, refused
    // before any connection even with the right roots.
    let e = event(&pool).await;
    {
        let _running = start_worker(&pool, trusting(false, &both_cas));
        for to in [endpoint, misnamed] {
            let row = settled(&pool, to, e).await;
            assert_eq!(row.last_error.as_deref(), Some("forbidden_address"));
        }
    }

    // Private targets allowed, the platform's roots only: the test's CA is unknown, so
    // the handshake fails and nothing is sent.
    let e = event(&pool).await;
    {
        let _running = start_worker(&pool, config(true, 1));
        for to in [endpoint, misnamed] {
            let row = settled(&pool, to, e).await;
            assert_eq!(
                (row.state.as_str(), row.last_status),
                ("DEAD", None),
                "{row:?}"
            );
            assert_eq!(row.last_error.as_deref(), Some("connect"), "{row:?}");
        }
    }
    assert!(
        receiver.got.all().is_empty(),
        "sent to an unverified receiver"
    );

    // Both CAs trusted: delivered, signed, to the receiver whose certificate names its
    // host; the other certificate names another host, so nothing is sent to it.
    let e = event(&pool).await;
    let _running = start_worker(&pool, trusting(true, &both_cas));
    let row = settled(&pool, endpoint, e).await;
    assert_eq!(
        (row.state.as_str(), row.last_status),
        ("DELIVERED", Some(200)),
        "{row:?}"
    );
    let got = receiver.got.all();
    assert_eq!(got.len(), 1);
    let (header, body) = &got[0];
    assert!(verify(&secret, header, body).is_ok(), "{header}");
    let row = settled(&pool, misnamed, e).await;
    assert_eq!(
        (row.state.as_str(), row.last_status),
        ("DEAD", None),
        "{row:?}"
    );
    assert!(
        elsewhere.got.all().is_empty(),
        "sent to a misnamed receiver"
    );
}
