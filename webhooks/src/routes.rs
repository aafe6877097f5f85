//! The operators' webhook API: endpoints (create, disable, enable, rotate the secret:
//! admins; list: every staff role) and deliveries (list: every role; replay a DEAD one:
//! operators and admins), each a thin call of [`Webhooks`], every change with its audit
//! row. People call it with their staff session; the operator tools' service credential
//! is still admitted (as an admin).

use std::sync::Arc;

use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    routing::{get, post},
    Json as AxumJson, Router,
};
use paysaga_common::{
    auth::Verifier,
    extract::{Json, Path, Query},
};
use paysaga_contracts::orchestrator::api::{
    CreateWebhookEndpoint, ListDeliveries, WebhookDelivery, WebhookDeliveryPage, WebhookEndpoint,
    WebhookEndpointCreated, WebhookEndpointList, WebhookSecretRotated,
};
use paysaga_staff::{
    allow::{ADMIN, ANY, OPERATOR},
    PersonOrTool, Staff,
};
use uuid::Uuid;

use crate::{error::Result, operations::Webhooks};

/// What the webhook API's routes need: the platform and the credential check.
#[derive(Clone, FromRef)]
pub struct ApiState {
    pub webhooks: Webhooks,
    pub verifier: Arc<Verifier>,
    pub staff: Staff,
}

/// The webhook API's routes, with their state.
pub fn routes(state: ApiState) -> Router {
    Router::new()
        .route(
            "/v1/webhook-endpoints",
            post(create_endpoint).get(list_endpoints),
        )
        .route("/v1/webhook-endpoints/{id}/disable", post(disable_endpoint))
        .route("/v1/webhook-endpoints/{id}/enable", post(enable_endpoint))
        .route(
            "/v1/webhook-endpoints/{id}/rotate-secret",
            post(rotate_secret),
        )
        .route("/v1/webhook-deliveries", get(list_deliveries))
        .route("/v1/webhook-deliveries/{id}/replay", post(replay_delivery))
        .with_state(state)
}

/// The reason a body may carry (`{"reason": "..."}`); an empty body gives none.
fn reason(body: &[u8]) -> Result<Option<String>> {
    paysaga_staff::accounts::reason_from_body(body).map_err(crate::Error::Api)
}

