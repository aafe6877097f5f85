//! The operators' web console under `/console`: server-rendered pages over the operator
//! logic the inspection API runs (the saga's [`PaymentDesk`], the webhook platform's
//! [`Webhooks`]), for staff signed in as themselves.
//!
//! Sign-in takes a staff member's email and password, then a TOTP code (or a recovery
//! code), and keeps the staff session's random token in an HttpOnly, SameSite=Strict
//! cookie; every page checks the session and names the roles it admits
//! (`Person<{ OPERATOR | ADMIN }>`). POSTs are protected by SameSite=Strict plus a
//! same-origin check of `Origin` (or `Sec-Fetch-Site`); see docs/console.md. The order
//! service and the gate are read with the console's own read-only credential.

/// The POST handler `$name` of an action behind a confirmation page, whose form sends
/// the id in its path and a reason: `$allow` (bits of `paysaga_staff::allow`) may send
/// it. Once the form passes [`payments::Reason::confirmed`] (an id that names nothing is
/// `$not_found`, shown in `$section`), `$run(state, confirmed, $what)` does it. Its span
/// names the person, and the id as `$id`.
macro_rules! confirmed_post {
    ($name:ident, $allow:expr, $id:ident, $section:expr, $not_found:path, $run:ident($($what:expr)?)) => {
        #[tracing::instrument(skip_all, fields(staff = %op.name(), $id = %raw))]
        pub async fn $name(
            axum::extract::State(state): axum::extract::State<crate::state::ConsoleState>,
            op: crate::auth::Person<{ $allow }>,
            headers: axum::http::HeaderMap,
            axum::extract::Path(raw): axum::extract::Path<String>,
            axum::Form(form): axum::Form<crate::payments::Reason>,
        ) -> axum::response::Response {
            match form.confirmed(&headers, &raw, $section, $not_found) {
                Ok((id, reason)) => {
                    let by = op.0;
                    $run(state, crate::payments::Confirmed { by, id, reason } $(, $what)?).await
                }
                Err(refused) => *refused,
            }
        }
    };
}

mod approvals;
mod audit;
mod auth;
mod charts;
pub mod desk;
mod drop_charts;
mod history;
mod layout;
mod lists;
mod live;
mod payments;
mod state;
mod trace;
mod webhooks;

use axum::{
    http::{header, HeaderValue, StatusCode},
    middleware,
    response::{IntoResponse, Redirect, Response},
    routing::get,
    Router,
};

pub use desk::{Bucket, Decision, DeskError, DropSeries, PaymentDesk, ProductPayments};
pub use state::{ConsoleConfig, ConsoleState};

const CSS: &str = include_str!("assets/console.css");
const HTMX: &str = include_str!("assets/htmx.min.js");

/// The console's routes, with their state. Not in the OpenAPI document: they answer
/// HTML to a browser, not JSON to a client.
pub fn routes(state: ConsoleState) -> Router {
    use axum::routing::post;
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/drop") }))
        .route("/console/", get(|| async { Redirect::to("/console/drop") }))
        .route("/console/login", get(auth::login_page).post(auth::login))
        .route(
            "/console/login/code",
            get(auth::code_page).post(auth::verify_code),
        )
        .route("/console/logout", post(auth::logout))
        .route("/console/drop", get(live::page))
        .route("/console/drop/live", get(live::fragment))
        .route("/console/payments", get(lists::page::<payments::Filter>))
        .route("/console/payments/{id}", get(payments::timeline))
        .route(
            "/console/payments/{id}/resume",
            get(payments::confirm_resume).post(payments::resume),
        )
        .route(
            "/console/payments/{id}/refund",
            get(payments::confirm_refund).post(payments::refund),
        )
        .route("/console/webhooks", get(lists::page::<webhooks::Filter>))
        .route(
            "/console/webhooks/{id}/replay",
            get(webhooks::confirm_replay).post(webhooks::replay),
        )
        .route("/console/audit", get(lists::page::<audit::Filter>))
        .route("/console/approvals", get(lists::page::<approvals::Filter>))
        .route("/console/approvals/{id}/approve", post(approvals::approve))
        .route("/console/approvals/{id}/reject", post(approvals::reject))
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
