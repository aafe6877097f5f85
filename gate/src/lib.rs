//! The gate: admits at most as many buyers per product as there are units, with signed
//! passes drawn from a shared quota in Redis, and keeps answering without Redis.

pub(crate) mod admission;
/// The wire types this service serves, from its contract.
pub use paysaga_contracts::gate::api;
pub(crate) mod batch;
pub mod config;
pub(crate) mod error;
pub(crate) mod health;
pub mod keys;
pub(crate) mod local;
pub mod pacing;
pub(crate) mod recompute;
pub(crate) mod routes;
pub(crate) mod scripts;
pub(crate) mod store;

use std::sync::Arc;

use axum::{
    extract::FromRef,
    routing::{get, post},
    Router,
};
use paysaga_common::{
    auth::{Audience, Verifier},
    jobs::Jobs,
    limits::MemberLimiter,
    pass::PassSigner,
    server::{self, Shutdown},
};
use paysaga_contracts::OrderClient;
use tokio::net::TcpListener;
use utoipa::{
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    Modify, OpenApi,
};

pub use crate::config::{Config, RedisTarget};
use crate::{
    admission::{Gate, Policy},
    pacing::Pacer,
    recompute::Recompute,
    store::QuotaStore,
};

#[derive(Clone, FromRef)]
pub struct AppState {
    pub gate: Arc<Gate>,
    pub verifier: Arc<Verifier>,
    pub recompute: Arc<Recompute>,
    /// Pass requests per member (`MEMBER_RATE_PER_SEC`, `MEMBER_RATE_BURST`).
    pub limiter: Arc<MemberLimiter>,
    /// Refusals standing per member and product (`REFUSAL_PACE_MS`).
    pub pacer: Arc<Pacer>,
}

impl AppState {
    /// Builds the state. Redis is connected lazily, so a gate starts (degraded) even
    /// while Redis is down.
    pub async fn connect(config: &Config) -> anyhow::Result<Self> {
        let verifier = Arc::new(Verifier::from_source(
            &config.buyer_keys,
            &config.service_keys,
            Audience::Gate,
        ));
        Ok(Self::with_verifier(config, verifier)?)
    }

    /// The state around `verifier`, given the gate's buyer-token cache (a buyer's
    /// retries during a drop need not re-verify the same signature).
    pub fn with_verifier(config: &Config, verifier: Arc<Verifier>) -> error::Result<Self> {
        let verifier =
            Arc::new(Verifier::clone(&verifier).with_buyer_cache(config.auth_cache_capacity));
        let store = QuotaStore::open(
            &config.redis_target(),
            &config.redis_prefix,
            config.redis_timeout,
            &config.process.trust,
        )?;
        let policy = Policy {
            pass_ttl: config.pass_ttl,
            sold_out_cache: config.sold_out_cache,
            fallback_instances: config.fallback_instances,
        };
        let gate = Arc::new(Gate::new(
            store,
            PassSigner::new(config.pass_signing_key.clone()),
            policy,
        ));
        let order = OrderClient::with_http(
            config.process.http_client(config.order_timeout),
            config.order_url.clone(),
            &config.service_credential,
        );
        let recompute = Arc::new(Recompute::new(
            gate.clone(),
            order,
            config.clock_skew.as_secs() as i64,
        ));
        Ok(Self {
            gate,
            verifier,
            recompute,
            limiter: Arc::new(MemberLimiter::new(config.member_rate)),
            pacer: Arc::new(Pacer::new(config.refusal_pace, config.refusal_hold_max)),
        })
    }
}

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = || {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            )
        };
        components.add_security_scheme("buyer", bearer());
        components.add_security_scheme("service", bearer());
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "paysaga gate", description = "Admission passes for limited drops; see docs/gate.md."),
    paths(routes::issue_pass, routes::quota),
    components(schemas(api::IssuePass, api::PassIssued, api::QuotaView, paysaga_common::ErrorBody)),
    modifiers(&Security)
)]
pub struct ApiDoc;

pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/passes", post(routes::issue_pass))
        .route("/v1/quota/{product_id}", get(routes::quota))
        .route("/readyz", get(routes::readyz))
        .with_state(state);
    server::finish(api, ApiDoc::openapi())
}

paysaga_common::serve_from_env_fn!("gate");

/// Computes the quota once, starts the recompute job, serves until `shutdown`, then
/// stops the job.
pub async fn run(config: Config, listener: TcpListener, shutdown: Shutdown) -> anyhow::Result<()> {
    serve_state(
        AppState::connect(&config).await?,
        config,
        listener,
        shutdown,
    )
    .await
}

/// [`run`] with a state built by the caller (tests share a verifier or inspect it).
pub async fn serve_state(
    state: AppState,
    config: Config,
    listener: TcpListener,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let first = state.recompute.run_once().await;
    tracing::info!(?first, addr = ?listener.local_addr().ok(), "gate starting");
    let jobs = Jobs::start().await?;
    let recompute = state.recompute.clone();
    jobs.every("quota_recompute", config.recompute_interval, move || {
        let recompute = recompute.clone();
        async move {
            recompute.run_once().await;
        }
    })
    .await?;
    jobs.stop_after(config.process.serve(listener, app(state), shutdown))
        .await
}
