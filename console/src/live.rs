//! The drop page: each product's units, the gate's quota, the waitlist, payments by state, rates, charts over the drop and payments needing attention, refreshed every few seconds.

use std::collections::BTreeMap;

use axum::{
    extract::State,
    response::{Html, IntoResponse, Response},
};
use chrono::Utc;
use futures::future::join_all;
use maud::{html, Markup};
use paysaga_common::client::CallError;
use paysaga_contracts::order::api::Product;
use paysaga_staff::allow::ANY;
use workflows::State as SagaState;

use paysaga_contracts::orchestrator::api::{ListPayments, PaymentPage};

use crate::{
    auth::Person,
    desk::{DeskError, DropSeries, ProductPayments},
    drop_charts,
    history::Sample,
    layout::{self, Section},
    payments::{self, Rows},
    state::ConsoleState,
};

/// How often the page refreshes itself (htmx polling; a whole-page refresh without
/// scripts).
const REFRESH_SECS: u32 = 2;
const ATTENTION_SHOWN: i64 = 20;

/// The gate's view of one product.
enum Quota {
    NotConfigured,
    Unreachable(String),
    Known { quota: i64, in_flight: i64 },
}

#[tracing::instrument(skip_all, fields(staff = %op.name()))]
pub async fn page(State(state): State<ConsoleState>, op: Person<{ ANY }>) -> Response {
    let live = figures(&state).await;
    layout::framed(Section::Drop, "Drop", live, Some(REFRESH_SECS)).into_response()
}

/// The live part alone, for the page's polling.
#[tracing::instrument(skip_all, fields(staff = %op.name()))]
pub async fn fragment(State(state): State<ConsoleState>, op: Person<{ ANY }>) -> Response {
    Html(figures(&state).await.into_string()).into_response()
}

fn call_error(e: &CallError) -> String {
    match (e.status(), e.code()) {
        (Some(s), Some(c)) => format!("{s} {c}"),
        (Some(s), None) => format!("HTTP {s}"),
        _ => e.to_string(),
    }
}

async fn quota(state: &ConsoleState, product_id: i64) -> Quota {
    let Some(gate) = state.gate() else {
        return Quota::NotConfigured;
    };
    match gate.quota(product_id).await {
        Ok(a) => Quota::Known {
            quota: a.body.quota,
            in_flight: a.body.in_flight,
        },
        Err(e) => Quota::Unreachable(call_error(&e)),
    }
}

async fn figures(state: &ConsoleState) -> Markup {
    let products = state.order().list_products().await;
    let (payments, series) = futures::join!(state.payments.by_product(), state.payments.series());
    let attention = state
        .payments
        .list(&ListPayments {
            needs_attention: Some(true),
            limit: Some(ATTENTION_SHOWN),
            ..ListPayments::default()
        })
        .await;
    let (products, products_error) = match products {
        Ok(a) => (a.body, None),
        Err(e) => (Vec::new(), Some(call_error(&e))),
    };
    let quotas = join_all(products.iter().map(|p| quota(state, p.id))).await;
    let (payments, payments_error) = match payments {
        Ok(p) => (p, None),
        Err(e) => {
            tracing::warn!(error = %e, "console: payment counts");
            (BTreeMap::new(), Some(e.to_string()))
        }
    };
    let (series, series_error) = match series {
        Ok(s) => (s, None),
        Err(e) => {
            tracing::warn!(error = %e, "console: drop series");
            (BTreeMap::new(), Some(e.to_string()))
        }
    };
    let none = ProductPayments::default();
    let now = Utc::now();
    html! {
        div #live hx-get="/console/drop/live" hx-trigger=(format!("every {REFRESH_SECS}s")) hx-swap="outerHTML" {
            p.muted { "As of " span #as-of { (layout::at(Utc::now())) } " UTC; refreshes every " (REFRESH_SECS) " s." }
            @if let Some(e) = &products_error {
                p.error { "Order service: " (e) " (units and waitlist unknown)." }
            }
            @if let Some(e) = &payments_error {
                p.error { "Payments: " (e) }
            }
            @if let Some(e) = &series_error {
                p.error { "Charts: " (e) }
            }
            @if products.is_empty() && products_error.is_none() {
                p { "No products yet." }
            }
            @for (p, q) in products.iter().zip(&quotas) {
                (product_card(state, now, p, q, payments.get(&Some(p.id)).unwrap_or(&none), series.get(&p.id)))
            }
            @if let Some(other) = payments.get(&None) {
                div.card {
                    h2 { "Payments without a product" }
                    (payment_table("none", other))
                }
            }
            h2 { "Payments needing attention" }
            (attention_table(attention))
        }
    }
}

