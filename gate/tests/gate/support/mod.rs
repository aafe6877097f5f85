//! Starting real services for the gate's tests: the order service on its own
//! database, gate instances on a Redis prefix, and a private redis-server to kill.

#![allow(dead_code)]

use std::{sync::Arc, time::Duration};

use gate::{AppState, Config};
use paysaga_common::{
    auth::Verifier,
    testkit::{buyer_token, service_token, InProcess, TestDb},
};
use paysaga_contracts::{
    gate::client::GateClient,
    order::{api::CreateProduct, client::OrderClient},
};

/// A service started in this process; its `url` is where it listens.
pub struct Service {
    pub url: String,
    process: InProcess,
}

impl Service {
    fn new(process: InProcess) -> Self {
        Self {
            url: process.url(),
            process,
        }
    }
}

/// The real order service on `db`.
pub async fn start_order(db: &TestDb) -> Service {
    let config = order::Config::local(db.role_url("order_app"));
    Service::new(
        InProcess::start("order", |listener, shutdown| {
            order::run(config, listener, shutdown)
        })
        .await,
    )
}

pub fn order_client(order: &Service) -> OrderClient {
    OrderClient::new(
        order.url.clone(),
        service_token("operator"),
        Duration::from_secs(10),
    )
}

pub async fn create_product(order: &Service, units: i64) -> i64 {
    let req = CreateProduct {
        name: "drop".into(),
        price: 12_900,
        units,
    };
    order_client(order)
        .create_product(&req)
        .await
        .expect("create product")
        .body
        .id
}

pub struct Gate {
    pub service: Service,
    pub state: AppState,
}

impl Gate {
    pub fn url(&self) -> &str {
        &self.service.url
    }
    pub fn buyer(&self, http: &reqwest::Client, member: &str) -> GateClient {
        GateClient::with_http(http.clone(), self.url(), buyer_token(member))
    }
    pub fn service_client(&self) -> GateClient {
        GateClient::new(
            self.url(),
            service_token("operator"),
            Duration::from_secs(10),
        )
    }
}

/// A gate instance; its first recompute has run when this returns.
pub async fn start_gate(config: Config) -> Gate {
    let state =
        AppState::with_verifier(&config, Arc::new(Verifier::development())).expect("gate state");
    let s = state.clone();
    let process = InProcess::start("gate", |listener, shutdown| {
        gate::serve_state(s, config, listener, shutdown)
    })
    .await;
    Gate {
        service: Service::new(process),
        state,
    }
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
