//! Logs (tracing, JSON or pretty) and Prometheus metrics, with the HTTP middleware that
//! records every request and logs internal errors once with their cause chain.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use axum::{
    extract::{MatchedPath, Request},
    http::Method,
    middleware::Next,
    response::Response,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, EnvFilter};

use crate::{config::LogFormat, error::InternalErrorReport};

/// Installs the tracing subscriber once per process; later calls are no-ops (tests
/// start several services in one process).
pub fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(false),
            )
            .try_init(),
        LogFormat::Pretty => registry
            .with(tracing_subscriber::fmt::layer().compact())
            .try_init(),
    };
}

/// Latency buckets in seconds, from 100µs to 10s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often histogram samples are folded into their buckets. `build_recorder` leaves
/// this to its caller: without it every sample waits in memory until the next scrape, so
/// a service nobody scrapes grows with every request it serves (the benchmark saw each
/// service's RSS creep drop after drop).
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder. The `metrics` facade is process-global by design,
/// so the recorder is installed once and shared by every router in the process.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("static bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder is installed; ours then simply stays unused.
            let _ = metrics::set_global_recorder(recorder);
            // A plain thread, not a task: the recorder may be created outside a runtime,
            // and must outlive whichever runtime created it.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(METRICS_UPKEEP_EVERY);
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the metrics upkeep thread; histogram samples accumulate until scraped");
            }
            handle
        })
        .clone()
}

/// The `method` label: the standard methods by name, any other (clients may invent
/// methods at will) as `OTHER`, so the number of series stays bounded.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The `route` label of requests that matched no route: their paths are the client's
/// choice, so they share one label.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Records `http_requests_total` and `http_request_duration_seconds` by method, route
/// template and status (each from a bounded set, whatever clients send), and logs a
/// 500's cause chain (never sent to the client) exactly once.
pub async fn http_middleware(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| UNMATCHED_ROUTE.to_owned());
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(InternalErrorReport(chain)) = response.extensions().get::<InternalErrorReport>() {
        tracing::error!(%method, %route, error = %chain, "internal error");
    }
    let labels = [
        ("method", method.to_owned()),
        ("route", route),
        ("status", status),
    ];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels).record(elapsed);
    response
}
