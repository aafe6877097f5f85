//! The account service: member accounts, the merchant account, an idempotent
//! double-entry ledger of debits, refunds and transfers between members, and holds
//! (money set aside until a debit captures it or it is released).

pub mod accounts;
pub(crate) mod batch;
/// The wire types this service serves, from its contract.
pub use paysaga_contracts::account::api;
pub mod config;
pub(crate) mod credit;
pub(crate) mod debit;
pub(crate) mod deposit;
pub(crate) mod error;
pub(crate) mod handlers;
pub(crate) mod hold;
pub(crate) mod holds;
pub(crate) mod ledger;
pub mod reconcile;
pub mod release;
pub(crate) mod rows;
pub(crate) mod shard;
pub(crate) mod transfer;

use std::sync::Arc;

use axum::{
    extract::{DefaultBodyLimit, FromRef},
    routing::{get, post},
    Router,
};
use paysaga_common::{
    auth::{Audience, Verifier},
    limits::MemberLimiter,
    server::{self, Shutdown},
};
use sqlx::PgPool;
use tokio::net::TcpListener;
use utoipa::OpenApi;

pub use config::Config;
pub use error::{Breach, Error, Result, Rule};

/// The schema this service owns.
pub const SCHEMA: &str = "account_service";

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/account_service");

/// A batch's body limit, in place of the common 64 KiB: room for `MAX_OPS` operations
/// with the longest keys, so a full batch is judged by its count, not refused as 413.
pub const BATCH_BODY_LIMIT: usize = paysaga_contracts::batch::MAX_OPS * 512;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub verifier: Arc<Verifier>,
    /// How many merchant shard rows payments spread over (1-16).
    pub merchant_shards: u16,
    /// Each member's rate on the buyer routes that move money (transfers).
    pub limiter: Arc<MemberLimiter>,
    /// The orchestrator's keys of `SERVICE_KEYS`: what a deposit's authorization must
    /// be signed with.
    pub deposits: Arc<paysaga_common::deposits::DepositVerifier>,
    /// Whether accounts may open with money and the operator tools release holds
    /// (development mode; [`Config::openings_with_money`]).
    pub openings_with_money: bool,
}

impl FromRef<AppState> for Arc<Verifier> {
    fn from_ref(state: &AppState) -> Self {
        state.verifier.clone()
    }
}

impl AppState {
    /// Connects as the service's role and runs its migrations.
    pub async fn connect(config: &Config) -> anyhow::Result<Self> {
        let pool = config.database.open(SCHEMA, &MIGRATOR).await?;
        let verifier =
            Verifier::from_source(&config.buyer_keys, &config.service_keys, Audience::Account);
        Ok(Self {
            pool,
            verifier: Arc::new(verifier),
            merchant_shards: config.merchant_shards,
            limiter: Arc::new(MemberLimiter::new(config.member_rate)),
            deposits: Arc::new(paysaga_common::deposits::DepositVerifier::new(
                &config.service_keys,
            )),
            openings_with_money: config.openings_with_money,
        })
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paysaga account service",
        description = "Accounts and an idempotent double-entry ledger. Errors: {code, message}; codes in docs/account.md."
    ),
    paths(
        handlers::open_account,
        handlers::get_account,
        handlers::debit,
        handlers::credit,
        handlers::deposit,
        handlers::transfer,
        handlers::transaction_by_key,
        handlers::place_hold,
        handlers::release_hold,
        handlers::get_hold,
        handlers::list_holds,
        handlers::batch
    ),
    components(schemas(paysaga_common::ErrorBody))
)]
pub struct ApiDoc;

/// The service's routes with the shared ones (health, OpenAPI, docs).
pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/accounts", post(handlers::open_account))
        .route("/v1/accounts/{id}", get(handlers::get_account))
        .route("/v1/debits", post(handlers::debit))
        .route("/v1/credits", post(handlers::credit))
        .route("/v1/deposits", post(handlers::deposit))
        .route("/v1/transfers", post(handlers::transfer))
        .route(
            "/v1/transactions/{operation_key}",
            get(handlers::transaction_by_key),
        )
        .route(
            "/v1/holds",
            post(handlers::place_hold).get(handlers::list_holds),
        )
        .route("/v1/holds/{operation_key}", get(handlers::get_hold))
        .route(
            "/v1/holds/{operation_key}/release",
            post(handlers::release_hold),
        )
        .route(
            "/v1/batch",
            post(handlers::batch).layer(DefaultBodyLimit::max(BATCH_BODY_LIMIT)),
        )
        .route("/readyz", get(handlers::readyz))
        .with_state(state);
    server::finish(api, ApiDoc::openapi())
}

paysaga_common::serve_from_env_fn!("account");

/// Connects, migrates, starts the sweep of lapsed holds and the ledger reconciliation,
/// serves until `shutdown` resolves, then stops both.
pub async fn run(config: Config, listener: TcpListener, shutdown: Shutdown) -> anyhow::Result<()> {
    let state = AppState::connect(&config).await?;
    let jobs = release::start(
        state.pool.clone(),
        config.hold_sweep_interval,
        config.hold_sweep_batch,
    )
    .await?;
    reconcile::schedule(&jobs, state.pool.clone(), config.ledger_reconcile_interval).await?;
    tracing::info!(addr = %listener.local_addr()?, merchant_shards = state.merchant_shards, "account service listening");
    jobs.stop_after(config.process.serve(listener, app(state), shutdown))
        .await
}
