//! The gate's typed configuration, read from the environment.

use std::{sync::Arc, time::Duration};

use ed25519_dalek::SigningKey;
use paysaga_common::{
    auth::{BuyerKeySource, ServiceRole},
    config::{self, ConfigError, Secrets},
    credentials::{self, ServiceKeys, TokenSource},
    keys::{self, DevKey},
    limits::MemberRate,
    service::Process,
};

pub use crate::store::RedisTarget;

/// `REFUSAL_PACE_MS` default: a refused member's next answer for the product comes no
/// sooner than this (a script asking in a loop gets one answer a second).
pub const DEFAULT_REFUSAL_PACE: Duration = Duration::from_secs(1);
/// `REFUSAL_HOLD_MAX` default: far below `HTTP_MAX_IN_FLIGHT`, so held requests never
/// take the buyers' share of it.
pub const DEFAULT_REFUSAL_HOLD_MAX: usize = 1024;

/// Everything the gate reads from the environment. Names and defaults are listed in
/// `docs/gate.md`.
#[derive(Clone)]
pub struct Config {
    /// `REDIS_URL`: the one Redis server, unless `REDIS_CLUSTER_NODES` is set.
    pub redis_url: String,
    /// `REDIS_CLUSTER_NODES`: comma-separated node URLs of a Redis Cluster. When not
    /// empty the gate uses the cluster and ignores `redis_url`.
    pub redis_cluster_nodes: Vec<String>,
    /// Namespace of every Redis key (`paysaga:` by default).
    pub redis_prefix: String,
    pub order_url: String,
    /// `LISTEN_ADDR` (default `127.0.0.1:8085`), `LOG_FORMAT`, and the development keys
    /// in use.
    pub process: Process,
    /// `PASS_SIGNING_KEY`. Required; the development key only with `PAYSAGA_DEV_KEYS=1`.
    pub pass_signing_key: SigningKey,
    /// `MEMBER_JWKS_URL`, else `JWT_PUBLIC_KEY`: buyer-token keys. One is required.
    pub buyer_keys: BuyerKeySource,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required.
    pub service_keys: ServiceKeys,
    /// `SERVICE_SIGNING_KEY` (and `SERVICE_TOKEN_LIFETIME_SECS`): the gate's own key,
    /// minting and renewing its credentials toward the order service. Required.
    pub service_credential: Arc<TokenSource>,
    /// How long a pass stays valid (and counts against the quota) after issue.
    pub pass_ttl: Duration,
    /// How often the quota recompute job runs.
    pub recompute_interval: Duration,
    /// How long a local "sold out" mark answers without asking Redis.
    pub sold_out_cache: Duration,
    /// Upper bound on any single Redis command, so a dead Redis never stalls a buyer.
    pub redis_timeout: Duration,
    /// Timeout of a call to the order service (the recompute job only).
    pub order_timeout: Duration,
    /// Allowed clock difference between gate and order: passes stay "in flight" this
    /// long after their expiry before their unit returns to the quota.
    pub clock_skew: Duration,
    /// Without Redis, each instance admits at most `last known quota / this` per product.
    pub fallback_instances: i64,
    /// Verified buyer tokens kept in memory (0 disables the cache).
    pub auth_cache_capacity: usize,
    /// `MEMBER_RATE_PER_SEC` / `MEMBER_RATE_BURST`: pass requests per member.
    pub member_rate: MemberRate,
    /// `REFUSAL_PACE_MS`: how long a refusal (not eligible, sold out) stands for its
    /// member and product; a request sooner is held until then (0: no pacing).
    pub refusal_pace: Duration,
    /// `REFUSAL_HOLD_MAX`: requests held at once by the pacing; past it, one that came
    /// too soon is answered 429 at once.
    pub refusal_hold_max: usize,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("redis_url", &self.redis_url)
            .field("redis_cluster_nodes", &self.redis_cluster_nodes)
            .field("redis_prefix", &self.redis_prefix)
            .field("order_url", &self.order_url)
            .field("process", &self.process)
            .field("pass_signing_key", &"<redacted>")
            .field("buyer_keys", &self.buyer_keys)
            .field("service_keys", &self.service_keys)
            .field("service_credential", &self.service_credential)
            .field("pass_ttl", &self.pass_ttl)
            .field("recompute_interval", &self.recompute_interval)
            .field("sold_out_cache", &self.sold_out_cache)
            .field("fallback_instances", &self.fallback_instances)
            .field("refusal_pace", &self.refusal_pace)
            .field("refusal_hold_max", &self.refusal_hold_max)
            .finish_non_exhaustive()
    }
}

fn positive<T: PartialOrd + Default + std::fmt::Display>(
    name: &str,
    v: T,
) -> Result<T, ConfigError> {
    if v > T::default() {
        Ok(v)
    } else {
        Err(config::invalid(name, v, "must be greater than zero"))
    }
}

fn nonzero(name: &str, d: Duration) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        Err(config::invalid(name, 0, "must be greater than zero"))
    } else {
        Ok(d)
    }
}

/// `REDIS_CLUSTER_NODES` split at commas, blanks dropped.
fn node_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The prefix goes in front of the `{p:<id>}` hash tag; a brace in it would move the
/// tag (every product into one cluster slot, or keys of one product apart).
fn key_prefix(prefix: String) -> Result<String, ConfigError> {
    if prefix.contains(['{', '}']) {
        Err(config::invalid(
            "REDIS_PREFIX",
            prefix,
            "must not contain '{' or '}' (the product's hash tag follows it)",
        ))
    } else {
        Ok(prefix)
    }
}

