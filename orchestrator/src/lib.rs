//! The orchestrator: takes a buyer's payment for a reservation and drives the payment
//! saga (see `workflows` and docs/orchestrator.md) to COMPLETED, FAILED or REFUNDED,
//! through retries, timeouts, crashes and slow downstreams.

/// The wire types this service serves, from its contract.
pub use paysaga_contracts::orchestrator::api;
pub mod answer;
pub mod config;
pub mod console;
pub(crate) mod downstream;
pub mod driver;
pub(crate) mod error;
pub mod failure;
pub mod idempotency;
pub(crate) mod metrics;
pub(crate) mod recovery;
pub(crate) mod routes;
pub mod store;
pub mod webhooks;

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{
    extract::{FromRef, State},
    response::Response,
    routing::{get, post},
    Router,
};
use paysaga_common::{auth::Verifier, db, limits::MemberLimiter, server};
use paysaga_contracts::AccountClient;
use paysaga_contracts::OrderClient;
use sqlx::{migrate::Migrator, PgPool};
use tokio::net::TcpListener;
use utoipa::{
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    Modify, OpenApi,
};
use uuid::Uuid;

pub use config::Config;
pub use driver::AfterCallHook;
pub use error::{Breach, Error, Result};
use webhooks::openapi::Webhooks as WebhookCatalogue;

/// The schema this service owns.
pub const SCHEMA: &str = "payment_service";

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations/payment_service");

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub verifier: Arc<Verifier>,
    pub engine: Arc<driver::Engine>,
    pub response_wait: Duration,
    pub retention_hours: i64,
    /// A buyer's payment requests per member (`MEMBER_RATE_PER_SEC`, `MEMBER_RATE_BURST`).
    pub limiter: Arc<MemberLimiter>,
    /// The operator console's downstream settings (`/console`).
    pub console: Arc<console::Console>,
}

impl FromRef<AppState> for Arc<Verifier> {
    fn from_ref(s: &AppState) -> Self {
        s.verifier.clone()
    }
}

/// Test seams; all empty in production.
#[derive(Clone, Default)]
pub struct Hooks {
    /// See [`AfterCallHook`].
    pub after_call: Option<AfterCallHook>,
}

impl AppState {
    pub fn new(pool: PgPool, config: &Config, hooks: Hooks) -> Self {
        let credential = &config.service_credential;
        let downstream = downstream::Downstream::new(
            AccountClient::new(
                config.account_url.clone(),
                credential,
                config.downstream_timeout,
            ),
            OrderClient::new(
                config.order_url.clone(),
                credential,
                config.downstream_timeout,
            ),
            config.downstream_batches,
        );
        let engine = driver::Engine {
            pool: pool.clone(),
            writes: store::Writes::new(pool.clone(), config.write_flushes),
            downstream,
            instance: Uuid::new_v4(),
            lease: config.lease,
            alive: Arc::new(AtomicBool::new(true)),
            after_call: hooks.after_call,
        };
        Self {
            pool,
            verifier: Arc::new(Verifier::from_source(
                &config.buyer_keys,
                &config.service_keys,
            )),
            engine: Arc::new(engine),
            response_wait: config.response_wait,
            retention_hours: config.idempotency_retention_hours,
            limiter: Arc::new(MemberLimiter::new(config.member_rate)),
            console: Arc::new(console::Console::new(config)),
        }
    }

    /// Connects as the service role and brings the schema up to date.
    pub async fn connect(config: &Config, hooks: Hooks) -> anyhow::Result<Self> {
        let pool = db::open(
            &config.database_url,
            config.migration_database_url.as_deref(),
            SCHEMA,
            config.db_max_connections,
            config.db_limits,
            &MIGRATOR,
        )
        .await?;
        Ok(Self::new(pool, config, hooks))
    }
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["buyer", "service"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("JWT")
                        .build(),
                ),
            );
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paysaga orchestrator",
        description = "The payment saga: idempotent checkout payments, recovery, and the operators' inspection API; the events it publishes as signed webhooks (see `webhooks`) and the operators' webhook API."
    ),
    modifiers(&SecuritySchemes, &WebhookCatalogue),
    paths(
        routes::payments::create,
        routes::payments::get,
        routes::operator::list,
        routes::operator::steps,
        routes::operator::resume,
        routes::operator::refund,
        routes::webhooks::create_endpoint,
        routes::webhooks::list_endpoints,
        routes::webhooks::disable_endpoint,
        routes::webhooks::enable_endpoint,
        routes::webhooks::list_deliveries,
        routes::webhooks::replay_delivery,
    ),
    components(schemas(
        api::CreatePayment,
        api::Payment,
        api::PaymentAdmin,
        api::Step,
        api::PaymentTimeline,
        api::PaymentPage,
        api::CreateWebhookEndpoint,
        api::WebhookEndpoint,
        api::WebhookEndpointCreated,
        api::WebhookEndpointList,
        api::WebhookDelivery,
        api::WebhookDeliveryPage,
        paysaga_common::ErrorBody,
    ))
)]
pub struct ApiDoc;

