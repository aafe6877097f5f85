//! `POST /v1/batch`: a service's confirms, cancels and lookups in one request.

use axum::extract::State;
use paysaga_common::{
    auth::{allow::ORCHESTRATOR, Service},
    extract::Json,
    telemetry, ApiError, ErrorBody,
};
use paysaga_contracts::batch::{Replies, BATCH_TOO_LARGE, MAX_OPS};

use crate::{
    api::{OrderBatch, OrderOp},
    error::{Error, Result},
    settle, AppState,
};

/// The common 64 KB limit holds fewer than 1,000 operations (about 75 bytes each), so
/// this route has its own: room for `MAX_OPS` + 1 with whitespace, so an oversized
/// batch gets its `BATCH_TOO_LARGE` rather than a 413.
pub const BODY_LIMIT: usize = 256 * 1024;

/// Apply up to 1,000 confirms, cancels and lookups together (service). Each operation
/// gets the status and body its own endpoint would have answered. They commit together
/// (one statement); a batch naming a reservation more than once commits in rounds, the
/// k-th operation on each reservation in round k. A 5xx for the whole batch means nothing
/// was applied; a 5xx for one operation (a later round failed) means its outcome is
/// unknown: ask for the reservation.
#[utoipa::path(post, path = "/v1/batch", security(("service" = [])), request_body = OrderBatch,
    responses(
        (status = 200, body = Replies, description = "one reply per operation, in order: the status and body of `POST /v1/reservations/{id}/confirm`, `POST /v1/reservations/{id}/cancel` (as a service) or `GET /v1/reservations/{id}`"),
        (status = 400, body = ErrorBody, description = "BATCH_TOO_LARGE: no operations, or more than 1,000"),
        (status = 403, body = ErrorBody, description = "FORBIDDEN: a buyer token"),
        (status = 500, body = ErrorBody, description = "the batch failed as a whole; nothing was written"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: the database could not serve; nothing was written")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, ops = req.ops.len()))]
pub async fn batch(
    State(state): State<AppState>,
    caller: Service<{ ORCHESTRATOR }>,
    Json(req): Json<OrderBatch>,
) -> Result<Json<Replies>> {
    if req.ops.is_empty() || req.ops.len() > MAX_OPS {
        return Err(Error::Api(ApiError::bad_request(
            BATCH_TOO_LARGE,
            format!(
                "a batch carries 1 to {MAX_OPS} operations, not {}",
                req.ops.len()
            ),
        )));
    }
    let spans =
        telemetry::batch_op_spans(&req.traceparents, req.ops.len(), |i| op_span(&req.ops[i]));
    let results =
        super::detached(async move { settle::batch(&state.pool, &req.ops).await }).await?;
    for (span, reply) in spans.iter().zip(&results) {
        span.record("status", reply.status);
    }
    Ok(Json(Replies { results }))
}

/// The span of one batch operation in its payment's trace (see
/// [`telemetry::batch_op_spans`]), named like the endpoint it stands for.
fn op_span(op: &OrderOp) -> tracing::Span {
    let (name, reservation_id) = match op {
        OrderOp::Confirm { reservation_id } => ("order confirm", reservation_id),
        OrderOp::Cancel { reservation_id } => ("order cancel", reservation_id),
        OrderOp::Reservation { reservation_id } => ("order reservation lookup", reservation_id),
    };
    tracing::info_span!(
        "batch op",
        otel.name = name,
        reservation_id = %reservation_id,
        status = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    )
}