impl Config {
    /// Where the shared quota lives: the cluster when nodes are listed, else `redis_url`.
    pub fn redis_target(&self) -> RedisTarget {
        if self.redis_cluster_nodes.is_empty() {
            RedisTarget::Single(self.redis_url.clone())
        } else {
            RedisTarget::Cluster(self.redis_cluster_nodes.clone())
        }
    }

    pub fn from_env() -> Result<Self, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let pass_signing_key = keys::signing_key(&mut secrets, "PASS_SIGNING_KEY", DevKey::Passes)?;
        let (buyer_keys, service_keys) = credentials::caller_keys(&mut secrets)?;
        let service_credential =
            Arc::new(TokenSource::from_secrets(&mut secrets, ServiceRole::Gate)?);
        let process = Process::from_env(secrets, "127.0.0.1:8085")?;
        Ok(Self {
            redis_url: config::string("REDIS_URL", "redis://127.0.0.1:6379/"),
            redis_cluster_nodes: node_list(&config::string("REDIS_CLUSTER_NODES", "")),
            redis_prefix: key_prefix(config::string("REDIS_PREFIX", "paysaga:"))?,
            order_url: config::string("ORDER_URL", config::DEFAULT_ORDER_URL),
            process,
            pass_signing_key,
            buyer_keys,
            service_keys,
            service_credential,
            pass_ttl: Duration::from_secs(positive(
                "PASS_TTL_SECS",
                config::parse("PASS_TTL_SECS", 60u64)?,
            )?),
            recompute_interval: nonzero(
                "RECOMPUTE_INTERVAL_MS",
                config::millis("RECOMPUTE_INTERVAL_MS", Duration::from_secs(2))?,
            )?,
            sold_out_cache: config::millis("SOLD_OUT_CACHE_MS", Duration::from_millis(1000))?,
            redis_timeout: nonzero(
                "REDIS_TIMEOUT_MS",
                config::millis("REDIS_TIMEOUT_MS", Duration::from_millis(250))?,
            )?,
            order_timeout: nonzero(
                "ORDER_TIMEOUT_MS",
                config::millis("ORDER_TIMEOUT_MS", Duration::from_secs(2))?,
            )?,
            clock_skew: Duration::from_secs(config::parse("CLOCK_SKEW_SECS", 2u64)?),
            fallback_instances: positive(
                "FALLBACK_INSTANCES",
                config::parse("FALLBACK_INSTANCES", 1i64)?,
            )?,
            auth_cache_capacity: config::parse("AUTH_CACHE_CAPACITY", 100_000usize)?,
            member_rate: MemberRate::from_env()?,
            refusal_pace: config::millis("REFUSAL_PACE_MS", DEFAULT_REFUSAL_PACE)?,
            refusal_hold_max: config::parse("REFUSAL_HOLD_MAX", DEFAULT_REFUSAL_HOLD_MAX)?,
        })
    }

    /// Defaults with the given Redis and order service, for tests and benchmarks: the
    /// development keys and a development service credential.
    pub fn local(redis_url: &str, redis_prefix: &str, order_url: &str) -> Self {
        Self {
            redis_url: redis_url.to_owned(),
            redis_cluster_nodes: Vec::new(),
            redis_prefix: redis_prefix.to_owned(),
            order_url: order_url.to_owned(),
            process: Process::local("127.0.0.1:0"),
            pass_signing_key: DevKey::Passes.signing_key(),
            buyer_keys: BuyerKeySource::development(),
            service_keys: ServiceKeys::development(),
            service_credential: Arc::new(TokenSource::development(ServiceRole::Gate)),
            pass_ttl: Duration::from_secs(60),
            recompute_interval: Duration::from_secs(2),
            sold_out_cache: Duration::from_millis(1000),
            redis_timeout: Duration::from_millis(250),
            order_timeout: Duration::from_secs(2),
            clock_skew: Duration::from_secs(2),
            fallback_instances: 1,
            auth_cache_capacity: 100_000,
            member_rate: MemberRate::default(),
            refusal_pace: DEFAULT_REFUSAL_PACE,
            refusal_hold_max: DEFAULT_REFUSAL_HOLD_MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_are_a_comma_separated_list() {
        assert!(node_list("").is_empty());
        assert_eq!(
            node_list("redis://127.0.0.1:7000, redis://127.0.0.1:7001,,"),
            ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
        );
        let mut c = Config::local("redis://127.0.0.1:6379/", "p:", "http://127.0.0.1:1");
        assert_eq!(
            c.redis_target(),
            RedisTarget::Single("redis://127.0.0.1:6379/".into())
        );
        c.redis_cluster_nodes = node_list("redis://127.0.0.1:7000");
        assert_eq!(
            c.redis_target(),
            RedisTarget::Cluster(vec!["redis://127.0.0.1:7000".into()])
        );
    }

    #[test]
    fn a_prefix_with_a_brace_is_refused() {
        assert!(key_prefix("paysaga:".into()).is_ok());
        assert!(key_prefix("pay{saga}:".into()).is_err());
        assert!(key_prefix("pay{".into()).is_err());
    }
}
