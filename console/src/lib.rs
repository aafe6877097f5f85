//! The operators' web console under `/console`: server-rendered pages over the operator
//! logic the inspection API runs (the saga's [`PaymentDesk`], the webhook platform's
//! [`Webhooks`]), signed in with an operator credential.
//!
//! Sign-in takes a service credential of role `operator` (checked as `Service<{ OPERATOR }>`
//! checks a bearer token) and keeps it in an HttpOnly, SameSite=Strict cookie. Every page
//! checks it again. POSTs are protected by SameSite=Strict plus a same-origin check of
//! `Origin` (or `Sec-Fetch-Site`); see docs/console.md. The order service and the gate are
//! read through their typed clients with the operator's own credential, so the console
//! sees what the operator may see and nothing more.

mod auth;
pub mod desk;
mod layout;
mod live;
mod payments;
mod trace;
mod webhooks;

use std::{sync::Arc, time::Duration};

use axum::{
    http::{header, HeaderValue, StatusCode},
    middleware,
    response::{IntoResponse, Redirect, Response},
    routing::get,
    Router,
};
use paysaga_common::auth::Verifier;
use paysaga_contracts::{GateClient, OrderClient};
use paysaga_webhooks::Webhooks;

pub use desk::{DeskError, PaymentDesk, ProductPayments};

const CSS: &str = include_str!("assets/console.css");
const HTMX: &str = include_str!("assets/htmx.min.js");

/// Where the console reads units, the waitlist and the quota.
#[derive(Clone, Debug)]
pub struct ConsoleConfig {
    /// `ORDER_URL`: the order service.
    pub order_url: String,
    /// `GATE_URL`: the gate; `None`, the drop page says "gate not configured".
    pub gate_url: Option<String>,
}

/// Everything the console's pages need: the credential check, the saga's payment desk,
/// the webhook platform, and one HTTP connection pool for calling the order service and
/// the gate with the operator's own credential.
#[derive(Clone)]
pub struct ConsoleState {
    verifier: Arc<Verifier>,
    payments: Arc<dyn PaymentDesk>,
    webhooks: Webhooks,
    http: reqwest::Client,
    order_url: String,
    gate_url: Option<String>,
}

impl ConsoleState {
    pub fn new(
        verifier: Arc<Verifier>,
        payments: Arc<dyn PaymentDesk>,
        webhooks: Webhooks,
        config: ConsoleConfig,
    ) -> Self {
        Self {
            verifier,
            payments,
            webhooks,
            // Short: a page waits on these reads, and a downstream that does not answer
            // is shown as unreachable rather than holding the page.
            http: paysaga_common::client::http_client(Duration::from_secs(2)),
            order_url: config.order_url,
            gate_url: config.gate_url,
        }
    }

    fn order(&self, token: &str) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.order_url, token)
    }

    fn gate(&self, token: &str) -> Option<GateClient> {
        self.gate_url
            .as_ref()
            .map(|url| GateClient::with_http(self.http.clone(), url, token))
    }
}

/// The console's routes, with their state. Not in the OpenAPI document: they answer
/// HTML to a browser, not JSON to a client.
pub fn routes(state: ConsoleState) -> Router {
    use axum::routing::post;
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/drop") }))
        .route("/console/", get(|| async { Redirect::to("/console/drop") }))
        .route("/console/login", get(auth::login_page).post(auth::login))
        .route("/console/logout", post(auth::logout))
        .route("/console/drop", get(live::page))
        .route("/console/drop/live", get(live::fragment))
        .route("/console/payments", get(payments::list))
        .route("/console/payments/{id}", get(payments::timeline))
        .route(
            "/console/payments/{id}/resume",
            get(payments::confirm_resume).post(payments::resume),
        )
        .route(
            "/console/payments/{id}/refund",
            get(payments::confirm_refund).post(payments::refund),
        )
        .route("/console/webhooks", get(webhooks::dead))
        .route(
            "/console/webhooks/{id}/replay",
            get(webhooks::confirm_replay).post(webhooks::replay),
        )
        .route("/console/assets/console.css", get(css))
        .route("/console/assets/htmx.min.js", get(htmx))
        .layer(middleware::map_response(harden))
        .with_state(state)
}

/// Headers on every console answer: pages are never cached (they show live figures and
/// carry a credential's view), never framed (a framed confirmation button could be
/// clicked by a page the operator did not mean to use), and load scripts and styles
/// only from the orchestrator itself.
async fn harden(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn htmx() -> Response {
    asset("text/javascript; charset=utf-8", HTMX)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}
