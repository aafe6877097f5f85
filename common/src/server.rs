//! The routes every service shares (health, OpenAPI, docs; metrics on a listener of
//! their own), the common middleware stack with its limits (request deadline, global
//! concurrency limit with load shedding), and serving with connection timers and
//! graceful shutdown.

use std::{future::Future, net::SocketAddr, pin::pin, time::Duration};

use anyhow::Context;

use axum::{
    error_handling::HandleErrorLayer,
    extract::{ConnectInfo, DefaultBodyLimit},
    http::{header, Request, StatusCode},
    middleware,
    response::{IntoResponse, Response},
    routing::get,
    serve::{Listener, ListenerExt},
    BoxError, Json, Router,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use serde::Serialize;
use tokio::net::TcpListener;
use tower::{
    limit::GlobalConcurrencyLimitLayer, load_shed::LoadShedLayer, timeout::TimeoutLayer,
    ServiceBuilder, ServiceExt,
};
use utoipa::openapi::OpenApi;
use utoipa_swagger_ui::{Config, SwaggerUi};

use crate::{
    error,
    limits::{self, ServerLimits},
    telemetry,
    tls::ServerTls,
};

/// What a service serves until, boxed so one type serves every caller: the process's
/// signal ([`shutdown_signal`]) or a test's.
pub type Shutdown = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Request bodies above this are refused with 413; no paysaga request needs more.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Wraps a service's API router with `/healthz`, `/openapi.json`, `/docs`, JSON
/// fallbacks for unknown routes and methods, a body limit, the limits from the
/// environment ([`ServerLimits`]) and the HTTP middleware.
/// `/readyz` is the service's own, since only it knows what it depends on. `/metrics` is
/// not here: it is served on a listener of its own ([`metrics_app`], `METRICS_ADDR`), so
/// whoever reaches the API (buyers included) never reads the sales rates.
pub fn finish(api: Router, openapi: OpenApi) -> Router {
    finish_with(api, openapi, ServerLimits::from_env_or_default())
}

/// [`finish`] with the given limits (tests set them small).
///
/// The OpenAPI document is completed with the answers the shared layers give
/// ([`crate::openapi::complete`]) before it is served.
pub fn finish_with(api: Router, mut openapi: OpenApi, limits: ServerLimits) -> Router {
    crate::openapi::complete(&mut openapi);
    // The recorder is installed with the routes, so every request is counted from the
    // first one, whenever (and wherever) the metrics listener is scraped.
    let _ = telemetry::metrics_handle();
    let limited = api
        .merge(docs(openapi).layer(middleware::map_response(with_docs_csp)))
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Load shedding over one concurrency budget shared by every route (a per-route
        // limit would multiply it by the number of routes), then the request deadline.
        // A request over the budget is answered at once instead of queued: a queue would
        // only add latency to requests whose clients are already timing out.
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(limit_error))
                .layer(LoadShedLayer::new())
                .layer(GlobalConcurrencyLimitLayer::new(limits.max_in_flight))
                .layer(TimeoutLayer::new(limits.request_timeout)),
        );
    // Liveness stays outside the limits: an instance at its concurrency limit is busy,
    // not dead.
    let exempt = Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .method_not_allowed_fallback(error::method_not_allowed);
    limited
        .merge(exempt)
        .fallback(error::not_found)
        .layer(middleware::from_fn(telemetry::http_middleware))
}

/// `/openapi.json` and the Swagger UI at `/docs`, its scripts and styles compiled into
/// the binary: the page works with no route out, and loads nothing from elsewhere onto
/// an origin that also serves the operator console. The validator badge is off, since
/// it would send the document to an outside service.
fn docs(openapi: OpenApi) -> Router {
    SwaggerUi::new("/docs")
        .url("/openapi.json", openapi)
        .config(Config::from("/openapi.json").validator_url("none"))
        .into()
}

/// The Content-Security-Policy of the docs page and everything it loads: scripts, styles,
/// fonts and the document from this origin only (Swagger UI sets inline style
/// attributes, and its icons are `data:` images), no plugin, no frame, no form, no
/// base URL. A script from elsewhere, had one been slipped into the page, would not run.
pub const DOCS_CSP: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
    connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

async fn with_docs_csp(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(DOCS_CSP),
    );
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// The metrics listener's routes: `/metrics` (Prometheus text) and `/healthz`, with no
/// limits (an instance at its concurrency limit is busy, and its metrics show why) and
/// outside the HTTP middleware (scrapes are not counted as API requests). Served on
/// `METRICS_ADDR` by [`crate::service::serve_from_env`], never on the API's listener.
pub fn metrics_app() -> Router {
    let metrics = telemetry::metrics_handle();
    Router::new()
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
            "/healthz",
            get(|| async { Json(serde_json::json!({"status": "ok"})) }),
        )
        .method_not_allowed_fallback(error::method_not_allowed)
        .fallback(error::not_found)
}

/// The answer for a request the limits stopped: shed (503 `OVERLOADED`) or out of
/// time (503 `TIMEOUT`), both with `Retry-After`.
async fn limit_error(err: BoxError) -> Response {
    if err.is::<tower::load_shed::error::Overloaded>() {
        metrics::counter!("http_requests_shed_total").increment(1);
        limits::overloaded()
    } else if err.is::<tower::timeout::error::Elapsed>() {
        metrics::counter!("http_requests_timed_out_total").increment(1);
        limits::timed_out()
    } else {
        error::internal_error_response(&*err)
    }
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
    detail: Option<&'static str>,
}

