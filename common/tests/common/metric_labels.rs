//! Clients choose methods and paths freely; the HTTP metrics must not grow with them.
//! A test binary of its own: the recorder is process-global, and no other test may add
//! series while this one counts them.

use std::time::Duration;

use axum::{routing::get, Router};
use paysaga_common::{
    limits::ServerLimits,
    server::{finish_with, metrics_app, serve_with_tls},
    telemetry::method_label,
};
use reqwest::Method;

fn series(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .collect()
}

/// Serves `app` on a port of its own until the test ends: its base URL.
async fn serve(app: Router, limits: ServerLimits) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(serve_with_tls(
        listener,
        app,
        std::future::pending(),
        limits,
        None,
    ));
    base
}

#[tokio::test]
async fn invented_methods_and_random_paths_add_no_series() {
    let api = Router::new().route("/v1/things/{id}", get(|| async { "thing" }));
    let limits = ServerLimits::default();
    let app = finish_with(api, utoipa::openapi::OpenApi::default(), limits);
    let base = serve(app, limits).await;
    // `/metrics` on a listener of its own, as `METRICS_ADDR` serves it; the API's has none.
    let metrics_base = serve(metrics_app(), limits).await;
    let http = reqwest::Client::new();
    let on_api = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("answer");
    assert_eq!(on_api.status(), 404, "the API's listener serves no metrics");
    let scrape = || async {
        http.get(format!("{metrics_base}/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
    };

    // One round of each kind first, so every series the test can cause exists.
    let round = |n: usize| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let invented = Method::from_bytes(format!("BREW{n}").as_bytes()).expect("token");
            let cases = [
                (
                    invented.clone(),
                    format!("/random/{n}/{}", uuid::Uuid::new_v4()),
                ),
                (invented.clone(), "/v1/things/1".to_owned()),
                (invented, "/healthz".to_owned()),
                (Method::GET, format!("/v1/things/{n}")),
                (Method::GET, format!("/nowhere-{n}")),
                (Method::DELETE, format!("/nowhere-{n}")),
            ];
            for (method, path) in cases {
                let r = http
                    .request(method, format!("{base}{path}"))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .expect("answer");
                assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
            }
        }
    };
    round(0).await;
    let before = scrape().await;
    for n in 1..40 {
        round(n).await;
    }
    let after = scrape().await;

    let (b, a) = (series(&before), series(&after));
    // Scrapes are not API requests (the metrics listener is outside the middleware), so
    // nothing is new.
    let new: Vec<&&str> = a
        .iter()
        .filter(|l| {
            let key = l.rsplit_once(' ').map(|(k, _)| k).unwrap_or(l);
            !b.iter().any(|o| o.starts_with(key))
        })
        .collect();
    assert!(new.is_empty(), "new series: {new:#?}");
    assert!(
        !after.contains("BREW") && !after.contains("/random/") && !after.contains("/nowhere"),
        "client-chosen text in the labels:\n{after}"
    );
    assert!(after.contains("method=\"OTHER\""));
    assert!(after.contains("route=\"unmatched\""));
    assert!(after.contains("route=\"/v1/things/{id}\""));
}

#[test]
fn standard_methods_keep_their_names() {
    for m in ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] {
        assert_eq!(method_label(&Method::from_bytes(m.as_bytes()).unwrap()), m);
    }
    assert_eq!(method_label(&Method::TRACE), "OTHER");
    assert_eq!(method_label(&Method::CONNECT), "OTHER");
}
