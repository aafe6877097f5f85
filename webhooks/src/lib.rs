//! The webhook platform (docs/events.md): the event log (payment events written by a
//! trigger in the payment's own transaction, order and member events pulled from those
//! services' outboxes), endpoints, the delivery worker every instance runs, and the
//! operators' webhook API. Its tables live in the schema of the service that hosts it
//! (the orchestrator's `payment_service`); it is given that schema's pool.

pub mod checks;
pub mod config;
pub mod egress;
pub mod error;
pub mod ingest;
pub(crate) mod metrics;
pub mod openapi;
pub mod operations;
pub mod purge;
pub mod routes;
pub mod sealing;
pub mod store;
pub mod worker;

use std::sync::{atomic::AtomicBool, Arc};

use openapi::Catalogue;
use paysaga_common::jobs::Jobs;
use paysaga_contracts::{orchestrator::api, MemberClient, OrderClient};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use utoipa::OpenApi;
use uuid::Uuid;

pub use config::WebhookConfig;
pub use error::{Error, Result};
pub use operations::Webhooks;
pub use routes::{routes, ApiState};
pub use worker::backoff;

/// The webhook API's part of its host's OpenAPI document: the operators' routes, their
/// schemas, and the event catalogue as OpenAPI 3.1 `webhooks` (see [`openapi`]).
#[derive(OpenApi)]
#[openapi(
    modifiers(&Catalogue),
    paths(
        routes::create_endpoint,
        routes::list_endpoints,
        routes::disable_endpoint,
        routes::enable_endpoint,
        routes::rotate_secret,
        routes::list_deliveries,
        routes::replay_delivery,
    ),
    components(schemas(
        api::CreateWebhookEndpoint,
        api::WebhookEndpoint,
        api::WebhookEndpointCreated,
        api::WebhookEndpointList,
        api::WebhookSecretRotated,
        api::DeliveryFailure,
        api::WebhookDelivery,
        api::WebhookDeliveryPage,
        paysaga_common::ErrorBody,
    ))
)]
pub struct ApiDoc;

impl ApiDoc {
    /// Adds the webhook API to `host`'s document: its paths and schemas, and the
    /// catalogue (a top-level extension, which `OpenApi::merge` does not carry).
    pub fn merge_into(host: &mut utoipa::openapi::OpenApi) {
        let mut own = Self::openapi();
        let extensions = own.extensions.take();
        host.merge(own);
        if let Some(extensions) = extensions {
            host.extensions
                .get_or_insert_with(Default::default)
                .merge(extensions);
        }
    }
}

/// What the background work of one instance needs.
pub struct Background {
    /// The pool of the schema holding the webhook tables.
    pub pool: PgPool,
    /// The order service, whose outbox is pulled.
    pub order: OrderClient,
    /// The member service, whose outbox is pulled (`None`: its events are not taken in).
    pub member: Option<MemberClient>,
    pub config: WebhookConfig,
    /// The lease owner this instance writes on the deliveries it claims.
    pub instance: Uuid,
    /// Cleared when the instance stops: nothing more is pulled, purged, claimed or
    /// recorded.
    pub alive: Arc<AtomicBool>,
}

/// Makes sure every endpoint secret is sealed under `key` before anything is sent:
/// refuses to go on when `key` does not open the secrets already sealed (another key
/// sealed them: nothing could be signed), then seals those still in plaintext (made
/// before secrets were sealed) and clears the plaintext.
pub async fn seal_secrets(pool: &PgPool, key: &sealing::SealingKey) -> anyhow::Result<()> {
    anyhow::ensure!(
        store::key_opens_secrets(pool, key).await?,
        "{} does not open the webhook secrets stored in the database (they were sealed \
         under another key); start with the key that sealed them",
        sealing::KEY_VAR
    );
    let sealed = store::seal_plaintext_secrets(pool, key).await?;
    if sealed > 0 {
        tracing::info!(
            sealed,
            "webhook secrets stored in plaintext sealed, plaintext cleared"
        );
    }
    Ok(())
}

/// Starts the instance's webhook work: the secrets sealed ([`seal_secrets`]), the ingest
/// of the order and member services' events and the purge of old ones on `jobs`, and the
/// delivery worker in a task of its own (abort it to stop; a delivery cut off is sent
/// again after its lease).
pub async fn start(jobs: &Jobs, b: Background) -> anyhow::Result<JoinHandle<()>> {
    seal_secrets(&b.pool, &b.config.secret_key).await?;
    let mut sources = vec![ingest::Puller {
        source: ingest::Source::Order,
        outbox: b.order.events(),
    }];
    sources.extend(b.member.map(|m| ingest::Puller {
        source: ingest::Source::Member,
        outbox: m.events(),
    }));
    ingest::schedule(jobs, b.pool.clone(), sources, &b.config, b.alive.clone()).await?;
    purge::schedule(jobs, b.pool.clone(), &b.config, b.alive.clone()).await?;
    Ok(worker::spawn(worker::Worker {
        http: worker::http_client(&b.config),
        pool: b.pool,
        instance: b.instance,
        config: b.config,
        alive: b.alive,
    }))
}
