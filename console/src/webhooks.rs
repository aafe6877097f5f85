//! Webhook deliveries in the console: the DEAD ones (or another state) and replay behind a confirmation, through the webhook API's own functions.

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Redirect, Response},
    Form,
};
use maud::html;
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    auth::Person,
    layout::{self, Section},
};
use paysaga_contracts::orchestrator::api::ListDeliveries;
use paysaga_webhooks::store::DeliveryState;

use crate::state::ConsoleState;
use paysaga_staff::allow::{ADMIN, ANY, OPERATOR};

const SHOWN: i64 = 200;
/// The states a page can show, in the order they are offered.
const STATES: [DeliveryState; 3] = [
    DeliveryState::Dead,
    DeliveryState::Pending,
    DeliveryState::Delivered,
];

#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    state: Option<String>,
    replayed: Option<String>,
}

#[tracing::instrument(skip_all, fields(staff = %op.name()))]
pub async fn dead(
    State(state): State<ConsoleState>,
    op: Person<{ ANY }>,
    Query(filter): Query<Filter>,
) -> Response {
    let shown = filter
        .state
        .as_deref()
        .and_then(|s| s.to_ascii_uppercase().parse::<DeliveryState>().ok())
        .unwrap_or(DeliveryState::Dead);
    let page = state
        .webhooks
        .deliveries(&ListDeliveries {
            state: Some(shown.as_str().to_owned()),
            endpoint_id: None,
            limit: Some(SHOWN),
        })
        .await;
    let page = match page {
        Ok(p) => p,
        Err(e) => return layout::failed(e, Section::Webhooks),
    };
    let body = html! {
        @if let Some(id) = filter.replayed.as_deref() {
            p.flash #flash { "Delivery " code { (id) } " replayed: PENDING and due now." }
        }
        p {
            "Show: "
            @for s in STATES {
                @if s == shown { strong { (s) } } @else { a href=(format!("/console/webhooks?state={s}")) { (s) } }
                " "
            }
        }
        @if page.deliveries.is_empty() {
            p #no-deliveries { "No " (shown) " deliveries." }
        } @else {
            table #deliveries {
                tr {
                    th { "delivery" } th { "event" } th { "subject" } th { "endpoint" } th.num { "attempts" }
                    th.num { "last status" } th { "last error" } th { "updated (UTC)" } th { "" }
                }
                @for d in &page.deliveries {
                    tr.delivery data-id=(d.id) {
                        td.mono { (d.id) }
                        td { (d.event_type) br; span.mono.muted { (d.event_id) } }
                        td.mono { (d.subject) }
                        td.mono { (d.endpoint_id) }
                        td.num { (d.attempts) }
                        td.num { (d.last_status.map(|s| s.to_string()).unwrap_or_default()) }
                        td.mono { (d.last_error.map(|e| e.as_str()).unwrap_or("")) }
                        td { (layout::at(d.updated_at)) }
                        td { @if d.state == DeliveryState::Dead.as_str() { a href=(format!("/console/webhooks/{}/replay", d.id)) { "Replay…" } } }
                    }
                }
            }
            @if page.deliveries.len() as i64 == SHOWN { p.muted { "The newest " (SHOWN) " are shown." } }
        }
    };
    layout::page(Section::Webhooks, "Webhook deliveries", body).into_response()
}

fn delivery_not_found() -> Response {
    layout::error_page(
        StatusCode::NOT_FOUND,
        "WEBHOOK_DELIVERY_NOT_FOUND",
        "no such webhook delivery",
        Some(Section::Webhooks),
    )
}

#[tracing::instrument(skip_all, fields(staff = %op.name(), delivery_id = %raw))]
pub async fn confirm_replay(op: Person<{ OPERATOR | ADMIN }>, Path(raw): Path<String>) -> Response {
    let Ok(id) = raw.parse::<Uuid>() else {
        return delivery_not_found();
    };
    let body = html! {
        p { "Delivery " code { (id) } " is made PENDING again, its attempts counted afresh, and due now. \
             The receiver gets the same event id it may have seen before." }
        form method="post" action=(format!("/console/webhooks/{id}/replay")) {
            p { label for="reason" { "Reason (kept in the audit trail)" } br;
                textarea id="reason" name="reason" rows="2" cols="60" required maxlength="500" {} }
            button.danger type="submit" id="confirm" { "Replay delivery" }
            " "
            a href="/console/webhooks" { "Cancel" }
        }
    };
    layout::page(Section::Webhooks, "Replay delivery?", body).into_response()
}

#[tracing::instrument(skip_all, fields(staff = %op.name(), delivery_id = %raw))]
pub async fn replay(
    State(state): State<ConsoleState>,
    op: Person<{ OPERATOR | ADMIN }>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    Form(form): Form<crate::payments::Reason>,
) -> Response {
    let confirmed = form.confirmed(&headers, &raw, Section::Webhooks, delivery_not_found);
    let (id, reason): (Uuid, _) = match confirmed {
        Ok(confirmed) => confirmed,
        Err(refused) => return *refused,
    };
    let result = state.webhooks.replay_as(&op.0, id, Some(reason)).await;
    match result {
        Ok(d) => {
            tracing::info!(event_id = %d.event_id, "console: webhook delivery replayed");
            Redirect::to(&format!("/console/webhooks?replayed={id}")).into_response()
        }
        Err(e) => layout::failed(e, Section::Webhooks),
    }
}
