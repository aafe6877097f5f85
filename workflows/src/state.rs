//! The vocabulary of the saga: states, the actions taken in them, and step outcomes.

use serde::{Deserialize, Serialize};

/// The states of a payment, exactly those of docs/ARCHITECTURE.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Processing,
    AccountDebited,
    OrderConfirmed,
    Completed,
    Failed,
    RefundProcessing,
    Refunded,
}

impl State {
    pub const ALL: [State; 7] = [
        State::Processing,
        State::AccountDebited,
        State::OrderConfirmed,
        State::Completed,
        State::Failed,
        State::RefundProcessing,
        State::Refunded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Processing => "PROCESSING",
            State::AccountDebited => "ACCOUNT_DEBITED",
            State::OrderConfirmed => "ORDER_CONFIRMED",
            State::Completed => "COMPLETED",
            State::Failed => "FAILED",
            State::RefundProcessing => "REFUND_PROCESSING",
            State::Refunded => "REFUNDED",
        }
    }

    /// Whether the buyer's answer is final: the money question is settled. A FAILED
    /// payment may still owe the release of its reservation (see [`Action::CancelReservation`]).
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Failed | State::Refunded)
    }
}

/// A stored name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown saga name {:?}", self.0)
    }
}

impl std::error::Error for ParseError {}

/// Each saga name is shown and parsed as its stored `as_str` spelling.
macro_rules! stored_names {
    ($($name:ident),*) => {$(
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = ParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .into_iter()
                    .find(|n| n.as_str() == s)
                    .ok_or_else(|| ParseError(s.to_owned()))
            }
        }
    )*};
}

stored_names!(State, Action, Outcome);

/// What the orchestrator does next. Every action but [`Action::Complete`] is one
/// idempotent downstream call under a fixed operation key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    /// account: debit the buyer (buyer -> merchant).
    Debit,
    /// order: confirm the reservation.
    Confirm,
    /// local: mark the confirmed order's payment COMPLETED. Cannot fail.
    Complete,
    /// order: release the reservation of a declined payment.
    CancelReservation,
    /// order: cancel the confirmed order of a payment an operator refunds.
    CancelOrder,
    /// account: credit the debit back (merchant -> buyer).
    Refund,
}

impl Action {
    pub const ALL: [Action; 6] = [
        Action::Debit,
        Action::Confirm,
        Action::Complete,
        Action::CancelReservation,
        Action::CancelOrder,
        Action::Refund,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Debit => "DEBIT",
            Action::Confirm => "CONFIRM",
            Action::Complete => "COMPLETE",
            Action::CancelReservation => "CANCEL_RESERVATION",
            Action::CancelOrder => "CANCEL_ORDER",
            Action::Refund => "REFUND",
        }
    }

    /// The last part of the operation key `pay:{payment_id}:{suffix}`. Both cancels
    /// are the same downstream operation (cancel the reservation), so they share a key.
    pub fn operation_suffix(self) -> &'static str {
        match self {
            Action::Debit => "debit",
            Action::Confirm => "confirm",
            Action::Complete => "complete",
            Action::CancelReservation | Action::CancelOrder => "cancel",
            Action::Refund => "refund",
        }
    }

    /// The fixed operation key of this action for one payment: every retry of the
    /// step, by any process, is the same operation downstream.
    pub fn operation_key(self, payment_id: impl std::fmt::Display) -> String {
        format!("pay:{payment_id}:{}", self.operation_suffix())
    }

    /// Whether the action calls another service (and so can time out).
    pub fn is_remote(self) -> bool {
        !matches!(self, Action::Complete)
    }
}

/// What came of one attempt at an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// The downstream did it (or had already done it under this operation key).
    Succeeded,
    /// A definite, final refusal: repeating the same request gets the same answer.
    Rejected,
    /// Timeout, connection error, 5xx: it may or may not have happened. Never a failure.
    Unknown,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Succeeded, Outcome::Rejected, Outcome::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "SUCCEEDED",
            Outcome::Rejected => "REJECTED",
            Outcome::Unknown => "UNKNOWN",
        }
    }

    /// Only an unknown outcome is retried: a definite answer is final by definition.
    pub fn is_retryable(self) -> bool {
        matches!(self, Outcome::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>(), Ok(s));
        }
        for a in Action::ALL {
            assert_eq!(a.as_str().parse::<Action>(), Ok(a));
        }
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
        }
        assert!("DONE".parse::<State>().is_err());
    }

    #[test]
    fn operation_keys_follow_the_contract() {
        assert_eq!(Action::Debit.operation_key("p1"), "pay:p1:debit");
        assert_eq!(Action::Confirm.operation_key("p1"), "pay:p1:confirm");
        assert_eq!(Action::Refund.operation_key("p1"), "pay:p1:refund");
        assert_eq!(
            Action::CancelReservation.operation_key("p1"),
            "pay:p1:cancel"
        );
        assert_eq!(Action::CancelOrder.operation_key("p1"), "pay:p1:cancel");
    }
}
