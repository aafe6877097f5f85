//! Why a payment is FAILED: the closed set of codes a definite rejection that moves it
//! there carries, stored in `payments.failure_code` under the downstream's own names.

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

// The stored names are the downstreams' codes.
paysaga_contracts::wire_names!(
    FailureCode {
        InsufficientFunds => INSUFFICIENT_FUNDS,
        AccountNotFound => ACCOUNT_NOT_FOUND,
        AccountNotMember => ACCOUNT_NOT_MEMBER,
        HoldNotFound => HOLD_NOT_FOUND,
        HoldReleased => HOLD_RELEASED,
        HoldExpired => HOLD_EXPIRED,
        HoldMismatch => HOLD_MISMATCH,
        ReservationNotFound => RESERVATION_NOT_FOUND,
        ReservationConfirmed => RESERVATION_CONFIRMED,
    },
    unknown: UnknownFailureCode
);

/// A stored failure code that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure code {0:?}")]
pub struct UnknownFailureCode(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for c in FailureCode::ALL {
            assert_eq!(c.as_str().parse::<FailureCode>(), Ok(c));
        }
        assert!("DECLINED".parse::<FailureCode>().is_err());
        assert_eq!(FailureCode::parse("RESERVATION_EXPIRED"), None);
    }
}
