//! The orchestrator service: takes a buyer's payment for a reservation and drives the
//! payment saga (see `workflows` and docs/orchestrator.md) to COMPLETED, FAILED or
//! REFUNDED, through retries, timeouts, crashes and slow downstreams. The service
//! composes three parts over one schema: the saga (this crate), the webhook platform
//! (`paysaga_webhooks`) and the operator console (`paysaga_console`).

/// The wire types this service serves, from its contract.
pub use paysaga_contracts::orchestrator::api;
pub mod answer;
pub mod catalog;
pub mod checkout;
pub mod config;
pub(crate) mod downstream;
pub mod driver;
pub(crate) mod error;
pub mod failure;
pub mod idempotency;
pub(crate) mod metrics;
pub mod openapi;
pub mod operations;
pub(crate) mod recovery;
pub(crate) mod routes;
pub mod store;

use anyhow::Context;
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use axum::{extract::State, response::Response, routing::get, Router};
use paysaga_common::{
    auth::{Audience, Verifier},
    limits::MemberLimiter,
    server::{self, Shutdown},
};
use paysaga_console::{ConsoleConfig, ConsoleState};
use paysaga_contracts::{AccountClient, MemberClient, OrderClient};
use paysaga_staff::Staff;
use paysaga_webhooks::Webhooks;
use sqlx::{migrate::Migrator, PgPool};
use tokio::net::TcpListener;

pub use config::Config;
pub use driver::AfterCallHook;
pub use error::{Breach, Error, Result};
pub use openapi::ApiDoc;

use checkout::Checkout;
use driver::Engine;
use operations::Operations;
use routes::SagaState;

/// The schema this service owns.
pub const SCHEMA: &str = "payment_service";

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations/payment_service");

/// How long a product change may take at the order service (see [`catalog`]).
const CATALOG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The service's parts, each with its own narrow state over the one pool.
#[derive(Clone)]
pub struct AppState {
    pool: PgPool,
    engine: Arc<Engine>,
    saga: SagaState,
    webhooks: paysaga_webhooks::ApiState,
    console: ConsoleState,
    catalog: routes::CatalogState,
    staff: Staff,
}

/// Test seams; all empty in production.
#[derive(Clone, Default)]
pub struct Hooks {
    /// See [`AfterCallHook`].
    pub after_call: Option<AfterCallHook>,
}

impl AppState {
    /// The state over `pool`, with `staff` (made over the same pool by
    /// [`AppState::connect`]).
    pub fn new(pool: PgPool, config: &Config, hooks: Hooks, staff: Staff) -> Self {
        let credential = &config.service_credential;
        let downstream = downstream::Downstream::new(
            AccountClient::with_http(
                config.process.http_client(config.downstream_timeout),
                config.account_url.clone(),
                credential,
            ),
            OrderClient::with_http(
                config.process.http_client(config.downstream_timeout),
                config.order_url.clone(),
                credential,
            ),
            config.downstream_batches,
        );
        let engine = Arc::new(Engine::new(
            pool.clone(),
            store::Writes::new(pool.clone(), config.write_flushes),
            downstream,
            config.lease,
            hooks.after_call,
        ));
        let verifier = Arc::new(Verifier::from_source(
            &config.buyer_keys,
            &config.service_keys,
            Audience::Orchestrator,
        ));
        let operations = Operations::new(
            engine.clone(),
            config.response_wait,
            config.staff.operator_refund_limit,
            config.staff.four_eyes_above,
            operations::TopUps {
                members: config.member_url.as_ref().map(|url| {
                    MemberClient::with_http(
                        config.process.http_client(config.downstream_timeout),
                        url.clone(),
                        credential,
                    )
                }),
                signer: credential.deposit_signer(),
                four_eyes_above: config.staff.top_up_four_eyes_above,
            },
        );
        let webhooks = Webhooks::new(pool.clone(), &config.webhooks);
        Self {
            saga: SagaState {
                verifier: verifier.clone(),
                limiter: Arc::new(MemberLimiter::new(config.member_rate)),
                checkout: Checkout::new(
                    engine.clone(),
                    config.response_wait,
                    config.idempotency_retention_hours,
                ),
                operations: operations.clone(),
                staff: staff.clone(),
            },
            webhooks: paysaga_webhooks::ApiState {
                webhooks: webhooks.clone(),
                verifier: verifier.clone(),
                staff: staff.clone(),
            },
            console: ConsoleState::new(
                staff.clone(),
                Arc::new(operations),
                webhooks,
                ConsoleConfig {
                    credential: config.console_credential.clone().into(),
                    order_url: config.order_url.clone(),
                    gate_url: config.gate_url.clone(),
                    trust: config.process.trust.clone(),
                },
            ),
            catalog: routes::CatalogState {
                verifier: verifier.clone(),
                staff: staff.clone(),
                catalog: catalog::Catalog::new(
                    OrderClient::with_http(
                        // Making up to 100,000 units is one statement under the order
                        // service's 5 s statement timeout: wait that long and more, so
                        // a slow but successful change is not recorded as failed.
                        config
                            .process
                            .http_client(config.downstream_timeout.max(CATALOG_TIMEOUT)),
                        config.order_url.clone(),
                        credential,
                    ),
                    pool.clone(),
                ),
            },
            pool,
            engine,
            staff,
        }
    }

