//! Events and signed webhooks end to end: the five real service processes (the harness
//! in `paysaga-e2e`), real buyers, and real webhook receivers in this test (axum on
//! 127.0.0.1:0) that can fail, hang past the timeout or answer slowly, and record every
//! request they get. What is checked is read from PostgreSQL (the events and deliveries
//! tables, the payments and their step log) and from what the receivers recorded.

use paysaga_common::auth::Audience;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::HeaderMap, http::StatusCode, routing::post, Router};
use paysaga_common::testkit::service_token;
use paysaga_contracts::{
    events::{self, EventEnvelope, SignatureError},
    orchestrator::{
        api::{CreateWebhookEndpoint, ListDeliveries, WebhookEndpointCreated},
        client::OrchestratorClient,
    },
};
use paysaga_e2e::{
    invariants, Admin, Driver, Endpoints, Outcome, ServiceKind, Stack, StackOptions, Stop,
};
use sqlx::PgPool;
use uuid::Uuid;

/// How a receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// 2xx to everything.
    Never,
    /// 500 to everything.
    Always,
    /// 500 to the first request carrying an event id, 2xx to its retries.
    FirstTry,
}

#[derive(Debug, Clone, Copy)]
struct Behaviour {
    fail: Fail,
    /// Every `delay_every`-th request (0: none) waits `delay` before answering; a
    /// delay past `WEBHOOK_TIMEOUT_MS` is a hung receiver.
    delay: Duration,
    delay_every: usize,
}

impl Behaviour {
    fn ok() -> Self {
        Self {
            fail: Fail::Never,
            delay: Duration::ZERO,
            delay_every: 0,
        }
    }
}

/// One request as a receiver got it.
#[derive(Debug, Clone)]
struct Received {
    /// Arrival order across all of this receiver's requests.
    n: usize,
    event_id: Uuid,
    event_type: String,
    signature: String,
    body: Bytes,
    /// The status it answered (or would have, had the sender still been waiting).
    answered: u16,
}

#[derive(Default)]
struct Inner {
    behaviour: Mutex<Option<Behaviour>>,
    got: Mutex<Vec<Received>>,
    seen: Mutex<BTreeSet<Uuid>>,
    arrivals: AtomicUsize,
    in_flight: AtomicUsize,
}

/// Counts a request in flight until it is answered or its connection is dropped.
struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A webhook receiver listening on 127.0.0.1.
#[derive(Clone)]
struct Receiver {
    url: String,
    inner: Arc<Inner>,
}

async fn hook(State(r): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    r.in_flight.fetch_add(1, Ordering::SeqCst);
    let _guard = InFlight(r.clone());
    let n = r.arrivals.fetch_add(1, Ordering::SeqCst);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let Ok(event_id) = header(events::EVENT_ID_HEADER).parse::<Uuid>() else {
        return StatusCode::BAD_REQUEST;
    };
    let behaviour = r.behaviour.lock().expect("lock").unwrap_or(Behaviour::ok());
    let first = r.seen.lock().expect("lock").insert(event_id);
    let answered = match behaviour.fail {
        Fail::Never => 200,
        Fail::Always => 500,
        Fail::FirstTry if first => 500,
        Fail::FirstTry => 200,
    };
    let delayed = behaviour.delay_every > 0 && n % behaviour.delay_every == 0;
    r.got.lock().expect("lock").push(Received {
        n,
        event_id,
        event_type: header(events::EVENT_TYPE_HEADER),
        signature: header(events::SIGNATURE_HEADER),
        body,
        answered,
    });
    if delayed {
        tokio::time::sleep(behaviour.delay).await;
    }
    StatusCode::from_u16(answered).expect("status")
}

impl Receiver {
    async fn start(behaviour: Behaviour) -> anyhow::Result<Self> {
        let inner = Arc::new(Inner::default());
        *inner.behaviour.lock().expect("lock") = Some(behaviour);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, inner })
    }

    fn set(&self, behaviour: Behaviour) {
        *self.inner.behaviour.lock().expect("lock") = Some(behaviour);
    }

    fn got(&self) -> Vec<Received> {
        self.inner.got.lock().expect("lock").clone()
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// Requests per event id.
    fn by_event(&self) -> BTreeMap<Uuid, Vec<Received>> {
        let mut m: BTreeMap<Uuid, Vec<Received>> = BTreeMap::new();
        for r in self.got() {
            m.entry(r.event_id).or_default().push(r);
        }
        m
    }
}

