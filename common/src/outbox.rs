//! The transactional outbox a service serves to the webhook platform: its wire types,
//! the reads and the acknowledgement over the service's `outbox_events` table, and the
//! two routes (`GET /v1/events`, `POST /v1/events/ack`) the orchestrator pulls with.
//! Each service writes its events in the transaction of the change they tell of; this
//! is everything after that, the same for every service.

use std::sync::Arc;

use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{
    auth::{allow::ORCHESTRATOR, Service, Verifier},
    error::{codes, internal_error_response, ApiError, ErrorBody},
    extract::{Json, Query},
};

/// One event of a service's transactional outbox, written in the same transaction as
/// the change it tells of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutboxEvent {
    /// Stable (a UUIDv7 assigned when the event was written): a consumer deduplicates on it.
    pub id: Uuid,
    /// The event type, one of the serving service's (the order service's
    /// `reservation.expired`, `waitlist.offer_made`, `waitlist.offer_expired`; the member
    /// service's `member.verification_requested`).
    #[serde(rename = "type")]
    #[schema(example = "reservation.expired")]
    pub kind: String,
    /// The ordering key: events of one subject are delivered in order (a reservation
    /// id, an offer id, a member id).
    pub subject: String,
    pub occurred_at: DateTime<Utc>,
    /// The payload; ids are strings, timestamps RFC 3339 (each type's payload is in the
    /// event catalogue).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// `GET /v1/events?limit=N`: events not yet relayed, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OutboxPage {
    pub events: Vec<OutboxEvent>,
}

/// The query of `GET /v1/events`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams,
)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// 1 to 1,000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// `POST /v1/events/ack`: these events have been taken; they are not served again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckEvents {
    /// 1 to 1,000 event ids; ids already acknowledged or unknown are ignored.
    #[schema(min_items = 1, max_items = 1000)]
    pub ids: Vec<Uuid>,
}

/// Most events one `GET /v1/events` returns and one ack names.
pub const MAX_OUTBOX_PAGE: i64 = 1_000;
/// `GET /v1/events` without `limit`.
pub const DEFAULT_OUTBOX_PAGE: i64 = 100;

/// `POST /v1/events/ack` named no event id, or more than [`MAX_OUTBOX_PAGE`] (422).
pub const INVALID_EVENT_IDS: &str = "INVALID_EVENT_IDS";

#[derive(sqlx::FromRow)]
struct EventRow {
    id: Uuid,
    #[sqlx(rename = "type")]
    kind: String,
    subject: String,
    data: serde_json::Value,
    occurred_at: DateTime<Utc>,
}

/// Up to `limit` events not yet relayed, in the order they were written (through the
/// partial index of unrelayed events, so relayed history costs nothing).
#[tracing::instrument(skip_all, fields(limit))]
pub async fn pending(pool: &PgPool, limit: i64) -> Result<Vec<OutboxEvent>, sqlx::Error> {
    let rows = sqlx::query_as::<_, EventRow>(
        r#"
        SELECT id, type, subject, data, occurred_at
        FROM outbox_events
        WHERE relayed_at IS NULL
        ORDER BY seq
        LIMIT $1
        "#,
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| OutboxEvent {
            id: r.id,
            kind: r.kind,
            subject: r.subject,
            occurred_at: r.occurred_at,
            data: r.data,
        })
        .collect())
}

/// Marks these events relayed; ids already relayed or unknown change nothing. Returns
/// how many were newly marked.
#[tracing::instrument(skip_all, fields(ids = ids.len()))]
pub async fn ack(pool: &PgPool, ids: &[Uuid]) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        r#"
        UPDATE outbox_events
        SET relayed_at = now()
        WHERE id = ANY($1) AND relayed_at IS NULL
        "#,
    )
    .bind(ids)
    .execute(pool)
    .await?
    .rows_affected())
}

