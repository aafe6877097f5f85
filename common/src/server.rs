//! The routes every service shares (health, metrics, OpenAPI, docs), the common
//! middleware stack, and serving with graceful shutdown.

use std::{future::Future, net::SocketAddr, time::Duration};

use anyhow::Context;

use axum::{
    extract::DefaultBodyLimit,
    http::{header, StatusCode},
    middleware,
    response::{IntoResponse, Response},
    routing::get,
    serve::ListenerExt,
    Json, Router,
};
use serde::Serialize;
use tokio::net::TcpListener;
use utoipa::openapi::OpenApi;
use utoipa_scalar::{Scalar, Servable};

use crate::{error, telemetry};

/// Request bodies above this are refused with 413; no paysaga request needs more.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Wraps a service's API router with `/healthz`, `/metrics`, `/openapi.json`, `/docs`,
/// JSON fallbacks for unknown routes and methods, a body limit and the HTTP middleware.
/// `/readyz` is the service's own, since only it knows what it depends on.
pub fn finish(api: Router, openapi: OpenApi) -> Router {
    let metrics = telemetry::metrics_handle();
    let spec = serde_json::to_string(&openapi).expect("OpenAPI document serialises");
    api.route(
        "/healthz",
        get(|| async { Json(serde_json::json!({"status": "ok"})) }),
    )
    .route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    metrics.render(),
                )
            }
        }),
    )
    .route(
        "/openapi.json",
        get(move || {
            let spec = spec.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], spec) }
        }),
    )
    .merge(Scalar::with_url("/docs", openapi))
    .fallback(error::not_found)
    .method_not_allowed_fallback(error::method_not_allowed)
    .layer(DefaultBodyLimit::max(BODY_LIMIT))
    .layer(middleware::from_fn(telemetry::http_middleware))
}

#[derive(Debug, Serialize)]
struct Readiness {
    status: &'static str,
    checks: Vec<Check>,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// The `/readyz` answer: 200 when every check passed, 503 otherwise. A check may also
/// be `degraded` (passes, but worth seeing), as the gate is without Redis.
pub fn readiness(checks: Vec<(&'static str, Result<(), String>)>, degraded: bool) -> Response {
    let all_ok = checks.iter().all(|(_, r)| r.is_ok());
    let body = Readiness {
        status: if !all_ok {
            "unavailable"
        } else if degraded {
            "degraded"
        } else {
            "ready"
        },
        checks: checks
            .into_iter()
            .map(|(name, r)| Check {
                name,
                ok: r.is_ok(),
                detail: r.err(),
            })
            .collect(),
    };
    let status = if all_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// A PostgreSQL readiness check with a short timeout.
pub async fn check_db(pool: &sqlx::PgPool) -> Result<(), String> {
    match tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query("SELECT 1").execute(pool),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("database error: {e}")),
        Err(_) => Err("database did not answer within 2s".into()),
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests. Each request
/// carries its peer's address as `ConnectInfo<SocketAddr>` in its extensions, for the
/// services that read it (a router called without it, as in-process tests may, simply
/// finds none there).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// The socket a service listens on: the one its supervisor handed over (systemd's
/// socket-activation protocol: `LISTEN_FDS=1`, the socket on fd 3), else `addr` bound
/// here. A handed-over socket was bound by the supervisor before the service started,
/// so no other process can take the port in between.
pub async fn listener(addr: &str) -> anyhow::Result<TcpListener> {
    let mut handed = listenfd::ListenFd::from_env();
    let inherited = handed
        .take_tcp_listener(0)
        .context("the socket handed over on fd 3 (LISTEN_FDS) is not a listening TCP socket")?;
    if let Some(std_listener) = inherited {
        std_listener
            .set_nonblocking(true)
            .context("cannot make the handed-over socket non-blocking")?;
        let listener = TcpListener::from_std(std_listener)
            .context("cannot serve on the handed-over socket")?;
        if let Ok(local) = listener.local_addr() {
            tracing::info!(%local, "listening on the socket handed over by the supervisor");
        }
        return Ok(listener);
    }
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
