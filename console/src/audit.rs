//! The audit trail page: who did what, when, from where, why, and how it ended; newest
//! first, filtered by person, action and target.

use axum::http::StatusCode;
use maud::{html, Markup};
use paysaga_contracts::staff::api::{AuditEntry, ListAudit};
use paysaga_staff::{Acting, AuditAction};
use serde::Deserialize;

use crate::{
    layout::{self, Section},
    lists::{self, ListPage, NoList},
    state::ConsoleState,
};

const PAGE_SIZE: i64 = 100;

/// The form's filters; empty means any.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    before: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl ListPage for Filter {
    const SECTION: Section = Section::Audit;
    const TITLE: &'static str = "Audit trail";

    async fn body(self, state: ConsoleState, _op: Acting) -> Result<Markup, NoList> {
        let before = match given(&self.before).map(|b| b.parse::<i64>()) {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => {
                return Err(NoList::Answer(layout::error_page(
                    StatusCode::BAD_REQUEST,
                    "INVALID_AUDIT_QUERY",
                    "bad page cursor",
                    Some(Self::SECTION),
                )))
            }
        };
        let query = ListAudit {
            actor: given(&self.actor),
            action: given(&self.action),
            target: given(&self.target),
            before,
            limit: Some(PAGE_SIZE),
        };
        let page = state.staff.audit(&query).await?;
        let chosen = query.action.clone().unwrap_or_default();
        let header = html! {
            tr {
                th { "when (UTC)" } th { "who" } th { "from" } th { "action" } th { "target" }
                th { "reason" } th { "outcome" } th { "detail" }
            }
        };
        let row = |e: &AuditEntry| {
            html! {
                tr.entry data-id=(e.id) data-action=(e.action.as_str()) {
                    td { (layout::at(e.at)) }
                    td.mono { (e.actor) }
                    td.mono { (e.client_addr.as_deref().unwrap_or("")) }
                    td { (e.action.as_str()) }
                    td.mono { (e.target.as_deref().unwrap_or("")) }
                    td { (e.reason.as_deref().unwrap_or("")) }
                    td { (e.outcome.as_str()) }
                    td.mono { (e.detail.as_deref().unwrap_or("")) }
                }
            }
        };
        Ok(html! {
            form.filters method="get" action="/console/audit" {
                label { "person (email)" input type="text" name="actor" id="filter-actor" value=[query.actor.as_deref()]; }
                label { "action"
                    select name="action" id="filter-action" {
                        option value="" { "any" }
                        @for a in AuditAction::ALL {
                            option value=(a.as_str()) selected[chosen == a.as_str()] { (a.as_str()) }
                        }
                    }
                }
                label { "target" input type="text" name="target" id="filter-target" value=[query.target.as_deref()]; }
                button.primary type="submit" id="filter-apply" { "Filter" }
                a href="/console/audit" { "Clear" }
            }
            (lists::table_or(html! { p #no-entries { "No entries match." } }, "audit", header, &page.entries, row))
            @if let Some(b) = page.next_before {
                p { a #next-page href=(format!("/console/audit?before={b}{}{}{}",
                    query.actor.as_deref().map(|a| format!("&actor={}", crate::payments::encode(a))).unwrap_or_default(),
                    query.action.as_deref().map(|a| format!("&action={}", crate::payments::encode(a))).unwrap_or_default(),
                    query.target.as_deref().map(|t| format!("&target={}", crate::payments::encode(t))).unwrap_or_default(),
                )) { "Older →" } }
            }
        })
    }
}