/// The age in seconds of the oldest event not yet relayed (0 when none is): how far the
/// orchestrator's ingest is behind. The first entry of the partial index of unrelayed
/// events, so it costs the same whatever the history.
pub async fn lag_seconds(pool: &PgPool) -> Result<f64, sqlx::Error> {
    let lag: Option<f64> = sqlx::query_scalar(
        r#"
        SELECT EXTRACT(EPOCH FROM now() - occurred_at)::FLOAT8
        FROM outbox_events
        WHERE relayed_at IS NULL
        ORDER BY seq
        LIMIT 1
        "#,
    )
    .fetch_optional(pool)
    .await?;
    Ok(lag.unwrap_or(0.0).max(0.0))
}

/// What the outbox routes run with: the service's pool (its schema holds
/// `outbox_events`), its verifier, and the counter of relayed events it reports.
#[derive(Clone)]
pub struct Outbox {
    pub pool: PgPool,
    pub verifier: Arc<Verifier>,
    /// `<service>_outbox_relayed_total`.
    pub relayed_metric: &'static str,
}

impl FromRef<Outbox> for Arc<Verifier> {
    fn from_ref(o: &Outbox) -> Self {
        o.verifier.clone()
    }
}

/// `GET /v1/events` and `POST /v1/events/ack`, to merge into the service's router.
pub fn routes<S: Clone + Send + Sync + 'static>(outbox: Outbox) -> Router<S> {
    Router::new()
        .route("/v1/events", get(list))
        .route("/v1/events/ack", post(ack_events))
        .with_state(outbox)
}

/// A refusal, or the database failing under a read or the acknowledgement.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("outbox database")]
    Database(#[from] sqlx::Error),
}

impl IntoResponse for OutboxError {
    fn into_response(self) -> Response {
        match self {
            OutboxError::Api(e) => e.into_response(),
            OutboxError::Database(e) if crate::db::unavailable(&e) => {
                ApiError::database_unavailable("the database is unavailable or overloaded; retry")
                    .into_response()
            }
            e @ OutboxError::Database(_) => internal_error_response(&e),
        }
    }
}

/// Events not yet relayed, oldest first (service: orchestrator).
#[utoipa::path(get, path = "/v1/events", security(("service" = [])), params(OutboxQuery),
    responses(
        (status = 200, body = OutboxPage, description = "up to `limit` events not yet acknowledged, in the order they were written"),
        (status = 400, body = ErrorBody, description = "INVALID_QUERY: limit not 1 to 1,000"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "a buyer token, or a caller other than the orchestrator")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0))]
pub async fn list(
    State(outbox): State<Outbox>,
    caller: Service<{ ORCHESTRATOR }>,
    Query(query): Query<OutboxQuery>,
) -> Result<Json<OutboxPage>, OutboxError> {
    let limit = query.limit.unwrap_or(DEFAULT_OUTBOX_PAGE);
    if !(1..=MAX_OUTBOX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            codes::INVALID_QUERY,
            format!("limit must be 1 to {MAX_OUTBOX_PAGE}"),
        )
        .into());
    }
    let events = pending(&outbox.pool, limit).await?;
    Ok(Json(OutboxPage { events }))
}

/// Acknowledge relayed events: they are not served again (service: orchestrator).
/// Ids already acknowledged or unknown are ignored, so a repeat is harmless.
#[utoipa::path(post, path = "/v1/events/ack", operation_id = "ack", security(("service" = [])), request_body = AckEvents,
    responses(
        (status = 204, description = "the named events are marked relayed"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "a buyer token, or a caller other than the orchestrator"),
        (status = 422, body = ErrorBody, description = "INVALID_EVENT_IDS: no ids, or more than 1,000")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, ids = req.ids.len()))]
pub async fn ack_events(
    State(outbox): State<Outbox>,
    caller: Service<{ ORCHESTRATOR }>,
    Json(req): Json<AckEvents>,
) -> Result<StatusCode, OutboxError> {
    let most = usize::try_from(MAX_OUTBOX_PAGE).unwrap_or(usize::MAX);
    if req.ids.is_empty() || req.ids.len() > most {
        return Err(ApiError::unprocessable(
            INVALID_EVENT_IDS,
            format!("name 1 to {MAX_OUTBOX_PAGE} event ids"),
        )
        .into());
    }
    let marked = ack(&outbox.pool, &req.ids).await?;
    metrics::counter!(outbox.relayed_metric).increment(marked);
    Ok(StatusCode::NO_CONTENT)
}
