//! The saga's routes' state: the credential check, the buyers' rate limit, and the two
//! owners of the saga's requests.

use std::sync::Arc;

use axum::extract::FromRef;
use paysaga_common::{auth::Verifier, limits::MemberLimiter};
use paysaga_staff::Staff;

use crate::{checkout::Checkout, operations::Operations};

/// What the saga's routes need: the credential check, the buyers' rate limit, and the
/// two owners of the saga's requests.
#[derive(Clone, FromRef)]
pub struct SagaState {
    pub verifier: Arc<Verifier>,
    /// A buyer's payment requests per member (`MEMBER_RATE_PER_SEC`, `MEMBER_RATE_BURST`).
    pub limiter: Arc<MemberLimiter>,
    pub checkout: Checkout,
    pub operations: Operations,
    /// Staff sessions: who a person's bearer token names, and their role.
    pub staff: Staff,
}
