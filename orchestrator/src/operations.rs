//! The operators' side of the saga: [`Operations`] lists payments, shows one with its
//! step log, resumes one and refunds one. The operator API's routes call it, and the
//! console reads and acts through it as its [`PaymentDesk`].
//!
//! Four eyes for money: a refund of a payment above `STAFF_FOUR_EYES_ABOVE` is not
//! carried out when asked for; it becomes a pending refund approval, which an admin
//! other than the one who asked approves (the refund is then carried out, through the
//! same [`Operations::refund`]) or rejects.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::http::StatusCode;
use paysaga_common::{error::codes as common_codes, ApiError};
use paysaga_console::{
    desk::Answer, Decision, DeskError, DropSeries, PaymentDesk, ProductPayments,
};
use paysaga_contracts::orchestrator::api::{
    page_limit, state_filter, ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::{
    codes as staff_codes, ApprovalDecided, ApprovalPage, ApprovalState, ListApprovals, RefundAnswer,
};
use paysaga_staff::{audit::Entry, Acting, AuditAction, AuditOutcome, StaffRole};
use uuid::Uuid;
use workflows::{request_refund, State};

use crate::{
    driver::Engine,
    error::{Breach, Error, Result},
    store::{self, approvals::ApprovalRow, PaymentRow},
};

/// The operators' actions on payments; cheap to clone.
#[derive(Clone)]
pub struct Operations {
    engine: Arc<Engine>,
    /// `RESPONSE_WAIT_MS`: how long a resume or refund waits for the payment to settle.
    response_wait: Duration,
    /// `STAFF_OPERATOR_REFUND_LIMIT`: the largest payment an operator may refund.
    operator_refund_limit: i64,
    /// `STAFF_FOUR_EYES_ABOVE`: a refund of a payment above it waits for a second person.
    four_eyes_above: i64,
}

/// What a refund request came to.
#[derive(Debug, Clone)]
pub enum Refund {
    /// Carried out (or under way): the payment after waiting up to `RESPONSE_WAIT_MS`.
    Done(PaymentRow),
    /// Above `STAFF_FOUR_EYES_ABOVE`: the approval awaiting a second person.
    AwaitingApproval(ApprovalRow),
}

impl Refund {
    pub fn to_api(&self) -> RefundAnswer {
        match self {
            Refund::Done(row) => RefundAnswer::Refunded(row.to_admin()),
            Refund::AwaitingApproval(a) => RefundAnswer::AwaitingApproval(a.to_api()),
        }
    }
}

/// The approval state a decision leaves.
fn decided_state(decision: Decision) -> ApprovalState {
    match decision {
        Decision::Approve => ApprovalState::Approved,
        Decision::Reject => ApprovalState::Rejected,
    }
}

/// The audit trail's name for a decision.
fn decision_action(decision: Decision) -> AuditAction {
    match decision {
        Decision::Approve => AuditAction::RefundApproved,
        Decision::Reject => AuditAction::RefundRejected,
    }
}

/// Whether a refund is carried out when asked for, or waits for a second person.
enum RefundGate {
    Now,
    /// The payment's amount, as the approval records it.
    FourEyes {
        amount: i64,
    },
}

/// What an audit row says a done action left.
trait Left {
    fn left(&self) -> String;
}

impl Left for PaymentRow {
    /// The payment's state.
    fn left(&self) -> String {
        self.state.to_string()
    }
}

impl Left for ApprovalRow {
    /// The approval and its state.
    fn left(&self) -> String {
        format!("approval {} {}", self.id, self.state)
    }
}

/// The step log's note for a person's action: what, by whom (their name), and why if
/// they said.
fn note(done: &str, by: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{done} by {by}: {r}"),
        None => format!("{done} by {by}"),
    }
}

/// A 400 `INVALID_QUERY` for the list's query.
fn invalid_query(message: String) -> Error {
    ApiError::bad_request(common_codes::INVALID_QUERY, message).into()
}

impl Operations {
    /// `operator_refund_limit` and `four_eyes_above` from the staff settings
    /// (`STAFF_OPERATOR_REFUND_LIMIT`, `STAFF_FOUR_EYES_ABOVE`).
    pub fn new(
        engine: Arc<Engine>,
        response_wait: Duration,
        operator_refund_limit: i64,
        four_eyes_above: i64,
    ) -> Self {
        Self {
            engine,
            response_wait,
            operator_refund_limit,
            four_eyes_above,
        }
    }

