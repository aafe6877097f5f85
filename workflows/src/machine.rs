//! The one transition function: (position, outcome) -> next position or retry or escalate.
//!
//! Beyond the main path drawn in docs/ARCHITECTURE.md, and why:
//! - A declined debit moves to FAILED at once (the money answer is final), but FAILED
//!   then still owes [`Action::CancelReservation`] so the unit goes back on sale now
//!   rather than when the reservation expires. The payment is terminal for the buyer;
//!   the follow-up is carried by the same row until done.
//! - An operator refund of a COMPLETED payment goes COMPLETED -> REFUND_PROCESSING
//!   (cancel the order first, then credit the buyer) -> REFUNDED. The order is
//!   cancelled before any money moves, so a refused cancel leaves nothing to undo:
//!   that case goes back to COMPLETED (the refund is refused, nothing moved).
//! - A rejected refund credit has no safe automatic move (the money is held and the
//!   order is gone), so it is escalated to an operator instead of being guessed at.

use crate::state::{Action, Outcome, State};

/// Where a payment is: its state and the action still owed in it, if any. Only the
/// combinations the machine can reach can be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    state: State,
    pending: Option<Action>,
}

/// A (state, action) pair the machine never produces, or an outcome an action cannot have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalTransition {
    pub state: State,
    pub pending: Option<Action>,
    pub outcome: Option<Outcome>,
}

impl std::fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.pending.map(Action::as_str).unwrap_or("nothing");
        match self.outcome {
            Some(o) => write!(
                f,
                "illegal transition: {} owing {pending} cannot take outcome {o}",
                self.state
            ),
            None => write!(f, "illegal position: {} owing {pending}", self.state),
        }
    }
}

impl std::error::Error for IllegalTransition {}

impl Position {
    /// Every reachable position; anything else is refused by [`Position::new`].
    pub const REACHABLE: [Position; 9] = [
        Position {
            state: State::Processing,
            pending: Some(Action::Debit),
        },
        Position {
            state: State::AccountDebited,
            pending: Some(Action::Confirm),
        },
        Position {
            state: State::OrderConfirmed,
            pending: Some(Action::Complete),
        },
        Position {
            state: State::Completed,
            pending: None,
        },
        Position {
            state: State::Failed,
            pending: Some(Action::CancelReservation),
        },
        Position {
            state: State::Failed,
            pending: None,
        },
        Position {
            state: State::RefundProcessing,
            pending: Some(Action::CancelOrder),
        },
        Position {
            state: State::RefundProcessing,
            pending: Some(Action::Refund),
        },
        Position {
            state: State::Refunded,
            pending: None,
        },
    ];

    /// A new payment: PROCESSING, about to debit.
    pub const fn start() -> Self {
        Position {
            state: State::Processing,
            pending: Some(Action::Debit),
        }
    }

    /// A stored position, checked: storage written by an older or broken version
    /// must not drive the machine somewhere it cannot go.
    pub fn new(state: State, pending: Option<Action>) -> Result<Self, IllegalTransition> {
        let p = Position { state, pending };
        if Self::REACHABLE.contains(&p) {
            Ok(p)
        } else {
            Err(IllegalTransition {
                state,
                pending,
                outcome: None,
            })
        }
    }

    pub fn state(self) -> State {
        self.state
    }

    pub fn pending(self) -> Option<Action> {
        self.pending
    }

    /// Nothing left to do, ever (unless an operator refunds a COMPLETED payment).
    pub fn is_settled(self) -> bool {
        self.pending.is_none()
    }
}

/// What to do with an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Record the move; then carry out `to.pending()`, if any.
    Move(Position),
    /// The outcome is unknown: stay, and do the same action again (same operation key)
    /// after the action's backoff. Never a failure.
    Retry,
    /// A definite answer with no safe automatic continuation: stay, flag for an operator.
    Escalate,
}