/// The `/readyz` answer: 200 when every check passed, 503 otherwise. A check may also
/// be `degraded` (passes, but worth seeing), as the gate is without Redis.
///
/// `/readyz` is open to anyone who can reach the port, so a failed check answers only
/// `"unavailable"`; its cause (a database error names hosts, roles and schemas) is
/// logged here, once per failed probe, for the operator.
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
            .map(|(name, r)| {
                if let Err(cause) = &r {
                    tracing::warn!(check = name, error = %cause, "readiness check failed");
                }
                Check {
                    name,
                    ok: r.is_ok(),
                    detail: r.err().map(|_| "unavailable"),
                }
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

/// A PostgreSQL readiness check with a short timeout. The error is for the log only;
/// [`readiness`] answers the client with a generic reason.
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
/// finds none there). The connection timers come from the environment
/// ([`ServerLimits`]); an invalid setting stops the service before it serves.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_tls(listener, app, shutdown, None).await
}

/// [`serve`], over TLS when `tls` is given (a service passes its `TLS_CERT_FILE` and
/// `TLS_KEY_FILE`, [`crate::service::Process::tls`]).
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    tls: Option<&ServerTls>,
) -> std::io::Result<()> {
    let limits = ServerLimits::from_env()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    serve_with_tls(listener, app, shutdown, limits, tls).await
}

/// [`serve_tls`] with the given limits (no TLS: `tls` `None`).
///
/// `axum::serve` sets no timer on its connections, so a client that sends half a
/// request (or nothing) holds its connection and task forever. This is the same accept
/// loop with hyper's HTTP/1 header-read timer, which also ends idle keep-alive
/// connections. HTTP/1 only, as before: nothing in paysaga speaks HTTP/2, and
/// hyper-util's auto-detecting builder reads the protocol preface before any timer runs.
///
/// With TLS, each connection's handshake runs in the connection's own task (a slow
/// client never holds up the accept loop), bounded by the header-read timeout like the
/// request after it; a failed handshake is logged at debug and the connection dropped.
pub async fn serve_with_tls(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: ServerLimits,
    tls: Option<&ServerTls>,
) -> std::io::Result<()> {
    let mut listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(limits.keep_alive);
    let acceptor = tls.map(|t| t.acceptor().clone());
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        // axum's `Listener` retries accept errors itself (pausing on resource
        // exhaustion such as EMFILE), as `axum::serve` does.
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let service = app
            .clone()
            .map_request(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let service = TowerToHyperService::new(service);
        let Some(acceptor) = &acceptor else {
            let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
            tokio::spawn(finish_connection(conn, peer));
            continue;
        };
        let (acceptor, http, watcher) = (acceptor.clone(), http.clone(), graceful.watcher());
        let handshake_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let conn = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
            finish_connection(conn, peer).await;
        });
    }
    // Stop accepting, then let every connection finish its request in flight and close.
    drop(listener);
    graceful.shutdown().await;
    // The last requests' spans leave now rather than with a batch that never comes.
    if telemetry::tracing_enabled() {
        let _ = tokio::task::spawn_blocking(telemetry::flush_traces).await;
    }
    Ok(())
}

/// Runs one connection to its end.
async fn finish_connection<E: std::fmt::Display>(
    conn: impl Future<Output = Result<(), E>>,
    peer: SocketAddr,
) {
    // Timeouts and clients hanging up end up here; neither is the server's fault.
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// The sockets a supervisor handed over (systemd's socket-activation protocol:
/// `LISTEN_FDS`, the API's socket on fd 3, the metrics listener's on fd 4), read once:
/// reading them clears the variables.
pub fn handed_over() -> listenfd::ListenFd {
    listenfd::ListenFd::from_env()
}

/// The socket a service listens on: the one its supervisor handed over, else `addr`
/// bound here. A handed-over socket was bound by the supervisor before the service
/// started, so no other process can take the port in between.
pub async fn listener(handed: &mut listenfd::ListenFd, addr: &str) -> anyhow::Result<TcpListener> {
    listener_at(handed, 0, addr).await
}

/// The metrics listener: the second socket handed over, else `addr` bound here.
pub async fn metrics_listener(
    handed: &mut listenfd::ListenFd,
    addr: &str,
) -> anyhow::Result<TcpListener> {
    listener_at(handed, 1, addr).await
}

/// The `index`th handed-over socket (fd 3 + `index`), else `addr` bound here.
async fn listener_at(
    handed: &mut listenfd::ListenFd,
    index: usize,
    addr: &str,
) -> anyhow::Result<TcpListener> {
    let inherited = handed.take_tcp_listener(index).with_context(|| {
        format!(
            "the socket handed over on fd {} (LISTEN_FDS) is not a listening TCP socket",
            3 + index
        )
    })?;
    if let Some(std_listener) = inherited {
        std_listener
            .set_nonblocking(true)
            .context("cannot make the handed-over socket non-blocking")?;
        let listener = TcpListener::from_std(std_listener)
            .context("cannot serve on the handed-over socket")?;
        if let Ok(local) = listener.local_addr() {
            tracing::info!(%local, "listening on a socket handed over by the supervisor");
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
