//! The orchestrator's settings, read from the environment with local defaults.

use std::{sync::Arc, time::Duration};

use paysaga_common::{
    auth::{BuyerKeySource, ServiceRole},
    config::{self, ConfigError, Secrets},
    credentials::{self, ServiceKeys, TokenSource, CONSOLE_SIGNING_KEY_VAR},
    limits::MemberRate,
    service::{Database, Process},
};
use paysaga_staff::StaffConfig;
use paysaga_webhooks::{sealing::SealingKey, WebhookConfig};

#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL` (the `payment_app` role), `MIGRATION_DATABASE_URL`,
    /// `DB_MAX_CONNECTIONS` (at least 2) and the connection limits.
    pub database: Database,
    /// `LISTEN_ADDR` (default `127.0.0.1:8083`), `LOG_FORMAT`, and the development keys
    /// in use.
    pub process: Process,
    /// `ACCOUNT_URL`: the account service.
    pub account_url: String,
    /// `ORDER_URL`: the order service.
    pub order_url: String,
    /// `MEMBER_URL`: the member service, whose events the webhook platform pulls
    /// (default `http://127.0.0.1:8081`). `None` (tests' [`Config::local`]): not pulled.
    pub member_url: Option<String>,
    /// `GATE_URL`: the gate, read only by the operator console for its quota view;
    /// unset, the console says "not configured".
    pub gate_url: Option<String>,
    /// Where buyer-token keys come from: the member service's key set
    /// (`MEMBER_JWKS_URL`), else `JWT_PUBLIC_KEY`; one of them is required.
    pub buyer_keys: BuyerKeySource,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required.
    pub service_keys: ServiceKeys,
    /// `SERVICE_SIGNING_KEY` (and `SERVICE_TOKEN_LIFETIME_SECS`): the orchestrator's own
    /// key, minting and renewing its credentials toward account and order. Required.
    pub service_credential: Arc<TokenSource>,
    /// `CONSOLE_SIGNING_KEY`: the operator console's own key, minting its read-only
    /// `console` credentials toward the order service and the gate (the console never
    /// forwards an operator's credential). Required.
    pub console_credential: Arc<TokenSource>,
    /// `DOWNSTREAM_TIMEOUT_MS`: per call to account or order (default 2000).
    pub downstream_timeout: Duration,
    /// `RESPONSE_WAIT_MS`: how long `POST /v1/payments` waits for a terminal state
    /// before answering 202 (default 3000).
    pub response_wait: Duration,
    /// `RECOVERY_INTERVAL_MS`: how often the recovery job looks for due payments (default 1000).
    pub recovery_interval: Duration,
    /// `RECOVERY_BATCH`: payments claimed per claim query (default 50).
    pub recovery_batch: i64,
    /// `RECOVERY_MAX_BATCHES`: claim queries per recovery run (default 10).
    pub recovery_max_batches: u32,
    /// `RECOVERY_CONCURRENCY`: payments one instance drives at once in recovery (default 16).
    pub recovery_concurrency: usize,
    /// `LEASE_MS`: how long a claim on a payment (or on a running idempotent request)
    /// lasts without renewal; a crashed owner's work is taken over after it (default 15000).
    pub lease: Duration,
    /// `IDEMPOTENCY_RETENTION_HOURS`: how long an `Idempotency-Key` is remembered (default 24).
    pub idempotency_retention_hours: i64,
    /// `IDEMPOTENCY_PURGE_INTERVAL_MS`: how often expired keys are purged (default 60000).
    pub idempotency_purge_interval: Duration,
    /// `DOWNSTREAM_BATCHES`: batches to each of account and order in flight at once
    /// (default 2, 1 to 64). Fewer makes each batch larger under load (fewer requests
    /// and transactions per payment); more keeps one slow batch from holding up the next.
    pub downstream_batches: usize,
    /// `WRITE_FLUSHES`: group-commit flushes of the saga's own writes in flight at once
    /// (default 2, 1 to 64), with the same trade-off.
    pub write_flushes: usize,
    /// `MEMBER_RATE_PER_SEC` / `MEMBER_RATE_BURST`: a buyer's payment requests
    /// (`POST /v1/payments`, `GET /v1/payments/{id}`) per member (defaults 20 and 40).
    pub member_rate: MemberRate,
    /// The webhook subsystem: event ingest, dispatch and the delivery worker, the egress
    /// rule, and `WEBHOOK_SECRET_KEY` (required; the development key with
    /// `PAYSAGA_DEV_KEYS=1`) sealing the endpoints' secrets.
    pub webhooks: WebhookConfig,
    /// Staff accounts, sessions and roles: `STAFF_SESSION_TTL_SECS`,
    /// `STAFF_SIGN_IN_BURST`, `STAFF_SIGN_IN_PERIOD_SECS`, `STAFF_OPERATOR_REFUND_LIMIT`,
    /// the Argon2 cost (`ARGON2_*`), and in development mode the development admin.
    pub staff: StaffConfig,
}

pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8083";
/// Default of `DOWNSTREAM_BATCHES` and `WRITE_FLUSHES`: one at a time, so everything
/// that arrives meanwhile rides in the next (larger batches, fewer requests and
/// commits; measured in docs/benchmark.md).
pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 1;

impl Config {
    pub fn from_env() -> Result<Config, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let database = Database::urls_from_env(&mut secrets, "payment_app")?;
        let (buyer_keys, service_keys) = credentials::caller_keys(&mut secrets)?;
        let service_credential = Arc::new(TokenSource::from_secrets(
            &mut secrets,
            ServiceRole::Orchestrator,
        )?);
        let console_credential = Arc::new(TokenSource::from_secrets_in(
            &mut secrets,
            CONSOLE_SIGNING_KEY_VAR,
            ServiceRole::Console,
        )?);
        let webhook_key = SealingKey::from_secrets(&mut secrets)?;
        let staff = StaffConfig::from_env(&mut secrets)?;
        let process = Process::from_env(secrets, DEFAULT_LISTEN_ADDR)?;
        let c = Config {
            database: database.with_pool_from_env()?,
            process,
            account_url: config::string("ACCOUNT_URL", config::DEFAULT_ACCOUNT_URL),
            order_url: config::string("ORDER_URL", config::DEFAULT_ORDER_URL),
            member_url: Some(config::string("MEMBER_URL", config::DEFAULT_MEMBER_URL)),
            gate_url: std::env::var("GATE_URL")
                .ok()
                .filter(|u| !u.trim().is_empty()),
            buyer_keys,
            service_keys,
            service_credential,
            console_credential,
            downstream_timeout: config::millis(
                "DOWNSTREAM_TIMEOUT_MS",
                Duration::from_millis(2000),
            )?,
            response_wait: config::millis("RESPONSE_WAIT_MS", Duration::from_millis(3000))?,
            recovery_interval: config::millis("RECOVERY_INTERVAL_MS", Duration::from_millis(1000))?,
            recovery_batch: config::parse("RECOVERY_BATCH", 50)?,
            recovery_max_batches: config::parse("RECOVERY_MAX_BATCHES", 10)?,
            recovery_concurrency: config::parse("RECOVERY_CONCURRENCY", 16)?,
            lease: config::millis("LEASE_MS", Duration::from_millis(15_000))?,
            idempotency_retention_hours: config::parse("IDEMPOTENCY_RETENTION_HOURS", 24)?,
            idempotency_purge_interval: config::millis(
                "IDEMPOTENCY_PURGE_INTERVAL_MS",
                Duration::from_millis(60_000),
            )?,
            downstream_batches: config::parse("DOWNSTREAM_BATCHES", DEFAULT_BATCHES_IN_FLIGHT)?,
            write_flushes: config::parse("WRITE_FLUSHES", DEFAULT_BATCHES_IN_FLIGHT)?,
            member_rate: MemberRate::from_env()?,
            webhooks: WebhookConfig::from_env(webhook_key)?,
            staff,
        };
        c.validate()?;
        Ok(c)
    }

    /// Defaults for a given database and downstreams (tests, tools); not validated
    /// against the environment.
    pub fn local(
        database_url: impl Into<String>,
        account_url: impl Into<String>,
        order_url: impl Into<String>,
    ) -> Config {
        Config {
            database: Database::local(database_url),
            process: Process::local(DEFAULT_LISTEN_ADDR),
            account_url: account_url.into(),
            order_url: order_url.into(),
            member_url: None,
            gate_url: None,
            buyer_keys: BuyerKeySource::development(),
            service_keys: ServiceKeys::development(),
            service_credential: Arc::new(TokenSource::development(ServiceRole::Orchestrator)),
            console_credential: Arc::new(TokenSource::development(ServiceRole::Console)),
            downstream_timeout: Duration::from_millis(2000),
            response_wait: Duration::from_millis(3000),
            recovery_interval: Duration::from_millis(1000),
            recovery_batch: 50,
            recovery_max_batches: 10,
            recovery_concurrency: 16,
            lease: Duration::from_millis(15_000),
            idempotency_retention_hours: 24,
            idempotency_purge_interval: Duration::from_millis(60_000),
            downstream_batches: DEFAULT_BATCHES_IN_FLIGHT,
            write_flushes: DEFAULT_BATCHES_IN_FLIGHT,
            member_rate: MemberRate::default(),
            webhooks: WebhookConfig::default(),
            staff: StaffConfig::local(),
        }
    }

    /// Settings that would break the saga's guarantees are refused at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        config::millis_at_least("DOWNSTREAM_TIMEOUT_MS", self.downstream_timeout, 10)?;
        // A step is one call plus one probe; a lease shorter than that would let a
        // second instance take over a payment whose first driver is still waiting.
        if self.lease < self.downstream_timeout * 3 {
            return Err(config::invalid(
                "LEASE_MS",
                self.lease.as_millis(),
                "must be at least 3 x DOWNSTREAM_TIMEOUT_MS",
            ));
        }
        if self.lease <= self.response_wait {
            return Err(config::invalid(
                "LEASE_MS",
                self.lease.as_millis(),
                "must exceed RESPONSE_WAIT_MS",
            ));
        }
        config::within("RECOVERY_BATCH", self.recovery_batch, 1, 10_000)?;
        config::at_least("RECOVERY_MAX_BATCHES", self.recovery_max_batches, 1)?;
        config::within("RECOVERY_CONCURRENCY", self.recovery_concurrency, 1, 1024)?;
        config::within(
            "IDEMPOTENCY_RETENTION_HOURS",
            self.idempotency_retention_hours,
            1,
            24 * 365,
        )?;
        config::within("DOWNSTREAM_BATCHES", self.downstream_batches, 1, 64)?;
        config::within("WRITE_FLUSHES", self.write_flushes, 1, 64)?;
        config::at_least("DB_MAX_CONNECTIONS", self.database.max_connections, 2)?;
        self.webhooks.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_unsafe_leases_are_refused() {
        let c = Config::local("postgres://x@h/db", "http://a", "http://o");
        assert!(c.validate().is_ok());
        let refused: [fn(&mut Config); 2] = [
            |c| c.lease = Duration::from_millis(1000),
            |c| c.recovery_batch = 0,
        ];
        for change in refused {
            let mut bad = c.clone();
            change(&mut bad);
            assert!(bad.validate().is_err());
        }
        // Sub-second job periods follow the job runner's one rule (rounded up to whole
        // seconds, logged at start), as in every service.
        let sub_second = Config {
            recovery_interval: Duration::from_millis(500),
            ..c
        };
        assert!(sub_second.validate().is_ok());
    }

    #[test]
    fn a_webhook_setting_that_breaks_delivery_is_refused_too() {
        let c = Config::local("postgres://x@h/db", "http://a", "http://o");
        let no_attempts = Config {
            webhooks: WebhookConfig {
                max_attempts: 0,
                ..WebhookConfig::default()
            },
            ..c
        };
        assert!(no_attempts.validate().is_err());
    }
}