    /// A person's (or tool's) resume, with its note on the step log and its audit row.
    pub async fn resume_as(
        &self,
        by: &Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<PaymentRow> {
        let result = self
            .resume(id, &note("resumed", &by.actor.name(), reason.as_deref()))
            .await;
        self.audited(by, AuditAction::PaymentResumed, id, reason, &result)
            .await?;
        result
    }

    /// A person's (or tool's) refund: an operator's only up to
    /// `STAFF_OPERATOR_REFUND_LIMIT` (403 `REFUND_ABOVE_LIMIT` above it); a payment above
    /// `STAFF_FOUR_EYES_ABOVE` only once a second person approves it (the pending
    /// approval is the answer, the same one while it is pending). With its note on the
    /// step log and its audit row (`PAYMENT_REFUNDED`, or `REFUND_REQUESTED`).
    pub async fn refund_as(&self, by: &Acting, id: Uuid, reason: Option<String>) -> Result<Refund> {
        let gate = self.refund_gate(by, id).await;
        if let Ok(RefundGate::FourEyes { amount }) = gate {
            let result =
                store::approvals::request(&self.engine.pool, id, amount, by, reason.as_deref())
                    .await;
            self.audited(by, AuditAction::RefundRequested, id, reason, &result)
                .await?;
            return result.map(Refund::AwaitingApproval);
        }
        let result = match gate {
            Ok(_) => {
                let note = note("refund requested", &by.actor.name(), reason.as_deref());
                self.refund(id, &note).await
            }
            Err(e) => Err(e),
        };
        self.audited(by, AuditAction::PaymentRefunded, id, reason, &result)
            .await?;
        result.map(Refund::Done)
    }

    /// Whether `by` may refund payment `id`, and whether at once: an operator only up to
    /// their limit; a payment above `STAFF_FOUR_EYES_ABOVE` that a refund would move
    /// waits for a second person (one refunding or refunded already is answered as it
    /// is, one that cannot be refunded is refused, so neither asks for an approval).
    async fn refund_gate(&self, by: &Acting, id: Uuid) -> Result<RefundGate> {
        let row = self.load(id).await?;
        if by.actor.role() == StaffRole::Operator && row.amount > self.operator_refund_limit {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                staff_codes::REFUND_ABOVE_LIMIT,
                format!(
                    "an operator refunds payments of at most {} (minor units); this one is {}: an admin's to refund",
                    self.operator_refund_limit, row.amount
                ),
            )
            .into());
        }
        if row.amount <= self.four_eyes_above
            || matches!(row.state, State::RefundProcessing | State::Refunded)
        {
            return Ok(RefundGate::Now);
        }
        request_refund(row.position()?).map_err(|_| Error::NotRefundable(row.state))?;
        Ok(RefundGate::FourEyes { amount: row.amount })
    }

    /// The refund approvals, newest first, filtered by state, keyset paged by id.
    pub async fn approvals(&self, filter: &ListApprovals) -> Result<ApprovalPage> {
        let limit = page_limit(filter.limit)?;
        let state = state_filter::<ApprovalState>(
            filter.state.as_deref(),
            ": PENDING, APPROVED or REJECTED",
        )?;
        let rows = store::approvals::list(&self.engine.pool, state, filter.before, limit).await?;
        let next_before = (rows.len() as i64 == limit)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        Ok(ApprovalPage {
            approvals: rows.iter().map(ApprovalRow::to_api).collect(),
            next_before,
        })
    }

    /// A second person's decision on refund approval `id`, with its audit row
    /// (`REFUND_APPROVED` or `REFUND_REJECTED`, about the payment). Refused: 404
    /// `APPROVAL_NOT_FOUND`; 403 `SAME_PERSON` for the one who asked; 409
    /// `APPROVAL_DECIDED` once decided (of two deciding at once, one wins). An approval
    /// carries the refund out through [`Operations::refund`], its note naming both
    /// people, with its own `PAYMENT_REFUNDED` row.
    pub async fn decide_as(
        &self,
        by: &Acting,
        id: i64,
        decision: Decision,
        reason: Option<String>,
    ) -> Result<ApprovalDecided> {
        let found = store::approvals::load(&self.engine.pool, id).await?;
        let decided = match &found {
            None => Err(ApiError::not_found(
                staff_codes::APPROVAL_NOT_FOUND,
                format!("no refund approval {id}"),
            )
            .into()),
            Some(asked) => self.decide(by, asked, decision, reason.as_deref()).await,
        };
        let target = found.map_or_else(|| format!("approval:{id}"), |a| a.payment_id.to_string());
        self.audited_on(
            by,
            decision_action(decision),
            target.clone(),
            reason.clone(),
            &decided,
        )
        .await?;
        let approval = decided?;
        if decision == Decision::Reject {
            return Ok(ApprovalDecided {
                approval: approval.to_api(),
                payment: None,
            });
        }
        let note = format!(
            "{}; {}",
            note(
                "refund requested",
                &approval.requested_by_name,
                approval.reason.as_deref()
            ),
            note("approved", &by.actor.name(), reason.as_deref())
        );
        let result = self.refund(approval.payment_id, &note).await;
        self.audited_on(by, AuditAction::PaymentRefunded, target, reason, &result)
            .await?;
        Ok(ApprovalDecided {
            approval: approval.to_api(),
            payment: Some(result?.to_admin()),
        })
    }

    /// The decision itself: the one who asked may not decide; a pending approval is
    /// decided by one conditional UPDATE.
    async fn decide(
        &self,
        by: &Acting,
        asked: &ApprovalRow,
        decision: Decision,
        reason: Option<&str>,
    ) -> Result<ApprovalRow> {
        if asked.requested_by.is_some() && asked.requested_by == by.actor.staff_id() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                staff_codes::SAME_PERSON,
                "four eyes: a refund is approved or rejected by someone other than the one who asked for it",
            )
            .into());
        }
        store::approvals::decide(
            &self.engine.pool,
            asked.id,
            decided_state(decision),
            by,
            reason,
        )
        .await?
        .ok_or_else(|| {
            ApiError::conflict(
                staff_codes::APPROVAL_DECIDED,
                format!("refund approval {} was decided already", asked.id),
            )
            .into()
        })
    }

    /// The audit row of an action on payment `id`: done (with what it left), refused
    /// (with the answer's code) or failed.
    async fn audited(
        &self,
        by: &Acting,
        action: AuditAction,
        id: Uuid,
        reason: Option<String>,
        result: &Result<impl Left>,
    ) -> Result<()> {
        self.audited_on(by, action, id.to_string(), reason, result)
            .await
    }

    /// The audit row of an action on `target`.
    async fn audited_on(
        &self,
        by: &Acting,
        action: AuditAction,
        target: String,
        reason: Option<String>,
        result: &Result<impl Left>,
    ) -> Result<()> {
        let (outcome, detail) = match result {
            Ok(done) => (AuditOutcome::Done, Some(done.left())),
            Err(e) => match e.api() {
                Some(api) => (AuditOutcome::Refused, Some(api.code.to_owned())),
                None => (AuditOutcome::Failed, None),
            },
        };
        paysaga_staff::audit::record(
            &self.engine.pool,
            by,
            Entry {
                action,
                target: Some(target),
                reason,
                outcome,
                detail,
            },
        )
        .await?;
        Ok(())
    }

    /// The payment `id`, or `PAYMENT_NOT_FOUND`.
    async fn load(&self, id: Uuid) -> Result<PaymentRow> {
        store::load(&self.engine.pool, id)
            .await?
            .ok_or(Error::PaymentNotFound)
    }

    /// The operator's list with its checks, newest first, keyset paged.
    pub async fn list(&self, filter: &ListPayments) -> Result<PaymentPage> {
        let limit = page_limit(filter.limit)?;
        let state = state_filter::<State>(filter.state.as_deref(), "")?;
        for (name, v) in [
            ("min_age_secs", filter.min_age_secs),
            ("max_age_secs", filter.max_age_secs),
        ] {
            if v.is_some_and(|v| !(0..=10 * 365 * 86_400).contains(&v)) {
                return Err(invalid_query(format!("{name} must be 0 to 315360000")));
            }
        }
        let rows = store::list(&self.engine.pool, filter, state, limit).await?;
        let next_cursor = (rows.len() as i64 == limit)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        Ok(PaymentPage {
            payments: rows.iter().map(PaymentRow::to_admin).collect(),
            next_cursor,
        })
    }

    /// One payment and its step log.
    pub async fn timeline(&self, id: Uuid) -> Result<PaymentTimeline> {
        let row = self.load(id).await?;
        let steps = store::steps(&self.engine.pool, id).await?;
        Ok(PaymentTimeline {
            payment: row.to_admin(),
            steps,
        })
    }

    /// Resume: clear the attention flag and the attempt count, drive the payment now
    /// and wait up to `RESPONSE_WAIT_MS` for it to settle. `note` is recorded on the step.
    pub async fn resume(&self, id: Uuid, note: &str) -> Result<PaymentRow> {
        let engine = &self.engine;
        let row = self.load(id).await?;
        let pos = row.position()?;
        let Some(action) = pos.pending() else {
            return Err(Error::NotResumable(row.state));
        };
        let moved = store::operator_move(
            &engine.pool,
            &row,
            engine.instance,
            engine.lease,
            pos,
            action,
            note,
        )
        .await?;
        // None: someone holds a live lease; it is being driven already.
        let handle = moved.and_then(|moved| engine.spawn_drive(moved, None));
        engine
            .wait_for_terminal(id, handle, self.response_wait)
            .await
    }

    /// Refund a settled COMPLETED payment through the saga (a refund already under way
    /// is returned as it is); waits up to `RESPONSE_WAIT_MS`. `note` is recorded on the
    /// step.
    pub async fn refund(&self, id: Uuid, note: &str) -> Result<PaymentRow> {
        let engine = &self.engine;
        let row = self.load(id).await?;
        let pos = row.position()?;
        if matches!(pos.state(), State::RefundProcessing | State::Refunded) {
            return Ok(row);
        }
        let to = request_refund(pos).map_err(|_| Error::NotRefundable(row.state))?;
        let action = to.pending().ok_or(Breach::RefundOwesNothing {
            payment: row.id,
            state: to.state(),
        })?;
        let Some(moved) = store::operator_move(
            &engine.pool,
            &row,
            engine.instance,
            engine.lease,
            to,
            action,
            note,
        )
        .await?
        else {
            let now = self.load(id).await?;
            if matches!(now.state, State::RefundProcessing | State::Refunded) {
                return Ok(now);
            }
            return Err(Error::NotRefundable(now.state));
        };
        let handle = engine.spawn_drive(moved, None);
        engine
            .wait_for_terminal(id, handle, self.response_wait)
            .await
    }

    /// Payments per product and state, with the attention count and the last minute's
    /// rates, as the console's drop page shows them.
    pub async fn by_product(&self) -> Result<BTreeMap<Option<i64>, ProductPayments>> {
        let mut out: BTreeMap<Option<i64>, ProductPayments> = BTreeMap::new();
        for c in store::product_census(&self.engine.pool).await? {
            let p = out.entry(c.product_id).or_default();
            p.by_state.insert(c.state, c.n);
            p.attention += c.attention;
            p.created_last_minute += c.created_last_minute;
            match c.state {
                State::Completed => p.completed_last_minute += c.updated_last_minute,
                State::Failed => p.failed_last_minute += c.updated_last_minute,
                State::Refunded => p.refunded_last_minute += c.updated_last_minute,
                _ => {}
            }
        }
        Ok(out)
    }
}

