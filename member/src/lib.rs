//! The member service: sign-up, sign-in and the buyer tokens every other service
//! verifies (published as a JSON Web Key Set), email verification (the sign-up's event
//! in the service's outbox, the webhook platform pulls it), each member's account
//! opened in the account service, and top-ups of it.

pub(crate) mod bulk;
pub mod config;
pub mod email;
pub(crate) mod error;
pub(crate) mod handlers;
pub mod members;
pub mod password;
pub mod proxies;
pub(crate) mod sessions;
pub(crate) mod throttle;
pub mod tokens;
pub mod verification;

/// The wire types this service serves, from its contract.
pub use paysaga_contracts::member::api;

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use axum::{
    extract::{DefaultBodyLimit, FromRef},
    routing::{get, post},
    Router,
};
use paysaga_common::{
    auth::{Audience, BuyerKeySource, Verifier},
    jobs::Jobs,
    jwks::JWKS_PATH,
    outbox::{self, Outbox},
    server::{self, Shutdown},
};
use paysaga_contracts::account::client::AccountClient;
use sqlx::PgPool;
use tokio::net::TcpListener;
use utoipa::OpenApi;

pub use config::Config;
pub use error::{Error, Result};
pub use members::{repair_accounts, Repaired};
use password::Passwords;
use tokens::TokenKeys;
use verification::VerificationKeys;

/// The schema this service owns.
pub const SCHEMA: &str = "member_service";

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/member_service");

/// A bulk sign-up's body limit, in place of the common 64 KiB: room for the most members
/// with long addresses.
pub const BULK_BODY_LIMIT: usize = api::MAX_BULK_MEMBERS * 320;

/// How often expired refresh tokens, sign-in failure counts and sign-up counts are
/// deleted.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(300);

#[derive(Clone, FromRef)]
pub struct AppState {
    pub pool: PgPool,
    /// Verifies service credentials (and, for a clear 403, this service's current buyer
    /// key); buyer endpoints here check tokens against every published key instead.
    pub verifier: Arc<Verifier>,
    pub keys: Arc<TokenKeys>,
    /// Signs and checks email-verification tokens.
    pub verification: Arc<VerificationKeys>,
    pub passwords: Passwords,
    pub accounts: AccountClient,
    pub config: Arc<Config>,
}

impl AppState {
    /// Connects as the service's role, runs its migrations, and makes the dummy
    /// password hash (one Argon2 run with the configured parameters).
    pub async fn connect(config: &Config) -> anyhow::Result<Self> {
        let pool = config.database.open(SCHEMA, &MIGRATOR).await?;
        let current = config.signing_keys.current().verifying_key();
        let verifier = Verifier::from_source(
            &BuyerKeySource::Static(current),
            &config.service_keys,
            Audience::Member,
        );
        let passwords = Passwords::new(
            config.argon2,
            config.argon2_max_concurrent,
            "member_argon2_seconds",
        )
        .await
        .context("preparing password hashing")?;
        let accounts = AccountClient::with_http(
            config.process.http_client(config.account_timeout),
            &config.account_url,
            &config.service_credential,
        );
        Ok(Self {
            pool,
            verifier: Arc::new(verifier),
            keys: Arc::new(TokenKeys::new(&config.signing_keys)),
            verification: Arc::new(VerificationKeys::new(&config.verification_key)),
            passwords,
            accounts,
            config: Arc::new(config.clone()),
        })
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paysaga member service",
        description = "Sign-up, sign-in, sessions and the buyer-token keys. Errors: {code, message}; codes in docs/members.md."
    ),
    paths(
        handlers::sign_up,
        handlers::sign_in,
        handlers::refresh,
        handlers::sign_out,
        handlers::me,
        handlers::get_member,
        handlers::list_members,
        handlers::top_up,
        handlers::bulk_sign_up,
        handlers::verify_email,
        handlers::jwks,
        paysaga_common::outbox::list,
        paysaga_common::outbox::ack_events
    ),
    components(schemas(paysaga_common::ErrorBody))
)]
pub struct ApiDoc;

/// The service's routes with the shared ones (health, OpenAPI, docs).
pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/v1/members",
            post(handlers::sign_up).get(handlers::list_members),
        )
        .route("/v1/members/me", get(handlers::me))
        .route("/v1/members/verification", post(handlers::verify_email))
        .route("/v1/members/{id}", get(handlers::get_member))
        .route("/v1/members/{id}/top-ups", post(handlers::top_up))
        .route(
            "/v1/members/bulk",
            post(handlers::bulk_sign_up).layer(DefaultBodyLimit::max(BULK_BODY_LIMIT)),
        )
        .route("/v1/sessions", post(handlers::sign_in))
        .route("/v1/sessions/refresh", post(handlers::refresh))
        .route("/v1/sessions/sign-out", post(handlers::sign_out))
        .route(JWKS_PATH, get(handlers::jwks))
        .route("/readyz", get(handlers::readyz))
        .merge(outbox::routes(Outbox {
            pool: state.pool.clone(),
            verifier: state.verifier.clone(),
            relayed_metric: "member_outbox_relayed_total",
        }))
        .with_state(state);
    server::finish(api, ApiDoc::openapi())
}

paysaga_common::serve_from_env_fn!("member");

/// Starts the periodic jobs: the account repair every `ACCOUNT_REPAIR_SECS`, and the
/// deletion of expired refresh tokens, sign-in failure counts and sign-up counts.
pub async fn start_jobs(state: &AppState) -> anyhow::Result<Jobs> {
    let jobs = Jobs::start().await?;
    let repair = state.clone();
    jobs.every(
        "account-repair",
        state.config.account_repair_every,
        move || {
            let state = repair.clone();
            async move {
                let min_age = state.config.account_repair_min_age;
                if let Err(e) = repair_accounts(&state, min_age).await {
                    tracing::warn!(error = %e, "account repair pass failed");
                }
            }
        },
    )
    .await?;
    let housekeeping = state.clone();
    jobs.every("member-housekeeping", HOUSEKEEPING_EVERY, move || {
        let state = housekeeping.clone();
        async move {
            let tokens = sessions::purge_expired(&state).await;
            let counts =
                throttle::purge(&state.pool, &state.config.throttle, &state.config.sign_up).await;
            match (tokens, counts) {
                (Ok(tokens), Ok(counts)) => {
                    tracing::debug!(tokens, counts, "expired refresh tokens and counts deleted")
                }
                (Err(e), _) | (_, Err(e)) => tracing::warn!(error = %e, "housekeeping failed"),
            }
        }
    })
    .await?;
    Ok(jobs)
}

/// Connects, migrates, starts the jobs, serves until `shutdown` resolves, then stops
/// the jobs.
pub async fn run(config: Config, listener: TcpListener, shutdown: Shutdown) -> anyhow::Result<()> {
    if config.signing_keys.is_development() {
        tracing::warn!(
            "MEMBER_SIGNING_KEYS is not set: buyer tokens are signed with the PUBLIC DEVELOPMENT KEY; \
             anyone can mint them. Never run this way outside development."
        );
    }
    let state = AppState::connect(&config).await?;
    let jobs = start_jobs(&state).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        kid = state.keys.current_kid(),
        published_keys = state.keys.jwks().keys.len(),
        argon2 = ?config.argon2,
        "member service listening"
    );
    jobs.stop_after(config.process.serve(listener, app(state), shutdown))
        .await
}
