//! The order service's settings, read from the environment with local defaults.

use std::{sync::Arc, time::Duration};

use ed25519_dalek::VerifyingKey;

use crate::claim_alternatives::ClaimStrategy;
use paysaga_common::{
    auth::{BuyerKeySource, ServiceRole},
    config::{self, ConfigError, Secrets},
    credentials::{self, ServiceKeys, TokenSource},
    keys::{self, DevKey},
    service::{Database, Process},
};

#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL` (the `order_app` role), `MIGRATION_DATABASE_URL`,
    /// `DB_MAX_CONNECTIONS` (at least 1) and the connection limits.
    pub database: Database,
    /// `LISTEN_ADDR` (default `127.0.0.1:8084`), `LOG_FORMAT`, and the development keys
    /// in use.
    pub process: Process,
    /// `PASS_PUBLIC_KEY`: the gate's Ed25519 public key (base64). Required; the
    /// development key only with `PAYSAGA_DEV_KEYS=1`.
    pub pass_public_key: VerifyingKey,
    /// Where buyer-token keys come from: the member service's key set
    /// (`MEMBER_JWKS_URL`), else `JWT_PUBLIC_KEY`; one of them is required.
    pub buyer_keys: BuyerKeySource,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required.
    pub service_keys: ServiceKeys,
    /// `SERVICE_SIGNING_KEY` (and `SERVICE_TOKEN_LIFETIME_SECS`): the order service's
    /// own key, minting its credentials toward the account service. Required.
    pub service_credential: Arc<TokenSource>,
    /// Development mode (`PAYSAGA_DEV_KEYS=1`) and tests only: the operator tools'
    /// credential may make products and add units here directly (the harness's, the
    /// benchmark's and the demo's set-up). Otherwise only the orchestrator may, carrying
    /// an admin's change that its audit trail records.
    pub tools_change_stock: bool,
    /// `ACCOUNT_URL`: the account service, which holds each reservation's price.
    pub account_url: String,
    /// `ACCOUNT_TIMEOUT_MS`: per batch of holds or releases (default 2000).
    pub account_timeout: Duration,
    /// `HOLD_BATCHES`: batches of holds and releases in flight at once (default 1, 1 to
    /// 64).
    pub hold_batches: usize,
    /// `HOLD_ORPHAN_GRACE_MS`: a hold this old with no reservation is released by the
    /// reconciliation (default 30000, at least 300); a claim must follow its hold within
    /// a third of it.
    pub hold_orphan_grace: Duration,
    /// `HOLD_RELEASE_INTERVAL_MS`: how often the releases that cancels owe are sent
    /// (default 250).
    pub hold_release_interval: Duration,
    /// `RESERVATION_TTL_SECS`: how long a reservation holds its unit and its price
    /// (default 600), unless its product sets its own.
    pub reservation_ttl: Duration,
    /// `PURCHASE_CAP`: how many units of one product a member may hold and buy in all
    /// (live and confirmed reservations; default 1). A member never holds two live
    /// reservations of one product whatever the cap.
    pub purchase_cap: i64,
    /// `WAITLIST_OFFER_TTL_SECS`: how long a unit offered to the head of a waitlist is
    /// held for that member (default 120). Kept with each entry when it joins.
    pub waitlist_offer_ttl: Duration,
    /// `SWEEP_INTERVAL_MS`: how often the expiry sweep runs (default 1000).
    pub sweep_interval: Duration,
    /// `SWEEP_BATCH`: reservations expired per transaction (default 500).
    pub sweep_batch: i64,
    /// `SWEEP_MAX_BATCHES`: batches per sweep run, so one run is bounded (default 20).
    pub sweep_max_batches: u32,
    /// `CLAIM_BATCH`: the most claims one group-commit flush carries (default 256,
    /// 1 to 10000); 1 turns group commit off, each claim then its own statement.
    pub claim_batch: usize,
    /// `CLAIM_FLUSHES`: claim flushes in flight at once (default 1, 1 to 64); each holds
    /// a connection for its statement.
    pub claim_flushes: usize,
    /// `CLAIM_STRATEGY`: how a unit is claimed. The default, `units-skip-locked`, is the
    /// service's claim; the others are the benchmark's alternatives
    /// (`counter-for-update`, `atomic-update`, `optimistic`, `optimistic-retry`; see
    /// [`crate::claim_alternatives`]), each claim then its own transaction.
    pub claim_strategy: ClaimStrategy,
}

pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8084";
/// As many claims per flush as the gate's quota script takes per call.
pub const DEFAULT_CLAIM_BATCH: usize = 256;
/// One flush at a time: claims that arrive meanwhile all ride in the next, so a busy
/// process pays one statement and one commit for many claims (measured on 2 cores:
/// less CPU and more checkouts per second than with two at 64 and 256 clients; see
/// docs/benchmark.md). More overlap a slow flush (a pass conflict waiting on another
/// transaction) with the next, on machines with cores to spare.
pub const DEFAULT_CLAIM_FLUSHES: usize = 1;

/// A time in seconds, `default` when unset, refused outside 1 to 86400 (a day).
fn secs_up_to_a_day(name: &str, default: u64) -> Result<u64, ConfigError> {
    let secs: u64 = config::parse(name, default)?;
    if secs == 0 || secs > 86_400 {
        return Err(config::invalid(name, secs, "must be 1 to 86400 seconds"));
    }
    Ok(secs)
}

