//! The operators' side of the saga: [`Operations`] lists payments, shows one with its
//! step log, resumes one and refunds one. The operator API's routes call it, and the
//! console reads and acts through it as its [`PaymentDesk`].

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::http::StatusCode;
use paysaga_common::{error::codes as common_codes, ApiError};
use paysaga_console::{desk::Answer, DeskError, PaymentDesk, ProductPayments};
use paysaga_contracts::orchestrator::api::{
    page_limit, state_filter, ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::codes as staff_codes;
use paysaga_staff::{audit::Entry, Acting, AuditAction, AuditOutcome, StaffRole};
use uuid::Uuid;
use workflows::{request_refund, State};

use crate::{
    driver::Engine,
    error::{Breach, Error, Result},
    store::{self, PaymentRow},
};

/// The operators' actions on payments; cheap to clone.
#[derive(Clone)]
pub struct Operations {
    engine: Arc<Engine>,
    /// `RESPONSE_WAIT_MS`: how long a resume or refund waits for the payment to settle.
    response_wait: Duration,
    /// `STAFF_OPERATOR_REFUND_LIMIT`: the largest payment an operator may refund.
    operator_refund_limit: i64,
}

/// The step log's note for a person's action: what, by whom, and why if they said.
fn note(done: &str, by: &Acting, reason: Option<&str>) -> String {
    match reason {
        Some(r) => format!("{done} by {}: {r}", by.actor.name()),
        None => format!("{done} by {}", by.actor.name()),
    }
}

/// A 400 `INVALID_QUERY` for the list's query.
fn invalid_query(message: String) -> Error {
    ApiError::bad_request(common_codes::INVALID_QUERY, message).into()
}

impl Operations {
    pub fn new(engine: Arc<Engine>, response_wait: Duration, operator_refund_limit: i64) -> Self {
        Self {
            engine,
            response_wait,
            operator_refund_limit,
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
            .resume(id, &note("resumed", by, reason.as_deref()))
            .await;
        self.audited(by, AuditAction::PaymentResumed, id, reason, &result)
            .await?;
        result
    }

    /// A person's (or tool's) refund: an operator's only up to
    /// `STAFF_OPERATOR_REFUND_LIMIT` (403 `REFUND_ABOVE_LIMIT` above it), with its note
    /// on the step log and its audit row.
    pub async fn refund_as(
        &self,
        by: &Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<PaymentRow> {
        let result = match self.within_refund_limit(by, id).await {
            Ok(()) => {
                self.refund(id, &note("refund requested", by, reason.as_deref()))
                    .await
            }
            Err(e) => Err(e),
        };
        self.audited(by, AuditAction::PaymentRefunded, id, reason, &result)
            .await?;
        result
    }

    async fn within_refund_limit(&self, by: &Acting, id: Uuid) -> Result<()> {
        if by.actor.role() != StaffRole::Operator {
            return Ok(());
        }
        let row = self.load(id).await?;
        if row.amount > self.operator_refund_limit {
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
        Ok(())
    }

    /// The audit row of an action on payment `id`: done (with the state it left), refused
    /// (with the answer's code) or failed.
    async fn audited(
        &self,
        by: &Acting,
        action: AuditAction,
        id: Uuid,
        reason: Option<String>,
        result: &Result<PaymentRow>,
    ) -> Result<()> {
        let (outcome, detail) = match result {
            Ok(row) => (AuditOutcome::Done, Some(row.state.to_string())),
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
                target: Some(id.to_string()),
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
    ) -> Answer<'a, PaymentAdmin> {
        Box::pin(async move { Ok(self.refund_as(by, id, reason).await?.to_admin()) })
    }

    fn by_product(&self) -> Answer<'_, BTreeMap<Option<i64>, ProductPayments>> {
        Box::pin(async move { Ok(Operations::by_product(self).await?) })
    }

    fn traceparent(&self, id: Uuid) -> Answer<'_, Option<String>> {
        Box::pin(async move { Ok(store::traceparent(&self.engine.pool, id).await?) })
    }
}
