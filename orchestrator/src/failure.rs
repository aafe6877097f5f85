//! Why a payment is FAILED: the closed set of codes a definite rejection that moves it
//! there carries, stored in `payments.failure_code` under the downstream's own names.

use std::{fmt, str::FromStr};

/// A payment's failure code. The debit's definite rejections say why the payment
/// failed; should the release of a failed payment's reservation be refused, that
/// refusal's code is recorded too (the move that follows is again into FAILED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// The account service declined the debit: the balance is short.
    InsufficientFunds,
    /// The account service has no such account.
    AccountNotFound,
    /// The account is not a member's account.
    AccountNotMember,
    /// The debit found no hold for the reservation (a reservation older than holds).
    HoldNotFound,
    /// The reservation's hold was released before the debit (the reservation was
    /// cancelled): nothing was taken.
    HoldReleased,
    /// The reservation's hold passed its deadline before the debit (the reservation
    /// expired): nothing was taken.
    HoldExpired,
    /// The reservation's hold is on another account or for another amount than the
    /// payment's, or another debit captured it.
    HoldMismatch,
    /// The order service has no such reservation (the release of a failed payment's unit).
    ReservationNotFound,
    /// The reservation was confirmed (the release of a failed payment's unit).
    ReservationConfirmed,
}

impl FailureCode {
    pub const ALL: [FailureCode; 9] = [
        FailureCode::InsufficientFunds,
        FailureCode::AccountNotFound,
        FailureCode::AccountNotMember,
        FailureCode::HoldNotFound,
        FailureCode::HoldReleased,
        FailureCode::HoldExpired,
        FailureCode::HoldMismatch,
        FailureCode::ReservationNotFound,
        FailureCode::ReservationConfirmed,
    ];

    /// The stored name, the downstream's code.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::InsufficientFunds => "INSUFFICIENT_FUNDS",
            FailureCode::AccountNotFound => "ACCOUNT_NOT_FOUND",
            FailureCode::AccountNotMember => "ACCOUNT_NOT_MEMBER",
            FailureCode::HoldNotFound => "HOLD_NOT_FOUND",
            FailureCode::HoldReleased => "HOLD_RELEASED",
            FailureCode::HoldExpired => "HOLD_EXPIRED",
            FailureCode::HoldMismatch => "HOLD_MISMATCH",
            FailureCode::ReservationNotFound => "RESERVATION_NOT_FOUND",
            FailureCode::ReservationConfirmed => "RESERVATION_CONFIRMED",
        }
    }

    /// The failure code a downstream's rejection code names, if it is one.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored failure code that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure code {0:?}")]
pub struct UnknownFailureCode(pub String);

impl FromStr for FailureCode {
    type Err = UnknownFailureCode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_code(s).ok_or_else(|| UnknownFailureCode(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for c in FailureCode::ALL {
            assert_eq!(c.as_str().parse::<FailureCode>(), Ok(c));
        }
        assert!("DECLINED".parse::<FailureCode>().is_err());
        assert_eq!(FailureCode::from_code("RESERVATION_EXPIRED"), None);
    }
}
