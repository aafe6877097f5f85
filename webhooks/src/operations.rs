//! The operators' side of the webhook platform: endpoints (create, list, switch on and
//! off) and deliveries (list, replay a DEAD one). The webhook API's routes and the
//! console both go through [`Webhooks`].

use paysaga_contracts::orchestrator::api::{
    page_limit, state_filter, CreateWebhookEndpoint, ListDeliveries, WebhookDelivery,
    WebhookDeliveryPage, WebhookEndpoint, WebhookEndpointCreated, WebhookEndpointList,
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    checks::{check_description, check_event_types, check_url, new_secret},
    error::{Error, Result},
    store::{self, DeliveryState},
};

/// The webhook tables as the operators work on them; cheap to clone.
#[derive(Debug, Clone)]
pub struct Webhooks {
    pool: PgPool,
}

impl Webhooks {
    /// Over the pool of the schema that holds the webhook tables.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Registers an endpoint, enabled; its signing secret is in this answer only.
    pub async fn create_endpoint(
        &self,
        req: CreateWebhookEndpoint,
    ) -> Result<WebhookEndpointCreated> {
        let url = check_url(&req.url)?;
        let event_types = check_event_types(&req.event_types)?;
        let description = check_description(req.description)?;
        let secret = new_secret();
        let row = store::create_endpoint(
            &self.pool,
            Uuid::now_v7(),
            &url,
            &secret,
            &event_types,
            &description,
        )
        .await?;
        tracing::info!(endpoint_id = %row.id, url = %row.url, "webhook endpoint created");
        Ok(WebhookEndpointCreated {
            endpoint: row.to_api(),
            secret,
        })
    }

    /// Every endpoint, oldest first (secrets are never shown again).
    pub async fn endpoints(&self) -> Result<WebhookEndpointList> {
        let rows = store::list_endpoints(&self.pool).await?;
        Ok(WebhookEndpointList {
            endpoints: rows.iter().map(store::EndpointRow::to_api).collect(),
        })
    }

    /// Switches an endpoint on or off; repeating it changes nothing.
    pub async fn set_enabled(&self, id: Uuid, enabled: bool) -> Result<WebhookEndpoint> {
        let row = store::set_enabled(&self.pool, id, enabled)
            .await?
            .ok_or(Error::EndpointNotFound)?;
        tracing::info!(endpoint_id = %id, enabled, "webhook endpoint switched");
        Ok(row.to_api())
    }

    /// Deliveries, most recently changed first, by state and endpoint.
    pub async fn deliveries(&self, filter: &ListDeliveries) -> Result<WebhookDeliveryPage> {
        let limit = page_limit(filter.limit)?;
        let state =
            state_filter::<DeliveryState>(filter.state.as_deref(), ": PENDING, DELIVERED or DEAD")?;
        let rows = store::list_deliveries(&self.pool, state, filter.endpoint_id, limit).await?;
        Ok(WebhookDeliveryPage {
            deliveries: rows.iter().map(store::DeliveryRow::to_api).collect(),
        })
    }

    /// Replays a DEAD delivery: PENDING again, attempts counted afresh, due at once.
    pub async fn replay(&self, id: Uuid) -> Result<WebhookDelivery> {
        let replayed = store::replay(&self.pool, id).await?;
        let row = store::load_delivery(&self.pool, id)
            .await?
            .ok_or(Error::DeliveryNotFound)?;
        if !replayed {
            return Err(Error::DeliveryNotDead(row.state));
        }
        tracing::info!(event_id = %row.event_id, endpoint_id = %row.endpoint_id, "webhook delivery replayed");
        Ok(row.to_api())
    }
}
