//! HTTP `Idempotency-Key` handling, as a payments API does it: one record per
//! (member, operation, key) with a fingerprint of the request, a lease for the request
//! executing it, and the response it finally gave, replayed byte for byte.
//!
//! Semantics (published in docs/orchestrator.md):
//! - finished request, same fingerprint: its stored status and body, `Idempotency-Replayed: true`;
//! - different fingerprint: 422 `IDEMPOTENCY_KEY_REUSED`;
//! - still running (live lease): 409 `IDEMPOTENCY_KEY_IN_PROGRESS` with `Retry-After`;
//! - lease expired (the executing instance died): taken over under a new owner token;
//!   the old owner's writes are refused (compare-and-set on the token);
//! - a request that failed before changing anything (validation, a downstream that
//!   did not answer) releases its key, so a retry executes afresh.
//!
//! Every write of the key table is in `table`: the claim, the take-over, the link to
//! the payment, the answer, the release and the purge.

mod key;
mod table;

pub use key::{fingerprint, Begin, IdempotencyKey, Scope, HEADER, MAX_KEY_LEN, REPLAYED_HEADER};
pub use table::{
    begin, claim_many, complete, complete_many, purge_expired, release, Answered, NewKey,
};
pub(crate) use table::{ANSWER_KEYS, LINK_KEYS, OWNED_KEYS};
