//! One checkout is one trace: the real processes export their spans over OTLP/HTTP to
//! a collector this test runs, and the spans chain from the buyer's own context through
//! gate, order and the orchestrator down to each batched debit and confirm. A payment
//! that recovery finishes after the orchestrator is SIGKILLed stays in the same trace.
//! And trace context changes nothing else: the same checkouts with and without it move
//! the same money and sell the same units in PostgreSQL.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{body::Bytes, extract::State, http::StatusCode, routing::post, Router};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value::Value,
};
use paysaga_e2e::{Buyer, Endpoints, Link, ServiceKind, Stack, StackOptions, Stop};
use prost::Message;
use serde_json::{json, Value as Json};
use uuid::Uuid;

const PRICE: i64 = 4_200;

/// A span as the collector received it; ids in lowercase hex, no parent as "".
#[derive(Debug, Clone)]
struct Collected {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
    links: Vec<String>,
}

/// A minimal OTLP/HTTP receiver on loopback: `POST /v1/traces`, protobuf bodies.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Collected>>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

async fn receive(State(c): State<Collector>, body: Bytes) -> (StatusCode, Vec<u8>) {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut got = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            got.push(Collected {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent: hex(&span.parent_span_id),
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| {
                        (
                            kv.key.clone(),
                            text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                        )
                    })
                    .collect(),
                links: span.links.iter().map(|l| hex(&l.span_id)).collect(),
            });
        }
    }
    c.spans.lock().expect("collector lock").extend(got);
    // An empty ExportTraceServiceResponse encodes to no bytes.
    (StatusCode::OK, Vec::new())
}

impl Collector {
    /// Serves on 127.0.0.1:0; returns the endpoint to give the services.
    async fn start(&self) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(format!("http://{addr}"))
    }

    fn trace(&self, trace_id: &str) -> Vec<Collected> {
        self.spans
            .lock()
            .expect("collector lock")
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    /// Waits until `done` holds for the spans of `trace_id` (the services export in
    /// batches), failing after a generous bound with what arrived.
    async fn wait_for(
        &self,
        trace_id: &str,
        what: &str,
        done: impl Fn(&[Collected]) -> bool,
    ) -> Vec<Collected> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.trace(trace_id);
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "never collected {what}; trace {trace_id} has {:#?}",
                spans
                    .iter()
                    .map(|s| format!("{} {} {}<-{}", s.service, s.name, s.span_id, s.parent))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn find<'a>(spans: &'a [Collected], service: &str, name: &str) -> Option<&'a Collected> {
    spans
        .iter()
        .find(|s| s.service == service && s.name == name)
}

/// The span ids from `span`'s parent up to the root of what was collected, then the
/// first parent id not collected (the buyer's own span, outside every service).
fn ancestors(spans: &[Collected], span: &Collected) -> Vec<String> {
    let by_id: HashMap<&str, &Collected> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut chain = Vec::new();
    let mut parent = span.parent.clone();
    while !parent.is_empty() && !chain.contains(&parent) {
        chain.push(parent.clone());
        match by_id.get(parent.as_str()) {
            Some(p) => parent = p.parent.clone(),
            None => break,
        }
    }
    chain
}

/// The buyer's own trace context: a fresh trace id and the id of the buyer's span.
fn buyer_context() -> (String, String, String) {
    let trace_id = Uuid::new_v4().simple().to_string();
    let span_id = Uuid::new_v4().simple().to_string()[..16].to_owned();
    let traceparent = format!("00-{trace_id}-{span_id}-01");
    (trace_id, span_id, traceparent)
}