fn product_card(
    state: &ConsoleState,
    now: chrono::DateTime<Utc>,
    p: &Product,
    q: &Quota,
    pay: &ProductPayments,
    series: Option<&DropSeries>,
) -> Markup {
    let id = p.id;
    let samples = state.history.record(
        id,
        Sample {
            at: now,
            waiting: p.waiting,
            attention: pay.attention,
        },
    );
    let cell = |name: &str, v: i64| {
        html! { td.num id=(format!("product-{id}-{name}")) { (v) } }
    };
    html! {
        div.card id=(format!("product-{id}")) {
            h2 { (p.name) " " span.muted { "#" (id) " · " (layout::money(p.price)) } }
            table {
                tr {
                    th.num { "units" } th.num { "available" } th.num { "reserved" }
                    th.num { "on offer" } th.num { "sold" } th.num { "waitlist" }
                    th.num { "gate quota" } th.num { "passes in flight" }
                }
                tr {
                    (cell("units_total", p.units_total))
                    (cell("available", p.available))
                    (cell("reserved", p.reserved))
                    (cell("offered", p.offered))
                    (cell("sold", p.sold))
                    (cell("waiting", p.waiting))
                    @match q {
                        Quota::Known { quota, in_flight } => {
                            (cell("quota", *quota))
                            (cell("in_flight", *in_flight))
                        }
                        Quota::NotConfigured => {
                            td.muted colspan="2" id=(format!("product-{id}-quota")) { "gate not configured" }
                        }
                        Quota::Unreachable(e) => {
                            td.warn colspan="2" id=(format!("product-{id}-quota")) { "gate: " (e) }
                        }
                    }
                }
            }
            (payment_table(&id.to_string(), pay))
            (drop_charts::product(id, series, &samples, Some(p.units_total)))
        }
    }
}

fn payment_table(key: &str, pay: &ProductPayments) -> Markup {
    let cell = |name: &str, v: i64| {
        html! { td.num id=(format!("payments-{key}-{name}")) { (v) } }
    };
    html! {
        table {
            tr {
                th { "payments" }
                @for s in SagaState::ALL { th.num { (s.as_str()) } }
                th.num { "total" } th.num { "needing attention" }
                th.num { "new /min" } th.num { "completed /min" } th.num { "failed /min" } th.num { "refunded /min" }
            }
            tr {
                td { "" }
                @for s in SagaState::ALL {
                    td.num id=(format!("payments-{key}-{}", s.as_str())) {
                        a href=(format!("/console/payments?state={}", s.as_str())) {
                            (pay.by_state.get(&s).copied().unwrap_or(0))
                        }
                    }
                }
                (cell("total", pay.total()))
                td.num id=(format!("payments-{key}-attention")) class=[(pay.attention > 0).then_some("bad")] {
                    (pay.attention)
                }
                (cell("new_per_min", pay.created_last_minute))
                (cell("completed_per_min", pay.completed_last_minute))
                (cell("failed_per_min", pay.failed_last_minute))
                (cell("refunded_per_min", pay.refunded_last_minute))
            }
        }
    }
}

fn attention_table(page: Result<PaymentPage, DeskError>) -> Markup {
    match page {
        Err(e) => html! { p.error { (e.to_string()) } },
        Ok(page) if page.payments.is_empty() => html! { p.ok #attention-none { "None." } },
        Ok(page) => html! {
            table #attention {
                (payments::header(Rows::Attention))
                @for p in &page.payments { (payments::row(p, Rows::Attention)) }
            }
            @if page.next_cursor.is_some() {
                p { a href="/console/payments?attention=yes" { "All payments needing attention" } }
            }
        },
    }
}
