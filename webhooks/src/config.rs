//! The webhook platform's settings, read from the environment with local defaults.

use std::time::Duration;

use paysaga_common::{
    config::{self, ConfigError},
    tls::Trust,
};

/// `WEBHOOK_CA_FILE`: see [`WebhookConfig::trust`].
pub const CA_FILE_VAR: &str = "WEBHOOK_CA_FILE";

use crate::{egress::Egress, sealing::SealingKey};

/// `WEBHOOK_ALLOW_PRIVATE_TARGETS`: `1`/`true` or `0`/`false` (unset: off); anything else
/// is refused, so a typo cannot open the inside.
fn allow_private_targets() -> Result<bool, ConfigError> {
    const VAR: &str = "WEBHOOK_ALLOW_PRIVATE_TARGETS";
    match std::env::var(VAR).ok().as_deref().map(str::trim) {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(config::invalid(
            VAR,
            other,
            "expected 1 or true (private targets allowed), 0 or false",
        )),
    }
}

/// Settings of the webhook subsystem (docs/events.md).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// `WEBHOOK_TIMEOUT_MS`: one delivery's whole request, connect to last byte (default
    /// 5000); longer is a failed attempt.
    pub timeout: Duration,
    /// `WEBHOOK_MAX_ATTEMPTS`: attempts before a delivery is DEAD (default 8, 1 to 100).
    pub max_attempts: i32,
    /// `WEBHOOK_BACKOFF_BASE_MS`: the first retry waits up to this long; each further one
    /// up to twice the one before (full jitter), at most `WEBHOOK_BACKOFF_CAP_MS`
    /// (defaults 30000 and 3600000).
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// `WEBHOOK_POLL_INTERVAL_MS`: how often an idle worker looks for new events and due
    /// deliveries (default 1000); a busy one goes on at once.
    pub poll_interval: Duration,
    /// `WEBHOOK_CONCURRENCY`: deliveries one instance has in flight at once (default 16,
    /// 1 to 1024). Each is claimed when a slot is free, so a claim never outlives its lease.
    pub concurrency: usize,
    /// `WEBHOOK_LEASE_MS`: a claimed delivery is another instance's to retry after this
    /// long (default 30000, at least 2 x `WEBHOOK_TIMEOUT_MS`).
    pub lease: Duration,
    /// `WEBHOOK_INGEST_INTERVAL_MS`: how often the order service's outbox is pulled
    /// (default 1000).
    pub ingest_interval: Duration,
    /// `WEBHOOK_INGEST_BATCH`: events pulled per request (default 500, 1 to 1000).
    pub ingest_batch: u32,
    /// `EVENT_RETENTION_HOURS`: how long events and their settled deliveries are kept
    /// (default 720, 30 days; 1 to 87600). PENDING deliveries and their events stay.
    pub retention_hours: i64,
    /// `EVENT_PURGE_INTERVAL_MS`: how often old events are purged (default 60000).
    pub purge_interval: Duration,
    /// `WEBHOOK_ALLOW_PRIVATE_TARGETS` (default off): whether deliveries may reach
    /// loopback, private, link-local and the other internal networks ([`Egress`]). On
    /// only for development and tests, whose receivers listen on 127.0.0.1.
    pub egress: Egress,
    /// `WEBHOOK_SECRET_KEY`: the key endpoint secrets are sealed with at rest (base64 of
    /// 32 bytes). Required; the development key with `PAYSAGA_DEV_KEYS=1`.
    pub secret_key: SealingKey,
    /// `WEBHOOK_SECRET_GRACE_SECS`: how long an endpoint's previous secret is still
    /// signed with after a rotation (default 86400, 24 h; 0 to 2592000, 30 days).
    pub secret_grace: Duration,
    /// `WEBHOOK_CA_FILE`: roots an `https` endpoint's certificate may chain to beside the
    /// platform's (PEM; a merchant's private CA, or a test's). Kept apart from
    /// `TLS_CA_FILE`, the services' own CA: trusting one never trusts the other.
    pub trust: Trust,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(5000),
            max_attempts: 8,
            backoff_base: Duration::from_millis(30_000),
            backoff_cap: Duration::from_millis(3_600_000),
            poll_interval: Duration::from_millis(1000),
            concurrency: 16,
            lease: Duration::from_millis(30_000),
            ingest_interval: Duration::from_millis(1000),
            ingest_batch: 500,
            retention_hours: 720,
            purge_interval: Duration::from_millis(60_000),
            egress: Egress::default(),
            secret_key: SealingKey::development(),
            secret_grace: Duration::from_secs(86_400),
            trust: Trust::default(),
        }
    }
}