    /// Connects as the service role, brings the schema up to date and, in development
    /// mode, makes sure the development staff admin exists.
    pub async fn connect(config: &Config, hooks: Hooks) -> anyhow::Result<Self> {
        let pool = config.database.open(SCHEMA, &MIGRATOR).await?;
        let staff = Staff::new(pool.clone(), config.staff.clone())
            .await
            .context("preparing staff password hashing")?;
        paysaga_staff::secrets::seal_at_start(&pool, &config.staff.secret_key)
            .await
            .context("sealing the staff TOTP secrets")?;
        staff
            .ensure_dev_admin()
            .await
            .context("creating the development staff admin")?;
        Ok(Self::new(pool, config, hooks, staff))
    }
}

async fn readyz(State(pool): State<PgPool>) -> Response {
    server::readiness(vec![("postgres", server::check_db(&pool).await)], false)
}

/// The service's routes: the saga's API, the webhook API and the console (HTML pages
/// for operators, deliberately not in the OpenAPI document), with `/readyz`.
pub fn app(state: AppState) -> Router {
    let staff = paysaga_staff::routes::StaffApi {
        staff: state.staff,
        verifier: state.saga.verifier.clone(),
    };
    let api = Router::new()
        .route("/readyz", get(readyz))
        .with_state(state.pool)
        .merge(routes::routes(state.saga))
        .merge(routes::product_routes(state.catalog))
        .merge(paysaga_webhooks::routes(state.webhooks))
        .merge(paysaga_staff::routes::routes(staff))
        .merge(paysaga_console::routes(state.console));
    server::finish(api, openapi::openapi())
}

/// Marks the instance dead when `run` ends or is aborted, so its drivers and jobs
/// write nothing more, as if the process had exited.
struct AliveGuard(Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

paysaga_common::serve_from_env_fn!("orchestrator");

/// Connects, migrates, starts recovery, the idempotency purge, the event ingest and the
/// webhook delivery worker, serves until `shutdown`, then stops them.
pub async fn run(config: Config, listener: TcpListener, shutdown: Shutdown) -> anyhow::Result<()> {
    run_with_hooks(config, listener, shutdown, Hooks::default()).await
}

/// [`run`] with test seams.
pub async fn run_with_hooks(
    config: Config,
    listener: TcpListener,
    shutdown: Shutdown,
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
    let delivery = paysaga_webhooks::start(
        &jobs,
        paysaga_webhooks::Background {
            pool: state.pool.clone(),
            order: OrderClient::with_http(
                config.process.http_client(config.downstream_timeout),
                config.order_url.clone(),
                &config.service_credential,
            ),
            member: config.member_url.as_ref().map(|url| {
                MemberClient::with_http(
                    config.process.http_client(config.downstream_timeout),
                    url.clone(),
                    &config.service_credential,
                )
            }),
            config: config.webhooks.clone(),
            instance: state.engine.instance,
            alive: state.engine.alive.clone(),
        },
    )
    .await?;
    tracing::info!(addr = %listener.local_addr()?, instance = %state.engine.instance, "orchestrator listening");
    let served = config.process.serve(listener, app(state), shutdown).await;
    delivery.abort();
    if let Err(e) = jobs.shutdown().await {
        tracing::warn!(error = %e, "scheduled jobs did not stop cleanly");
    }
    served?;
    Ok(())
}
