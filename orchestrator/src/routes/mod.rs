//! The saga's HTTP handlers: the buyer's payment endpoints and the operators'
//! inspection API, over their narrow state.

pub mod operator;
pub mod payments;

use std::sync::Arc;

use axum::{
    extract::FromRef,
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use paysaga_common::{auth::Verifier, limits::MemberLimiter};

use crate::{checkout::Checkout, operations::Operations};

/// What the saga's routes need: the credential check, the buyers' rate limit, and the
/// two owners of the saga's requests.
#[derive(Clone)]
pub struct SagaState {
    pub verifier: Arc<Verifier>,
    /// A buyer's payment requests per member (`MEMBER_RATE_PER_SEC`, `MEMBER_RATE_BURST`).
    pub limiter: Arc<MemberLimiter>,
    pub checkout: Checkout,
    pub operations: Operations,
}

impl FromRef<SagaState> for Arc<Verifier> {
    fn from_ref(s: &SagaState) -> Self {
        s.verifier.clone()
    }
}

/// The saga's routes, with their state.
pub fn routes(state: SagaState) -> Router {
    Router::new()
        .route("/v1/payments", post(payments::create).get(operator::list))
        .route("/v1/payments/{id}", get(payments::get))
        .route("/v1/payments/{id}/steps", get(operator::steps))
        .route("/v1/payments/{id}/resume", post(operator::resume))
        .route("/v1/payments/{id}/refund", post(operator::refund))
        .with_state(state)
}

/// A JSON body with the given status, serialised once so it can be stored and replayed.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
