//! The account service's settings, read from the environment.

use paysaga_common::{
    auth::BuyerKeySource,
    config::{self, ConfigError, DevFallbacks, LogFormat, Secrets},
    credentials::ServiceKeys,
};

/// How many merchant shard rows the migration creates; `MERCHANT_SHARDS` uses a prefix.
pub const MAX_MERCHANT_SHARDS: u16 = 16;

#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL`: connects as `account_app`. Required; the development password
    /// only with `PAYSAGA_DEV_KEYS=1`.
    pub database_url: String,
    /// `MIGRATION_DATABASE_URL`: the schema's migrator role, to apply migrations and
    /// grants at start; see `paysaga_common::config::migration_database_url`.
    pub migration_database_url: Option<String>,
    /// `DB_STATEMENT_TIMEOUT_MS`, `DB_IDLE_IN_TRANSACTION_MS`: limits on every
    /// connection of the service.
    pub db_limits: paysaga_common::db::Limits,
    /// `LISTEN_ADDR`, default `127.0.0.1:8082`.
    pub listen_addr: String,
    /// `DB_MAX_CONNECTIONS`, default 16.
    pub db_max_connections: u32,
    /// `LOG_FORMAT`: `json` or `pretty` (default).
    pub log_format: LogFormat,
    /// `MERCHANT_SHARDS`, 1-16, default 16: how many rows the merchant balance is spread over.
    pub merchant_shards: u16,
    /// Where buyer-token keys come from: the member service's key set
    /// (`MEMBER_JWKS_URL`), else `JWT_PUBLIC_KEY`; one of them is required.
    pub buyer_keys: BuyerKeySource,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required: it decides who may open accounts and move money.
    pub service_keys: ServiceKeys,
    /// The development keys and password in use (development mode only), warned at start.
    pub dev_fallbacks: DevFallbacks,
}

pub const DEFAULT_DATABASE_URL: &str = "postgres://account_app:paysaga-dev@127.0.0.1:5432/paysaga";
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8082";

impl Config {
    pub fn from_env() -> Result<Self, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let database_url = config::database_url(&mut secrets, DEFAULT_DATABASE_URL)?;
        let migration_database_url = config::migration_database_url(&mut secrets, &database_url)?;
        let buyer_keys = BuyerKeySource::from_secrets(&mut secrets)?;
        let service_keys = ServiceKeys::from_secrets(&mut secrets)?;
        let dev_fallbacks = secrets.finish()?;
        let merchant_shards = config::parse("MERCHANT_SHARDS", MAX_MERCHANT_SHARDS)?;
        if merchant_shards == 0 || merchant_shards > MAX_MERCHANT_SHARDS {
            return Err(ConfigError {
                name: "MERCHANT_SHARDS".into(),
                value: merchant_shards.to_string(),
                reason: format!("must be between 1 and {MAX_MERCHANT_SHARDS}"),
            }
            .into());
        }
        Ok(Self {
            database_url,
            migration_database_url,
            db_limits: config::db_limits()?,
            listen_addr: config::string("LISTEN_ADDR", DEFAULT_LISTEN_ADDR),
            db_max_connections: config::parse("DB_MAX_CONNECTIONS", 16)?,
            log_format: config::parse("LOG_FORMAT", LogFormat::Pretty)?,
            merchant_shards,
            buyer_keys,
            service_keys,
            dev_fallbacks,
        })
    }

    /// Defaults for everything but the database, as tests and tools want it: the
    /// development keys.
    pub fn local(database_url: impl Into<String>) -> Self {
        let database_url: String = database_url.into();
        Self {
            migration_database_url: paysaga_common::db::dev_migrator_url(&database_url),
            database_url,
            db_limits: paysaga_common::db::Limits::default(),
            listen_addr: DEFAULT_LISTEN_ADDR.into(),
            db_max_connections: 16,
            log_format: LogFormat::Pretty,
            merchant_shards: MAX_MERCHANT_SHARDS,
            buyer_keys: BuyerKeySource::development(),
            service_keys: ServiceKeys::development(),
            dev_fallbacks: DevFallbacks::default(),
        }
    }
}