impl From<Error> for DeskError {
    fn from(e: Error) -> Self {
        DeskError::new(e.api(), e)
    }
}

/// The console's view of payments: the very functions the operator API runs.
impl PaymentDesk for Operations {
    fn list<'a>(&'a self, filter: &'a ListPayments) -> Answer<'a, PaymentPage> {
        Box::pin(async move { Ok(Operations::list(self, filter).await?) })
    }

    fn timeline(&self, id: Uuid) -> Answer<'_, PaymentTimeline> {
        Box::pin(async move { Ok(Operations::timeline(self, id).await?) })
    }

    fn resume<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, PaymentAdmin> {
        Box::pin(async move { Ok(self.resume_as(by, id, reason).await?.to_admin()) })
    }

    fn refund<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, RefundAnswer> {
        Box::pin(async move { Ok(self.refund_as(by, id, reason).await?.to_api()) })
    }

    fn approvals<'a>(&'a self, filter: &'a ListApprovals) -> Answer<'a, ApprovalPage> {
        Box::pin(async move { Ok(Operations::approvals(self, filter).await?) })
    }

    fn decide<'a>(
        &'a self,
        by: &'a Acting,
        id: i64,
        decision: Decision,
        reason: Option<String>,
    ) -> Answer<'a, ApprovalDecided> {
        Box::pin(async move { Ok(self.decide_as(by, id, decision, reason).await?) })
    }

    fn by_product(&self) -> Answer<'_, BTreeMap<Option<i64>, ProductPayments>> {
        Box::pin(async move { Ok(Operations::by_product(self).await?) })
    }

    fn traceparent(&self, id: Uuid) -> Answer<'_, Option<String>> {
        Box::pin(async move { Ok(store::traceparent(&self.engine.pool, id).await?) })
    }

    fn series(&self) -> Answer<'_, BTreeMap<i64, DropSeries>> {
        Box::pin(async move { Ok(store::drop_series(&self.engine.pool).await?) })
    }
}
