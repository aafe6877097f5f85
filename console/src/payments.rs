//! The payments pages: the filtered list, one payment's timeline, and resume and refund behind a confirmation, through the operator API's own functions.

use std::str::FromStr;

use axum::{
    extract::{Path, Query, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use maud::{html, Markup};
use serde::Deserialize;
use uuid::Uuid;
use workflows::State as SagaState;

use paysaga_contracts::orchestrator::api::{
    codes, ListPayments, PaymentAdmin, PaymentTimeline, Step,
};
use paysaga_contracts::staff::api::RefundAnswer;

use paysaga_staff::{
    allow::{ADMIN, ANY, OPERATOR},
    Acting,
};

use crate::{
    auth::{self, Person},
    desk::DeskError,
    layout::{self, Section},
    lists::{self, ListPage, NoList},
    state::ConsoleState,
    trace,
};

const PAGE_SIZE: i64 = 50;

/// The list's filters as the form sends them: every field a string, empty meaning
/// "any", so a half-filled form is never a 400.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    state: Option<String>,
    attention: Option<String>,
    min_age_secs: Option<String>,
    max_age_secs: Option<String>,
    error: Option<String>,
    cursor: Option<String>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl Filter {
    fn to_query(&self) -> Result<ListPayments, String> {
        let secs = |name: &str, v: &Option<String>| -> Result<Option<i64>, String> {
            given(v)
                .map(|s| {
                    s.parse::<i64>()
                        .map_err(|_| format!("{name} must be a whole number of seconds"))
                })
                .transpose()
        };
        Ok(ListPayments {
            state: given(&self.state).map(str::to_ascii_uppercase),
            needs_attention: match given(&self.attention) {
                None => None,
                Some("yes") => Some(true),
                Some("no") => Some(false),
                Some(other) => return Err(format!("attention {other:?}: yes, no or empty")),
            },
            min_age_secs: secs("minimum age", &self.min_age_secs)?,
            max_age_secs: secs("maximum age", &self.max_age_secs)?,
            error_contains: given(&self.error).map(str::to_owned),
            limit: Some(PAGE_SIZE),
            cursor: given(&self.cursor)
                .map(|c| c.parse::<Uuid>().map_err(|_| "bad page cursor".to_owned()))
                .transpose()?,
        })
    }

    /// The same filters as a query string, with another cursor.
    fn with_cursor(&self, cursor: Uuid) -> String {
        let mut q = url_pairs(&[
            ("state", given(&self.state)),
            ("attention", given(&self.attention)),
            ("min_age_secs", given(&self.min_age_secs)),
            ("max_age_secs", given(&self.max_age_secs)),
            ("error", given(&self.error)),
        ]);
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str(&format!("cursor={cursor}"));
        q
    }
}

/// `k=v&...` with values percent-encoded (everything but unreserved characters).
fn url_pairs(pairs: &[(&str, Option<&str>)]) -> String {
    pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", encode(v))))
        .collect::<Vec<_>>()
        .join("&")
}

pub(crate) fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn filter_form(f: &Filter) -> Markup {
    let state = given(&f.state).map(str::to_ascii_uppercase);
    let attention = given(&f.attention);
    html! {
        form.filters method="get" action="/console/payments" {
            label { "state"
                select name="state" id="filter-state" {
                    option value="" { "any" }
                    @for s in SagaState::ALL {
                        option value=(s.as_str()) selected[state.as_deref() == Some(s.as_str())] { (s.as_str()) }
                    }
                }
            }
            label { "needs attention"
                select name="attention" id="filter-attention" {
                    option value="" { "any" }
                    option value="yes" selected[attention == Some("yes")] { "yes" }
                    option value="no" selected[attention == Some("no")] { "no" }
                }
            }
            label { "older than (s)" input type="number" min="0" name="min_age_secs" id="filter-min-age" value=[given(&f.min_age_secs)]; }
            label { "younger than (s)" input type="number" min="0" name="max_age_secs" id="filter-max-age" value=[given(&f.max_age_secs)]; }
            label { "error contains" input type="text" name="error" id="filter-error" value=[given(&f.error)]; }
            button.primary type="submit" id="filter-apply" { "Filter" }
            a href="/console/payments" { "Clear" }
        }
    }
}

impl ListPage for Filter {
    const SECTION: Section = Section::Payments;
    const TITLE: &'static str = "Payments";

    async fn body(self, state: ConsoleState, _op: Acting) -> Result<Markup, NoList> {
        let form = filter_form(&self);
        // Filters that are refused, or a list that could not be read: the form again,
        // with why, under the status.
        let refused = |status: StatusCode, message: &str| {
            let body = html! { (form) p.error { (message) } };
            NoList::Answer((status, layout::page(Self::SECTION, Self::TITLE, body)).into_response())
        };
        let query = self
            .to_query()
            .map_err(|e| refused(StatusCode::BAD_REQUEST, &e))?;
        let page = state.payments.list(&query).await.map_err(|e| match e {
            DeskError::Refused(api) => refused(api.status, &api.message),
            e @ DeskError::Internal(_) => {
                tracing::error!(error = %e, "console: the payments list");
                refused(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the list could not be read",
                )
            }
        })?;
        Ok(html! {
            (form)
            (lists::table_or(html! { p #no-payments { "No payments match." } }, "payments", header(Rows::List), &page.payments, |p| row(p, Rows::List)))
            @if let Some(c) = page.next_cursor {
                p { a #next-page href=(format!("/console/payments?{}", self.with_cursor(c))) { "Older →" } }
            }
        })
    }
}

/// Which table a payment row is drawn for: the payments list shows every column; the
/// drop page's attention table leaves out what every row there shares (flagged, and the
/// amount and member are on the timeline) and offers Resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rows {
    List,
    Attention,
}

/// The header row of a payments table.
pub(super) fn header(rows: Rows) -> Markup {
    let list = rows == Rows::List;
    html! {
        tr {
            th { "payment" } th { "state" } th { "pending" }
            @if list { th { "attention" } }
            th.num { "attempts" }
            @if list { th.num { "amount" } th { "member" } }
            th { "age" } th { "last error" }
            @if !list { th { "" } }
        }
    }
}

/// One payment's row, linking to its timeline.
pub(super) fn row(p: &PaymentAdmin, rows: Rows) -> Markup {
    let id = p.payment.id;
    let list = rows == Rows::List;
    html! {
        tr.payment data-id=(id) data-state=(p.payment.state) {
            td.mono { a href=(format!("/console/payments/{id}")) { (id) } }
            td.state { (p.payment.state) }
            td { (p.pending_action.as_deref().unwrap_or("")) }
            @if list { td { @if p.needs_attention { span.bad { "yes" } } } }
            td.num { (p.attempts) }
            @if list {
                td.num { (layout::money(p.payment.amount)) }
                td.mono { (p.payment.member_id) }
            }
            td { (layout::age(p.payment.created_at)) }
            td.mono { (p.last_error.as_deref().unwrap_or("")) }
            @if !list { td { a href=(format!("/console/payments/{id}/resume")) { "Resume…" } } }
        }
    }
}

fn payment_not_found() -> DeskError {
    DeskError::not_found(codes::PAYMENT_NOT_FOUND, "no such payment")
}

/// The payment a page is about, by the id in its path (one that is no id is no payment).
async fn load(state: &ConsoleState, raw: &str) -> Result<PaymentTimeline, DeskError> {
    let Ok(id) = raw.parse::<Uuid>() else {
        return Err(payment_not_found());
    };
    state.payments.timeline(id).await
}

#[derive(Debug, Default, Deserialize)]
pub struct Done {
    done: Option<String>,
}

/// The payment's fields; `trace` is `Some` on the timeline (the trace id or none).
fn facts(p: &PaymentAdmin, trace: Option<Option<&str>>) -> Markup {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    html! {
        dl.facts #facts {
            dt { "state" } dd #state { (p.payment.state) @if p.payment.terminal { " (terminal)" } }
            dt { "pending action" } dd #pending { (opt(p.pending_action.clone())) }
            dt { "needs attention" } dd #needs-attention { @if p.needs_attention { span.bad { "yes" } } @else { "no" } }
            dt { "last error" } dd.mono { (opt(p.last_error.clone())) }
            dt { "failure code" } dd { (opt(p.payment.failure_code.clone())) }
            dt { "amount" } dd { (layout::money(p.payment.amount)) }
            dt { "member, account" } dd.mono { (p.payment.member_id) ", " (p.payment.account_id) }
            dt { "reservation" } dd.mono { (p.payment.reservation_id) }
            dt { "attempts" } dd { (p.attempts) }
            dt { "next attempt" } dd { (opt(p.next_attempt_at.map(layout::at))) }
            dt { "lease" } dd.mono { (opt(p.lease_owner.map(|o| o.to_string()))) " until " (opt(p.lease_until.map(layout::at))) }
            dt { "version" } dd { (p.version) }
            dt { "created, updated" } dd { (layout::at(p.payment.created_at)) ", " (layout::at(p.payment.updated_at)) " UTC" }
            // The trace id comes from the payment's `traceparent` when the row carries
            // one; payments recorded without trace context show none.
            @if let Some(trace_id) = trace {
                dt { "trace id" } dd #trace-id {
                    @match trace_id {
                        Some(t) => code { (t) },
                        None => span.muted { "none recorded" },
                    }
                }
            }
        }
    }
}

#[tracing::instrument(skip_all, fields(staff = %op.name(), payment_id = %raw))]
pub async fn timeline(
    State(state): State<ConsoleState>,
    op: Person<{ ANY }>,
    Path(raw): Path<String>,
    Query(done): Query<Done>,
) -> Response {
    let t = match load(&state, &raw).await {
        Ok(t) => t,
        Err(e) => return layout::failed(e, Section::Payments),
    };
    let id = t.payment.payment.id;
    let traceparent = state.payments.traceparent(id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "console: traceparent");
        None
    });
    let trace_id = traceparent.as_deref().and_then(trace::trace_id);
    let p = &t.payment;
    let flash = match done.done.as_deref() {
        Some("resume") => Some(format!("Resumed: the payment is now {}.", p.payment.state)),
        Some("refund") => Some(format!(
            "Refund requested: the payment is now {}.",
            p.payment.state
        )),
        Some("approval") => Some(
            "Refund asked for: above the four-eyes amount, it awaits an admin other than you \
             (paysaga approvals)."
                .to_owned(),
        ),
        _ => None,
    };
    // Offered only to the roles the actions admit (the actions check again).
    let acts = paysaga_staff::bit(op.0.actor.role()) & (OPERATOR | ADMIN) != 0;
    let resumable = acts && p.pending_action.is_some() && !p.payment.terminal;
    let refundable = acts && p.payment.state == SagaState::Completed.as_str();
    let header = html! {
        tr {
            th.num { "seq" } th { "action" } th { "operation key" } th { "outcome" } th { "move" }
            th.num { "status" } th.num { "latency ms" } th { "error" } th { "settled by query" } th { "driver" } th { "at (UTC)" }
        }
    };
    let step = |s: &Step| {
        html! {
            tr.step {
                td.num { (s.seq) }
                td { (s.action) }
                td.mono { (s.operation_key) }
                td class=[(s.outcome != "SUCCEEDED").then_some("warn")] { (s.outcome) }
                td { (s.from_state) " → " (s.to_state) }
                td.num { (s.downstream_status.map(|v| v.to_string()).unwrap_or_default()) }
                td.num { (s.latency_ms) }
                td.mono { (s.error.as_deref().unwrap_or("")) }
                td { @if s.settled_by_query { "yes" } }
                td.mono title=(s.driver) { (s.driver.to_string().get(..8).unwrap_or("")) }
                td { (layout::at(s.created_at)) }
            }
        }
    };
    let body = html! {
        @if let Some(f) = flash { p.flash #flash { (f) } }
        p.mono { (id) }
        (facts(p, Some(trace_id)))
        p {
            @if resumable { a #resume href=(format!("/console/payments/{id}/resume")) { button type="button" { "Resume…" } } " " }
            @if refundable { a #refund href=(format!("/console/payments/{id}/refund")) { button type="button" { "Refund…" } } }
        }
        h2 { "Steps" }
        (lists::table_or(html! { p.muted { "No step recorded yet." } }, "steps", header, &t.steps, step))
    };
    layout::page(Section::Payments, "Payment", body).into_response()
}

/// Which operator action a confirmation is for.
#[derive(Clone, Copy)]
enum Action {
    Resume,
    Refund,
}

impl Action {
    fn path(self) -> &'static str {
        match self {
            Action::Resume => "resume",
            Action::Refund => "refund",
        }
    }
}

async fn confirm(state: ConsoleState, raw: String, action: Action) -> Response {
    let t = match load(&state, &raw).await {
        Ok(t) => t,
        Err(e) => return layout::failed(e, Section::Payments),
    };
    let id = t.payment.payment.id;
    let p = &t.payment;
    let (title, what, button) = match action {
        Action::Resume => (
            "Resume payment?",
            "The attention flag and the attempt count are cleared and the payment is driven now, \
             from where it stands, with the same operation keys (a step that already took \
             effect downstream is not repeated).",
            "Resume payment",
        ),
        Action::Refund => (
            "Refund payment?",
            "The order is cancelled and the buyer's money is credited back, through the saga \
             (REFUND_PROCESSING → REFUNDED). This cannot be undone.",
            "Refund payment",
        ),
    };
    let body = html! {
        (facts(p, None))
        p { (what) }
        form method="post" action=(format!("/console/payments/{id}/{}", action.path())) {
            p { label for="reason" { "Reason (kept in the audit trail and on the payment's step log)" } br;
                textarea id="reason" name="reason" rows="2" cols="60" required maxlength="500" {} }
            button.danger type="submit" id="confirm" { (button) }
            " "
            a href=(format!("/console/payments/{id}")) { "Cancel" }
        }
    };
    layout::page(Section::Payments, title, body).into_response()
}

/// The confirmation form's fields.
#[derive(Debug, Default, Deserialize)]
pub struct Reason {
    reason: Option<String>,
}

/// An action whose form passed [`Reason::confirmed`]: who sent it, the id it is on, and
/// why.
pub struct Confirmed<T> {
    pub by: Acting,
    pub id: T,
    pub reason: String,
}

impl Reason {
    /// The confirmed form's checks before anything is done, in this order: it was sent
    /// from the console's own pages, `raw` is an id (else the page of `not_found`), and a
    /// reason was given. The id and the reason, or the page that refuses the form.
    pub fn confirmed<T: FromStr>(
        &self,
        headers: &HeaderMap,
        raw: &str,
        section: Section,
        not_found: impl FnOnce() -> DeskError,
    ) -> Result<(T, String), Box<Response>> {
        if !auth::same_origin(headers) {
            return Err(Box::new(auth::cross_origin()));
        }
        let id = raw
            .parse::<T>()
            .map_err(|_| Box::new(layout::failed(not_found(), section)))?;
        match paysaga_staff::accounts::reason(self.reason.as_deref()) {
            Ok(Some(reason)) => Ok((id, reason)),
            Ok(None) | Err(_) => Err(Box::new(layout::failed(
                paysaga_staff::Error::ReasonInvalid,
                section,
            ))),
        }
    }
}

async fn act(state: ConsoleState, confirmed: Confirmed<Uuid>, action: Action) -> Response {
    let Confirmed { by, id, reason } = confirmed;
    let result = match action {
        Action::Resume => state
            .payments
            .resume(&by, id, Some(reason))
            .await
            .map(RefundAnswer::Refunded),
        Action::Refund => state.payments.refund(&by, id, Some(reason)).await,
    };
    let done = match result {
        Ok(RefundAnswer::Refunded(p)) => {
            tracing::info!(payment_id = %id, state = %p.payment.state, action = action.path(), "console action");
            action.path()
        }
        Ok(RefundAnswer::AwaitingApproval(a)) => {
            tracing::info!(payment_id = %id, approval = a.id, "console action: refund awaits approval");
            "approval"
        }
        Err(e) => return layout::failed(e, Section::Payments),
    };
    Redirect::to(&format!("/console/payments/{id}?done={done}")).into_response()
}

/// The two handlers of an operator action on a payment: `$confirm` (GET) asks the
/// operator to confirm it, `$act` (POST) does it.
macro_rules! action_handlers {
    ($action:expr, $confirm:ident, $act:ident) => {
        #[tracing::instrument(skip_all, fields(staff = %op.name(), payment_id = %raw))]
        pub async fn $confirm(
            State(state): State<ConsoleState>,
            op: Person<{ OPERATOR | ADMIN }>,
            Path(raw): Path<String>,
        ) -> Response {
            confirm(state, raw, $action).await
        }

        confirmed_post! {
            $act, OPERATOR | ADMIN, payment_id, Section::Payments, payment_not_found, act($action)
        }
    };
}

action_handlers!(Action::Resume, confirm_resume, resume);
action_handlers!(Action::Refund, confirm_refund, refund);
