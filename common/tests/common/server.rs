//! The shared server's limits over real sockets: slow and idle connections are closed by
//! the header-read timer, normal requests (and their `ConnectInfo`) are unaffected,
//! graceful shutdown finishes requests in flight, a full instance sheds load, a stuck
//! request gets the JSON timeout answer, and `/readyz` tells clients no internals.
//!
//! Durations below are liveness bounds (how long to wait before calling it a failure),
//! never speed claims.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{extract::ConnectInfo, routing::get, Router};
use paysaga_common::{
    limits::ServerLimits,
    server::{finish_with, readiness, serve_with_tls},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{oneshot, Notify},
    task::JoinHandle,
};

fn limits() -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_millis(400),
        ..ServerLimits::default()
    }
}

/// A server on a free port; dropping the sender (or sending) shuts it down.
struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start(app: Router, limits: ServerLimits) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_with_tls(
        listener,
        app,
        async move {
            let _ = stopped.await;
        },
        limits,
        None,
    ));
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

fn echo_peer() -> Router {
    Router::new().route(
        "/peer",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    )
}

/// Reads until the server closes the connection (EOF or reset), or `bound` passes.
async fn closed_within(tcp: &mut TcpStream, bound: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_client_sending_headers_slowly_is_disconnected() {
    let server = start(echo_peer(), limits()).await;
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    // A request line and a header, a few bytes at a time, never finished: each write
    // arrives well within the timeout, but the head as a whole never completes.
    tcp.write_all(b"GET /peer HTTP/1.1\r\n")
        .await
        .expect("write");
    for chunk in [&b"Host: "[..], b"local", b"host\r\n", b"X-Slow: "] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tcp.write_all(chunk).await.is_err() {
            break;
        }
    }
    assert!(
        closed_within(&mut tcp, Duration::from_secs(10)).await,
        "the server keeps a connection whose headers never complete"
    );
}

#[tokio::test]
async fn a_silent_or_idle_connection_is_closed() {
    let server = start(echo_peer(), limits()).await;
    // Connected, nothing sent.
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    assert!(closed_within(&mut silent, Duration::from_secs(10)).await);

    // One request answered, then idle on a keep-alive connection.
    let mut idle = TcpStream::connect(server.addr).await.expect("connect");
    idle.write_all(b"GET /peer HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 1024];
    let n = idle.read(&mut buf).await.expect("answer");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert!(closed_within(&mut idle, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn normal_requests_work_and_see_their_peer_address() {
    let server = start(echo_peer(), limits()).await;
    let http = reqwest::Client::new();
    // Several on one pooled connection: keep-alive works within the timeout.
    for _ in 0..3 {
        let r = http
            .get(format!("http://{}/peer", server.addr))
            .send()
            .await
            .expect("answer");
        assert_eq!(r.status(), 200);
        let peer: SocketAddr = r.text().await.expect("body").parse().expect("an address");
        assert!(peer.ip().is_loopback());
        assert_ne!(
            peer.port(),
            server.addr.port(),
            "the client's port, not ours"
        );
    }
}

#[tokio::test]
async fn graceful_shutdown_finishes_requests_in_flight() {
    let started = Arc::new(Notify::new());
    let s = started.clone();
    let app = Router::new().route(
        "/slow",
        get(move || {
            let s = s.clone();
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(300)).await;
                "done"
            }
        }),
    );
    let mut server = start(app, limits()).await;
    let url = format!("http://{}/slow", server.addr);
    let request = tokio::spawn(async move { reqwest::get(url).await?.text().await });
    started.notified().await;
    let _ = server.stop.take().expect("running").send(());
    let body = request
        .await
        .expect("task")
        .expect("the request in flight is answered");
    assert_eq!(body, "done");
    tokio::time::timeout(Duration::from_secs(10), server.task)
        .await
        .expect("serve returns once the request is answered")
        .expect("task")
        .expect("serve");
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn a_full_instance_sheds_load_and_a_stuck_request_times_out() {
    let release = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (r, e) = (release.clone(), entered.clone());
    let api = Router::new()
        .route(
            "/hold",
            get(move || {
                let (r, e) = (r.clone(), e.clone());
                async move {
                    e.notify_one();
                    r.notified().await;
                    "released"
                }
            }),
        )
        .route("/stuck", get(std::future::pending::<&'static str>));
    let limits = ServerLimits {
        max_in_flight: 1,
        request_timeout: Duration::from_millis(500),
        ..limits()
    };
    let app = finish_with(api, utoipa::openapi::OpenApi::default(), limits);
    let server = start(app, limits).await;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();

    let held = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move { http.get(format!("{base}/hold")).send().await }
    });
    entered.notified().await;
    let get = |path: &str| http.get(format!("{base}{path}")).send();
    let shed = get("/hold").await.expect("answer");
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    let body: serde_json::Value = shed.json().await.expect("json");
    assert_eq!(body["code"], "OVERLOADED");
    // Liveness and metrics are outside the budget.
    assert_eq!(get("/healthz").await.expect("answer").status(), 200);
    release.notify_one();
    assert_eq!(held.await.expect("task").expect("answer").status(), 200);

    let stuck = get("/stuck").await.expect("answer");
    assert_eq!(stuck.status(), 503);
    assert!(stuck.headers().contains_key("retry-after"));
    let body: serde_json::Value = stuck.json().await.expect("json");
    assert_eq!(body["code"], "TIMEOUT");
    assert!(body["message"].is_string());
}

#[tokio::test]
async fn readiness_tells_clients_no_internals() {
    let response = readiness(
        vec![
            (
                "postgres",
                Err("database error: password authentication failed for user \"payment_app\" at 10.0.0.5".into()),
            ),
            ("shared_quota", Ok(())),
        ],
        false,
    );
    assert_eq!(response.status(), 503);
    let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .expect("body");
    let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["checks"][0]["name"], "postgres");
    assert_eq!(body["checks"][0]["ok"], false);
    assert_eq!(body["checks"][0]["detail"], "unavailable");
    let text = String::from_utf8_lossy(&bytes);
    for secret in ["password", "payment_app", "10.0.0.5", "database error"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
}