/// Register an endpoint; its signing secret is in this answer only.
#[utoipa::path(
    post, path = "/v1/webhook-endpoints", tag = "webhooks",
    request_body = CreateWebhookEndpoint,
    responses(
        (status = 201, description = "created and enabled; `secret` is shown this once", body = WebhookEndpointCreated),
        (status = 422, description = "WEBHOOK_URL_INVALID, WEBHOOK_ADDRESS_FORBIDDEN (the host is an internal address: loopback, private, link-local, unique-local, multicast or reserved), EVENT_TYPE_UNKNOWN, INVALID_BODY (too many types, description too long)", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []), ("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn create_endpoint(
    State(state): State<ApiState>,
    PersonOrTool(by): PersonOrTool<{ ADMIN }>,
    Json(req): Json<CreateWebhookEndpoint>,
) -> Result<(StatusCode, AxumJson<WebhookEndpointCreated>)> {
    let created = state.webhooks.create_endpoint_as(&by, req).await?;
    Ok((StatusCode::CREATED, AxumJson(created)))
}

/// Every endpoint, oldest first (secrets are never shown again).
#[utoipa::path(
    get, path = "/v1/webhook-endpoints", tag = "webhooks",
    responses((status = 200, body = WebhookEndpointList)),
    security(("service" = []), ("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn list_endpoints(
    State(state): State<ApiState>,
    _viewer: PersonOrTool<{ ANY }>,
) -> Result<AxumJson<WebhookEndpointList>> {
    Ok(AxumJson(state.webhooks.endpoints().await?))
}

/// An endpoint switch: the disable and enable routes differ only in their path, doc and
/// the state they set.
macro_rules! endpoint_switch {
    ($(#[$doc:meta])* $name:ident, $path:literal, $enabled:literal) => {
        $(#[$doc])*
        #[utoipa::path(
            post, path = $path, tag = "webhooks",
            params(("id" = Uuid, Path, description = "endpoint id")),
            responses(
                (status = 200, body = WebhookEndpoint),
                (status = 404, description = "WEBHOOK_ENDPOINT_NOT_FOUND", body = paysaga_common::ErrorBody),
            ),
            security(("service" = []), ("staff" = []))
        )]
        #[tracing::instrument(skip_all, fields(endpoint_id = %id))]
        pub async fn $name(
            State(state): State<ApiState>,
            PersonOrTool(by): PersonOrTool<{ ADMIN }>,
            Path(id): Path<Uuid>,
        ) -> Result<AxumJson<WebhookEndpoint>> {
            Ok(AxumJson(state.webhooks.set_enabled_as(&by, id, $enabled).await?))
        }
    };
}

endpoint_switch!(
    /// Disable an endpoint: no new deliveries are made for it, and its pending ones wait
    /// until it is enabled again. Repeating it changes nothing.
    disable_endpoint,
    "/v1/webhook-endpoints/{id}/disable",
    false
);

endpoint_switch!(
    /// Enable an endpoint again: its waiting deliveries go out, and new events are
    /// delivered to it. Repeating it changes nothing.
    enable_endpoint,
    "/v1/webhook-endpoints/{id}/enable",
    true
);

/// Rotate an endpoint's signing secret: the new one is in this answer only. Until
/// `previous_expires_at` (`WEBHOOK_SECRET_GRACE_SECS` from now) every delivery carries
/// two `v1` signatures, under the new secret and the previous one, so the receiver can
/// switch at any moment in the grace; after it, only the new. Rotating again within the
/// grace drops the oldest.
#[utoipa::path(
    post, path = "/v1/webhook-endpoints/{id}/rotate-secret", tag = "webhooks",
    params(("id" = Uuid, Path, description = "endpoint id")),
    responses(
        (status = 200, description = "rotated; `secret` is shown this once", body = WebhookSecretRotated),
        (status = 404, description = "WEBHOOK_ENDPOINT_NOT_FOUND", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []), ("staff" = []))
)]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
pub async fn rotate_secret(
    State(state): State<ApiState>,
    PersonOrTool(by): PersonOrTool<{ ADMIN }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<WebhookSecretRotated>> {
    Ok(AxumJson(state.webhooks.rotate_secret_as(&by, id).await?))
}

/// Deliveries, most recently changed first, by state and endpoint.
#[utoipa::path(
    get, path = "/v1/webhook-deliveries", tag = "webhooks",
    params(ListDeliveries),
    responses(
        (status = 200, body = WebhookDeliveryPage),
        (status = 400, description = "INVALID_QUERY", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []), ("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn list_deliveries(
    State(state): State<ApiState>,
    _viewer: PersonOrTool<{ ANY }>,
    Query(filter): Query<ListDeliveries>,
) -> Result<AxumJson<WebhookDeliveryPage>> {
    Ok(AxumJson(state.webhooks.deliveries(&filter).await?))
}

/// Replay a DEAD delivery: PENDING again, attempts counted afresh, due at once. The
/// receiver gets the same event id it may have seen before.
#[utoipa::path(
    post, path = "/v1/webhook-deliveries/{id}/replay", tag = "webhooks",
    params(("id" = Uuid, Path, description = "delivery id")),
    request_body(content = Option<paysaga_contracts::staff::api::ActionReason>, description = "why (kept in the audit trail); the body may be empty"),
    responses(
        (status = 200, description = "PENDING and due", body = WebhookDelivery),
        (status = 404, description = "WEBHOOK_DELIVERY_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "WEBHOOK_DELIVERY_NOT_DEAD", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []), ("staff" = []))
)]
#[tracing::instrument(skip_all, fields(delivery_id = %id))]
pub async fn replay_delivery(
    State(state): State<ApiState>,
    PersonOrTool(by): PersonOrTool<{ OPERATOR | ADMIN }>,
    Path(id): Path<Uuid>,
    body: axum::body::Bytes,
) -> Result<AxumJson<WebhookDelivery>> {
    let reason = reason(&body)?;
    Ok(AxumJson(state.webhooks.replay_as(&by, id, reason).await?))
}
