//! The operators' side of the webhook platform: endpoints (create, list, switch on and
//! off, rotate the secret) and deliveries (list, replay a DEAD one). The webhook API's
//! routes and the console both go through [`Webhooks`].

use std::time::Duration;

use paysaga_contracts::orchestrator::api::{
    page_limit, state_filter, CreateWebhookEndpoint, ListDeliveries, WebhookDelivery,
    WebhookDeliveryPage, WebhookEndpoint, WebhookEndpointCreated, WebhookEndpointList,
    WebhookSecretRotated,
};
use paysaga_staff::{audit::Entry, Acting, AuditAction};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{
    checks::{check_description, check_event_types, check_url, new_secret},
    config::WebhookConfig,
    egress::Egress,
    error::{Error, Result},
    sealing::SealingKey,
    store::{self, DeliveryState},
};

/// The webhook tables as the operators work on them; cheap to clone.
#[derive(Debug, Clone)]
pub struct Webhooks {
    pool: PgPool,
    egress: Egress,
    key: SealingKey,
    grace: Duration,
}

impl Webhooks {
    /// Over the pool of the schema that holds the webhook tables, with the egress rule,
    /// sealing key and rotation grace of `config`.
    pub fn new(pool: PgPool, config: &WebhookConfig) -> Self {
        Self {
            pool,
            egress: config.egress,
            key: config.secret_key.clone(),
            grace: config.secret_grace,
        }
    }

    /// Registers an endpoint, enabled; its signing secret is in this answer only.
    pub async fn create_endpoint(
        &self,
        req: CreateWebhookEndpoint,
    ) -> Result<WebhookEndpointCreated> {
        let url = check_url(&req.url, self.egress)?;
        let event_types = check_event_types(&req.event_types)?;
        let description = check_description(req.description)?;
        let secret = new_secret();
        let id = Uuid::now_v7();
        let row = store::create_endpoint(
            &self.pool,
            id,
            &url,
            &self.key.seal(id, &secret),
            &event_types,
            &description,
        )
        .await?;
        tracing::info!(endpoint_id = %row.id, url = %row.url, "webhook endpoint created");
        Ok(WebhookEndpointCreated {
            endpoint: row,
            secret,
        })
    }

    /// Every endpoint, oldest first (secrets are never shown again).
    pub async fn endpoints(&self) -> Result<WebhookEndpointList> {
        Ok(WebhookEndpointList {
            endpoints: store::list_endpoints(&self.pool).await?,
        })
    }

    /// Switches an endpoint on or off; repeating it changes nothing.
    pub async fn set_enabled(&self, id: Uuid, enabled: bool) -> Result<WebhookEndpoint> {
        let row = store::set_enabled(&self.pool, id, enabled)
            .await?
            .ok_or(Error::EndpointNotFound)?;
        tracing::info!(endpoint_id = %id, enabled, "webhook endpoint switched");
        Ok(row)
    }

    /// Gives an endpoint a new secret, returned this once; the one before is still
    /// signed with (a second `v1`) until the grace (`WEBHOOK_SECRET_GRACE_SECS`) ends.
    pub async fn rotate_secret(&self, id: Uuid) -> Result<WebhookSecretRotated> {
        let secret = new_secret();
        let previous_expires_at =
            store::rotate_secret(&self.pool, &self.key, id, &secret, self.grace)
                .await?
                .ok_or(Error::EndpointNotFound)?;
        tracing::info!(endpoint_id = %id, %previous_expires_at, "webhook secret rotated");
        Ok(WebhookSecretRotated {
            endpoint_id: id,
            secret,
            previous_expires_at,
        })
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
        let Some(row) = store::replay(&self.pool, id).await? else {
            let row = store::load_delivery(&self.pool, id)
                .await?
                .ok_or(Error::DeliveryNotFound)?;
            return Err(Error::DeliveryNotDead(row.state));
        };
        tracing::info!(event_id = %row.event_id, endpoint_id = %row.endpoint_id, "webhook delivery replayed");
        Ok(row.to_api())
    }
}

/// A person's (or tool's) changes to webhooks, each with its audit row: done (with what
/// it left), refused (with the answer's code) or failed.
impl Webhooks {
    async fn audited<T>(
        &self,
        by: &Acting,
        action: AuditAction,
        target: String,
        reason: Option<String>,
        result: Result<T>,
        detail: impl FnOnce(&T) -> Option<String>,
    ) -> Result<T> {
        let entry = Entry::of(action, target, reason, &result, detail, |e| {
            e.api().map(|a| a.code)
        });
        paysaga_staff::audit::record(&self.pool, by, entry).await?;
        result
    }

    /// [`Self::create_endpoint`] by `by`.
    pub async fn create_endpoint_as(
        &self,
        by: &Acting,
        req: CreateWebhookEndpoint,
    ) -> Result<WebhookEndpointCreated> {
        let url = req.url.clone();
        let result = self.create_endpoint(req).await;
        self.audited(
            by,
            AuditAction::WebhookEndpointCreated,
            url,
            None,
            result,
            |c| Some(c.endpoint.id.to_string()),
        )
        .await
    }

    /// [`Self::set_enabled`] by `by`.
    pub async fn set_enabled_as(
        &self,
        by: &Acting,
        id: Uuid,
        enabled: bool,
    ) -> Result<WebhookEndpoint> {
        let result = self.set_enabled(id, enabled).await;
        let what = if enabled { "enabled" } else { "disabled" };
        self.endpoint_changed(by, id, result, what).await
    }

    /// [`Self::rotate_secret`] by `by`.
    pub async fn rotate_secret_as(&self, by: &Acting, id: Uuid) -> Result<WebhookSecretRotated> {
        let result = self.rotate_secret(id).await;
        self.endpoint_changed(by, id, result, "secret rotated")
            .await
    }

    /// [`Self::audited`] for a change to endpoint `id`, described as `what`.
    async fn endpoint_changed<T>(
        &self,
        by: &Acting,
        id: Uuid,
        result: Result<T>,
        what: &str,
    ) -> Result<T> {
        self.audited(
            by,
            AuditAction::WebhookEndpointChanged,
            id.to_string(),
            None,
            result,
            |_| Some(what.to_owned()),
        )
        .await
    }

    /// [`Self::replay`] by `by`, for `reason`.
    pub async fn replay_as(
        &self,
        by: &Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<WebhookDelivery> {
        let result = self.replay(id).await;
        self.audited(
            by,
            AuditAction::WebhookReplayed,
            id.to_string(),
            reason,
            result,
            |d| Some(d.state.clone()),
        )
        .await
    }
}