impl Config {
    pub fn from_env() -> Result<Config, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let database = Database::urls_from_env(&mut secrets, "order_app")?;
        let pass_public_key = keys::verifying_key(&mut secrets, "PASS_PUBLIC_KEY", DevKey::Passes)?;
        let (buyer_keys, service_keys) = credentials::caller_keys(&mut secrets)?;
        let service_credential =
            Arc::new(TokenSource::from_secrets(&mut secrets, ServiceRole::Order)?);
        let tools_change_stock = secrets.is_dev();
        let process = Process::from_env(secrets, DEFAULT_LISTEN_ADDR)?;
        let purchase_cap: i64 = config::parse("PURCHASE_CAP", 1)?;
        config::within("PURCHASE_CAP", purchase_cap, 1, 1_000)?;
        let ttl_secs = secs_up_to_a_day("RESERVATION_TTL_SECS", 600)?;
        let offer_ttl_secs = secs_up_to_a_day("WAITLIST_OFFER_TTL_SECS", 120)?;
        let sweep_interval = config::millis("SWEEP_INTERVAL_MS", Duration::from_millis(1000))?;
        config::millis_at_least("SWEEP_INTERVAL_MS", sweep_interval, 10)?;
        let sweep_batch: i64 = config::parse("SWEEP_BATCH", 500)?;
        config::within("SWEEP_BATCH", sweep_batch, 1, 10_000)?;
        let sweep_max_batches: u32 = config::parse("SWEEP_MAX_BATCHES", 20)?;
        config::at_least("SWEEP_MAX_BATCHES", sweep_max_batches, 1)?;
        let database = database.with_pool_from_env()?;
        config::at_least("DB_MAX_CONNECTIONS", database.max_connections, 1)?;
        let claim_batch: usize = config::parse("CLAIM_BATCH", DEFAULT_CLAIM_BATCH)?;
        config::within("CLAIM_BATCH", claim_batch, 1, 10_000)?;
        let claim_flushes: usize = config::parse("CLAIM_FLUSHES", DEFAULT_CLAIM_FLUSHES)?;
        config::within("CLAIM_FLUSHES", claim_flushes, 1, 64)?;
        let claim_strategy: ClaimStrategy =
            config::parse("CLAIM_STRATEGY", ClaimStrategy::default())?;
        let account_timeout = config::millis("ACCOUNT_TIMEOUT_MS", Duration::from_millis(2000))?;
        config::millis_at_least("ACCOUNT_TIMEOUT_MS", account_timeout, 10)?;
        let hold_batches: usize = config::parse("HOLD_BATCHES", 1)?;
        config::within("HOLD_BATCHES", hold_batches, 1, 64)?;
        let hold_orphan_grace =
            config::millis("HOLD_ORPHAN_GRACE_MS", Duration::from_millis(30_000))?;
        config::millis_at_least("HOLD_ORPHAN_GRACE_MS", hold_orphan_grace, 300)?;
        let hold_release_interval =
            config::millis("HOLD_RELEASE_INTERVAL_MS", Duration::from_millis(250))?;
        config::millis_at_least("HOLD_RELEASE_INTERVAL_MS", hold_release_interval, 10)?;
        Ok(Config {
            database,
            process,
            pass_public_key,
            buyer_keys,
            service_keys,
            service_credential,
            tools_change_stock,
            account_url: config::string("ACCOUNT_URL", config::DEFAULT_ACCOUNT_URL),
            account_timeout,
            hold_batches,
            hold_orphan_grace,
            hold_release_interval,
            reservation_ttl: Duration::from_secs(ttl_secs),
            purchase_cap,
            waitlist_offer_ttl: Duration::from_secs(offer_ttl_secs),
            sweep_interval,
            sweep_batch,
            sweep_max_batches,
            claim_batch,
            claim_flushes,
            claim_strategy,
        })
    }

    /// Defaults for a given database and account service, for tests and tools
    /// (development keys).
    pub fn local(database_url: impl Into<String>, account_url: impl Into<String>) -> Config {
        Config {
            database: Database::local(database_url),
            process: Process::local("127.0.0.1:0"),
            pass_public_key: DevKey::Passes.verifying_key(),
            buyer_keys: BuyerKeySource::development(),
            service_keys: ServiceKeys::development(),
            service_credential: Arc::new(TokenSource::development(ServiceRole::Order)),
            tools_change_stock: true,
            account_url: account_url.into(),
            account_timeout: Duration::from_millis(2000),
            hold_batches: 1,
            hold_orphan_grace: Duration::from_millis(30_000),
            hold_release_interval: Duration::from_millis(250),
            reservation_ttl: Duration::from_secs(600),
            purchase_cap: 1,
            waitlist_offer_ttl: Duration::from_secs(120),
            sweep_interval: Duration::from_millis(1000),
            sweep_batch: 500,
            sweep_max_batches: 20,
            claim_batch: DEFAULT_CLAIM_BATCH,
            claim_flushes: DEFAULT_CLAIM_FLUSHES,
            claim_strategy: ClaimStrategy::default(),
        }
    }
}
