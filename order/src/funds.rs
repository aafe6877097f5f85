//! Every reservation holds its price on the buyer's account: the order service asks the
//! account service for the hold before it takes a unit, so a buyer who cannot pay never
//! touches one. This is its side of holds: placing a reservation's hold, releasing one
//! no reservation will use, all group-committed through the account service's batch.
//!
//! A hold's key names its reservation (`res:{id}:hold`, see
//! [`paysaga_contracts::order::api::hold_key`]), so the saga's debit captures it by a
//! key it derives from the reservation alone. The reservation's id, in turn, is derived
//! from what admits it (its pass, or the waitlist offer taken) and the attempt's
//! number: a retry of a request (a lost answer, a crash between hold and claim) places
//! the same hold again, which answers as a replay, and finds the same reservation.
//! An attempt whose hold was released without a reservation (the claim got no unit,
//! or the hold was abandoned) is over: the next attempt has a reservation id, and so a
//! hold, of its own.
//!
//! A hold placed but never claimed with (a crash, an answer lost for good) is found by
//! the reconciliation ([`crate::releases`]) once it is older than the orphan grace and
//! released. A claim is therefore refused once a third of that grace has passed since
//! its hold was placed ([`crate::claim::NewClaim::claim_by`], checked by the claim
//! statement itself), so a hold is never released under a claim still on its way.

use std::time::Duration;

use chrono::{DateTime, Utc};
use paysaga_common::{auth::MemberId, batch::Coalescer, client::CallError, money::Amount};
use paysaga_contracts::{
    account::{
        api::{
            AccountBatch, AccountCode, AccountOp, Hold, HoldPage, HoldRequest, HoldTtl, ListHolds,
            OperationKey, ReleaseRequest,
        },
        client::AccountClient,
    },
    batch::{self, Reply},
    order::api::{hold_key, Reservation},
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    error::{Error, Result},
    reservations,
};

/// The most holds and releases one batch to the account service carries.
const MAX_BATCH: usize = 256;

/// Attempts one pass or offer may make before it is used up.
pub const MAX_ATTEMPTS: u32 = 8;

/// A claim must follow its hold within the orphan grace divided by this.
pub const CLAIM_WINDOW_SHARE: u32 = 3;

/// What admits a reservation: a gate pass, or a waitlist offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Pass(Uuid),
    Offer(Uuid),
}

/// Namespaces of the derived reservation ids (UUIDv5), one per source.
const PASS_NAMESPACE: Uuid = Uuid::from_u128(0x7b1d_95a6_2f3c_4e0a_9f1e_6c2d_8a47_b301);
const OFFER_NAMESPACE: Uuid = Uuid::from_u128(0x7b1d_95a6_2f3c_4e0a_9f1e_6c2d_8a47_b302);

/// The id of the reservation attempt `attempt` of `source` makes: the same for every
/// retry of that attempt, by any instance.
pub fn reservation_id(source: Source, attempt: u32) -> Uuid {
    let (namespace, id) = match source {
        Source::Pass(id) => (&PASS_NAMESPACE, id),
        Source::Offer(id) => (&OFFER_NAMESPACE, id),
    };
    let mut name = [0u8; 20];
    name[..16].copy_from_slice(id.as_bytes());
    name[16..].copy_from_slice(&attempt.to_be_bytes());
    Uuid::new_v5(namespace, &name)
}

/// The reservation `source` already made, if any.
pub async fn made_by(pool: &PgPool, source: Source) -> Result<Option<Reservation>> {
    match source {
        Source::Pass(id) => reservations::by_pass(pool, id).await,
        Source::Offer(id) => reservations::of_offer(pool, id).await,
    }
}

/// A hold live for a reservation not made yet: make it with this id, this deadline, by
/// `claim_by`.
#[derive(Debug, Clone)]
pub struct Held {
    pub reservation_id: Uuid,
    pub hold: Hold,
    pub claim_by: DateTime<Utc>,
}

/// What a reservation request's funds came to.
#[derive(Debug)]
pub enum Funded {
    /// The price is held: go on and take the unit.
    Held(Held),
    /// The source already made this reservation (a replay): nothing more to hold.
    Reserved(Reservation),
}

/// The order service's client of holds; cheap to clone.
#[derive(Clone, Debug)]
pub struct Funds {
    account: AccountClient,
    batcher: Coalescer<AccountOp, Reply, CallError>,
    /// `HOLD_ORPHAN_GRACE_MS`: a hold this old with no reservation is released.
    grace: Duration,
}

impl Funds {
    /// Holds and releases to `account`, at most `in_flight` batches at once.
    pub fn new(account: AccountClient, grace: Duration, in_flight: usize) -> Self {
        let client = account.clone();
        let batcher = Coalescer::new("holds", MAX_BATCH, in_flight, move |ops| {
            let client = client.clone();
            async move {
                client
                    .batch(&AccountBatch::new(ops))
                    .await
                    .map(|a| a.body.results)
            }
        });
        Self {
            account,
            batcher,
            grace,
        }
    }

    /// A page of the account service's live holds (see [`crate::releases`]).
    pub async fn list(&self, q: &ListHolds) -> Result<HoldPage, CallError> {
        self.account.holds(q).await.map(|a| a.body)
    }

