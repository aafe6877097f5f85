//! The account service's settings, read from the environment.

use std::time::Duration;

use paysaga_common::{
    auth::BuyerKeySource,
    config::{self, Secrets},
    credentials::{self, ServiceKeys},
    limits::MemberRate,
    service::{Database, Process},
};

/// How many merchant shard rows the migration creates; `MERCHANT_SHARDS` uses a prefix.
pub const MAX_MERCHANT_SHARDS: u16 = 16;

#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL` (the `account_app` role), `MIGRATION_DATABASE_URL`,
    /// `DB_MAX_CONNECTIONS` and the connection limits.
    pub database: Database,
    /// `LISTEN_ADDR` (default `127.0.0.1:8082`), `LOG_FORMAT`, and the development keys
    /// in use.
    pub process: Process,
    /// `MERCHANT_SHARDS`, 1-16, default 16: how many rows the merchant balance is spread over.
    pub merchant_shards: u16,
    /// Where buyer-token keys come from: the member service's key set
    /// (`MEMBER_JWKS_URL`), else `JWT_PUBLIC_KEY`; one of them is required.
    pub buyer_keys: BuyerKeySource,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required: it decides who may open accounts and move money.
    pub service_keys: ServiceKeys,
    /// `HOLD_SWEEP_INTERVAL_MS`, default 1000 (at least 10): how often holds past their
    /// deadline are released. A lapsed hold can no longer be captured from its deadline
    /// on; its money counts as held until this sweep.
    pub hold_sweep_interval: Duration,
    /// `HOLD_SWEEP_BATCH`, 1-10000, default 500: lapsed holds released per statement.
    pub hold_sweep_batch: i64,
    /// `LEDGER_RECONCILE_INTERVAL_MS`, at least 1000, default 60000: how often member
    /// balances are checked against their ledger rows ([`crate::reconcile`]).
    pub ledger_reconcile_interval: Duration,
    /// `MEMBER_RATE_PER_SEC`, `MEMBER_RATE_BURST`: each member's rate on transfers.
    pub member_rate: MemberRate,
    /// Development mode (`PAYSAGA_DEV_KEYS=1`) and tests only: accounts may open with
    /// money (seeding the demo, the benchmark and the tests), and the operator tools'
    /// credential may release a hold. Otherwise every account opens empty, so money
    /// enters only by a deposit the orchestrator authorizes for named people, and holds
    /// are released only by the order service that placed them.
    pub openings_with_money: bool,
}

pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8082";

impl Config {
    pub fn from_env() -> Result<Self, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let database = Database::urls_from_env(&mut secrets, "account_app")?;
        let (buyer_keys, service_keys) = credentials::caller_keys(&mut secrets)?;
        let openings_with_money = secrets.is_dev();
        let process = Process::from_env(secrets, DEFAULT_LISTEN_ADDR)?;
        let merchant_shards = config::parse("MERCHANT_SHARDS", MAX_MERCHANT_SHARDS)?;
        if merchant_shards == 0 || merchant_shards > MAX_MERCHANT_SHARDS {
            return Err(config::invalid(
                "MERCHANT_SHARDS",
                merchant_shards,
                &format!("must be between 1 and {MAX_MERCHANT_SHARDS}"),
            )
            .into());
        }
        let hold_sweep_interval =
            config::millis("HOLD_SWEEP_INTERVAL_MS", Duration::from_millis(1000))?;
        config::millis_at_least("HOLD_SWEEP_INTERVAL_MS", hold_sweep_interval, 10)?;
        let hold_sweep_batch: i64 = config::parse("HOLD_SWEEP_BATCH", 500)?;
        config::within("HOLD_SWEEP_BATCH", hold_sweep_batch, 1, 10_000)?;
        let ledger_reconcile_interval = config::millis(
            "LEDGER_RECONCILE_INTERVAL_MS",
            Duration::from_millis(60_000),
        )?;
        config::millis_at_least(
            "LEDGER_RECONCILE_INTERVAL_MS",
            ledger_reconcile_interval,
            1000,
        )?;
        let member_rate = MemberRate::from_env()?;
        Ok(Self {
            database: database.with_pool_from_env()?,
            process,
            merchant_shards,
            buyer_keys,
            service_keys,
            hold_sweep_interval,
            hold_sweep_batch,
            ledger_reconcile_interval,
            member_rate,
            openings_with_money,
        })
    }

    /// Defaults for everything but the database, as tests and tools want it: the
    /// development keys.
    pub fn local(database_url: impl Into<String>) -> Self {
        Self {
            database: Database::local(database_url),
            process: Process::local(DEFAULT_LISTEN_ADDR),
            merchant_shards: MAX_MERCHANT_SHARDS,
            buyer_keys: BuyerKeySource::development(),
            service_keys: ServiceKeys::development(),
            hold_sweep_interval: Duration::from_millis(1000),
            hold_sweep_batch: 500,
            ledger_reconcile_interval: Duration::from_millis(60_000),
            member_rate: MemberRate::default(),
            openings_with_money: true,
        }
    }
}
