//! Who may call which internal route: every service route of the five services, called
//! with a service credential of each role and of a name that is no role, with a buyer
//! token, with no credential and with a bearer that is no token; and every route the
//! orchestrator may call, with credentials claiming to be the orchestrator that no
//! verifier may accept (signed with the gate's key, expired, too long-lived, not yet
//! valid, under an unknown key or none named). A role the route does not admit gets 403
//! `FORBIDDEN_CALLER`, a buyer on a route only services may call 403 `FORBIDDEN`, a
//! missing, unreadable or unverifiable credential (a name that is no role has no key)
//! 401 `UNAUTHENTICATED`, and none of them changes anything in PostgreSQL; an admitted
//! role is never refused for who it is. The matrix below is the one in docs/security.md
//! ("Service credentials"), and every route a service documents in its OpenAPI must be
//! in it or in the list of routes without a service credential.
//!
//! A credential opens the one service it was made for: every credential the system
//! mints (each caller role toward each service it calls, the operator's toward all five,
//! the console's toward the order service and the gate) is replayed at every route of
//! every other service, where each is 401 `UNAUTHENTICATED`, inside the same window in
//! which PostgreSQL must not change.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use paysaga_common::{
    auth::{allow, Audience, Minter, ServiceRole, ISSUER},
    credentials::{TokenSource, MAX_SERVICE_TOKEN_LIFETIME_SECS},
    keys::DevKey,
    testkit::{deposit_authorization, service_token},
};
use paysaga_e2e::{Admin, Driver, Endpoints, Outcome, ServiceKind, Stack, StackOptions};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

// The five services, one letter each (P: the orchestrator, which runs payments), so the
// route tables below read one route a line.
use ServiceKind::{Account as A, Gate as G, Member as M, Orchestrator as P, Order as O};

const GATE: u8 = allow::GATE;
const ORCH: u8 = allow::ORCHESTRATOR;
const MEMBER: u8 = allow::MEMBER;
const OPERATOR: u8 = allow::OPERATOR;
const ORDER_ROLE: u8 = allow::ORDER;
const CONSOLE: u8 = allow::CONSOLE;

/// The service a credential sent to `kind` must be made for.
fn audience(kind: ServiceKind) -> Audience {
    match kind {
        ServiceKind::Account => Audience::Account,
        ServiceKind::Order => Audience::Order,
        ServiceKind::Gate => Audience::Gate,
        ServiceKind::Orchestrator => Audience::Orchestrator,
        ServiceKind::Member => Audience::Member,
    }
}

/// Every credential the running system mints: each caller role and the services it
/// calls (the operator, its commands and tools, calls all five).
const MINTED: &[(ServiceRole, &[Audience])] = &[
    (ServiceRole::Gate, &[Audience::Order]),
    (
        ServiceRole::Orchestrator,
        &[Audience::Account, Audience::Order, Audience::Member],
    ),
    (ServiceRole::Member, &[Audience::Account]),
    (ServiceRole::Order, &[Audience::Account]),
    (ServiceRole::Operator, &Audience::ALL),
    (ServiceRole::Console, &[Audience::Order, Audience::Gate]),
];

/// Routes that take no service credential at all (buyers, sign-in, keys, probes):
/// `(service, method, OpenAPI path)`.
const NOT_SERVICE_ROUTES: &[(ServiceKind, &str, &str)] = &[
    (O, "post", "/v1/reservations"),
    (O, "post", "/v1/products/{id}/waitlist"),
    (O, "get", "/v1/products/{id}/waitlist/me"),
    (O, "delete", "/v1/products/{id}/waitlist/me"),
    (O, "post", "/v1/offers/{offer_id}/reservation"),
    (P, "post", "/v1/payments"),
    // Staff sessions: people sign in, out, and read the audit trail as themselves; no
    // service credential is admitted (the staff tests hold their role matrix).
    (P, "post", "/v1/staff/sessions"),
    (P, "post", "/v1/staff/sessions/sign-out"),
    (P, "get", "/v1/audit"),
    // Top-ups: admins, people only (the operator tools' credential tops up nothing).
    (P, "post", "/v1/top-ups"),
    // Approvals (four eyes) of refunds and top-ups: people only, two of them.
    (P, "get", "/v1/approvals"),
    (P, "post", "/v1/approvals/{id}/approve"),
    (P, "post", "/v1/approvals/{id}/reject"),
    (A, "post", "/v1/transfers"),
    (G, "post", "/v1/passes"),
    (M, "post", "/v1/members"),
    (M, "post", "/v1/members/verification"),
    (M, "get", "/v1/members/me"),
    (M, "post", "/v1/sessions"),
    (M, "post", "/v1/sessions/refresh"),
    (M, "post", "/v1/sessions/sign-out"),
    (M, "get", "/.well-known/jwks.json"),
];

