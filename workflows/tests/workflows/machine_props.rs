//! Property tests: random outcome sequences (unknowns and repeats included) through the
//! machine, against a simulated downstream world that honours operation keys.

use proptest::prelude::*;
use workflows::{request_refund, transition, Action, Next, Outcome, Position, State};

/// What the money and the order look like, as the downstream services would record them.
#[derive(Debug, Default, Clone)]
struct World {
    funds_ok: bool,
    /// The debit under this payment's key: None = never seen, Some(applied).
    debit: Option<bool>,
    refunded: bool,
    reservation: Res,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Res {
    #[default]
    Reserved,
    Confirmed,
    Cancelled,
    Expired,
}

const AMOUNT: i64 = 1_000;

impl World {
    /// Carries out `action` as the real service would (idempotent per key) and says
    /// what a delivered answer would be.
    fn perform(&mut self, action: Action) -> Outcome {
        match action {
            Action::Debit => {
                let applied = *self.debit.get_or_insert(self.funds_ok);
                if applied {
                    Outcome::Succeeded
                } else {
                    Outcome::Rejected
                }
            }
            Action::Confirm => match self.reservation {
                Res::Reserved | Res::Confirmed => {
                    self.reservation = Res::Confirmed;
                    Outcome::Succeeded
                }
                Res::Cancelled | Res::Expired => Outcome::Rejected,
            },
            Action::CancelReservation | Action::CancelOrder => {
                if matches!(self.reservation, Res::Reserved | Res::Confirmed) {
                    self.reservation = Res::Cancelled;
                }
                Outcome::Succeeded
            }
            Action::Refund => {
                if self.debit == Some(true) {
                    self.refunded = true;
                    Outcome::Succeeded
                } else {
                    Outcome::Rejected
                }
            }
            Action::Complete => Outcome::Succeeded,
        }
    }

    fn net(&self) -> i64 {
        let debited = if self.debit == Some(true) { AMOUNT } else { 0 };
        let refunded = if self.refunded { AMOUNT } else { 0 };
        debited - refunded
    }
}

/// One fault the environment may inject at an attempt.
#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    /// The call never reached the service.
    Lost,
    /// The service did it, the answer was lost.
    AnswerLost,
    /// The reservation expires just before the attempt.
    Expire,
    /// An operator asks for a refund (applies only when the payment is COMPLETED).
    OperatorRefund,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        4 => Just(Fault::None),
        2 => Just(Fault::Lost),
        2 => Just(Fault::AnswerLost),
        1 => Just(Fault::Expire),
        1 => Just(Fault::OperatorRefund),
    ]
}

fn check_money(pos: Position, w: &World) {
    let net = w.net();
    assert!(net == 0 || net == AMOUNT, "net {net} at {pos:?}");
    assert!(
        !(w.refunded && w.debit != Some(true)),
        "refund without a debit"
    );
    match pos.state() {
        State::Completed => {
            assert_eq!(net, AMOUNT);
            assert_eq!(
                w.reservation,
                Res::Confirmed,
                "COMPLETED without a confirmed order"
            );
        }
        State::Failed | State::Refunded => {
            assert_eq!(net, 0, "{:?} kept money", pos.state());
            assert_ne!(
                w.reservation,
                Res::Confirmed,
                "{:?} with a confirmed order",
                pos.state()
            );
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Faults come and go; once they stop, every payment settles in a terminal state,
    /// and at every point money is held only against a confirmed order (or in transit).
    #[test]
    fn every_path_settles_and_never_keeps_money(funds_ok: bool, faults in proptest::collection::vec(fault(), 0..60)) {
        let mut w = World { funds_ok, ..World::default() };
        let mut pos = Position::start();
        let mut faults = faults.into_iter();
        let mut steps = 0;
        while let Some(action) = pos.pending() {
            steps += 1;
            prop_assert!(steps < 200, "no progress at {:?}", pos);
            let outcome = match faults.next().unwrap_or(Fault::None) {
                Fault::None => w.perform(action),
                Fault::Lost if action.is_remote() => Outcome::Unknown,
                Fault::AnswerLost if action.is_remote() => {
                    w.perform(action);
                    Outcome::Unknown
                }
                Fault::Expire => {
                    if w.reservation == Res::Reserved {
                        w.reservation = Res::Expired;
                    }
                    w.perform(action)
                }
                _ => w.perform(action),
            };
            match transition(pos, outcome).expect("a reachable position takes any outcome of its action") {
                Next::Move(to) => pos = to,
                Next::Retry => prop_assert_eq!(outcome, Outcome::Unknown),
                Next::Escalate => prop_assert!(false, "escalated in a world that never refuses a due refund"),
            }
            check_money(pos, &w);
            if pos.state() == State::Completed && pos.is_settled() {
                // An operator may refund a completed payment at any later point.
                if matches!(faults.next(), Some(Fault::OperatorRefund)) {
                    pos = request_refund(pos).expect("a settled COMPLETED payment is refundable");
                }
            }
        }
        prop_assert!(pos.state().is_terminal());
        check_money(pos, &w);
    }

    /// Arbitrary outcome sequences, however implausible: the machine moves only along
    /// its edges, refuses what a position cannot take, and settles once answers succeed.
    #[test]
    fn arbitrary_outcomes_stay_on_the_edges(outcomes in proptest::collection::vec(
        prop_oneof![Just(Outcome::Succeeded), Just(Outcome::Rejected), Just(Outcome::Unknown)], 0..50)) {
        let mut pos = Position::start();
        // The money model implied by the outcomes themselves.
        let (mut debited, mut refunded, mut confirmed) = (false, false, false);
        for outcome in outcomes.into_iter().chain(std::iter::repeat_n(Outcome::Succeeded, 5)) {
            let Some(action) = pos.pending() else {
                prop_assert!(transition(pos, outcome).is_err());
                break;
            };
            match transition(pos, outcome) {
                Ok(Next::Move(to)) => {
                    prop_assert!(Position::new(to.state(), to.pending()).is_ok());
                    match (action, outcome) {
                        (Action::Debit, Outcome::Succeeded) => debited = true,
                        (Action::Confirm, Outcome::Succeeded) => confirmed = true,
                        (Action::CancelOrder, Outcome::Succeeded) => confirmed = false,
                        (Action::Refund, Outcome::Succeeded) => refunded = true,
                        _ => {}
                    }
                    pos = to;
                }
                Ok(Next::Retry) => prop_assert_eq!(outcome, Outcome::Unknown),
                Ok(Next::Escalate) => prop_assert_eq!((action, outcome), (Action::Refund, Outcome::Rejected)),
                Err(_) => prop_assert!(action == Action::Complete && outcome != Outcome::Succeeded),
            }
            let net = i64::from(debited) - i64::from(refunded);
            prop_assert!(net == 0 || net == 1);
            if pos.state() == State::Completed {
                prop_assert!(debited && confirmed && !refunded);
            }
            if matches!(pos.state(), State::Failed | State::Refunded) {
                prop_assert!(net == 0 && !confirmed);
            }
        }
        prop_assert!(pos.is_settled() && pos.state().is_terminal(), "not settled: {:?}", pos);
    }
}