/// The saga's transition function. `Err` for an outcome the position cannot take
/// (nothing pending, or a local step reported as anything but success).
pub fn transition(from: Position, outcome: Outcome) -> Result<Next, IllegalTransition> {
    use Action as A;
    use Outcome as O;
    use State as S;
    let illegal = || IllegalTransition {
        state: from.state,
        pending: from.pending,
        outcome: Some(outcome),
    };
    let to = |state, pending| Ok(Next::Move(Position { state, pending }));
    let Some(action) = from.pending else {
        return Err(illegal());
    };
    match (action, outcome) {
        (A::Complete, O::Succeeded) => to(S::Completed, None),
        (A::Complete, _) => Err(illegal()),
        (_, O::Unknown) => Ok(Next::Retry),
        (A::Debit, O::Succeeded) => to(S::AccountDebited, Some(A::Confirm)),
        (A::Debit, O::Rejected) => to(S::Failed, Some(A::CancelReservation)),
        (A::Confirm, O::Succeeded) => to(S::OrderConfirmed, Some(A::Complete)),
        (A::Confirm, O::Rejected) => to(S::RefundProcessing, Some(A::Refund)),
        // A refused release means the reservation is already gone: the unit is back either way.
        (A::CancelReservation, O::Succeeded | O::Rejected) => to(S::Failed, None),
        (A::CancelOrder, O::Succeeded) => to(S::RefundProcessing, Some(A::Refund)),
        (A::CancelOrder, O::Rejected) => to(S::Completed, None),
        (A::Refund, O::Succeeded) => to(S::Refunded, None),
        (A::Refund, O::Rejected) => Ok(Next::Escalate),
    }
}

/// An operator's refund of a settled COMPLETED payment: the position it moves to.
/// Anything else is refused.
pub fn request_refund(from: Position) -> Result<Position, IllegalTransition> {
    if from.state == State::Completed && from.pending.is_none() {
        Ok(Position {
            state: State::RefundProcessing,
            pending: Some(Action::CancelOrder),
        })
    } else {
        Err(IllegalTransition {
            state: from.state,
            pending: from.pending,
            outcome: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(state: State, pending: Option<Action>) -> Position {
        Position::new(state, pending).unwrap()
    }

    #[test]
    fn happy_path() {
        let mut p = Position::start();
        for expected in [
            State::AccountDebited,
            State::OrderConfirmed,
            State::Completed,
        ] {
            match transition(p, Outcome::Succeeded).unwrap() {
                Next::Move(to) => p = to,
                other => panic!("expected a move, got {other:?}"),
            }
            assert_eq!(p.state(), expected);
        }
        assert!(p.is_settled());
    }

    #[test]
    fn declined_debit_fails_and_releases_the_reservation() {
        let Next::Move(p) = transition(Position::start(), Outcome::Rejected).unwrap() else {
            panic!()
        };
        assert_eq!(p, pos(State::Failed, Some(Action::CancelReservation)));
        assert_eq!(
            transition(p, Outcome::Succeeded).unwrap(),
            Next::Move(pos(State::Failed, None))
        );
        assert_eq!(
            transition(p, Outcome::Rejected).unwrap(),
            Next::Move(pos(State::Failed, None))
        );
        assert_eq!(transition(p, Outcome::Unknown).unwrap(), Next::Retry);
    }

    #[test]
    fn rejected_confirm_refunds() {
        let p = pos(State::AccountDebited, Some(Action::Confirm));
        let Next::Move(p) = transition(p, Outcome::Rejected).unwrap() else {
            panic!()
        };
        assert_eq!(p, pos(State::RefundProcessing, Some(Action::Refund)));
        assert_eq!(
            transition(p, Outcome::Succeeded).unwrap(),
            Next::Move(pos(State::Refunded, None))
        );
        assert_eq!(transition(p, Outcome::Rejected).unwrap(), Next::Escalate);
    }

    #[test]
    fn operator_refund_cancels_first_then_credits() {
        let done = pos(State::Completed, None);
        let p = request_refund(done).unwrap();
        assert_eq!(p, pos(State::RefundProcessing, Some(Action::CancelOrder)));
        assert_eq!(
            transition(p, Outcome::Succeeded).unwrap(),
            Next::Move(pos(State::RefundProcessing, Some(Action::Refund)))
        );
        assert_eq!(transition(p, Outcome::Rejected).unwrap(), Next::Move(done));
        assert!(request_refund(Position::start()).is_err());
        assert!(request_refund(pos(State::Refunded, None)).is_err());
    }

    #[test]
    fn illegal_inputs_are_refused() {
        assert!(Position::new(State::Completed, Some(Action::Debit)).is_err());
        assert!(Position::new(State::Processing, None).is_err());
        for settled in Position::REACHABLE.into_iter().filter(|p| p.is_settled()) {
            for o in Outcome::ALL {
                assert!(transition(settled, o).is_err());
            }
        }
        let completing = pos(State::OrderConfirmed, Some(Action::Complete));
        assert!(transition(completing, Outcome::Unknown).is_err());
        assert!(transition(completing, Outcome::Rejected).is_err());
    }

    #[test]
    fn unknown_always_retries_a_remote_step() {
        for p in Position::REACHABLE {
            if let Some(a) = p.pending().filter(|a| a.is_remote()) {
                assert_eq!(transition(p, Outcome::Unknown).unwrap(), Next::Retry, "{a}");
            }
        }
    }
}