/// Matrix routes that also take a buyer token (a buyer sees or cancels only their own):
/// `(service, method, OpenAPI path)`. On every other matrix route a buyer is refused.
const BUYERS_TOO: [(ServiceKind, &str, &str); 5] = [
    (A, "get", "/v1/accounts/{id}"),
    (O, "get", "/v1/products/{id}"),
    (O, "get", "/v1/reservations/{id}"),
    (O, "post", "/v1/reservations/{id}/cancel"),
    (P, "get", "/v1/payments/{id}"),
];

/// Who sends a request in the refusal window.
#[derive(Debug, Clone, Copy)]
enum Who<'a> {
    /// A service credential whose `sub` is this name (a role, or no role at all).
    Service(&'a str),
    /// A buyer's token, minted by the member service.
    Buyer,
    /// No `Authorization` header.
    Nobody,
    /// `Authorization: Bearer` followed by something that is no token.
    Garbage,
    /// A credential claiming `sub: orchestrator` that must not verify.
    Forged(Forged),
    /// A credential of this role minted for another service, replayed here.
    Replayed(ServiceRole, Audience),
}

/// How a credential claiming to be the orchestrator can be wrong.
#[derive(Debug, Clone, Copy)]
enum Forged {
    /// Signed with the gate's key, naming it: a gate key holder minting another role.
    GateKey,
    /// Signed with the gate's key, naming the orchestrator's.
    GateKeyOrchestratorKid,
    /// The orchestrator's key, expired a minute ago.
    Expired,
    /// The orchestrator's key, living a minute longer than a service credential may.
    TooLong,
    /// The orchestrator's key, not valid for another five minutes.
    NotYet,
    /// A key no service knows, named by its thumbprint.
    UnknownKid,
    /// The orchestrator's key, naming no key.
    NoKid,
    /// Not forged: built the same way, but right (the control, which is admitted).
    Valid,
}

const FORGED: [Forged; 7] = [
    Forged::GateKey,
    Forged::GateKeyOrchestratorKid,
    Forged::Expired,
    Forged::TooLong,
    Forged::NotYet,
    Forged::UnknownKid,
    Forged::NoKid,
];

/// A credential claiming `sub: orchestrator` for the service `to`, wrong as `how` says.
fn forged_token(how: Forged, to: Audience) -> String {
    let service_audience = to.claim();
    let now = chrono::Utc::now().timestamp();
    let claims = |iat: i64, nbf: i64, exp: i64| {
        json!({"sub": "orchestrator", "aud": service_audience, "iss": ISSUER,
               "iat": iat, "nbf": nbf, "exp": exp})
    };
    let valid = claims(now, now, now + 300);
    let key = |role| DevKey::Service(role).signing_key();
    let orchestrator = Minter::dev_service(ServiceRole::Orchestrator, to);
    match how {
        Forged::GateKey => Minter::dev_service(ServiceRole::Gate, to).sign(&valid),
        Forged::GateKeyOrchestratorKid => Minter::new(&key(ServiceRole::Gate), service_audience)
            .naming(orchestrator.kid().map(str::to_owned))
            .sign(&valid),
        Forged::Expired => orchestrator.sign(&claims(now - 360, now - 360, now - 60)),
        Forged::TooLong => orchestrator.sign(&claims(
            now,
            now,
            now + MAX_SERVICE_TOKEN_LIFETIME_SECS + 60,
        )),
        Forged::NotYet => orchestrator.sign(&claims(now, now + 300, now + 600)),
        Forged::UnknownKid => Minter::with_kid(
            &ed25519_dalek::SigningKey::from_bytes(&rand::random()),
            service_audience,
        )
        .sign(&valid),
        Forged::NoKid => Minter::new(&key(ServiceRole::Orchestrator), service_audience)
            .naming(None)
            .sign(&valid),
        Forged::Valid => orchestrator.sign(&valid),
    }
}