    /// How long after its hold a claim may still be made.
    pub fn claim_window(&self) -> Duration {
        self.grace / CLAIM_WINDOW_SHARE
    }

    /// A hold this old with no reservation is an orphan.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    async fn place(&self, req: HoldRequest) -> Result<Hold, CallError> {
        batch::submit(&self.batcher, AccountOp::Hold(req))
            .await
            .map(|a| a.body)
    }

    /// Releases the hold under `key`: `Ok` once the account service has settled it
    /// (released now or before, captured, or never placed), `Err` when the answer is
    /// unknown.
    pub async fn release(&self, key: &str) -> Result<Released, CallError> {
        let operation_key = OperationKey::parse(key).map_err(|e| CallError::Unknown {
            status: None,
            reason: format!("hold key {key}: {e}"),
        })?;
        let op = AccountOp::Release(ReleaseRequest { operation_key });
        match batch::submit::<_, Hold>(&self.batcher, op).await {
            Ok(_) => Ok(Released::Released),
            Err(e) => match e.code().and_then(AccountCode::parse) {
                Some(AccountCode::HoldCaptured) => Ok(Released::Captured),
                Some(AccountCode::HoldNotFound) => Ok(Released::NeverHeld),
                _ => Err(e),
            },
        }
    }

    /// Gives up a hold no reservation will use. If the answer is lost, the
    /// reconciliation releases it once it is older than the grace.
    pub async fn abandon(&self, key: &str) {
        match self.release(key).await {
            Ok(_) => metrics::counter!("order_holds_total", "outcome" => "abandoned").increment(1),
            Err(e) => {
                tracing::warn!(hold = key, error = %e, "an unused hold was not released; the reconciliation will")
            }
        }
    }

    /// Holds `price` on `member`'s account for `ttl`, for the reservation `source`
    /// admits: the first attempt whose hold is live and young enough to claim with
    /// (placed now, or by an earlier try of the same attempt), or the reservation the
    /// source already made.
    #[tracing::instrument(skip_all, fields(member = %member))]
    pub async fn hold_for(
        &self,
        pool: &PgPool,
        source: Source,
        member: &MemberId,
        price: i64,
        ttl: Duration,
    ) -> Result<Funded> {
        let amount = Amount::new(price)
            .map_err(|e| Error::Invariant(crate::breach::Breach::missing("a positive price", e)))?;
        let ttl_secs = HoldTtl::from_duration(ttl)
            .map_err(|e| Error::Invariant(crate::breach::Breach::missing("a hold time", e)))?;
        let window = chrono::Duration::from_std(self.claim_window()).unwrap_or_default();
        for attempt in 0..MAX_ATTEMPTS {
            let reservation_id = reservation_id(source, attempt);
            let key = hold_key(reservation_id);
            let req = HoldRequest {
                operation_key: OperationKey::parse(key.clone())
                    .map_err(|e| Error::Invariant(crate::breach::Breach::missing("hold key", e)))?,
                member_id: member.clone(),
                amount,
                ttl_secs,
            };
            let hold = match self.place(req).await {
                Ok(hold) => hold,
                Err(e) => {
                    return match e.code().and_then(AccountCode::parse) {
                        // A concurrent request of the same source may just have made
                        // the reservation this one asks for.
                        Some(AccountCode::InsufficientFunds) => {
                            match made_by(pool, source).await? {
                                Some(r) => Ok(Funded::Reserved(r)),
                                None => {
                                    metrics::counter!("order_holds_total", "outcome" => "insufficient_funds").increment(1);
                                    Err(Error::InsufficientFunds { price })
                                }
                            }
                        }
                        Some(AccountCode::AccountNotFound) => Err(Error::NoAccount),
                        _ => Err(Error::Funds(e)),
                    };
                }
            };
            let now = Utc::now();
            let claim_by = hold.created_at + window;
            if hold.is_live(now) && claim_by > now {
                return Ok(Funded::Held(Held {
                    reservation_id,
                    hold,
                    claim_by,
                }));
            }
            // This attempt's hold is over (captured, released, lapsed) or too old to
            // claim with: either it made the reservation, or the attempt is spent.
            if let Some(r) = made_by(pool, source).await? {
                return Ok(Funded::Reserved(r));
            }
            if hold.is_live(now) {
                self.abandon(&key).await;
            }
        }
        Err(Error::AttemptsUsedUp)
    }
}

/// How a release settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    Released,
    /// A debit captured it first: the money is paid (and refunded by the saga if the
    /// order is not confirmed).
    Captured,
    /// No hold under the key (a reservation older than holds).
    NeverHeld,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_ids_are_fixed_per_source_and_attempt() {
        let pass = Uuid::now_v7();
        assert_eq!(
            reservation_id(Source::Pass(pass), 0),
            reservation_id(Source::Pass(pass), 0)
        );
        assert_ne!(
            reservation_id(Source::Pass(pass), 0),
            reservation_id(Source::Pass(pass), 1)
        );
        assert_ne!(
            reservation_id(Source::Pass(pass), 0),
            reservation_id(Source::Offer(pass), 0)
        );
    }
}
