//! The operators' webhook API (service credential): endpoints (create, list, disable,
//! enable, rotate the secret) and deliveries (list, replay a DEAD one), each a thin call
//! of [`Webhooks`].

use std::sync::Arc;

use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    routing::{get, post},
    Json as AxumJson, Router,
};
use paysaga_common::{
    auth::{allow::OPERATOR, Service, Verifier},
    extract::{Json, Path, Query},
};
use paysaga_contracts::orchestrator::api::{
    CreateWebhookEndpoint, ListDeliveries, WebhookDelivery, WebhookDeliveryPage, WebhookEndpoint,
    WebhookEndpointCreated, WebhookEndpointList, WebhookSecretRotated,
};
use uuid::Uuid;

use crate::{error::Result, operations::Webhooks};

/// What the webhook API's routes need: the platform and the credential check.
#[derive(Clone)]
pub struct ApiState {
    pub webhooks: Webhooks,
    pub verifier: Arc<Verifier>,
}

impl FromRef<ApiState> for Arc<Verifier> {
    fn from_ref(s: &ApiState) -> Self {
        s.verifier.clone()
    }
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

/// Register an endpoint; its signing secret is in this answer only.
#[utoipa::path(
    post, path = "/v1/webhook-endpoints", tag = "webhooks",
    request_body = CreateWebhookEndpoint,
    responses(
        (status = 201, description = "created and enabled; `secret` is shown this once", body = WebhookEndpointCreated),
        (status = 422, description = "WEBHOOK_URL_INVALID, WEBHOOK_ADDRESS_FORBIDDEN (the host is an internal address: loopback, private, link-local, unique-local, multicast or reserved), EVENT_TYPE_UNKNOWN, INVALID_BODY (too many types, description too long)", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(operator = %operator))]
pub async fn create_endpoint(
    State(state): State<ApiState>,
    Service(operator): Service<{ OPERATOR }>,
    Json(req): Json<CreateWebhookEndpoint>,
) -> Result<(StatusCode, AxumJson<WebhookEndpointCreated>)> {
    let created = state.webhooks.create_endpoint(req).await?;
    Ok((StatusCode::CREATED, AxumJson(created)))
}

/// Every endpoint, oldest first (secrets are never shown again).
#[utoipa::path(
    get, path = "/v1/webhook-endpoints", tag = "webhooks",
    responses((status = 200, body = WebhookEndpointList)),
    security(("service" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn list_endpoints(
    State(state): State<ApiState>,
    _operator: Service<{ OPERATOR }>,
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
            security(("service" = []))
        )]
        #[tracing::instrument(skip_all, fields(endpoint_id = %id, operator = %operator))]
        pub async fn $name(
            State(state): State<ApiState>,
            Service(operator): Service<{ OPERATOR }>,
            Path(id): Path<Uuid>,
        ) -> Result<AxumJson<WebhookEndpoint>> {
            Ok(AxumJson(state.webhooks.set_enabled(id, $enabled).await?))
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
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(endpoint_id = %id, operator = %operator))]
pub async fn rotate_secret(
    State(state): State<ApiState>,
    Service(operator): Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<WebhookSecretRotated>> {
    Ok(AxumJson(state.webhooks.rotate_secret(id).await?))
}

/// Deliveries, most recently changed first, by state and endpoint.
#[utoipa::path(
    get, path = "/v1/webhook-deliveries", tag = "webhooks",
    params(ListDeliveries),
    responses(
        (status = 200, body = WebhookDeliveryPage),
        (status = 400, description = "INVALID_QUERY", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn list_deliveries(
    State(state): State<ApiState>,
    _operator: Service<{ OPERATOR }>,
    Query(filter): Query<ListDeliveries>,
) -> Result<AxumJson<WebhookDeliveryPage>> {
    Ok(AxumJson(state.webhooks.deliveries(&filter).await?))
}

/// Replay a DEAD delivery: PENDING again, attempts counted afresh, due at once. The
/// receiver gets the same event id it may have seen before.
#[utoipa::path(
    post, path = "/v1/webhook-deliveries/{id}/replay", tag = "webhooks",
    params(("id" = Uuid, Path, description = "delivery id")),
    responses(
        (status = 200, description = "PENDING and due", body = WebhookDelivery),
        (status = 404, description = "WEBHOOK_DELIVERY_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 409, description = "WEBHOOK_DELIVERY_NOT_DEAD", body = paysaga_common::ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(delivery_id = %id, operator = %operator))]
pub async fn replay_delivery(
    State(state): State<ApiState>,
    Service(operator): Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<AxumJson<WebhookDelivery>> {
    Ok(AxumJson(state.webhooks.replay(id).await?))
}