async fn readyz(State(state): State<AppState>) -> Response {
    server::readiness(
        vec![("postgres", server::check_db(&state.pool).await)],
        false,
    )
}

pub fn app(state: AppState) -> Router {
    use routes::{operator, payments, webhooks};
    let api = Router::new()
        .route("/v1/payments", post(payments::create).get(operator::list))
        .route("/v1/payments/{id}", get(payments::get))
        .route("/v1/payments/{id}/steps", get(operator::steps))
        .route("/v1/payments/{id}/resume", post(operator::resume))
        .route("/v1/payments/{id}/refund", post(operator::refund))
        .route(
            "/v1/webhook-endpoints",
            post(webhooks::create_endpoint).get(webhooks::list_endpoints),
        )
        .route(
            "/v1/webhook-endpoints/{id}/disable",
            post(webhooks::disable_endpoint),
        )
        .route(
            "/v1/webhook-endpoints/{id}/enable",
            post(webhooks::enable_endpoint),
        )
        .route("/v1/webhook-deliveries", get(webhooks::list_deliveries))
        .route(
            "/v1/webhook-deliveries/{id}/replay",
            post(webhooks::replay_delivery),
        )
        .route("/readyz", get(readyz))
        // HTML pages for operators; deliberately not in the OpenAPI document.
        .merge(console::routes())
        .with_state(state);
    server::finish(api, ApiDoc::openapi())
}

/// Marks the instance dead when `run` ends or is aborted, so its drivers and jobs
/// write nothing more, as if the process had exited.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The orchestrator process, as the `orchestrator` binary and `paysaga service orchestrator` both run it:
/// configuration from the environment, logging, the listening socket (handed over by a
/// supervisor, else bound to `LISTEN_ADDR`), then serving until SIGINT or SIGTERM.
pub async fn serve_from_env() -> anyhow::Result<()> {
    let config = Config::from_env()?;
    paysaga_common::telemetry::init_tracing_for("orchestrator", config.log_format);
    config.dev_fallbacks.warn("orchestrator");
    let listener = paysaga_common::server::listener(&config.listen_addr).await?;
    run(config, listener, paysaga_common::server::shutdown_signal()).await
}

/// Connects, migrates, starts recovery, the idempotency purge, the event ingest and the
/// webhook delivery worker, serves until `shutdown`, then stops them.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with_hooks(config, listener, shutdown, Hooks::default()).await
}

/// [`run`] with test seams.
pub async fn run_with_hooks(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    hooks: Hooks,
) -> anyhow::Result<()> {
    config.validate()?;
    let state = AppState::connect(&config, hooks).await?;
    let _alive = AliveGuard(state.engine.alive.clone());
    let policy = recovery::RecoveryPolicy {
        interval: config.recovery_interval,
        batch: config.recovery_batch,
        max_batches: config.recovery_max_batches,
        concurrency: config.recovery_concurrency,
    };
    let jobs = recovery::start(
        state.engine.clone(),
        policy,
        config.idempotency_purge_interval,
    )
    .await?;
    webhooks::ingest::schedule(
        &jobs,
        state.pool.clone(),
        OrderClient::new(
            config.order_url.clone(),
            &config.service_credential,
            config.downstream_timeout,
        ),
        &config.webhooks,
        state.engine.alive.clone(),
    )
    .await?;
    webhooks::schedule_purge(
        &jobs,
        state.pool.clone(),
        &config.webhooks,
        state.engine.alive.clone(),
    )
    .await?;
    let delivery = webhooks::worker::spawn(webhooks::worker::Worker {
        pool: state.pool.clone(),
        instance: state.engine.instance,
        config: config.webhooks.clone(),
        http: webhooks::worker::http_client(config.webhooks.timeout),
        alive: state.engine.alive.clone(),
    });
    tracing::info!(addr = %listener.local_addr()?, instance = %state.engine.instance, "orchestrator listening");
    let served = server::serve(listener, app(state), shutdown).await;
    delivery.abort();
    if let Err(e) = jobs.shutdown().await {
        tracing::warn!(error = %e, "scheduled jobs did not stop cleanly");
    }
    served?;
    Ok(())
}
