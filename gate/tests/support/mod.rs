//! Starting real services for the gate's tests: the order service on its own
//! database, gate instances on a Redis prefix, and a private redis-server to kill.

#![allow(dead_code)]

use std::{process::Stdio, sync::Arc, time::Duration};

use gate::{client::GateClient, AppState, Config};
use order::{api::CreateProduct, client::OrderClient};
use paysaga_common::{
    auth::Verifier,
    testkit::{buyer_token, service_token, TestDb},
};
use tokio::{net::TcpListener, process::Child, sync::oneshot};

pub struct Service {
    pub url: String,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn wait_healthy(url: &str) {
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if let Ok(r) = http.get(format!("{url}/healthz")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never became healthy");
}

/// The real order service on `db`.
pub async fn start_order(db: &TestDb) -> Service {
    let config = order::Config::for_database(db.role_url("order_app"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        if let Err(e) = order::run(config, listener, async move {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("order service stopped: {e:#}");
        }
    });
    wait_healthy(&url).await;
    Service {
        url,
        stop: Some(tx),
    }
}

pub fn order_client(order: &Service) -> OrderClient {
    OrderClient::new(
        order.url.clone(),
        service_token("tests"),
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
        GateClient::new(self.url(), service_token("tests"), Duration::from_secs(10))
    }
}

/// A gate instance; its first recompute has run when this returns.
pub async fn start_gate(config: Config) -> Gate {
    let state =
        AppState::with_verifier(&config, Arc::new(Verifier::development())).expect("gate state");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = oneshot::channel::<()>();
    let s = state.clone();
    tokio::spawn(async move {
        if let Err(e) = gate::serve_state(s, config, listener, async move {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("gate stopped: {e:#}");
        }
    });
    wait_healthy(&url).await;
    Gate {
        service: Service {
            url,
            stop: Some(tx),
        },
        state,
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A redis-server of this test's own, without persistence, to stop and restart.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    pub async fn start(port: u16) -> Self {
        let child = tokio::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server is installed");
        let this = Self {
            port,
            child: Some(child),
        };
        let client = redis::Client::open(this.url()).expect("url");
        for _ in 0..200 {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    return this;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("private redis-server on {port} did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill redis-server");
        }
    }
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
