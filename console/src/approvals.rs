//! Approvals (four eyes): the refunds above `STAFF_FOUR_EYES_ABOVE` and the top-ups
//! above `STAFF_TOP_UP_FOUR_EYES_ABOVE`, each with its kind and where it stands, newest
//! first; an admin other than the one who asked approves (the refund or the top-up is
//! carried out) or rejects one, with a reason.

use axum::{
    extract::{Path, Query, State},
    http::HeaderMap,
    response::{IntoResponse, Redirect, Response},
    Form,
};
use maud::html;
use paysaga_contracts::staff::api::{ApprovalKind, ApprovalState, ListApprovals};
use paysaga_staff::{
    allow::{ADMIN, ANY},
    Acting, StaffRole,
};
use serde::Deserialize;

use crate::{
    auth::Person,
    desk::Decision,
    layout::{self, Section},
    payments::Reason,
    state::ConsoleState,
};

const PAGE_SIZE: i64 = 100;

/// The state shown (`PENDING` when absent; empty: every state), and what was just done.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    state: Option<String>,
    done: Option<String>,
}

#[tracing::instrument(skip_all, fields(staff = %op.name()))]
pub async fn page(
    State(state): State<ConsoleState>,
    op: Person<{ ANY }>,
    Query(filter): Query<Filter>,
) -> Response {
    let chosen = filter.state.unwrap_or_else(|| "PENDING".to_owned());
    let query = ListApprovals {
        state: (!chosen.is_empty()).then(|| chosen.clone()),
        kind: None,
        before: None,
        limit: Some(PAGE_SIZE),
    };
    let page = match state.payments.approvals(&query).await {
        Ok(p) => p,
        Err(e) => return layout::failed(e, Section::Approvals),
    };
    let admin = op.0.actor.role() == StaffRole::Admin;
    let me = op.0.actor.staff_id();
    let flash = match filter.done.as_deref() {
        Some("approve") => {
            Some("Approved: the refund was carried out through the saga, or the top-up deposited.")
        }
        Some("reject") => Some("Rejected: nothing was refunded or deposited."),
        _ => None,
    };
    let tab = |name: &str, label: &str| {
        html! { a href=(format!("/console/approvals?state={name}")) class=[(chosen == name).then_some("here")] { (label) } " " }
    };
    let body = html! {
        @if let Some(f) = flash { p.flash #flash { (f) } }
        p {
            "Refunds and top-ups above their four-eyes amounts wait here for an admin other than the one who asked. "
            (tab("PENDING", "Pending")) (tab("APPROVED", "Approved")) (tab("REJECTED", "Rejected")) (tab("", "All"))
        }
        @if page.approvals.is_empty() {
            p #no-approvals { "No approvals." }
        } @else {
            table #approvals {
                tr {
                    th { "id" } th { "kind" } th { "payment or member" } th { "amount" } th { "state" } th { "asked by" }
                    th { "asked (UTC)" } th { "reason" } th { "decided by" } th { "decision" }
                }
                @for a in &page.approvals {
                    tr.approval data-id=(a.id) data-state=(a.state.as_str()) data-kind=(a.kind.as_str()) {
                        td { (a.id) }
                        td { (a.kind.as_str()) }
                        @match (a.kind, a.payment_id) {
                            (ApprovalKind::Refund, Some(p)) => td.mono { a href=(format!("/console/payments/{p}")) { (p) } },
                            _ => td.mono { (a.target()) },
                        }
                        td { (layout::money(a.amount)) }
                        td { (a.state.as_str()) }
                        td.mono { (a.requested_by_name) }
                        td { (layout::at(a.requested_at)) }
                        td { (a.reason.as_deref().unwrap_or("")) }
                        td.mono { (a.decided_by_name.as_deref().unwrap_or("")) }
                        td {
                            @if a.state == ApprovalState::Pending && admin && a.requested_by != me {
                                form method="post" action=(format!("/console/approvals/{}/approve", a.id)) {
                                    textarea name="reason" rows="1" cols="30" required maxlength="500" placeholder="reason" {}
                                    " "
                                    button.danger type="submit" id=(format!("approve-{}", a.id)) { @if a.kind == ApprovalKind::TopUp { "Approve top-up" } @else { "Approve refund" } }
                                    " "
                                    button type="submit" id=(format!("reject-{}", a.id))
                                        formaction=(format!("/console/approvals/{}/reject", a.id)) { "Reject" }
                                }
                            } @else {
                                (a.decision_reason.as_deref().unwrap_or(""))
                            }
                        }
                    }
                }
            }
        }
    };
    layout::page(Section::Approvals, "Approvals", body).into_response()
}

async fn decide(
    state: ConsoleState,
    by: Acting,
    headers: HeaderMap,
    raw: String,
    decision: Decision,
    reason: Reason,
) -> Response {
    let not_found = || layout::failed(approval_not_found(), Section::Approvals);
    let confirmed = reason.confirmed(&headers, &raw, Section::Approvals, not_found);
    let (id, reason): (i64, _) = match confirmed {
        Ok(confirmed) => confirmed,
        Err(refused) => return *refused,
    };
    let done = match decision {
        Decision::Approve => "approve",
        Decision::Reject => "reject",
    };
    match state.payments.decide(&by, id, decision, Some(reason)).await {
        Ok(d) => {
            tracing::info!(approval = id, kind = %d.approval.kind, target = %d.approval.target(), decision = done, "console decision");
            Redirect::to(&format!("/console/approvals?state=&done={done}")).into_response()
        }
        Err(e) => layout::failed(e, Section::Approvals),
    }
}

fn approval_not_found() -> crate::DeskError {
    crate::DeskError::Refused(paysaga_common::ApiError::not_found(
        paysaga_contracts::staff::api::codes::APPROVAL_NOT_FOUND,
        "no such approval",
    ))
}

/// The POST of a decision: admins only (the desk refuses the one who asked).
macro_rules! decision_handler {
    ($decision:expr, $name:ident) => {
        #[tracing::instrument(skip_all, fields(staff = %op.name(), approval = %raw))]
        pub async fn $name(
            State(state): State<ConsoleState>,
            op: Person<{ ADMIN }>,
            headers: HeaderMap,
            Path(raw): Path<String>,
            Form(reason): Form<Reason>,
        ) -> Response {
            let by = op.0.clone();
            decide(state, by, headers, raw, $decision, reason).await
        }
    };
}

decision_handler!(Decision::Approve, approve);
decision_handler!(Decision::Reject, reject);
