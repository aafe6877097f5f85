//! Webhook deliveries in the console: the DEAD ones (or another state) and replay behind a confirmation, through the webhook API's own functions.

use axum::{
    extract::Path,
    response::{IntoResponse, Redirect, Response},
};
use maud::{html, Markup};
use serde::Deserialize;
use uuid::Uuid;

use crate::{
    auth::Person,
    desk::DeskError,
    layout::{self, Section},
    lists::{self, ListPage, NoList},
    payments::Confirmed,
};
use paysaga_contracts::orchestrator::api::{codes, ListDeliveries, WebhookDelivery};
use paysaga_webhooks::store::DeliveryState;

use crate::state::ConsoleState;
use paysaga_staff::{
    allow::{ADMIN, OPERATOR},
    Acting,
};

const SHOWN: i64 = 200;
/// The states a page can show, in the order they are offered.
const STATES: [DeliveryState; 3] = [
    DeliveryState::Dead,
    DeliveryState::Pending,
    DeliveryState::Delivered,
];

/// The state shown, and the delivery just replayed.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    state: Option<String>,
    replayed: Option<String>,
}

impl Filter {
    /// The state asked for (in any case), else DEAD.
    fn shown(&self) -> DeliveryState {
        self.state
            .as_deref()
            .and_then(|s| s.to_ascii_uppercase().parse::<DeliveryState>().ok())
            .unwrap_or(DeliveryState::Dead)
    }

    /// What the webhook API is asked for: the newest deliveries in the state shown.
    fn to_query(&self) -> ListDeliveries {
        ListDeliveries {
            state: Some(self.shown().as_str().to_owned()),
            endpoint_id: None,
            limit: Some(SHOWN),
        }
    }
}

/// The deliveries in one state, the DEAD ones with a replay link.
impl ListPage for Filter {
    const SECTION: Section = Section::Webhooks;
    const TITLE: &'static str = "Webhook deliveries";

    async fn body(self, state: ConsoleState, _op: Acting) -> Result<Markup, NoList> {
        let page = state.webhooks.deliveries(&self.to_query()).await?;
        let shown = self.shown();
        let header = html! {
            tr {
                th { "delivery" } th { "event" } th { "subject" } th { "endpoint" } th.num { "attempts" }
                th.num { "last status" } th { "last error" } th { "updated (UTC)" } th { "" }
            }
        };
        let row = |d: &WebhookDelivery| {
            html! {
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
        };
        Ok(html! {
            @if let Some(id) = self.replayed.as_deref() {
                p.flash #flash { "Delivery " code { (id) } " replayed: PENDING and due now." }
            }
            p {
                "Show: "
                @for s in STATES {
                    @if s == shown { strong { (s) } } @else { a href=(format!("/console/webhooks?state={s}")) { (s) } }
                    " "
                }
            }
            (lists::table_or(html! { p #no-deliveries { "No " (shown) " deliveries." } }, "deliveries", header, &page.deliveries, row))
            @if page.deliveries.len() as i64 == SHOWN { p.muted { "The newest " (SHOWN) " are shown." } }
        })
    }
}

fn delivery_not_found() -> DeskError {
    DeskError::not_found(
        codes::WEBHOOK_DELIVERY_NOT_FOUND,
        "no such webhook delivery",
    )
}

#[tracing::instrument(skip_all, fields(staff = %op.name(), delivery_id = %raw))]
pub async fn confirm_replay(op: Person<{ OPERATOR | ADMIN }>, Path(raw): Path<String>) -> Response {
    let Ok(id) = raw.parse::<Uuid>() else {
        return layout::failed(delivery_not_found(), Section::Webhooks);
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

confirmed_post! {
    replay, OPERATOR | ADMIN, delivery_id, Section::Webhooks, delivery_not_found, replay_delivery()
}

async fn replay_delivery(state: ConsoleState, confirmed: Confirmed<Uuid>) -> Response {
    let Confirmed { by, id, reason } = confirmed;
    let result = state.webhooks.replay_as(&by, id, Some(reason)).await;
    match result {
        Ok(d) => {
            tracing::info!(event_id = %d.event_id, "console: webhook delivery replayed");
            Redirect::to(&format!("/console/webhooks?replayed={id}")).into_response()
        }
        Err(e) => layout::failed(e, Section::Webhooks),
    }
}
