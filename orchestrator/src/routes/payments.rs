//! The buyer's endpoints: pay for a reservation (idempotent), read a payment. Each
//! parses its request and answers with what [`Checkout`](crate::checkout::Checkout) gives.

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use paysaga_common::{
    auth::{allow::OPERATOR, Buyer, Caller},
    extract::{Json, Path},
};
use paysaga_contracts::orchestrator::api::{CreatePayment, Payment};
use uuid::Uuid;

use crate::{
    checkout::PaymentRequest,
    error::Result,
    idempotency::{self, IdempotencyKey},
    routes::state::SagaState,
};

/// Pay for a reservation.
///
/// Requires `Idempotency-Key`. Answers 201 with the payment once it is terminal
/// (COMPLETED, FAILED, REFUNDED), or 202 with its current state after
/// `RESPONSE_WAIT_MS` (then poll `GET /v1/payments/{id}`). A retry with the same key
/// and body gets the stored answer with `Idempotency-Replayed: true`.
#[utoipa::path(
    post, path = "/v1/payments", tag = "payments",
    request_body = CreatePayment,
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$", description = "1-255 visible ASCII characters, unique per payment attempt; reuse it on retries")),
    responses(
        (status = 201, description = "terminal payment", body = Payment),
        (status = 202, description = "still running; poll GET /v1/payments/{id}", body = Payment),
        (status = 400, description = "IDEMPOTENCY_KEY_MISSING, IDEMPOTENCY_KEY_INVALID, MALFORMED_JSON", body = paysaga_common::ErrorBody),
        (status = 404, description = "RESERVATION_NOT_FOUND, ACCOUNT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "IDEMPOTENCY_KEY_IN_PROGRESS (with Retry-After), RESERVATION_NOT_PAYABLE, RESERVATION_ALREADY_PAID", body = paysaga_common::ErrorBody),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED, INVALID_BODY", body = paysaga_common::ErrorBody),
        (status = 429, description = "RATE_LIMITED: too many requests from this member (with Retry-After); nothing was done", body = paysaga_common::ErrorBody),
        (status = 503, description = "UNAVAILABLE: a service needed to accept it did not answer; nothing charged", body = paysaga_common::ErrorBody),
    ),
    security(("buyer" = []))
)]
#[tracing::instrument(skip_all, fields(member = %member, reservation_id = %req.reservation_id))]
pub async fn create(
    State(state): State<SagaState>,
    Buyer(member): Buyer,
    headers: HeaderMap,
    Json(req): Json<CreatePayment>,
) -> Result<Response> {
    // First, before the key is read or anything is written: a refused request leaves no
    // idempotency record and no payment behind.
    state.limiter.check(&member)?;
    let key = IdempotencyKey::from_headers(&headers)?;
    let reply = state
        .checkout
        .create(PaymentRequest {
            member,
            key,
            body: req,
        })
        .await?;
    let mut response = json_response(reply.status, reply.body);
    if reply.replayed {
        response.headers_mut().insert(
            idempotency::REPLAYED_HEADER,
            HeaderValue::from_static("true"),
        );
    }
    Ok(response)
}

/// A payment (buyers: their own only).
#[utoipa::path(
    get, path = "/v1/payments/{id}", tag = "payments",
    params(("id" = Uuid, Path, description = "payment id")),
    responses(
        (status = 200, body = Payment),
        (status = 404, description = "PAYMENT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 429, description = "RATE_LIMITED: too many requests from this member (with Retry-After)", body = paysaga_common::ErrorBody),
    ),
    security(("buyer" = []), ("service" = []))
)]
#[tracing::instrument(skip_all, fields(payment_id = %id))]
pub async fn get(
    State(state): State<SagaState>,
    caller: Caller<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<axum::Json<Payment>> {
    // Buyers poll this; services (operators, tools) are not members and not limited.
    if let Caller::Buyer(member) = &caller {
        state.limiter.check(member)?;
    }
    Ok(axum::Json(state.checkout.get(id, &caller).await?))
}

/// A JSON body with the given status, serialised once so it can be stored and replayed.
fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
