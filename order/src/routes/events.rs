//! `GET /v1/events` and `POST /v1/events/ack`: the outbox, pulled by the orchestrator.

use axum::{extract::State, http::StatusCode};
use paysaga_common::{
    auth::{allow::ORCHESTRATOR, Service},
    error::codes as common_codes,
    extract::{Json, Query},
    ApiError, ErrorBody,
};

use crate::{
    api::{AckEvents, ErrorCode, OutboxPage, OutboxQuery, DEFAULT_OUTBOX_PAGE, MAX_OUTBOX_PAGE},
    error::{Error, Result},
    outbox, AppState,
};

/// Events not yet relayed, oldest first (service: orchestrator).
#[utoipa::path(get, path = "/v1/events", security(("service" = [])), params(OutboxQuery),
    responses(
        (status = 200, body = OutboxPage, description = "up to `limit` events not yet acknowledged, in the order they were written"),
        (status = 400, body = ErrorBody, description = "INVALID_QUERY: limit not 1 to 1,000")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0))]
pub async fn list(
    State(state): State<AppState>,
    caller: Service<{ ORCHESTRATOR }>,
    Query(query): Query<OutboxQuery>,
) -> Result<Json<OutboxPage>> {
    let limit = query.limit.unwrap_or(DEFAULT_OUTBOX_PAGE);
    if !(1..=MAX_OUTBOX_PAGE).contains(&limit) {
        return Err(Error::Api(ApiError::bad_request(
            common_codes::INVALID_QUERY,
            format!("limit must be 1 to {MAX_OUTBOX_PAGE}"),
        )));
    }
    let events = outbox::pending(&state.pool, limit).await?;
    Ok(Json(OutboxPage { events }))
}

/// Acknowledge relayed events: they are not served again (service: orchestrator).
/// Ids already acknowledged or unknown are ignored, so a repeat is harmless.
#[utoipa::path(post, path = "/v1/events/ack", security(("service" = [])), request_body = AckEvents,
    responses(
        (status = 204, description = "the named events are marked relayed"),
        (status = 422, body = ErrorBody, description = "INVALID_EVENT_IDS: no ids, or more than 1,000")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, ids = req.ids.len()))]
pub async fn ack(
    State(state): State<AppState>,
    caller: Service<{ ORCHESTRATOR }>,
    Json(req): Json<AckEvents>,
) -> Result<StatusCode> {
    let most = usize::try_from(MAX_OUTBOX_PAGE).unwrap_or(usize::MAX);
    if req.ids.is_empty() || req.ids.len() > most {
        return Err(Error::invalid(
            ErrorCode::InvalidEventIds,
            format!("name 1 to {MAX_OUTBOX_PAGE} event ids"),
        ));
    }
    outbox::ack(&state.pool, &req.ids).await?;
    Ok(StatusCode::NO_CONTENT)
}