impl WebhookConfig {
    /// The settings from the environment, defaults for those unset; the sealing key
    /// is read beforehand with the service's other secrets
    /// ([`SealingKey::from_secrets`]).
    pub fn from_env(secret_key: SealingKey) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            timeout: config::millis("WEBHOOK_TIMEOUT_MS", d.timeout)?,
            max_attempts: config::parse("WEBHOOK_MAX_ATTEMPTS", d.max_attempts)?,
            backoff_base: config::millis("WEBHOOK_BACKOFF_BASE_MS", d.backoff_base)?,
            backoff_cap: config::millis("WEBHOOK_BACKOFF_CAP_MS", d.backoff_cap)?,
            poll_interval: config::millis("WEBHOOK_POLL_INTERVAL_MS", d.poll_interval)?,
            concurrency: config::parse("WEBHOOK_CONCURRENCY", d.concurrency)?,
            lease: config::millis("WEBHOOK_LEASE_MS", d.lease)?,
            ingest_interval: config::millis("WEBHOOK_INGEST_INTERVAL_MS", d.ingest_interval)?,
            ingest_batch: config::parse("WEBHOOK_INGEST_BATCH", d.ingest_batch)?,
            retention_hours: config::parse("EVENT_RETENTION_HOURS", d.retention_hours)?,
            purge_interval: config::millis("EVENT_PURGE_INTERVAL_MS", d.purge_interval)?,
            egress: Egress {
                allow_private: allow_private_targets()?,
            },
            secret_key,
            secret_grace: Duration::from_secs(config::parse(
                "WEBHOOK_SECRET_GRACE_SECS",
                d.secret_grace.as_secs(),
            )?),
            trust: Trust::from_env_var(CA_FILE_VAR)?,
        })
    }

    /// Settings that would break delivery are refused at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        config::millis_at_least("WEBHOOK_TIMEOUT_MS", self.timeout, 10)?;
        config::within("WEBHOOK_MAX_ATTEMPTS", self.max_attempts, 1, 100)?;
        if self.backoff_base.is_zero() {
            return Err(config::invalid(
                "WEBHOOK_BACKOFF_BASE_MS",
                0,
                "must be at least 1",
            ));
        }
        if self.backoff_cap < self.backoff_base {
            return Err(config::invalid(
                "WEBHOOK_BACKOFF_CAP_MS",
                self.backoff_cap.as_millis(),
                "must be at least WEBHOOK_BACKOFF_BASE_MS",
            ));
        }
        config::millis_at_least("WEBHOOK_POLL_INTERVAL_MS", self.poll_interval, 10)?;
        config::within("WEBHOOK_CONCURRENCY", self.concurrency, 1, 1024)?;
        // A delivery still running when its lease ends would be sent again by another
        // instance while the first is still waiting for the answer.
        if self.lease < self.timeout * 2 {
            return Err(config::invalid(
                "WEBHOOK_LEASE_MS",
                self.lease.as_millis(),
                "must be at least 2 x WEBHOOK_TIMEOUT_MS",
            ));
        }
        config::within("WEBHOOK_INGEST_BATCH", self.ingest_batch, 1, 1000)?;
        config::within(
            "WEBHOOK_SECRET_GRACE_SECS",
            self.secret_grace.as_secs(),
            0,
            2_592_000,
        )?;
        config::within("EVENT_RETENTION_HOURS", self.retention_hours, 1, 87_600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_break_delivery_are_refused() {
        let d = WebhookConfig::default();
        assert!(d.validate().is_ok());
        let refused: [fn(&mut WebhookConfig); 5] = [
            |c| c.lease = c.timeout,
            |c| c.max_attempts = 0,
            |c| c.backoff_cap = Duration::from_millis(1),
            |c| c.ingest_batch = 1001,
            |c| c.secret_grace = Duration::from_secs(2_592_001),
        ];
        for change in refused {
            let mut c = d.clone();
            change(&mut c);
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
