//! The order service: products with one row per unit; its stock rules, each one
//! set-based statement for any number of operations (a lone one is a batch of one):
//! the claim of a unit with `FOR UPDATE SKIP LOCKED` (`claim`), and confirm, cancel and
//! expiry (`settle`); the price of every reservation held on the buyer's account first
//! (`funds`), and given back when it is cancelled (`releases`); the FIFO waitlist that
//! returned units are offered to; the transactional outbox of its events; and the
//! claim's benchmark alternatives behind `CLAIM_STRATEGY` (`claim_alternatives`).

/// The wire types this service serves, from its contract.
pub use paysaga_contracts::order::api;
pub mod breach;
/// Public because paysaga-bench's claim bench calls the claim itself.
pub mod claim;
pub mod claim_alternatives;
pub mod config;
pub(crate) mod error;
pub mod funds;
pub mod promises;
pub mod releases;
pub mod reservations;
pub(crate) mod routes;
pub mod settle;
pub mod states;
/// Public because paysaga-bench's claim bench stocks products directly.
pub mod stock;
pub mod sweep;
pub mod waitlist;

use std::{sync::Arc, time::Duration};

use axum::{
    extract::{DefaultBodyLimit, FromRef, State},
    response::Response,
    routing::{get, post},
    Router,
};
use paysaga_common::{
    auth::{Audience, Verifier},
    outbox::{self, Outbox},
    pass::PassVerifier,
    server::{self, Shutdown},
};
use paysaga_contracts::account::client::AccountClient;
use sqlx::{migrate::Migrator, PgPool};
use tokio::net::TcpListener;
use utoipa::OpenApi;

pub use config::Config;
pub use error::{Error, Result};

/// The schema this service owns.
pub const SCHEMA: &str = "order_service";

pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations/order_service");

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub verifier: Arc<Verifier>,
    pub passes: Arc<PassVerifier>,
    /// The service's reservation hold time, for products without their own.
    pub ttl: Duration,
    /// Holds of reservations' prices on buyers' accounts.
    pub funds: funds::Funds,
    /// Each product's price and hold time.
    pub terms: stock::TermsCache,
    /// Units of one product a member may hold and buy in all.
    pub purchase_cap: i64,
    /// Whether the operator tools' credential may change stock here (development mode;
    /// see [`Config::tools_change_stock`]).
    pub tools_change_stock: bool,
    /// How long a unit offered to a waitlist member is held for them.
    pub offer_ttl: Duration,
    /// Group commit of reservations' claims, one per process.
    pub claims: claim::Claims,
}

impl FromRef<AppState> for Arc<Verifier> {
    fn from_ref(s: &AppState) -> Self {
        s.verifier.clone()
    }
}

impl AppState {
    /// Needs a Tokio runtime: it starts the claims' flushing task.
    pub fn new(pool: PgPool, config: &Config) -> Self {
        Self {
            claims: claim::Claims::new(
                pool.clone(),
                config.claim_batch,
                config.claim_flushes,
                config.claim_strategy,
            ),
            funds: funds::Funds::new(
                AccountClient::with_http(
                    config.process.http_client(config.account_timeout),
                    config.account_url.clone(),
                    &config.service_credential,
                ),
                config.hold_orphan_grace,
                config.hold_batches,
            ),
            terms: stock::TermsCache::default(),
            pool,
            verifier: Arc::new(Verifier::from_source(
                &config.buyer_keys,
                &config.service_keys,
                Audience::Order,
            )),
            passes: Arc::new(PassVerifier::new(config.pass_public_key)),
            ttl: config.reservation_ttl,
            purchase_cap: config.purchase_cap,
            tools_change_stock: config.tools_change_stock,
            offer_ttl: config.waitlist_offer_ttl,
        }
    }

    /// Connects as the service role and brings the schema up to date.
    pub async fn connect(config: &Config) -> anyhow::Result<Self> {
        let pool = config.database.open(SCHEMA, &MIGRATOR).await?;
        Ok(Self::new(pool, config))
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paysaga order service",
        description = "Products, one row per unit, reservations and orders."
    ),
    paths(
        routes::products::create,
        routes::products::add_units,
        routes::products::list,
        routes::products::get,
        routes::products::availability,
        routes::products::report_promises,
        routes::reservations::create,
        routes::reservations::get,
        routes::reservations::confirm,
        routes::reservations::cancel,
        routes::reservations::used_passes,
        routes::batch::batch,
        routes::waitlist::join,
        routes::waitlist::me,
        routes::waitlist::leave,
        routes::waitlist::take,
        paysaga_common::outbox::list,
        paysaga_common::outbox::ack_events,
    ),
    components(schemas(
        api::CreateProduct,
        api::AddUnits,
        api::Product,
        api::Availability,
        api::ReportPromises,
        api::CreateReservation,
        api::Reservation,
        api::ReservationState,
        api::UsedPassesQuery,
        api::UsedPasses,
        api::OrderOp,
        api::OrderBatch,
        api::ErrorCode,
        api::WaitlistEntry,
        api::WaitlistState,
        api::WaitlistOffer,
        api::OfferState,
        api::OutboxEvent,
        api::OutboxPage,
        api::AckEvents,
        paysaga_contracts::batch::Reply,
        paysaga_contracts::batch::Replies,
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
    use routes::{batch, products, reservations, waitlist};
    let api = Router::new()
        .route("/v1/products", post(products::create).get(products::list))
        .route("/v1/products/{id}", get(products::get))
        .route("/v1/products/{id}/units", post(products::add_units))
        .route(
            "/v1/products/{id}/availability",
            get(products::availability),
        )
        .route(
            "/v1/products/{id}/promises",
            post(products::report_promises),
        )
        .route("/v1/products/{id}/waitlist", post(waitlist::join))
        .route(
            "/v1/products/{id}/waitlist/me",
            get(waitlist::me).delete(waitlist::leave),
        )
        .route("/v1/offers/{offer_id}/reservation", post(waitlist::take))
        .route("/v1/reservations", post(reservations::create))
        .route("/v1/reservations/{id}", get(reservations::get))
        .route("/v1/reservations/{id}/confirm", post(reservations::confirm))
        .route("/v1/reservations/{id}/cancel", post(reservations::cancel))
        .route("/v1/passes/used", post(reservations::used_passes))
        .route(
            "/v1/batch",
            post(batch::batch).layer(DefaultBodyLimit::max(batch::BODY_LIMIT)),
        )
        .route("/readyz", get(readyz))
        .merge(outbox::routes(Outbox {
            pool: state.pool.clone(),
            verifier: state.verifier.clone(),
            relayed_metric: "order_outbox_relayed_total",
        }))
        .with_state(state);
    server::finish(api, ApiDoc::openapi())
}

paysaga_common::serve_from_env_fn!("order");

/// Connects, migrates, starts the expiry sweeps and the holds' releases and
/// reconciliation, serves until `shutdown`, then stops the jobs.
pub async fn run(config: Config, listener: TcpListener, shutdown: Shutdown) -> anyhow::Result<()> {
    let state = AppState::connect(&config).await?;
    let jobs = sweep::start(
        state.pool.clone(),
        config.sweep_interval,
        config.sweep_batch,
        config.sweep_max_batches,
    )
    .await?;
    releases::schedule(
        &jobs,
        state.pool.clone(),
        state.funds.clone(),
        config.hold_release_interval,
    )
    .await?;
    tracing::info!(addr = %listener.local_addr()?, "order service listening");
    jobs.stop_after(config.process.serve(listener, app(state), shutdown))
        .await
}
