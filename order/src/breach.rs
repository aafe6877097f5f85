//! Invariant breaches: what was found wrong when something that must never happen did,
//! with the rows involved, so the 500 it becomes is logged with its context.

use std::borrow::Cow;

use serde::Deserialize;
use uuid::Uuid;

use crate::{api::ReservationState, states::UnitState};

/// Who holds a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Holder {
    Reservation(Uuid),
    Offer(Uuid),
}

/// A breach of an invariant the tables or a statement's plan must keep. Nothing was
/// written where it was found: the statement or transaction is abandoned.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Breach {
    /// A unit is not in the state its holder implies (`found` is `None` when the unit
    /// was not seen at all).
    Unit {
        unit_id: i64,
        holder: Option<Holder>,
        expected: UnitState,
        found: Option<UnitState>,
    },
    /// A statement's writes disagree with its plan: `expected` rows of `what`, `found`.
    Count {
        statement: Cow<'static, str>,
        what: Cow<'static, str>,
        expected: i64,
        found: i64,
    },
    /// A row that another one names is missing.
    Missing { what: Cow<'static, str>, id: String },
    /// An operation left a reservation in a state it cannot leave it in.
    Outcome {
        reservation_id: Uuid,
        op: Cow<'static, str>,
        state: ReservationState,
    },
}

impl Breach {
    pub fn count(statement: &'static str, what: &'static str, expected: i64, found: i64) -> Self {
        Breach::Count {
            statement: statement.into(),
            what: what.into(),
            expected,
            found,
        }
    }

    /// `Ok` when `statement` gave as many `what` as `expected`, else [`Breach::Count`].
    pub fn check_count(
        statement: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    ) -> Result<(), Self> {
        if found == expected {
            Ok(())
        } else {
            Err(Breach::count(
                statement,
                what,
                expected as i64,
                found as i64,
            ))
        }
    }

    pub fn missing(what: &'static str, id: impl ToString) -> Self {
        Breach::Missing {
            what: what.into(),
            id: id.to_string(),
        }
    }
}

impl std::fmt::Display for Breach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Breach::Unit {
                unit_id,
                holder,
                expected,
                found,
            } => {
                write!(f, "unit {unit_id}")?;
                match holder {
                    Some(Holder::Reservation(id)) => write!(f, " of reservation {id}")?,
                    Some(Holder::Offer(id)) => write!(f, " of offer {id}")?,
                    None => {}
                }
                match found {
                    Some(found) => write!(f, " is {found}, expected {expected}"),
                    None => write!(f, " not found, expected {expected}"),
                }
            }
            Breach::Count {
                statement,
                what,
                expected,
                found,
            } => write!(f, "{statement}: {found} {what}, expected {expected}"),
            Breach::Missing { what, id } => write!(f, "{what} {id} is missing"),
            Breach::Outcome {
                reservation_id,
                op,
                state,
            } => write!(f, "{op} left reservation {reservation_id} {state}"),
        }
    }
}
