//! Approvals (four eyes): the refunds above `STAFF_FOUR_EYES_ABOVE` and the top-ups
//! above `STAFF_TOP_UP_FOUR_EYES_ABOVE`, each with its kind and where it stands, newest
//! first; an admin other than the one who asked approves (the refund or the top-up is
//! carried out) or rejects one, with a reason.

use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use paysaga_contracts::staff::api::{codes, Approval, ApprovalKind, ApprovalState, ListApprovals};
use paysaga_staff::{allow::ADMIN, Acting, StaffRole};
use serde::Deserialize;

use crate::{
    desk::{Decision, DeskError},
    layout::{self, Section},
    lists::{self, ListPage, NoList},
    payments::Confirmed,
    state::ConsoleState,
};

const PAGE_SIZE: i64 = 100;

/// The state shown (`PENDING` when absent; empty: every state), and what was just done.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    state: Option<String>,
    done: Option<String>,
}

impl Filter {
    /// What the desk is asked for: the newest approvals in the state shown.
    fn to_query(&self) -> ListApprovals {
        let chosen = self.chosen();
        ListApprovals {
            state: (!chosen.is_empty()).then(|| chosen.to_owned()),
            kind: None,
            before: None,
            limit: Some(PAGE_SIZE),
        }
    }

    /// The state shown: PENDING when none is chosen, every state for the empty one.
    fn chosen(&self) -> &str {
        self.state.as_deref().unwrap_or("PENDING")
    }
}

impl ListPage for Filter {
    const SECTION: Section = Section::Approvals;
    const TITLE: &'static str = "Approvals";

    async fn body(self, state: ConsoleState, op: Acting) -> Result<Markup, NoList> {
        let page = state.payments.approvals(&self.to_query()).await?;
        let admin = op.actor.role() == StaffRole::Admin;
        let me = op.actor.staff_id();
        let chosen = self.chosen();
        let flash = match self.done.as_deref() {
            Some("approve") => Some(
                "Approved: the refund was carried out through the saga, or the top-up deposited.",
            ),
            Some("reject") => Some("Rejected: nothing was refunded or deposited."),
            _ => None,
        };
        let tab = |name: &str, label: &str| {
            html! { a href=(format!("/console/approvals?state={name}")) class=[(chosen == name).then_some("here")] { (label) } " " }
        };
        let header = html! {
            tr {
                th { "id" } th { "kind" } th { "payment or member" } th { "amount" } th { "state" } th { "asked by" }
                th { "asked (UTC)" } th { "reason" } th { "decided by" } th { "decision" }
            }
        };
        let row = |a: &Approval| {
            html! {
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
        };
        Ok(html! {
            @if let Some(f) = flash { p.flash #flash { (f) } }
            p {
                "Refunds and top-ups above their four-eyes amounts wait here for an admin other than the one who asked. "
                (tab("PENDING", "Pending")) (tab("APPROVED", "Approved")) (tab("REJECTED", "Rejected")) (tab("", "All"))
            }
            (lists::table_or(html! { p #no-approvals { "No approvals." } }, "approvals", header, &page.approvals, row))
        })
    }
}

async fn decide(state: ConsoleState, confirmed: Confirmed<i64>, decision: Decision) -> Response {
    let Confirmed { by, id, reason } = confirmed;
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

fn approval_not_found() -> DeskError {
    DeskError::not_found(codes::APPROVAL_NOT_FOUND, "no such approval")
}

// The POSTs of a decision: admins only (the desk refuses the one who asked).
confirmed_post! {
    approve, ADMIN, approval, Section::Approvals, approval_not_found, decide(Decision::Approve)
}
confirmed_post! {
    reject, ADMIN, approval, Section::Approvals, approval_not_found, decide(Decision::Reject)
}