/// An event as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
struct EventRow {
    id: Uuid,
    #[sqlx(rename = "type")]
    event_type: String,
    subject: String,
    data: serde_json::Value,
    occurred_at: chrono::DateTime<chrono::Utc>,
    source: String,
}

async fn events_table(pool: &PgPool) -> anyhow::Result<Vec<EventRow>> {
    Ok(sqlx::query_as::<_, EventRow>(
        r#"SELECT seq, id, type, subject, data, occurred_at, source FROM payment_service.events ORDER BY seq"#,
    )
    .fetch_all(pool)
    .await?)
}

/// A delivery as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
struct DeliveryRow {
    id: Uuid,
    event_id: Uuid,
    state: String,
    attempts: i32,
    last_status: Option<i32>,
    last_error: Option<String>,
}

async fn deliveries(pool: &PgPool, endpoint: Uuid) -> anyhow::Result<Vec<DeliveryRow>> {
    Ok(sqlx::query_as::<_, DeliveryRow>(
        r#"SELECT id, event_id, state, attempts, last_status, last_error
           FROM payment_service.webhook_deliveries WHERE endpoint_id = $1 ORDER BY event_seq"#,
    )
    .bind(endpoint)
    .fetch_all(pool)
    .await?)
}

/// Waits (bounded) until `check` holds, polling PostgreSQL; the bound is against a hang,
/// not a timing assertion.
async fn eventually<F, Fut>(what: &str, bound: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if check().await? {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The operator's client of the stack's orchestrator.
fn operator_client(stack: &Stack) -> OrchestratorClient {
    OrchestratorClient::new(
        stack.url(ServiceKind::Orchestrator),
        service_token("operator", Audience::Orchestrator),
        Duration::from_secs(10),
    )
}

/// The stack's admin (products, buyers, quotas) and a driver of its buyers.
fn admin_and_driver(stack: &Stack) -> (Admin, Driver) {
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let admin = Admin::new(
        endpoints.clone(),
        paysaga_common::client::http_client(Duration::from_secs(10)),
    );
    (admin, Driver::new(endpoints, Duration::from_secs(10)))
}

/// A drop of `units` units (buyers named after it) to buyers with `balances`, `clients`
/// at a time, run to its end; then the invariants hold once everything settled.
async fn drop_settled(
    stack: &Stack,
    pool: &PgPool,
    name: &str,
    units: i64,
    balances: &[i64],
    clients: usize,
) -> anyhow::Result<()> {
    let (admin, driver) = admin_and_driver(stack);
    let product = admin.create_product(name, PRICE, units).await?;
    let buyers = admin.open_buyers(name, balances, 4).await?;
    admin
        .wait_for_quota(product.id, units, Duration::from_secs(30))
        .await?;
    driver.run_drop(&buyers, product.id, clients, |_| {}).await;
    settled(pool).await
}

/// Everything settles and the invariants hold.
async fn settled(pool: &PgPool) -> anyhow::Result<()> {
    invariants::settled(pool, Duration::from_secs(30))
        .await?
        .assert_holds();
    Ok(())
}

async fn scalar(pool: &PgPool, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

/// Waits, as [`eventually`], until no event is left undispatched and no delivery
/// matches `deliveries` (about the endpoint `id`, its `$1`): how a test sees a backlog
/// drain.
async fn until_delivered(
    what: &str,
    bound: Duration,
    pool: &PgPool,
    deliveries: &str,
    id: Uuid,
) -> anyhow::Result<()> {
    let sql = &format!(
        r#"SELECT (SELECT COUNT(*) FROM payment_service.events_undispatched)
            + (SELECT COUNT(*) FROM payment_service.webhook_deliveries WHERE {deliveries})"#
    );
    eventually(what, bound, || async move {
        let left: i64 = sqlx::query_scalar(sql).bind(id).fetch_one(pool).await?;
        Ok(left == 0)
    })
    .await
}

async fn endpoint(
    operator: &OrchestratorClient,
    receiver: &Receiver,
    types: &[&str],
    description: &str,
) -> anyhow::Result<WebhookEndpointCreated> {
    Ok(operator
        .create_webhook_endpoint(&CreateWebhookEndpoint {
            url: receiver.url.clone(),
            event_types: types.iter().map(|t| (*t).to_owned()).collect(),
            description: Some(description.to_owned()),
        })
        .await?
        .body)
}

/// Every request `receiver` got carries a valid signature made with `secret` over its
/// exact body; the same body altered by a byte, or checked later than the tolerance,
/// is refused. Returns the envelopes by event id (every request for one id carries the
/// same envelope: a duplicate is a retry of that event, never something else).
fn verified(receiver: &Receiver, secret: &str) -> BTreeMap<Uuid, EventEnvelope> {
    let mut envelopes: BTreeMap<Uuid, EventEnvelope> = BTreeMap::new();
    for r in receiver.got() {
        let t: i64 = r
            .signature
            .split(',')
            .find_map(|p| p.strip_prefix("t="))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no timestamp in {:?}", r.signature));
        assert_eq!(
            events::verify(
                secret,
                &r.signature,
                &r.body,
                t,
                events::DEFAULT_TOLERANCE_SECS
            ),
            Ok(t),
            "request {} ({}) is not signed with the endpoint's secret",
            r.n,
            r.event_id
        );
        let mut tampered = r.body.to_vec();
        let last = tampered.len() - 2;
        tampered[last] ^= 0x01;
        assert_eq!(
            events::verify(secret, &r.signature, &tampered, t, 300),
            Err(SignatureError::Mismatch)
        );
        assert!(matches!(
            events::verify(secret, &r.signature, &r.body, t + 301, 300),
            Err(SignatureError::TooOld { .. })
        ));
        let envelope: EventEnvelope = serde_json::from_slice(&r.body).expect("envelope");
        assert_eq!(
            envelope.id, r.event_id,
            "header and body name the same event"
        );
        assert_eq!(envelope.event_type, r.event_type);
        if let Some(earlier) = envelopes.get(&r.event_id) {
            assert_eq!(earlier, &envelope, "a retry carries the same event");
        }
        envelopes.insert(r.event_id, envelope);
    }
    envelopes
}

/// Settings that make retries and polls quick enough for a test, with private targets
/// allowed (the receivers listen on 127.0.0.1).
fn fast_webhooks(options: StackOptions) -> StackOptions {
    quick_polls(options).env(
        ServiceKind::Orchestrator,
        "WEBHOOK_ALLOW_PRIVATE_TARGETS",
        1,
    )
}

/// Quick retries and polls, the egress rule left as configured.
fn quick_polls(options: StackOptions) -> StackOptions {
    options
        .env(ServiceKind::Orchestrator, "WEBHOOK_POLL_INTERVAL_MS", 100)
        .env(ServiceKind::Orchestrator, "WEBHOOK_BACKOFF_BASE_MS", 50)
        .env(ServiceKind::Orchestrator, "WEBHOOK_BACKOFF_CAP_MS", 200)
        .env(
            ServiceKind::Orchestrator,
            "WEBHOOK_INGEST_INTERVAL_MS",
            1000,
        )
        .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 1000)
}

const PRICE: i64 = 4_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_event_is_delivered_signed_in_order_retried_until_dead_and_replayed(
) -> anyhow::Result<()> {
    // all: every type, first try of each event refused, every third answer slow.
    let all = Receiver::start(Behaviour {
        fail: Fail::FirstTry,
        delay: Duration::from_millis(200),
        delay_every: 3,
    })
    .await?;
    // failed: payment.failed only, always 500.
    let failing = Receiver::start(Behaviour {
        fail: Fail::Always,
        ..Behaviour::ok()
    })
    .await?;
    // hung: payment.refunded only, answers long after the sender gave up.
    let hung = Receiver::start(Behaviour {
        fail: Fail::Never,
        delay: Duration::from_millis(2_000),
        delay_every: 1,
    })
    .await?;
    // switched: everything until disabled.
    let switched = Receiver::start(Behaviour::ok()).await?;

    let stack = Stack::start(
        fast_webhooks(StackOptions::new("webhooks"))
            .env(ServiceKind::Orchestrator, "WEBHOOK_MAX_ATTEMPTS", 3)
            .env(ServiceKind::Orchestrator, "WEBHOOK_TIMEOUT_MS", 800)
            .env(ServiceKind::Orchestrator, "WEBHOOK_LEASE_MS", 3000)
            .env(ServiceKind::Order, "RESERVATION_TTL_SECS", 3)
            .env(ServiceKind::Order, "SWEEP_INTERVAL_MS", 1000),
    )
    .await?;
    let pool = stack.admin_pool().await;
    let orchestrator_url = stack.url(ServiceKind::Orchestrator);
    let operator = operator_client(&stack);

    // Bad endpoints are refused with their codes and write nothing.
    registrations_refused(
        &operator,
        &pool,
        vec![
            ("ftp://example.com/hook", vec![], "WEBHOOK_URL_INVALID"),
            (
                "https://user:pw@example.com/hook",
                vec![],
                "WEBHOOK_URL_INVALID",
            ),
            ("not a url", vec![], "WEBHOOK_URL_INVALID"),
            ("http://user:pw@example.com/", vec![], "WEBHOOK_URL_INVALID"),
            (
                "http://example.com/",
                vec!["payment.created".to_owned()],
                "EVENT_TYPE_UNKNOWN",
            ),
        ],
    )
    .await?;

    let ep_all = endpoint(&operator, &all, &[], "everything").await?;
    let ep_failing = endpoint(&operator, &failing, &["payment.failed"], "failures").await?;
    let ep_hung = endpoint(&operator, &hung, &["payment.refunded"], "refunds").await?;
    let ep_switched = endpoint(&operator, &switched, &[], "switched off later").await?;
    assert!(ep_all.secret.starts_with("whsec_") && ep_all.secret != ep_failing.secret);
    let listed = operator.webhook_endpoints().await?.body.endpoints;
    assert_eq!(listed.len(), 4);
    assert_eq!(listed[1].event_types, vec!["payment.failed"]);

    // A drop: some buyers cannot afford it (refused a unit), one reserves and never
    // pays, one's hold is released before paying (the payment fails).
    let (admin, driver) = admin_and_driver(&stack);
    let units = 14;
    let product = admin.create_product("webhooks-drop", PRICE, units).await?;
    let balances: Vec<i64> = (0..20)
        .map(|i| if i % 4 == 3 { PRICE / 2 } else { PRICE })
        .collect();
    let buyers = admin.open_buyers("webhooks-buyer", &balances, 4).await?;
    admin
        .wait_for_quota(product.id, units, Duration::from_secs(30))
        .await?;
    let late = &buyers[0];
    let mut retries = 0;
    let pass = driver.pass(late, product.id, &mut retries).await?;
    let expiring = driver
        .reserve(late, product.id, &pass.pass, &mut retries)
        .await?
        .id;
    // One buyer's hold is released before they pay: that payment fails.
    let dropped = &buyers[1];
    let pass = driver.pass(dropped, product.id, &mut retries).await?;
    let unheld = driver
        .reserve(dropped, product.id, &pass.pass, &mut retries)
        .await?
        .id;
    admin.release_hold(unheld).await?;
    let failed = driver
        .pay(dropped, unheld, &format!("buy-{unheld}"), &mut retries)
        .await?;
    let failed = driver
        .follow(dropped, failed)
        .await
        .map_err(|(_, why)| anyhow::anyhow!(why))?;
    assert_eq!(failed.failure_code.as_deref(), Some("HOLD_RELEASED"));
    let attempts = driver.run_drop(&buyers[2..], product.id, 8, |_| {}).await;
    let completed: Vec<Uuid> = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::Completed)
        .filter_map(|a| a.payment_id)
        .collect();
    assert!(completed.len() >= 3, "{attempts:#?}");
    assert!(
        attempts.iter().any(|a| matches!(
            &a.outcome,
            Outcome::Rejected { code, .. } if code == "INSUFFICIENT_FUNDS"
        )),
        "buyers who cannot pay are refused a unit: {attempts:#?}"
    );
    let report = invariants::settled(&pool, Duration::from_secs(30)).await?;
    report.assert_holds();

    // The switched-off endpoint has had everything so far; then it is disabled.
    until_delivered(
        "the switched endpoint caught up",
        Duration::from_secs(20),
        &pool,
        "endpoint_id = $1 AND state <> 'DELIVERED'",
        ep_switched.endpoint.id,
    )
    .await?;
    let disabled = operator
        .set_webhook_endpoint_enabled(ep_switched.endpoint.id, false)
        .await?
        .body;
    assert!(!disabled.enabled);
    let switched_before = switched.got().len();
    assert!(switched_before >= completed.len());

    // Refunds: a second event about each of these payments, after payment.completed.
    for id in completed.iter().take(3) {
        operator.refund(*id).await?;
    }
    settled(&pool).await?;

    // The reservation that was never paid expires in the order service; its event comes
    // over through the order service's outbox.
    eventually(
        "reservation.expired taken in",
        Duration::from_secs(20),
        || {
            let pool = pool.clone();
            async move {
                Ok(sqlx::query_scalar::<_, i64>(
                    r#"SELECT COUNT(*) FROM payment_service.events
                   WHERE type = 'reservation.expired' AND subject = $1 AND source = 'order'"#,
                )
                .bind(expiring.to_string())
                .fetch_one(&pool)
                .await?
                    == 1)
            }
        },
    )
    .await?;

    // Everything settles: every delivery DELIVERED or DEAD, except those waiting for the
    // disabled endpoint.
    until_delivered(
        "deliveries settled",
        Duration::from_secs(25),
        &pool,
        "state = 'PENDING' AND endpoint_id <> $1",
        ep_switched.endpoint.id,
    )
    .await?;

    let events = events_table(&pool).await?;
    let by_id: HashMap<Uuid, &EventRow> = events.iter().map(|e| (e.id, e)).collect();

    // Exactly one event per move into a terminal state, as the step log records them.
    let transitions: Vec<(String, String)> = sqlx::query_as(
        r#"SELECT payment_id::TEXT, 'payment.' || lower(to_state)
           FROM payment_service.payment_steps
           WHERE to_state IN ('COMPLETED', 'FAILED', 'REFUNDED') AND from_state <> to_state
           ORDER BY 1, 2"#,
    )
    .fetch_all(&pool)
    .await?;
    let mut payment_events: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.source == "orchestrator")
        .map(|e| (e.subject.clone(), e.event_type.clone()))
        .collect();
    payment_events.sort();
    assert_eq!(payment_events, transitions);
    let terminal = scalar(
        &pool,
        "SELECT COUNT(*) FROM payment_service.payments WHERE state IN ('COMPLETED', 'FAILED', 'REFUNDED')",
    )
    .await?;
    assert_eq!(terminal, report.payments);
    assert!(payment_events.len() as i64 >= terminal);
    for e in events.iter().filter(|e| e.source == "orchestrator") {
        assert_eq!(e.data["payment_id"], e.subject.as_str());
        assert_eq!(e.data["product_id"], product.id.to_string());
        assert_eq!(e.data["amount"], PRICE);
        assert_eq!(
            e.data.get("reason").is_some(),
            e.event_type == "payment.failed",
            "{e:?}"
        );
        assert_eq!(e.id.get_version_num(), 7, "event ids are UUIDv7");
    }

    // The catch-all endpoint: every event delivered, signed, its body the stored event;
    // each was refused once and retried under the same id.
    let envelopes = verified(&all, &ep_all.secret);
    assert_eq!(
        envelopes.keys().copied().collect::<BTreeSet<_>>(),
        events.iter().map(|e| e.id).collect::<BTreeSet<_>>(),
        "every event reached the catch-all endpoint"
    );
    for (id, envelope) in &envelopes {
        let stored = by_id[id];
        assert_eq!(envelope.event_type, stored.event_type);
        assert_eq!(envelope.data, stored.data);
        assert_eq!(envelope.created_at, stored.occurred_at);
    }
    let rows = deliveries(&pool, ep_all.endpoint.id).await?;
    assert_eq!(rows.len(), events.len());
    for r in &rows {
        assert_eq!(r.state, "DELIVERED", "{r:?}");
        assert!(r.attempts >= 2, "{r:?}");
    }
    let received = all.by_event();
    for (id, requests) in &received {
        assert!(requests.len() >= 2, "{id}: the first try was refused");
        assert!(requests.iter().any(|r| r.answered == 200));
    }

    // One subject's events in order: a later event is not sent before the earlier one
    // was taken.
    let mut by_subject: BTreeMap<&str, Vec<&EventRow>> = BTreeMap::new();
    for e in &events {
        by_subject.entry(e.subject.as_str()).or_default().push(e);
    }
    let mut pairs = 0;
    for list in by_subject.values().filter(|l| l.len() > 1) {
        for w in list.windows(2) {
            let accepted_earlier = received[&w[0].id]
                .iter()
                .filter(|r| r.answered == 200)
                .map(|r| r.n)
                .min()
                .expect("accepted");
            let first_later = received[&w[1].id].iter().map(|r| r.n).min().expect("sent");
            assert!(
                first_later > accepted_earlier,
                "{} ({}) was sent before {} ({}) was taken",
                w[1].event_type,
                w[1].id,
                w[0].event_type,
                w[0].id
            );
            pairs += 1;
        }
    }
    assert!(pairs >= 3, "the refunded payments each had two events");

    // The failing endpoint: each payment.failed tried WEBHOOK_MAX_ATTEMPTS times, DEAD.
    verified(&failing, &ep_failing.secret);
    let failed_events: Vec<Uuid> = events
        .iter()
        .filter(|e| e.event_type == "payment.failed")
        .map(|e| e.id)
        .collect();
    let dead = deliveries(&pool, ep_failing.endpoint.id).await?;
    assert_eq!(dead.len(), failed_events.len());
    for r in &dead {
        assert_eq!(
            (r.state.as_str(), r.attempts, r.last_status),
            ("DEAD", 3, Some(500)),
            "{r:?}"
        );
        assert_eq!(r.last_error.as_deref(), Some("http_status"), "{r:?}");
        assert_eq!(failing.by_event()[&r.event_id].len(), 3);
    }

    // The hung endpoint: each refund timed out three times, DEAD.
    verified(&hung, &ep_hung.secret);
    let timed_out = deliveries(&pool, ep_hung.endpoint.id).await?;
    assert_eq!(timed_out.len(), 3);
    for r in &timed_out {
        assert_eq!(
            (r.state.as_str(), r.attempts, r.last_status),
            ("DEAD", 3, None)
        );
        assert_eq!(r.last_error.as_deref(), Some("timeout"), "{r:?}");
    }

    // The disabled endpoint got nothing new, and nothing was made for it after.
    assert_eq!(switched.got().len(), switched_before);
    let refunds: BTreeSet<Uuid> = events
        .iter()
        .filter(|e| e.event_type == "payment.refunded" || e.source == "order")
        .map(|e| e.id)
        .collect();
    for r in deliveries(&pool, ep_switched.endpoint.id).await? {
        assert!(r.state == "DELIVERED" || r.attempts == 0, "{r:?}");
        assert!(
            !refunds.contains(&r.event_id),
            "made after it was disabled: {r:?}"
        );
    }

    // The operator lists the DEAD and replays one: delivered, the same event id.
    let listed = operator
        .webhook_deliveries(&ListDeliveries {
            state: Some("DEAD".into()),
            endpoint_id: Some(ep_failing.endpoint.id),
            limit: Some(500),
        })
        .await?
        .body
        .deliveries;
    assert_eq!(listed.len(), dead.len());
    assert!(listed.iter().all(|d| d.event_type == "payment.failed"));
    failing.set(Behaviour::ok());
    let target = &dead[0];
    let replayed = operator.replay_webhook_delivery(target.id).await?.body;
    assert_eq!((replayed.state.as_str(), replayed.attempts), ("PENDING", 0));
    eventually("the replay delivered", Duration::from_secs(10), || {
        let pool = pool.clone();
        let id = target.id;
        async move {
            Ok(sqlx::query_scalar::<_, String>(
                r#"SELECT state FROM payment_service.webhook_deliveries WHERE id = $1"#,
            )
            .bind(id)
            .fetch_one(&pool)
            .await?
                == "DELIVERED")
        }
    })
    .await?;
    let again = &failing.by_event()[&target.event_id];
    assert_eq!(again.len(), 4);
    assert_eq!(again.last().map(|r| r.answered), Some(200));
    verified(&failing, &ep_failing.secret);
    let still_dead = deliveries(&pool, ep_failing.endpoint.id)
        .await?
        .iter()
        .filter(|d| d.state == "DEAD")
        .count();
    assert_eq!(still_dead, dead.len() - 1);
    // Replaying what is not DEAD, or nothing at all, is refused.
    let not_dead = operator
        .replay_webhook_delivery(target.id)
        .await
        .expect_err("not DEAD");
    assert_eq!(
        (not_dead.status(), not_dead.code()),
        (Some(409), Some("WEBHOOK_DELIVERY_NOT_DEAD"))
    );
    let missing = operator
        .replay_webhook_delivery(Uuid::now_v7())
        .await
        .expect_err("missing");
    assert_eq!(missing.code(), Some("WEBHOOK_DELIVERY_NOT_FOUND"));

    // The order service's outbox row was acknowledged once it was ours.
    let relayed = scalar(
        &pool,
        "SELECT COUNT(*) FROM order_service.outbox_events WHERE relayed_at IS NULL",
    )
    .await?;
    assert_eq!(relayed, 0);

    // The catalogue is published as OpenAPI webhooks.
    let spec: serde_json::Value = reqwest::get(format!("{orchestrator_url}/openapi.json"))
        .await?
        .json()
        .await?;
    let published: BTreeSet<&str> = spec["webhooks"]
        .as_object()
        .expect("webhooks")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(published, events::types::ALL.into_iter().collect());

    // Metrics: the outcomes counted.
    let metrics = reqwest::get(format!(
        "{}/metrics",
        stack.metrics_url(ServiceKind::Orchestrator)
    ))
    .await?
    .text()
    .await?;
    for outcome in ["delivered", "failed", "dead"] {
        assert!(
            metrics.contains(&format!(
                "paysaga_webhook_deliveries_total{{outcome=\"{outcome}\"}}"
            )),
            "{outcome}"
        );
    }
    assert!(metrics.contains("paysaga_outbox_lag_seconds"));
    assert!(metrics.contains("paysaga_webhook_dead_deliveries"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_lost_when_the_worker_is_killed_mid_delivery() -> anyhow::Result<()> {
    // Every answer takes a while, so the kill lands with deliveries in flight.
    let slow = Receiver::start(Behaviour {
        fail: Fail::Never,
        delay: Duration::from_millis(700),
        delay_every: 1,
    })
    .await?;
    let mut stack = Stack::start(
        fast_webhooks(StackOptions::new("webhooks-crash"))
            .env(ServiceKind::Orchestrator, "WEBHOOK_TIMEOUT_MS", 2000)
            .env(ServiceKind::Orchestrator, "WEBHOOK_LEASE_MS", 4000)
            .env(ServiceKind::Orchestrator, "WEBHOOK_CONCURRENCY", 3),
    )
    .await?;
    let pool = stack.admin_pool().await;
    let operator = operator_client(&stack);
    let ep = endpoint(&operator, &slow, &[], "slow").await?;

    let balances: Vec<i64> = (0..12)
        .map(|i| if i % 3 == 2 { PRICE / 2 } else { PRICE })
        .collect();
    drop_settled(&stack, &pool, "webhooks-crash", 10, &balances, 6).await?;

    // SIGKILL while the receiver is answering.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(slow.in_flight() >= 2 && slow.got().len() >= 4) {
        anyhow::ensure!(Instant::now() < deadline, "deliveries never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stack.stop(ServiceKind::Orchestrator, Stop::Kill).await?;
    let at_kill = slow.got().len();
    stack.start_service(ServiceKind::Orchestrator).await?;

    eventually("every delivery DELIVERED after the restart", Duration::from_secs(25), || {
        let pool = pool.clone();
        async move {
            let open = sqlx::query_scalar::<_, i64>(
                r#"SELECT (SELECT COUNT(*) FROM payment_service.events_undispatched)
                        + (SELECT COUNT(*) FROM payment_service.webhook_deliveries WHERE state <> 'DELIVERED')"#,
            )
            .fetch_one(&pool)
            .await?;
            Ok(open == 0)
        }
    })
    .await?;

    let events = events_table(&pool).await?;
    let terminal = scalar(
        &pool,
        "SELECT COUNT(*) FROM payment_service.payments WHERE state IN ('COMPLETED', 'FAILED', 'REFUNDED')",
    )
    .await?;
    assert_eq!(
        events.len() as i64,
        terminal,
        "one event per settled payment"
    );
    let rows = deliveries(&pool, ep.endpoint.id).await?;
    assert_eq!(
        rows.iter().map(|r| r.event_id).collect::<BTreeSet<_>>(),
        events.iter().map(|e| e.id).collect::<BTreeSet<_>>(),
        "a delivery for every event"
    );
    assert!(rows.iter().all(|r| r.state == "DELIVERED"));
    let envelopes = verified(&slow, &ep.secret);
    assert_eq!(
        envelopes.keys().copied().collect::<BTreeSet<_>>(),
        events.iter().map(|e| e.id).collect::<BTreeSet<_>>(),
        "the receiver got every event"
    );
    // The deliveries cut off by the kill were sent again, under their own ids.
    let requests = slow.got().len();
    assert!(
        requests > envelopes.len(),
        "{requests} requests, {} events",
        envelopes.len()
    );
    assert!(at_kill < requests);
    assert_eq!(
        stack
            .services
            .process(ServiceKind::Orchestrator)
            .map(|p| p.starts()),
        Some(2)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn internal_targets_are_refused_at_registration_and_when_delivering() -> anyhow::Result<()> {
    // Private targets are not allowed (the default): the probes of internal addresses.
    let inside = Receiver::start(Behaviour::ok()).await?;
    let stack = Stack::start(quick_polls(StackOptions::new("webhooks-egress")).env(
        ServiceKind::Orchestrator,
        "WEBHOOK_MAX_ATTEMPTS",
        1,
    ))
    .await?;
    let pool = stack.admin_pool().await;
    let operator = operator_client(&stack);
    registrations_refused(
        &operator,
        &pool,
        [
            "http://127.0.0.1:5432/",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.1/",
        ]
        .map(|url| (url, vec![], "WEBHOOK_ADDRESS_FORBIDDEN"))
        .to_vec(),
    )
    .await?;

    // A name that resolves to 127.0.0.1 is registered, and refused when delivering.
    let port = inside
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next());
    let by_name = format!("http://localhost:{}/hook", port.expect("a port"));
    let ep = operator
        .create_webhook_endpoint(&CreateWebhookEndpoint {
            url: by_name,
            event_types: vec![],
            description: Some("resolves inside".into()),
        })
        .await?
        .body;
    // Its secret is sealed at rest.
    let (plain, sealed): (Option<String>, Vec<u8>) = sqlx::query_as(
        r#"SELECT secret, secret_sealed FROM payment_service.webhook_endpoints WHERE id = $1"#,
    )
    .bind(ep.endpoint.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(plain, None);
    assert!(!sealed
        .windows(ep.secret.len())
        .any(|w| w == ep.secret.as_bytes()));
    // Rotation through the API: a new secret, once.
    let rotated = operator.rotate_webhook_secret(ep.endpoint.id).await?.body;
    assert_ne!(rotated.secret, ep.secret);
    assert!(rotated.secret.starts_with("whsec_"));
    let missing = operator
        .rotate_webhook_secret(Uuid::now_v7())
        .await
        .expect_err("no such endpoint");
    assert_eq!(missing.code(), Some("WEBHOOK_ENDPOINT_NOT_FOUND"));

    // Events: a small drop.
    drop_settled(&stack, &pool, "webhooks-egress", 2, &[PRICE, PRICE], 2).await?;
    until_delivered(
        "every delivery settled",
        Duration::from_secs(25),
        &pool,
        "endpoint_id = $1 AND state = 'PENDING'",
        ep.endpoint.id,
    )
    .await?;
    let rows = deliveries(&pool, ep.endpoint.id).await?;
    assert!(!rows.is_empty(), "the drop made events");
    for r in &rows {
        assert_eq!(
            (r.state.as_str(), r.last_status, r.last_error.as_deref()),
            ("DEAD", None, Some("forbidden_address")),
            "{r:?}"
        );
    }
    assert!(inside.got().is_empty(), "the receiver was reached");
    let shown = operator
        .webhook_deliveries(&ListDeliveries {
            state: Some("DEAD".into()),
            endpoint_id: Some(ep.endpoint.id),
            limit: None,
        })
        .await?
        .body
        .deliveries;
    assert_eq!(shown.len(), rows.len());
    assert!(shown.iter().all(|d| d.last_error
        == Some(paysaga_contracts::orchestrator::api::DeliveryFailure::ForbiddenAddress)));
    Ok(())
}

/// Each `(url, event types, code)` registration is refused 422 with its code, and no
/// endpoint is written.
async fn registrations_refused(
    operator: &OrchestratorClient,
    pool: &sqlx::PgPool,
    cases: Vec<(&str, Vec<String>, &str)>,
) -> anyhow::Result<()> {
    for (url, types, code) in cases {
        let refused = operator
            .create_webhook_endpoint(&CreateWebhookEndpoint {
                url: url.to_owned(),
                event_types: types,
                description: None,
            })
            .await
            .expect_err("refused");
        assert_eq!(
            (refused.status(), refused.code()),
            (Some(422), Some(code)),
            "{url}"
        );
    }
    assert_eq!(
        scalar(
            pool,
            "SELECT COUNT(*) FROM payment_service.webhook_endpoints"
        )
        .await?,
        0
    );
    Ok(())
}