async fn start_stack(label: &str, collector: &str, proxy: bool) -> anyhow::Result<Stack> {
    let mut options = StackOptions::new(label)
        .env_all("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        .env_all("OTEL_BSP_SCHEDULE_DELAY", 100)
        .quick_loops()
        // The restarted orchestrator takes the dead one's payment once its lease ends;
        // the lease must outlast a call and its probe.
        .env(ServiceKind::Orchestrator, "LEASE_MS", 9000)
        .env(ServiceKind::Orchestrator, "DOWNSTREAM_TIMEOUT_MS", 3000);
    if proxy {
        options = options.proxy(Link::OrchestratorToAccount);
    }
    Stack::start(options).await
}

/// A product with one unit and a buyer who can pay for it.
async fn setup(stack: &Stack, name: &str) -> anyhow::Result<(Endpoints, i64, Buyer)> {
    let (endpoints, admin) = stack.operator();
    let product = admin.create_product(name, PRICE, 1).await?;
    let buyer = admin.open_buyer(&format!("{name}-buyer"), PRICE).await?;
    admin
        .wait_for_quota(product.id, 1, Duration::from_secs(30))
        .await?;
    Ok((endpoints, product.id, buyer))
}

/// A buyer's request, carrying the buyer's `traceparent` if it has one; the JSON answer.
async fn call(
    http: &reqwest::Client,
    url: String,
    buyer: &Buyer,
    traceparent: Option<&str>,
    body: Json,
    idempotency_key: Option<&str>,
) -> anyhow::Result<(u16, Json)> {
    let mut req = http.post(url).bearer_auth(&buyer.token).json(&body);
    if let Some(traceparent) = traceparent {
        req = req.header("traceparent", traceparent);
    }
    if let Some(key) = idempotency_key {
        req = req.header("idempotency-key", key);
    }
    let response = req.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

/// The id of the reservation a [`try_reserve`] made (its answer must be a 201).
fn reserved((status, reservation): (u16, Json)) -> String {
    assert_eq!(status, 201, "{reservation}");
    reservation["id"]
        .as_str()
        .expect("reservation id")
        .to_owned()
}

/// Pass and reservation, as the buyer: the reservation's answer, whatever it is.
async fn try_reserve(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    buyer: &Buyer,
    product_id: i64,
    traceparent: Option<&str>,
) -> anyhow::Result<(u16, Json)> {
    let (status, pass) = call(
        http,
        format!("{}/v1/passes", endpoints.gate),
        buyer,
        traceparent,
        json!({ "product_id": product_id }),
        None,
    )
    .await?;
    assert_eq!(status, 201, "{pass}");
    call(
        http,
        format!("{}/v1/reservations", endpoints.order),
        buyer,
        traceparent,
        json!({ "product_id": product_id, "pass": pass["pass"] }),
        None,
    )
    .await
}

fn route_span<'a>(spans: &'a [Collected], service: &str, route: &str) -> Option<&'a Collected> {
    spans.iter().find(|s| {
        s.service == service
            && s.name.starts_with("POST ")
            && s.attributes.get("http.route").map(String::as_str) == Some(route)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_checkout_is_one_trace_across_the_services() -> anyhow::Result<()> {
    let collector = Collector::default();
    let endpoint = collector.start().await?;
    let stack = start_stack("traces", &endpoint, false).await?;
    let (endpoints, product_id, buyer) = setup(&stack, "traced").await?;
    let http = reqwest::Client::new();
    let (trace_id, buyer_span, traceparent) = buyer_context();

    let reservation_id =
        reserved(try_reserve(&http, &endpoints, &buyer, product_id, Some(&traceparent)).await?);
    let (status, payment) = call(
        &http,
        format!("{}/v1/payments", endpoints.orchestrator),
        &buyer,
        Some(&traceparent),
        json!({ "reservation_id": reservation_id, "account_id": buyer.account_id }),
        Some("traced-checkout"),
    )
    .await?;
    assert_eq!(status, 201, "{payment}");
    assert_eq!(payment["state"], "COMPLETED");
    let payment_id = payment["id"].as_str().expect("payment id").to_owned();

    // The payment keeps the context of the request that created it, from PostgreSQL.
    let pool = stack.admin_pool().await;
    let (state, stored): (String, Option<String>) = sqlx::query_as(
        r#"SELECT state, traceparent FROM payment_service.payments WHERE id = $1::UUID"#,
    )
    .bind(&payment_id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(state, "COMPLETED");
    let stored = stored.expect("the payment keeps its trace context");
    assert!(stored.starts_with(&format!("00-{trace_id}-")), "{stored}");

    let spans = collector
        .wait_for(&trace_id, "the whole checkout", |spans| {
            route_span(spans, "gate", "/v1/passes").is_some()
                && route_span(spans, "order", "/v1/reservations").is_some()
                && route_span(spans, "orchestrator", "/v1/payments").is_some()
                && find(spans, "account", "account debit").is_some()
                && find(spans, "order", "order confirm").is_some()
                && find(spans, "orchestrator", "drive").is_some()
        })
        .await;

    // The buyer called gate, order and the orchestrator: three children of its span.
    for (service, route) in [
        ("gate", "/v1/passes"),
        ("order", "/v1/reservations"),
        ("orchestrator", "/v1/payments"),
    ] {
        let s = route_span(&spans, service, route).expect("collected");
        assert_eq!(
            s.parent, buyer_span,
            "{service} {route} continues the buyer's span"
        );
    }
    let payment_request = route_span(&spans, "orchestrator", "/v1/payments").expect("collected");
    let drive = find(&spans, "orchestrator", "drive").expect("collected");
    assert_eq!(drive.attributes.get("payment_id"), Some(&payment_id));
    assert!(
        ancestors(&spans, drive).contains(&payment_request.span_id),
        "the saga's drive runs under the payment request"
    );
    // The stored context names a span of the payment request (its handler span).
    let stored_span = stored.split('-').nth(2).expect("span id part");
    let drive_chain = ancestors(&spans, drive);
    assert!(drive_chain.iter().any(|id| id == stored_span));

    // The batched debit and confirm each sit in this payment's trace, under its drive,
    // linked to the batch request that carried them.
    for (service, name) in [("account", "account debit"), ("order", "order confirm")] {
        let op = find(&spans, service, name).expect("collected");
        let chain = ancestors(&spans, op);
        assert_eq!(
            chain.first(),
            Some(&drive.span_id),
            "{name}'s parent is the drive"
        );
        assert!(chain.contains(&payment_request.span_id), "{name}");
        assert_eq!(chain.last(), Some(&buyer_span), "{name} ends at the buyer");
        assert_eq!(op.links.len(), 1, "{name} links to its batch request");
    }
    let debit = find(&spans, "account", "account debit").expect("collected");
    assert_eq!(debit.attributes.get("payment_id"), Some(&payment_id));
    assert_eq!(
        debit.attributes.get("operation_key"),
        Some(&format!("pay:{payment_id}:debit"))
    );
    // Before paying, the orchestrator checked the reservation: that lookup is in the
    // trace too, under the payment request.
    let lookup = find(&spans, "order", "order reservation lookup").expect("collected");
    assert!(ancestors(&spans, lookup).contains(&payment_request.span_id));
    drop(stack);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payment_recovered_after_a_crash_stays_in_the_buyers_trace() -> anyhow::Result<()> {
    let collector = Collector::default();
    let endpoint = collector.start().await?;
    let mut stack = start_stack("traces-crash", &endpoint, true).await?;
    let (endpoints, product_id, buyer) = setup(&stack, "traced-crash").await?;
    let http = reqwest::Client::new();
    let (trace_id, buyer_span, traceparent) = buyer_context();
    let reservation_id =
        reserved(try_reserve(&http, &endpoints, &buyer, product_id, Some(&traceparent)).await?);

    // The debit is applied but its answer held, so the orchestrator dies waiting for it.
    let proxy = stack.proxy(Link::OrchestratorToAccount).expect("proxied");
    proxy.set_slow_answers(br#""op":"debit""#, Duration::from_secs(60));
    let pay = {
        let (http, buyer, traceparent) = (http.clone(), buyer.clone(), traceparent.clone());
        let url = format!("{}/v1/payments", endpoints.orchestrator);
        let body = json!({ "reservation_id": reservation_id, "account_id": buyer.account_id });
        tokio::spawn(async move {
            call(
                &http,
                url,
                &buyer,
                Some(&traceparent),
                body,
                Some("traced-crash"),
            )
            .await
        })
    };
    let pool = stack.admin_pool().await;
    let payment_id: Uuid = paysaga_common::testkit::until_some(
        "the debit in the ledger",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            sqlx::query_scalar(
                r#"SELECT p.id FROM payment_service.payments p
               JOIN account_service.transactions t ON t.operation_key = 'pay:' || p.id || ':debit'
               WHERE p.reservation_id = $1::UUID"#,
            )
            .bind(&reservation_id)
            .fetch_optional(&pool)
            .await
            .expect("debit")
        },
    )
    .await;
    stack.stop(ServiceKind::Orchestrator, Stop::Kill).await?;
    assert!(
        pay.await?.is_err(),
        "the buyer's request died with the process"
    );
    stack
        .proxy(Link::OrchestratorToAccount)
        .expect("proxied")
        .heal();
    stack.start_service(ServiceKind::Orchestrator).await?;

    let deadline = Instant::now() + Duration::from_secs(60);
    let (state, stored) = loop {
        let (state, stored): (String, Option<String>) = sqlx::query_as(
            r#"SELECT state, traceparent FROM payment_service.payments WHERE id = $1"#,
        )
        .bind(payment_id)
        .fetch_one(&pool)
        .await?;
        if state == "COMPLETED" {
            break (state, stored);
        }
        assert!(
            Instant::now() < deadline,
            "recovery never finished {payment_id}: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(state, "COMPLETED");
    let stored = stored.expect("the payment keeps its trace context");
    let stored_span = stored.split('-').nth(2).expect("span id part").to_owned();
    let payment_id = payment_id.to_string();

    // Each service exports its spans in batches of its own, so the account service's
    // (and the orchestrator's spans between them and the recovery) may come after the
    // order's: wait for what the assertions below read, not for a part of it.
    let spans = collector
        .wait_for(&trace_id, "the recovery's spans", |spans| {
            let Some(recover) = find(spans, "orchestrator", "recover payment") else {
                return false;
            };
            let under_recovery = |s: &Collected| ancestors(spans, s).contains(&recover.span_id);
            find(spans, "order", "order confirm").is_some_and(under_recovery)
                && spans
                    .iter()
                    .any(|s| s.service == "account" && under_recovery(s))
        })
        .await;
    let recover = find(&spans, "orchestrator", "recover payment").expect("collected");
    assert_eq!(recover.attributes.get("payment_id"), Some(&payment_id));
    assert_eq!(
        recover.parent, stored_span,
        "recovery continues the stored context of the payment request"
    );
    // What recovery did downstream (the debit replayed or looked up, the confirm) is in
    // the same trace, under the recovery span.
    let confirm = find(&spans, "order", "order confirm").expect("collected");
    assert!(ancestors(&spans, confirm).contains(&recover.span_id));
    let account_ops: Vec<_> = spans
        .iter()
        .filter(|s| s.service == "account" && ancestors(&spans, s).contains(&recover.span_id))
        .collect();
    assert!(
        !account_ops.is_empty(),
        "recovery settled the debit in the trace"
    );
    // The buyer's spans from before the crash are in the same trace.
    let reservation = route_span(&spans, "order", "/v1/reservations").expect("collected");
    assert_eq!(reservation.parent, buyer_span);
    drop(stack);
    Ok(())
}

/// One ledger row: (kind, status, amount).
type Move = (String, String, i64);

/// The same checkouts' results, as PostgreSQL holds them: payments, money, units. Buyers
/// are in checkout order (their names differ between runs, their roles do not).
#[derive(Debug, PartialEq, Eq)]
struct Ledger {
    /// (state, failure code, count, amount) of the product's payments.
    payments: Vec<(String, Option<String>, i64, i64)>,
    /// Each buyer's balance and ledger rows.
    buyers: Vec<(i64, Vec<Move>)>,
    /// What the merchant received during the run.
    merchant_received: i64,
    /// (state, count) of the product's units, reservations and orders.
    units: Vec<(String, i64)>,
    reservations: Vec<(String, i64)>,
    orders: Vec<(String, i64)>,
}

async fn merchant_total(pool: &sqlx::PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        r#"SELECT COALESCE(SUM(balance), 0)::BIGINT FROM account_service.merchant_shards"#,
    )
    .fetch_one(pool)
    .await?)
}

/// `(state, count)` rows of `table` for one product, in state order.
async fn states(
    pool: &sqlx::PgPool,
    table: &str,
    product_id: i64,
) -> anyhow::Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(&format!(
        r#"SELECT state, COUNT(*) FROM order_service.{table} WHERE product_id = $1 GROUP BY state ORDER BY state"#
    ))
    .bind(product_id)
    .fetch_all(pool)
    .await?)
}

async fn ledger(
    pool: &sqlx::PgPool,
    product_id: i64,
    buyers: &[Buyer],
    merchant_received: i64,
) -> anyhow::Result<Ledger> {
    let payments = sqlx::query_as(
        r#"SELECT state, failure_code, COUNT(*), SUM(amount)::BIGINT
           FROM payment_service.payments WHERE product_id = $1
           GROUP BY state, failure_code ORDER BY state, failure_code"#,
    )
    .bind(product_id)
    .fetch_all(pool)
    .await?;
    let mut rows = Vec::new();
    for b in buyers {
        let balance: i64 =
            sqlx::query_scalar(r#"SELECT balance FROM account_service.accounts WHERE id = $1"#)
                .bind(b.account_id)
                .fetch_one(pool)
                .await?;
        let moves: Vec<Move> = sqlx::query_as(
            r#"SELECT kind, status, amount FROM account_service.transactions
               WHERE account_id = $1 ORDER BY kind, status, amount"#,
        )
        .bind(b.account_id)
        .fetch_all(pool)
        .await?;
        rows.push((balance, moves));
    }
    Ok(Ledger {
        payments,
        buyers: rows,
        merchant_received,
        units: states(pool, "product_stock", product_id).await?,
        reservations: states(pool, "reservations", product_id).await?,
        orders: states(pool, "orders", product_id).await?,
    })
}

/// Trace context only rides along: the same checkouts, once with the buyer's
/// `traceparent` on every request and once without, debit, credit and sell exactly the
/// same, as PostgreSQL records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trace_context_changes_no_money_and_no_units() -> anyhow::Result<()> {
    const UNITS: i64 = 4;
    // Checkout order: three can pay, the second cannot (refused a unit); one unit is
    // left over.
    const BALANCES: [i64; 4] = [PRICE, PRICE / 2, PRICE * 2, PRICE];
    let collector = Collector::default();
    let endpoint = collector.start().await?;
    let stack = start_stack("traces-ledger", &endpoint, false).await?;
    let (endpoints, admin) = stack.operator();
    let pool = stack.admin_pool().await;
    let http = reqwest::Client::new();

    let mut results = Vec::new();
    for traced in [true, false] {
        let name = if traced { "traced" } else { "untraced" };
        let product = admin.create_product(name, PRICE, UNITS).await?;
        let buyers = admin
            .open_buyers(&format!("{name}-buyer"), &BALANCES, 4)
            .await?;
        admin
            .wait_for_quota(product.id, UNITS, Duration::from_secs(30))
            .await?;
        let merchant_before = merchant_total(&pool).await?;
        let mut trace_ids = Vec::new();
        for (i, buyer) in buyers.iter().enumerate() {
            let context = traced.then(buyer_context);
            let traceparent = context.as_ref().map(|(_, _, tp)| tp.as_str());
            trace_ids.extend(context.as_ref().map(|(id, _, _)| id.clone()));
            let (status, reservation) =
                try_reserve(&http, &endpoints, buyer, product.id, traceparent).await?;
            if buyer.balance < PRICE {
                assert_eq!(
                    (status, reservation["code"].as_str()),
                    (422, Some("INSUFFICIENT_FUNDS")),
                    "{reservation}"
                );
                continue;
            }
            assert_eq!(status, 201, "{reservation}");
            let reservation_id = reservation["id"].as_str().expect("reservation id");
            let (status, payment) = call(
                &http,
                format!("{}/v1/payments", endpoints.orchestrator),
                buyer,
                traceparent,
                json!({ "reservation_id": reservation_id, "account_id": buyer.account_id }),
                Some(&format!("{name}-{i}")),
            )
            .await?;
            assert!(status == 201 || status == 202, "{status}: {payment}");
        }
        // Every payment terminal before reading.
        let report = paysaga_e2e::invariants::settled(&pool, Duration::from_secs(60)).await?;
        report.assert_holds();
        let received = merchant_total(&pool).await? - merchant_before;
        let ledger = ledger(&pool, product.id, &buyers, received).await?;

        // The context was really there, or really not: the stored traceparents are the
        // buyers' traces only in the traced run.
        let stored: Vec<Option<String>> = sqlx::query_scalar(
            r#"SELECT traceparent FROM payment_service.payments WHERE product_id = $1"#,
        )
        .bind(product.id)
        .fetch_all(&pool)
        .await?;
        let payers = BALANCES.iter().filter(|b| **b >= PRICE).count();
        assert_eq!(stored.len(), payers);
        let in_buyers_traces = stored
            .iter()
            .flatten()
            .filter(|tp| {
                trace_ids
                    .iter()
                    .any(|id| tp.starts_with(&format!("00-{id}-")))
            })
            .count();
        assert_eq!(
            in_buyers_traces,
            if traced { payers } else { 0 },
            "{name}: {stored:?}"
        );
        eprintln!("{name}: {ledger:#?}");
        results.push(ledger);
    }

    let (with, without) = (&results[0], &results[1]);
    assert_eq!(with, without, "trace context changed money or units");
    // And the outcome is the one the balances call for, so the equality is not empty.
    assert_eq!(
        with.payments,
        vec![("COMPLETED".to_owned(), None, 3, 3 * PRICE)]
    );
    assert_eq!(with.merchant_received, 3 * PRICE);
    let balances: Vec<i64> = with.buyers.iter().map(|(b, _)| *b).collect();
    assert_eq!(balances, [0, PRICE / 2, PRICE, 0]);
    assert_eq!(
        with.units,
        [("AVAILABLE".to_owned(), 1), ("SOLD".to_owned(), 3)]
    );
    assert_eq!(with.orders, [("CONFIRMED".to_owned(), 3)]);
    drop(stack);
    Ok(())
}