/// One internal route: where, how, the OpenAPI path it is documented under, a request
/// that would change something if it were let through, and the roles it admits.
struct Route {
    service: ServiceKind,
    method: Method,
    template: &'static str,
    path: String,
    body: Option<Value>,
    allowed: u8,
}

fn route(
    service: ServiceKind,
    method: Method,
    template: &'static str,
    path: impl Into<String>,
    body: Option<Value>,
    allowed: u8,
) -> Route {
    Route {
        service,
        method,
        template,
        path: path.into(),
        body,
        allowed,
    }
}

/// The event feed a service serves the orchestrator (its outbox): read and ack.
fn event_feed(service: ServiceKind) -> [Route; 2] {
    [
        route(
            service,
            Method::GET,
            "/v1/events",
            "/v1/events?limit=10",
            None,
            ORCH,
        ),
        route(
            service,
            Method::POST,
            "/v1/events/ack",
            "/v1/events/ack",
            Some(json!({"ids": ["0190a5b2-0000-7000-8000-000000000000"]})),
            ORCH,
        ),
    ]
}

/// Every table of the four schemas, each as the md5 of its rows: any write shows.
async fn fingerprint(pool: &PgPool) -> Vec<(String, String)> {
    let tables: Vec<String> = sqlx::query_scalar(
        r#"SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables
           WHERE table_schema IN ('account_service', 'order_service', 'payment_service', 'member_service')
             AND table_type = 'BASE TABLE'
             AND table_name NOT LIKE '\_sqlx%'
           ORDER BY 1"#,
    )
    .fetch_all(pool)
    .await
    .expect("tables");
    assert!(tables.len() >= 8, "{tables:?}");
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        let digest: Option<String> = sqlx::query_scalar(&format!(
            "SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {table} t"
        ))
        .fetch_one(pool)
        .await
        .expect("digest");
        out.push((table, digest.unwrap_or_default()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_internal_route_admits_only_its_callers() -> anyhow::Result<()> {
    // The webhook endpoints below are registered on 127.0.0.1: private targets allowed.
    let stack = Stack::start(StackOptions::new("callers").quick_quota().env(
        ServiceKind::Orchestrator,
        "WEBHOOK_ALLOW_PRIVATE_TARGETS",
        1,
    ))
    .await?;
    let endpoints = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let admin = Admin::new(endpoints.clone(), http.clone());

    // Something for every route to act on: a product, a completed payment (its debit),
    // a live reservation, members with accounts.
    let product = admin.create_product("callers", 1_000, 5).await?;
    let buyers = admin
        .open_buyers("callers-buyer", &[5_000, 5_000], 2)
        .await?;
    admin
        .wait_for_quota(product.id, 5, Duration::from_secs(30))
        .await?;
    let driver = Driver::new(endpoints.clone(), Duration::from_secs(10));
    let paid = driver.buy(&buyers[0], product.id).await;
    assert_eq!(paid.outcome, Outcome::Completed, "{paid:?}");
    let payment = paid.payment_id.expect("payment id");
    let mut retries = 0;
    let pass = driver.pass(&buyers[1], product.id, &mut retries).await?;
    let live = driver
        .reserve(&buyers[1], product.id, &pass.pass, &mut retries)
        .await?
        .id;
    let account = buyers[1].account_id;
    let member = &buyers[1].member;
    let debit_key = format!("pay:{payment}:debit");
    let pid = product.id;
    // A webhook endpoint for the switch routes, subscribed to a type this test never
    // makes, so no delivery to it writes anything while refusals are checked.
    let operator = paysaga_contracts::OrchestratorClient::new(
        stack.url(ServiceKind::Orchestrator),
        service_token("operator", Audience::Orchestrator),
        Duration::from_secs(10),
    );
    let hook = operator
        .create_webhook_endpoint(
            &paysaga_contracts::orchestrator::api::CreateWebhookEndpoint {
                url: "http://127.0.0.1:9/callers".into(),
                event_types: vec!["waitlist.offer_expired".into()],
                description: None,
            },
        )
        .await?
        .body
        .endpoint
        .id;
    let hook_body =
        json!({"url": "http://127.0.0.1:9/callers-new", "event_types": ["waitlist.offer_expired"]});

    let mut matrix = vec![
        // account
        route(
            A,
            Method::POST,
            "/v1/accounts",
            "/v1/accounts",
            Some(json!({"member_id": "callers-new", "opening_balance": 1_000_000})),
            MEMBER | OPERATOR,
        ),
        route(
            A,
            Method::GET,
            "/v1/accounts/{id}",
            format!("/v1/accounts/{account}"),
            None,
            ORCH | OPERATOR,
        ),
        route(
            A,
            Method::POST,
            "/v1/debits",
            "/v1/debits",
            Some(json!({"operation_key": "callers:debit", "account_id": account, "amount": 100})),
            ORCH,
        ),
        route(
            A,
            Method::POST,
            "/v1/credits",
            "/v1/credits",
            Some(
                json!({"operation_key": "callers:credit", "account_id": buyers[0].account_id, "amount": 100, "refund_of": debit_key}),
            ),
            ORCH,
        ),
        route(
            A,
            Method::POST,
            "/v1/deposits",
            "/v1/deposits",
            // With the orchestrator's authorization (signed afresh at each send: it lives
            // 60 s), so that an admitted caller is answered as one.
            Some(
                json!({"operation_key": "callers:deposit", "account_id": account, "amount": 100, "authorization": ""}),
            ),
            MEMBER,
        ),
        route(
            A,
            Method::GET,
            "/v1/transactions/{operation_key}",
            format!("/v1/transactions/{debit_key}"),
            None,
            ORCH | OPERATOR,
        ),
        // The batch admits the order service too, but only for holds and releases: a
        // batch carrying a debit is the saga's alone.
        route(
            A,
            Method::POST,
            "/v1/batch",
            "/v1/batch",
            Some(
                json!({"ops": [{"op": "debit", "operation_key": "callers:batch", "account_id": account, "amount": 100}]}),
            ),
            ORCH,
        ),
        route(
            A,
            Method::POST,
            "/v1/holds",
            "/v1/holds",
            Some(
                json!({"operation_key": "callers:hold", "member_id": member, "amount": 100, "ttl_secs": 60}),
            ),
            ORDER_ROLE,
        ),
        route(
            A,
            Method::GET,
            "/v1/holds",
            "/v1/holds?older_than_ms=0",
            None,
            ORDER_ROLE | OPERATOR,
        ),
        route(
            A,
            Method::GET,
            "/v1/holds/{operation_key}",
            "/v1/holds/callers:hold",
            None,
            ORDER_ROLE | ORCH | OPERATOR,
        ),
        route(
            A,
            Method::POST,
            "/v1/holds/{operation_key}/release",
            "/v1/holds/callers:hold/release",
            Some(json!({})),
            ORDER_ROLE | OPERATOR,
        ),
        // order
        route(
            O,
            Method::POST,
            "/v1/products",
            "/v1/products",
            Some(json!({"name": "callers-new", "price": 100, "units": 3})),
            OPERATOR | ORCH,
        ),
        route(
            O,
            Method::GET,
            "/v1/products",
            "/v1/products",
            None,
            GATE | OPERATOR | CONSOLE,
        ),
        route(
            O,
            Method::GET,
            "/v1/products/{id}",
            format!("/v1/products/{pid}"),
            None,
            OPERATOR,
        ),
        route(
            O,
            Method::POST,
            "/v1/products/{id}/units",
            format!("/v1/products/{pid}/units"),
            Some(json!({"count": 2})),
            OPERATOR | ORCH,
        ),
        route(
            O,
            Method::GET,
            "/v1/products/{id}/availability",
            format!("/v1/products/{pid}/availability"),
            None,
            GATE,
        ),
        route(
            O,
            Method::POST,
            "/v1/products/{id}/promises",
            format!("/v1/products/{pid}/promises"),
            Some(json!({"in_flight": 0})),
            GATE,
        ),
        route(
            O,
            Method::GET,
            "/v1/reservations/{id}",
            format!("/v1/reservations/{live}"),
            None,
            ORCH | OPERATOR,
        ),
        route(
            O,
            Method::POST,
            "/v1/reservations/{id}/confirm",
            format!("/v1/reservations/{live}/confirm"),
            None,
            ORCH,
        ),
        route(
            O,
            Method::POST,
            "/v1/reservations/{id}/cancel",
            format!("/v1/reservations/{live}/cancel"),
            None,
            ORCH | OPERATOR,
        ),
        route(
            O,
            Method::POST,
            "/v1/passes/used",
            "/v1/passes/used",
            Some(json!({"pass_ids": [pass.pass_id]})),
            GATE,
        ),
        route(
            O,
            Method::POST,
            "/v1/batch",
            "/v1/batch",
            Some(json!({"ops": [{"op": "cancel", "reservation_id": live}]})),
            ORCH,
        ),
    ];
    matrix.extend(event_feed(O));
    matrix.extend([
        // orchestrator
        route(
            P,
            Method::GET,
            "/v1/payments",
            "/v1/payments",
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::GET,
            "/v1/payments/{id}",
            format!("/v1/payments/{payment}"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::GET,
            "/v1/payments/{id}/steps",
            format!("/v1/payments/{payment}/steps"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/payments/{id}/resume",
            format!("/v1/payments/{payment}/resume"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/payments/{id}/refund",
            format!("/v1/payments/{payment}/refund"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/webhook-endpoints",
            "/v1/webhook-endpoints",
            Some(hook_body),
            OPERATOR,
        ),
        route(
            P,
            Method::GET,
            "/v1/webhook-endpoints",
            "/v1/webhook-endpoints",
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/webhook-endpoints/{id}/disable",
            format!("/v1/webhook-endpoints/{hook}/disable"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/webhook-endpoints/{id}/enable",
            format!("/v1/webhook-endpoints/{hook}/enable"),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/webhook-endpoints/{id}/rotate-secret",
            format!(
                "/v1/webhook-endpoints/{}/rotate-secret",
                uuid::Uuid::now_v7()
            ),
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::GET,
            "/v1/webhook-deliveries",
            "/v1/webhook-deliveries?state=DEAD",
            None,
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/webhook-deliveries/{id}/replay",
            format!("/v1/webhook-deliveries/{}/replay", uuid::Uuid::now_v7()),
            None,
            OPERATOR,
        ),
        // A system's first admin is made with the operator tools' credential (this one
        // is refused for its password, so nothing is made).
        route(
            P,
            Method::POST,
            "/v1/staff",
            "/v1/staff",
            Some(
                json!({"email": "callers@example.com", "password": "short", "role": "ADMIN", "reason": "callers"}),
            ),
            OPERATOR,
        ),
        // Staff product changes: admitted, then refused by the order service (no such
        // price, no such product), so nothing is made.
        route(
            P,
            Method::POST,
            "/v1/products",
            "/v1/products",
            Some(json!({"name": "callers-staff", "price": 0, "units": 1, "reason": "callers"})),
            OPERATOR,
        ),
        route(
            P,
            Method::POST,
            "/v1/products/{id}/units",
            "/v1/products/999999/units",
            Some(json!({"count": 1, "reason": "callers"})),
            OPERATOR,
        ),
        // gate
        route(
            G,
            Method::GET,
            "/v1/quota/{product_id}",
            format!("/v1/quota/{pid}"),
            None,
            OPERATOR | CONSOLE,
        ),
        // member
        route(
            M,
            Method::GET,
            "/v1/members",
            "/v1/members",
            None,
            OPERATOR,
        ),
        route(
            M,
            Method::GET,
            "/v1/members/{id}",
            format!("/v1/members/{member}"),
            None,
            OPERATOR,
        ),
        route(
            M,
            Method::POST,
            "/v1/members/{id}/top-ups",
            format!("/v1/members/{member}/top-ups"),
            Some(
                json!({"operation_key": "callers:top-up", "amount": 100, "authorization": ""}),
            ),
            ORCH,
        ),
        route(
            M,
            Method::POST,
            "/v1/members/bulk",
            "/v1/members/bulk",
            Some(
                json!({"password": "callers-password-1", "members": [{"email": "callers-bulk@example.com"}], "opening_balance": 1_000}),
            ),
            OPERATOR,
        ),
    ]);
    matrix.extend(event_feed(M));

    // `/metrics` is on each service's own metrics listener, never on the API's.
    for kind in [A, O, P, G, M] {
        for (base, status, listener) in [
            (stack.url(kind), 404, "the API"),
            (stack.metrics_url(kind), 200, "its metrics listener"),
        ] {
            let answer = http.get(format!("{base}/metrics")).send().await?;
            assert_eq!(answer.status().as_u16(), status, "{kind:?}: {listener}");
            if status == 200 {
                assert!(answer.text().await?.contains("http_requests_total"));
            }
        }
    }

    // Every documented route is in the matrix or takes no service credential.
    for kind in [A, O, P, G, M] {
        let spec: Value = http
            .get(format!("{}/openapi.json", stack.url(kind)))
            .send()
            .await?
            .json()
            .await?;
        let mut documented = BTreeSet::new();
        for (path, item) in spec["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                documented.insert((method.to_lowercase(), path.clone()));
            }
        }
        let known: BTreeSet<(String, String)> = matrix
            .iter()
            .filter(|r| r.service == kind)
            .map(|r| (r.method.as_str().to_lowercase(), r.template.to_owned()))
            .chain(
                NOT_SERVICE_ROUTES
                    .iter()
                    .filter(|(k, _, _)| *k == kind)
                    .map(|(_, m, p)| ((*m).to_owned(), (*p).to_owned())),
            )
            .collect();
        let missing: Vec<_> = documented
            .difference(&known)
            .filter(|(_, p)| !matches!(p.as_str(), "/healthz" | "/readyz"))
            .collect();
        assert!(
            missing.is_empty(),
            "{kind:?}: routes not in the matrix: {missing:?}"
        );
        let stale: Vec<_> = known.difference(&documented).collect();
        assert!(
            stale.is_empty(),
            "{kind:?}: matrix rows not documented: {stale:?}"
        );
    }

    for (kind, method, template) in &BUYERS_TOO {
        assert!(
            matrix.iter().any(|r| r.service == *kind
                && r.method.as_str().eq_ignore_ascii_case(method)
                && r.template == *template),
            "{kind:?} {method} {template} is not in the matrix"
        );
    }
    let buyer_token = buyers[1].token.clone();
    let forged: BTreeMap<Audience, Vec<String>> =
        [Audience::Account, Audience::Order, Audience::Member]
            .into_iter()
            .map(|to| {
                (
                    to,
                    FORGED
                        .into_iter()
                        .map(|how| forged_token(how, to))
                        .collect(),
                )
            })
            .collect();
    // The credentials the system mints, each for the one service it calls.
    let minted: BTreeMap<(&str, Audience), String> = MINTED
        .iter()
        .flat_map(|(role, tos)| {
            let source = TokenSource::development(*role);
            tos.iter()
                .map(move |to| ((role.name(), *to), source.token(*to).to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    // The forged credentials are built as a right one is, which is admitted: each is
    // refused for what is wrong with it alone.
    let control = http
        .get(format!("{}/v1/events?limit=1", stack.url(O)))
        .bearer_auth(forged_token(Forged::Valid, Audience::Order))
        .send()
        .await?;
    assert_eq!(control.status().as_u16(), 200, "{}", control.text().await?);
    let send = |r: &Route, who: Who| {
        let mut req = http.request(
            r.method.clone(),
            format!("{}{}", stack.url(r.service), r.path),
        );
        req = match who {
            Who::Service(name) => req.bearer_auth(service_token(name, audience(r.service))),
            Who::Buyer => req.bearer_auth(&buyer_token),
            Who::Nobody => req,
            Who::Garbage => req.bearer_auth("not-a-token"),
            Who::Forged(how) => req.bearer_auth(&forged[&audience(r.service)][how as usize]),
            Who::Replayed(role, to) => req.bearer_auth(&minted[&(role.name(), to)]),
        };
        if let Some(body) = &r.body {
            req = req.json(&signed_afresh(body, member));
        }
        req.send()
    };
    let callers: Vec<&str> = ServiceRole::ALL
        .iter()
        .map(|r| r.name())
        .chain(["stranger"])
        .collect();
    // The answer each refused caller of a route must get, computed from the matrix; the
    // admitted pairs (a role the route names, a buyer where buyers are served) are left
    // out. A name that is no role has no key, so its credential does not verify at all.
    // Forged orchestrator credentials go to every route the orchestrator may call, where
    // a verifier that believed them would let them through.
    let refusals: Vec<(&Route, Who, u16, &str)> = matrix
        .iter()
        .flat_map(|r| {
            let buyers_too = BUYERS_TOO.iter().any(|(k, m, t)| {
                *k == r.service && r.method.as_str().eq_ignore_ascii_case(m) && *t == r.template
            });
            let forged = ServiceRole::Orchestrator
                .allowed_by(r.allowed)
                .then_some(FORGED)
                .into_iter()
                .flatten()
                .map(move |how| (r, Who::Forged(how), 401, "UNAUTHENTICATED"));
            callers
                .iter()
                .filter_map(move |who| match ServiceRole::parse(who) {
                    Some(role) if role.allowed_by(r.allowed) => None,
                    Some(_) => Some((r, Who::Service(who), 403, "FORBIDDEN_CALLER")),
                    None => Some((r, Who::Service(who), 401, "UNAUTHENTICATED")),
                })
                .chain((!buyers_too).then_some((r, Who::Buyer, 403, "FORBIDDEN")))
                .chain([
                    (r, Who::Nobody, 401, "UNAUTHENTICATED"),
                    (r, Who::Garbage, 401, "UNAUTHENTICATED"),
                ])
                .chain(forged)
        })
        .collect();
    // Per service: (service credentials of other roles or of no role, buyer tokens,
    // missing or unreadable credentials, forged orchestrator credentials). Pinned, so a
    // row lost from the matrix or a role's reach widened shows here as well as in the
    // answers.
    let mut expected: BTreeMap<String, (usize, usize, usize, usize)> = BTreeMap::new();
    for (r, who, _, _) in &refusals {
        let row = expected.entry(format!("{:?}", r.service)).or_default();
        match who {
            Who::Service(_) => row.0 += 1,
            Who::Buyer => row.1 += 1,
            Who::Nobody | Who::Garbage => row.2 += 1,
            Who::Forged(_) => row.3 += 1,
            Who::Replayed(..) => unreachable!("replays are listed apart"),
        }
    }
    assert_eq!(
        expected,
        BTreeMap::from(
            [
                ("Account", (59, 10, 22, 42)),
                ("Gate", (5, 1, 2, 0)),
                ("Member", (36, 6, 12, 21)),
                ("Orchestrator", (90, 14, 30, 0)),
                ("Order", (72, 10, 26, 56)),
            ]
            .map(|(k, v)| (k.to_owned(), v))
        ),
        "the refusals the matrix implies"
    );
    assert_eq!(refusals.len(), 514);
    // Every minted credential at every route of every service it was not made for: a
    // verifier that ignored the audience would admit most of them (the operator's opens
    // nearly every route of the service it is for).
    let replays: Vec<(&Route, Who, u16, &str)> = minted
        .keys()
        .flat_map(|&(role, to)| {
            let role = ServiceRole::parse(role).expect("a role");
            matrix
                .iter()
                .filter(move |r| audience(r.service) != to)
                .map(move |r| (r, Who::Replayed(role, to), 401, "UNAUTHENTICATED"))
        })
        .collect();
    assert_eq!(minted.len(), 13);
    assert_eq!(replays.len(), 473);
    // Each minted credential opens the service it was made for (a route of its role there,
    // a read where there is one), before the window.
    for (&(role, to), token) in &minted {
        let role = ServiceRole::parse(role).expect("a role");
        let r = matrix
            .iter()
            .find(|r| {
                audience(r.service) == to && role.allowed_by(r.allowed) && r.method == Method::GET
            })
            .or_else(|| {
                matrix
                    .iter()
                    .find(|r| audience(r.service) == to && role.allowed_by(r.allowed))
            })
            .unwrap_or_else(|| panic!("{role} calls nothing at {to}"));
        let mut req = http
            .request(
                r.method.clone(),
                format!("{}{}", stack.url(r.service), r.path),
            )
            .bearer_auth(token);
        if let Some(body) = &r.body {
            req = req.json(&signed_afresh(body, member));
        }
        let answer = req.send().await?;
        let status = answer.status().as_u16();
        assert!(
            status != 401 && status != 403 && status < 500,
            "{role}'s credential for {to} at {}: {status} {}",
            r.path,
            answer.text().await?
        );
    }

    // Every refused pair first, all of them inside one window in which nothing may change
    // (once the orchestrator has taken in every member event and its worker has
    // dispatched the events: it writes on its own schedule, not for any caller).
    let pool = stack.admin_pool().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sqlx::query_scalar::<_, i64>(
        r#"SELECT (SELECT COUNT(*) FROM member_service.outbox_events WHERE relayed_at IS NULL)
                + (SELECT COUNT(*) FROM payment_service.events_undispatched)"#,
    )
    .fetch_one(&pool)
    .await?
        > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "events never dispatched"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = fingerprint(&pool).await;
    let mut refused = 0;
    for (r, who, status, code) in refusals.iter().chain(&replays) {
        let answer = send(r, *who).await?;
        let got = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        assert_eq!(
            (got, body["code"].as_str()),
            (*status, Some(*code)),
            "{who:?} -> {:?} {} {}: {body}",
            r.service,
            r.method,
            r.path
        );
        refused += 1;
    }
    assert_eq!(
        fingerprint(&pool).await,
        before,
        "a refused request wrote something"
    );
    assert_eq!(refused, 514 + 473, "every refusal was sent and answered");

    // Then each admitted caller: whatever the answer, it is not a refusal of the caller.
    for r in &matrix {
        for role in ServiceRole::ALL
            .into_iter()
            .filter(|role| role.allowed_by(r.allowed))
        {
            let answer = send(r, Who::Service(role.name())).await?;
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            assert!(
                status != 403 && status != 401 && status < 500,
                "{role} -> {:?} {} {}: {status} {body}",
                r.service,
                r.method,
                r.path
            );
        }
    }
    Ok(())
}

/// `body` with its deposit authorization, if it carries one, signed now for `member` (as
/// the orchestrator signs one for each attempt: it lives 60 s).
fn signed_afresh(body: &Value, member: &str) -> Value {
    let mut body = body.clone();
    if body.get("authorization").is_some() {
        let key = body["operation_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let amount = body["amount"].as_i64().unwrap_or_default();
        body["authorization"] = Value::String(deposit_authorization(
            member,
            amount,
            &key,
            "admin@example.com",
            None,
        ));
    }
    body
}
