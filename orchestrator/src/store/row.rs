//! A payment as stored: its row, decoded once (state, pending action and failure code
//! as our enums), its columns, and the helpers every statement of the store shares.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use paysaga_contracts::orchestrator::api::{Payment, PaymentAdmin};
use sqlx::{postgres::PgRow, FromRow, Row};
use uuid::Uuid;
use workflows::{Action, Position, State};

use crate::{
    error::{Breach, Result},
    failure::FailureCode,
};

pub(crate) const PAYMENT_COLUMNS: &str = r#"id, member_id, account_id, reservation_id, amount, state, pending_action,
    attempts, next_attempt_at, needs_attention, last_error, failure_code, lease_owner, lease_until,
    version, created_at, updated_at, traceparent"#;

#[derive(Debug, Clone)]
pub struct PaymentRow {
    pub id: Uuid,
    pub member_id: String,
    pub account_id: i64,
    pub reservation_id: Uuid,
    pub amount: i64,
    pub state: State,
    pub pending_action: Option<Action>,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub needs_attention: bool,
    pub last_error: Option<String>,
    pub failure_code: Option<FailureCode>,
    pub lease_owner: Option<Uuid>,
    pub lease_until: Option<DateTime<Utc>>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The W3C trace context of the request that created the payment (`None` when
    /// tracing was off): every later drive of it, by recovery too, joins that trace.
    pub traceparent: Option<String>,
}

/// A column holding one of our names, decoded in place (no copy of the text) and
/// refused as a decode error if it is not one of them.
pub(crate) fn named<T>(row: &PgRow, column: &'static str) -> sqlx::Result<T>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let name: &str = row.try_get(column)?;
    name.parse().map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(e),
    })
}

/// [`named`] for a column that may be NULL.
fn named_or_null<T>(row: &PgRow, column: &'static str) -> sqlx::Result<Option<T>>
where
    T: FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let name: Option<&str> = row.try_get(column)?;
    name.map(str::parse)
        .transpose()
        .map_err(|e| sqlx::Error::ColumnDecode {
            index: column.to_owned(),
            source: Box::new(e),
        })
}

impl<'r> FromRow<'r, PgRow> for PaymentRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        Ok(Self {
            id: row.try_get("id")?,
            member_id: row.try_get("member_id")?,
            account_id: row.try_get("account_id")?,
            reservation_id: row.try_get("reservation_id")?,
            amount: row.try_get("amount")?,
            state: named(row, "state")?,
            pending_action: named_or_null(row, "pending_action")?,
            attempts: row.try_get("attempts")?,
            next_attempt_at: row.try_get("next_attempt_at")?,
            needs_attention: row.try_get("needs_attention")?,
            last_error: row.try_get("last_error")?,
            failure_code: named_or_null(row, "failure_code")?,
            lease_owner: row.try_get("lease_owner")?,
            lease_until: row.try_get("lease_until")?,
            version: row.try_get("version")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            traceparent: row.try_get("traceparent")?,
        })
    }
}

impl PaymentRow {
    /// The stored position, checked against the machine.
    pub fn position(&self) -> Result<Position> {
        Position::new(self.state, self.pending_action).map_err(|found| {
            Breach::UnreachablePosition {
                payment: self.id,
                found,
            }
            .into()
        })
    }

    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    pub fn to_api(&self) -> Payment {
        Payment {
            id: self.id,
            reservation_id: self.reservation_id,
            account_id: self.account_id,
            member_id: self.member_id.clone(),
            amount: self.amount,
            state: self.state.as_str().to_owned(),
            terminal: self.is_terminal(),
            failure_code: self.failure_code.map(|c| c.as_str().to_owned()),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }

    pub fn to_admin(&self) -> PaymentAdmin {
        PaymentAdmin {
            payment: self.to_api(),
            pending_action: self.pending_action.map(|a| a.as_str().to_owned()),
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
                .ok_or(Breach::BatchIndex {
                    index: r.batch_idx.into(),
                    len: requests,
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
