//! Payments in PostgreSQL, one module per concern: creation and loading (`payments`),
//! leases and recovery claims (`leases`), the compare-and-set step record and the step
//! log (`steps`), and the operator's listing and counts (`listing`). Every write is one
//! short transaction.

mod group;
mod leases;
mod listing;
mod payments;
mod steps;

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;
use workflows::{Action, Position, State};

use crate::{
    api::{Payment, PaymentAdmin},
    error::{Error, Result},
};

pub use group::Writes;
pub use leases::{claim_due, claim_one, release};
pub use listing::{census, list, Census};
pub use payments::{
    by_reservation, explain_missing, insert_linked_payment, insert_many, load, Linked, NewPayment,
};
pub use steps::{
    operator_move, record_many, record_step, record_steps, steps, Answer, Move, Recorded,
    Recording, StepMove, StepRecord,
};

pub(crate) const PAYMENT_COLUMNS: &str = r#"id, member_id, account_id, reservation_id, amount, state, pending_action,
    attempts, next_attempt_at, needs_attention, last_error, failure_code, lease_owner, lease_until,
    version, created_at, updated_at, traceparent"#;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
    pub state: String,
    pub pending_action: Option<String>,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub needs_attention: bool,
    pub last_error: Option<String>,
    pub failure_code: Option<String>,
    pub lease_owner: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The W3C trace context of the request that created the payment (`None` when
    /// tracing was off): every later drive of it, by recovery too, joins that trace.
    pub traceparent: Option<String>,
}

impl PaymentRow {
    /// The stored position, checked against the machine.
    pub fn position(&self) -> Result<Position> {
        let bad = |e: String| Error::Invariant(format!("payment {}: {e}", self.id));
        let state: State = self
            .state
            .parse()
            .map_err(|e: workflows::ParseError| bad(e.to_string()))?;
        let pending = match &self.pending_action {
            Some(a) => Some(a.parse::<Action>().map_err(|e| bad(e.to_string()))?),
            None => None,
        };
        Position::new(state, pending).map_err(|e| bad(e.to_string()))
    }

    pub fn is_terminal(&self) -> bool {
        self.state
            .parse::<State>()
            .map(State::is_terminal)
            .unwrap_or(false)
    }

    pub fn to_api(&self) -> Payment {
        Payment {
            id: self.id,
            reservation_id: self.reservation_id,
            account_id: self.account_id,
            member_id: self.member_id.clone(),
            amount: self.amount,
            state: self.state.clone(),
            terminal: self.is_terminal(),
            failure_code: self.failure_code.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    pub fn to_admin(&self) -> PaymentAdmin {
        PaymentAdmin {
            payment: self.to_api(),
            pending_action: self.pending_action.clone(),
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            needs_attention: self.needs_attention,
            last_error: self.last_error.clone(),
            lease_owner: self.lease_owner,
            lease_until: self.lease_until,
            version: self.version,
        }
    }
}

/// A row returned by a batch statement, with the index of the request it answers.
#[derive(sqlx::FromRow)]
pub(crate) struct Indexed {
    pub batch_idx: i32,
    #[sqlx(flatten)]
    pub row: PaymentRow,
}

impl Indexed {
    /// Each request's row in request order; `None` where the statement wrote nothing.
    pub(crate) fn place(rows: Vec<Indexed>, requests: usize) -> Result<Vec<Option<PaymentRow>>> {
        let mut answers: Vec<Option<PaymentRow>> = vec![None; requests];
        for r in rows {
            let slot = usize::try_from(r.batch_idx)
                .ok()
                .and_then(|i| answers.get_mut(i))
                .ok_or_else(|| {
                    Error::Invariant(format!("batch index {} out of range", r.batch_idx))
                })?;
            *slot = Some(r.row);
        }
        Ok(answers)
    }
}

/// The payment columns qualified by `alias`, for a `RETURNING` that names other columns too.
pub(crate) fn returned_columns(alias: &str) -> String {
    PAYMENT_COLUMNS
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The name of the constraint a database error violated, if any.
pub fn constraint(e: &sqlx::Error) -> Option<&str> {
    e.as_database_error().and_then(|d| d.constraint())
}
