//! Starting real services for the gate's tests: the order service on its own
//! database, gate instances on a Redis prefix, and a private redis-server to kill.

#![allow(dead_code)]

use paysaga_common::auth::Audience;
use std::{sync::Arc, time::Duration};

use gate::{
    api::{PassIssued, QuotaView},
    AppState, Config,
};
use paysaga_common::{
    auth::{MemberId, Verifier},
    testkit::{buyer_token, service_token, InProcess, TestDb, TestRedis},
};
use paysaga_contracts::{
    account::{
        api::{OpenAccountRequest, OperationKey},
        client::AccountClient,
    },
    gate::client::GateClient,
    order::{api::CreateProduct, client::OrderClient},
};

/// A service started in this process; its `url` is where it listens.
pub struct Service {
    pub url: String,
    process: InProcess,
    /// The account service the order service holds prices on (the order service's
    /// only).
    account: Option<Box<Service>>,
}

impl Service {
    fn new(process: InProcess) -> Self {
        Self {
            url: process.url(),
            process,
            account: None,
        }
    }
}

/// The real order service on `db`, with the real account service it holds each
/// reservation's price on.
pub async fn start_order(db: &TestDb) -> Service {
    let account_config = account::Config::local(db.role_url("account_app"));
    let account = Service::new(
        InProcess::start("account", |listener, shutdown| {
            account::run(account_config, listener, shutdown)
        })
        .await,
    );
    let config = order::Config::local(db.role_url("order_app"), &account.url);
    Service {
        account: Some(Box::new(account)),
        ..Service::new(
            InProcess::start("order", |listener, shutdown| {
                order::run(config, listener, shutdown)
            })
            .await,
        )
    }
}

/// Opens `member`'s account (once, under its key, as the member service does) with
/// plenty to pay for a unit, at the account service `order` holds prices on.
pub async fn fund(order: &Service, member: &str) {
    let account = order
        .account
        .as_ref()
        .expect("an order service with its account service");
    let req = OpenAccountRequest {
        member_id: MemberId::parse(member).expect("member id"),
        opening_balance: 1_000_000,
        open_key: Some(OperationKey::parse(format!("member:{member}:account")).expect("key")),
    };
    AccountClient::new(
        &account.url,
        service_token("operator", Audience::Account),
        Duration::from_secs(10),
    )
    .open_account(&req)
    .await
    .expect("account opened");
}

pub fn order_client(order: &Service) -> OrderClient {
    OrderClient::new(
        order.url.clone(),
        service_token("operator", Audience::Order),
        Duration::from_secs(10),
    )
}

/// `member`'s own client of the order service, to reserve with a pass (the member
/// funded first).
pub async fn order_buyer(order: &Service, member: &str) -> OrderClient {
    fund(order, member).await;
    OrderClient::new(
        order.url.clone(),
        buyer_token(member),
        Duration::from_secs(10),
    )
}

pub async fn create_product(order: &Service, units: i64) -> i64 {
    let req = CreateProduct {
        name: "drop".into(),
        price: 12_900,
        units,
        reservation_ttl_secs: None,
        eligibility: Vec::new(),
    };
    order_client(order)
        .create_product(&req)
        .await
        .expect("create product")
        .body
        .id
}

/// A product of `units` on sale at the real order service (on a database of its own),
/// and a Redis prefix of its own: where most gate tests start.
pub struct Sale {
    pub order: Service,
    pub product: i64,
    pub redis: TestRedis,
    // Last: dropped after the order service has stopped using it.
    pub db: TestDb,
}

impl Sale {
    pub async fn start(units: i64) -> Self {
        let db = TestDb::new().await;
        let order = start_order(&db).await;
        let product = create_product(&order, units).await;
        Self {
            order,
            product,
            redis: TestRedis::new(),
            db,
        }
    }

    /// A gate's settings on this sale's Redis prefix and order service.
    pub fn config(&self) -> Config {
        Config::local(&self.redis.url, &self.redis.prefix, &self.order.url)
    }

    /// `member` reserves the sale's product with `pass` at the order service.
    pub async fn reserve(&self, member: &str, pass: &str) {
        order_buyer(&self.order, member)
            .await
            .reserve(self.product, pass)
            .await
            .unwrap_or_else(|e| panic!("{member} reserves: {e}"));
    }
}

/// What `sql` counts for the sale's product (its `$1`), read from PostgreSQL as an
/// administrator.
pub async fn count(sale: &Sale, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .bind(sale.product)
        .fetch_one(&sale.db.admin_pool().await)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

pub struct Gate {
    pub service: Service,
    pub state: AppState,
    /// One connection pool for every client of this gate.
    pub http: reqwest::Client,
}

impl Gate {
    pub fn url(&self) -> &str {
        &self.service.url
    }
    pub fn buyer(&self, member: &str) -> GateClient {
        self.with_token(&buyer_token(member))
    }
    /// A client sending `token`, on this gate's connection pool.
    pub fn with_token(&self, token: &str) -> GateClient {
        GateClient::with_http(self.http.clone(), self.url(), token.to_owned())
    }
    pub fn service_client(&self) -> GateClient {
        GateClient::new(
            self.url(),
            service_token("operator", Audience::Gate),
            Duration::from_secs(10),
        )
    }

    /// `member`'s pass for `product`; panics unless one is issued.
    pub async fn pass(&self, member: &str, product: i64) -> PassIssued {
        self.buyer(member)
            .issue_pass(product)
            .await
            .unwrap_or_else(|e| panic!("{member}'s pass: {e}"))
            .body
    }

    /// Asks for `member`'s pass for `product` and checks the answer is `SOLD_OUT`.
    pub async fn assert_sold_out(&self, member: &str, product: i64) {
        let e = self
            .buyer(member)
            .issue_pass(product)
            .await
            .expect_err("sold out");
        assert_eq!(e.code(), Some("SOLD_OUT"), "{member}: {e}");
    }

    /// The quota of `product` as the service endpoint reports it.
    pub async fn quota(&self, product: i64) -> QuotaView {
        self.service_client()
            .quota(product)
            .await
            .expect("quota")
            .body
    }

    /// `GET /metrics` of the metrics listener (the gate's own listener serves none), as
    /// text.
    pub async fn metrics(&self) -> String {
        let on_api = self.http.get(format!("{}/metrics", self.url())).send();
        assert_eq!(on_api.await.expect("answer").status(), 404);
        paysaga_common::testkit::scrape_metrics().await
    }
}

/// A gate instance; its first recompute has run when this returns.
pub async fn start_gate(config: Config) -> Gate {
    let state = AppState::with_verifier(&config, Arc::new(Verifier::development(Audience::Gate)))
        .expect("gate state");
    let s = state.clone();
    let process = InProcess::start("gate", |listener, shutdown| {
        gate::serve_state(s, config, listener, shutdown)
    })
    .await;
    Gate {
        service: Service::new(process),
        state,
        http: reqwest::Client::new(),
    }
}

/// [`start_gate`], then waits until the gate answers from Redis (`/readyz` ready).
pub async fn start_ready_gate(config: Config) -> Gate {
    let gate = start_gate(config).await;
    wait_ready_status(gate.url(), "ready").await;
    gate
}

pub fn free_port() -> u16 {
    paysaga_e2e::process::free_port().expect("a free port")
}

/// Polls `/readyz` until its status is `want`.
pub async fn wait_ready_status(url: &str, want: &str) -> serde_json::Value {
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = http.get(format!("{url}/readyz")).send().await {
            if let Ok(body) = r.json::<serde_json::Value>().await {
                if body["status"] == want {
                    return body;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url}/readyz never reported {want}");
}
