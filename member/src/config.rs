//! The member service's settings, read from the environment.

use std::{sync::Arc, time::Duration};

use ed25519_dalek::SigningKey;
use paysaga_common::{
    auth::{ServiceRole, MAX_BUYER_TOKEN_LIFETIME_SECS},
    config::{self, ConfigError, Secrets},
    credentials::{ServiceKeys, TokenSource},
    jwks::kid_of,
    keys::{self, is_development_key, parse_signing_key, DevKey},
    service::{Database, Process},
};

use crate::proxies::TrustedProxies;

/// The keys buyer tokens are signed with: the first signs, all are published.
#[derive(Clone)]
pub struct SigningKeys {
    keys: Vec<SigningKey>,
    development: bool,
}

impl SigningKeys {
    /// `keys[0]` signs; the rest (previous keys) are only published. Panics on none.
    pub fn new(keys: Vec<SigningKey>) -> Self {
        assert!(!keys.is_empty(), "at least one signing key");
        Self {
            keys,
            development: false,
        }
    }

    /// DEVELOPMENT ONLY: the public development buyer-token key.
    pub fn development() -> Self {
        Self {
            keys: vec![DevKey::BuyerTokens.signing_key()],
            development: true,
        }
    }

    /// Base64 32-byte seeds separated by commas or newlines; blank entries and lines
    /// starting with `#` are skipped. A development key is refused: anyone could sign
    /// buyer tokens with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let keys = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.starts_with('#'))
            .enumerate()
            .map(|(i, s)| {
                let key = parse_signing_key(s).map_err(|e| format!("key {}: {e}", i + 1))?;
                if is_development_key(&key.verifying_key()) {
                    return Err(format!(
                        "key {} is a public DEVELOPMENT key (anyone can sign with it); \
                         configure a key of your own",
                        i + 1
                    ));
                }
                Ok(key)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err("no key given".into());
        }
        Ok(Self::new(keys))
    }

    pub fn current(&self) -> &SigningKey {
        &self.keys[0]
    }

    pub fn all(&self) -> &[SigningKey] {
        &self.keys
    }

    pub fn is_development(&self) -> bool {
        self.development
    }
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<String> = self
            .keys
            .iter()
            .map(|k| kid_of(&k.verifying_key()))
            .collect();
        f.debug_struct("SigningKeys")
            .field("kids", &kids)
            .field("development", &self.development)
            .finish()
    }
}

/// Argon2id cost (the shared password rules' parameters, `paysaga_common::password`).
pub use paysaga_common::password::Argon2Params;

/// Sign-in failure limits: a scope that reached its limit within `window` refuses
/// further attempts until the window has passed (docs/members.md, "Throttling").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// `SIGNIN_MAX_FAILURES_PER_PAIR`, default 5: failures for one email from one address.
    pub per_pair: u32,
    /// `SIGNIN_MAX_FAILURES_PER_ADDRESS`, default 50: failures from one address, any email.
    pub per_address: u32,
    /// `SIGNIN_MAX_FAILURES_PER_EMAIL`, default 50: failures for one email from any
    /// address; past it, only the addresses that failed for the email are refused it.
    pub per_email: u32,
    /// `SIGNIN_FAILURE_WINDOW_SECS`, default 900.
    pub window: Duration,
}

impl Default for Throttle {
    fn default() -> Self {
        Self {
            per_pair: 5,
            per_address: 50,
            per_email: 50,
            window: Duration::from_secs(15 * 60),
        }
    }
}

/// Sign-up limits, counted before any password is hashed: a window that is full refuses
/// further sign-ups until it has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignUpLimits {
    /// `SIGNUP_MAX_PER_ADDRESS`, default 5: sign-ups from one address per window.
    pub per_address: u32,
    /// `SIGNUP_ADDRESS_WINDOW_SECS`, default 60.
    pub address_window: Duration,
    /// `SIGNUP_MAX_TOTAL`, default 50: sign-ups from all addresses, on every instance,
    /// per window.
    pub total: u32,
    /// `SIGNUP_TOTAL_WINDOW_SECS`, default 1.
    pub total_window: Duration,
}

impl Default for SignUpLimits {
    fn default() -> Self {
        Self {
            per_address: 5,
            address_window: Duration::from_secs(60),
            total: 50,
            total_window: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// `DATABASE_URL` (as `member_app`; required), `MIGRATION_DATABASE_URL`,
    /// `DB_MAX_CONNECTIONS` and the connection limits.
    pub database: Database,
    /// `LISTEN_ADDR` (default `127.0.0.1:8081`), `LOG_FORMAT`, and the development keys
    /// and password in use.
    pub process: Process,
    /// `ACCOUNT_URL`, default `http://127.0.0.1:8082`.
    pub account_url: String,
    /// `ACCOUNT_TIMEOUT_MS`, default 5000: each call to the account service.
    pub account_timeout: Duration,
    /// `SERVICE_SIGNING_KEY` (and `SERVICE_TOKEN_LIFETIME_SECS`): this service's own
    /// key, minting and renewing its credentials toward the account service. Required.
    pub service_credential: Arc<TokenSource>,
    /// `MEMBER_SIGNING_KEYS` (comma-separated base64 seeds) or `MEMBER_SIGNING_KEYS_FILE`
    /// (one per line); the first signs, all are published. Required.
    pub signing_keys: SigningKeys,
    /// `SERVICE_KEYS`: each caller role's public keys, verifying service credentials.
    /// Required.
    pub service_keys: ServiceKeys,
    /// `ARGON2_MEMORY_KIB`, `ARGON2_ITERATIONS`, `ARGON2_PARALLELISM`; OWASP's minimum
    /// by default.
    pub argon2: Argon2Params,
    /// `ARGON2_MAX_CONCURRENT`, default the number of CPUs: hashes computed at once (each
    /// holds `ARGON2_MEMORY_KIB` of memory while it runs).
    pub argon2_max_concurrent: usize,
    /// `ACCESS_TOKEN_TTL_SECS`, default 900.
    pub access_ttl: Duration,
    /// `REFRESH_TOKEN_TTL_SECS`, default 30 days.
    pub refresh_ttl: Duration,
    /// Sign-in failure limits.
    pub throttle: Throttle,
    /// Sign-up limits.
    pub sign_up: SignUpLimits,
    /// `TRUSTED_PROXIES`, default none: comma-separated addresses and CIDR networks of
    /// the proxies whose `X-Forwarded-For` names the client ([`TrustedProxies`]).
    pub trusted_proxies: TrustedProxies,
    /// `ACCOUNT_REPAIR_SECS`, default 5: how often accounts still to be opened are opened.
    pub account_repair_every: Duration,
    /// `ACCOUNT_REPAIR_MIN_AGE_SECS`, default 5: members younger than this are left to
    /// their own sign-up request.
    pub account_repair_min_age: Duration,
    /// `MEMBER_BULK_SIGNUP=1` enables `POST /v1/members/bulk` (seeding only).
    pub bulk_signup: bool,
    /// `MEMBER_VERIFICATION_KEY`: base64 Ed25519 seed signing email-verification tokens
    /// (a key of its own: a verification token can never be a buyer token). Required
    /// (the public development key with `PAYSAGA_DEV_KEYS=1`).
    pub verification_key: SigningKey,
    /// `EMAIL_VERIFICATION_TTL_SECS`, default 86400: how long a verification token is good.
    pub verification_ttl: Duration,
}

pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8081";
/// How long an email-verification token is good by default: a day.
pub const DEFAULT_VERIFICATION_TTL: Duration = Duration::from_secs(24 * 3600);

/// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`; `default` when unset or empty.
fn flag(name: &str, default: bool) -> Result<bool, ConfigError> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(config::invalid(name, v, "expected 1 or 0")),
        },
        _ => Ok(default),
    }
}

fn secs(name: &str, default: u64) -> Result<Duration, ConfigError> {
    config::parse(name, default).map(Duration::from_secs)
}

/// A limit from the environment: a positive count.
fn count(name: &str, default: u32) -> Result<u32, ConfigError> {
    let n = config::parse(name, default)?;
    positive(name, n.into())?;
    Ok(n)
}

/// A limit's window from the environment, in whole seconds, at least one.
fn window(name: &str, default: Duration) -> Result<Duration, ConfigError> {
    let w = secs(name, default.as_secs())?;
    positive(name, w.as_secs())?;
    Ok(w)
}

fn positive(name: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(config::invalid(name, value, "must be positive"));
    }
    Ok(())
}

fn signing_keys_from_env(secrets: &mut Secrets) -> Result<SigningKeys, ConfigError> {
    let invalid = |name: &str, reason: String| config::invalid(name, "<redacted>", &reason);
    if let Ok(v) = std::env::var("MEMBER_SIGNING_KEYS") {
        if !v.trim().is_empty() {
            return SigningKeys::parse(&v).map_err(|e| invalid("MEMBER_SIGNING_KEYS", e));
        }
    }
    if let Ok(path) = std::env::var("MEMBER_SIGNING_KEYS_FILE") {
        if !path.trim().is_empty() {
            let text = std::fs::read_to_string(path.trim())
                .map_err(|e| config::invalid("MEMBER_SIGNING_KEYS_FILE", &path, &e.to_string()))?;
            return SigningKeys::parse(&text).map_err(|e| invalid("MEMBER_SIGNING_KEYS_FILE", e));
        }
    }
    secrets.unset("MEMBER_SIGNING_KEYS or MEMBER_SIGNING_KEYS_FILE");
    Ok(SigningKeys::development())
}

/// `TRUSTED_PROXIES`, parsed once. `TRUST_FORWARDED_FOR=1` is refused rather than
/// ignored: it believed any peer's header, so a deployment still setting it must name
/// its proxies instead.
fn trusted_proxies_from_env() -> Result<TrustedProxies, ConfigError> {
    if flag("TRUST_FORWARDED_FOR", false)? {
        return Err(config::invalid(
            "TRUST_FORWARDED_FOR",
            1,
            "not read: list the proxies whose X-Forwarded-For is believed in \
             TRUSTED_PROXIES (addresses or CIDR networks)",
        ));
    }
    let text = config::string("TRUSTED_PROXIES", "");
    text.parse().map_err(|e: crate::proxies::InvalidProxy| {
        config::invalid("TRUSTED_PROXIES", &text, &e.to_string())
    })
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl Config {
    pub fn from_env() -> Result<Self, config::Error> {
        // Every missing secret is named at once, before any other setting is judged.
        let mut secrets = Secrets::from_env()?;
        let database = Database::urls_from_env(&mut secrets, "member_app")?;
        let signing_keys = signing_keys_from_env(&mut secrets)?;
        let verification_key = keys::signing_key(
            &mut secrets,
            "MEMBER_VERIFICATION_KEY",
            DevKey::EmailVerification,
        )?;
        let service_keys = ServiceKeys::from_secrets(&mut secrets)?;
        let service_credential = Arc::new(TokenSource::from_secrets(
            &mut secrets,
            ServiceRole::Member,
        )?);
        let process = Process::from_env(secrets, DEFAULT_LISTEN_ADDR)?;
        let argon2 = Argon2Params::from_env()?;
        if let Err(e) = argon2::Params::new(
            argon2.memory_kib,
            argon2.iterations,
            argon2.parallelism,
            None,
        ) {
            return Err(config::invalid(
                "ARGON2_MEMORY_KIB/ARGON2_ITERATIONS/ARGON2_PARALLELISM",
                format!("{argon2:?}"),
                &e.to_string(),
            )
            .into());
        }
        let argon2_max_concurrent: usize = config::parse("ARGON2_MAX_CONCURRENT", cpus())?;
        positive("ARGON2_MAX_CONCURRENT", argon2_max_concurrent as u64)?;
        let defaults = Throttle::default();
        let throttle = Throttle {
            per_pair: count("SIGNIN_MAX_FAILURES_PER_PAIR", defaults.per_pair)?,
            per_address: count("SIGNIN_MAX_FAILURES_PER_ADDRESS", defaults.per_address)?,
            per_email: count("SIGNIN_MAX_FAILURES_PER_EMAIL", defaults.per_email)?,
            window: window("SIGNIN_FAILURE_WINDOW_SECS", defaults.window)?,
        };
        let defaults = SignUpLimits::default();
        let sign_up = SignUpLimits {
            per_address: count("SIGNUP_MAX_PER_ADDRESS", defaults.per_address)?,
            address_window: window("SIGNUP_ADDRESS_WINDOW_SECS", defaults.address_window)?,
            total: count("SIGNUP_MAX_TOTAL", defaults.total)?,
            total_window: window("SIGNUP_TOTAL_WINDOW_SECS", defaults.total_window)?,
        };
        let trusted_proxies = trusted_proxies_from_env()?;
        let access_ttl = secs("ACCESS_TOKEN_TTL_SECS", 900)?;
        let refresh_ttl = secs("REFRESH_TOKEN_TTL_SECS", 30 * 86_400)?;
        positive("ACCESS_TOKEN_TTL_SECS", access_ttl.as_secs())?;
        if access_ttl.as_secs() > MAX_BUYER_TOKEN_LIFETIME_SECS as u64 {
            // Every service refuses a buyer token that lives longer.
            return Err(config::invalid(
                "ACCESS_TOKEN_TTL_SECS",
                access_ttl.as_secs(),
                &format!("must be at most {MAX_BUYER_TOKEN_LIFETIME_SECS}"),
            )
            .into());
        }
        positive("REFRESH_TOKEN_TTL_SECS", refresh_ttl.as_secs())?;
        Ok(Self {
            database: database.with_pool_from_env()?,
            process,
            account_url: config::string("ACCOUNT_URL", config::DEFAULT_ACCOUNT_URL),
            account_timeout: config::millis("ACCOUNT_TIMEOUT_MS", Duration::from_secs(5))?,
            service_credential,
            signing_keys,
            service_keys,
            argon2,
            argon2_max_concurrent,
            access_ttl,
            refresh_ttl,
            throttle,
            sign_up,
            trusted_proxies,
            account_repair_every: secs("ACCOUNT_REPAIR_SECS", 5)?,
            account_repair_min_age: secs("ACCOUNT_REPAIR_MIN_AGE_SECS", 5)?,
            bulk_signup: flag("MEMBER_BULK_SIGNUP", false)?,
            verification_key,
            verification_ttl: window("EMAIL_VERIFICATION_TTL_SECS", DEFAULT_VERIFICATION_TTL)?,
        })
    }

    /// Defaults for everything but the database and the account service, as tests and
    /// tools want it: the development signing key and a development service credential.
    pub fn local(database_url: impl Into<String>, account_url: impl Into<String>) -> Self {
        Self {
            database: Database::local(database_url),
            process: Process::local(DEFAULT_LISTEN_ADDR),
            account_url: account_url.into(),
            account_timeout: Duration::from_secs(5),
            service_credential: Arc::new(TokenSource::development(ServiceRole::Member)),
            signing_keys: SigningKeys::development(),
            service_keys: ServiceKeys::development(),
            argon2: Argon2Params::OWASP,
            argon2_max_concurrent: cpus(),
            access_ttl: Duration::from_secs(900),
            refresh_ttl: Duration::from_secs(30 * 86_400),
            throttle: Throttle::default(),
            sign_up: SignUpLimits::default(),
            trusted_proxies: TrustedProxies::default(),
            account_repair_every: Duration::from_secs(5),
            account_repair_min_age: Duration::from_secs(5),
            bulk_signup: false,
            verification_key: DevKey::EmailVerification.signing_key(),
            verification_ttl: DEFAULT_VERIFICATION_TTL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lists_parse_in_order_and_refuse_junk() {
        let a = paysaga_common::keys::encode_signing_key(&SigningKey::from_bytes(&[1; 32]));
        let b = paysaga_common::keys::encode_signing_key(&SigningKey::from_bytes(&[2; 32]));
        let keys = SigningKeys::parse(&format!(" {a} ,{b}")).unwrap();
        assert_eq!(keys.all().len(), 2);
        assert_eq!(keys.current().to_bytes(), [1; 32]);
        let file = SigningKeys::parse(&format!("# current\n{b}\n\n{a}\n")).unwrap();
        assert_eq!(file.current().to_bytes(), [2; 32]);
        assert!(SigningKeys::parse("").is_err());
        assert!(SigningKeys::parse("not-base64!").is_err());
        let dev = paysaga_common::keys::encode_signing_key(&DevKey::BuyerTokens.signing_key());
        let refused = SigningKeys::parse(&format!("{a},{dev}")).unwrap_err();
        assert!(
            refused.contains("key 2") && refused.contains("DEVELOPMENT"),
            "{refused}"
        );
        assert!(
            !format!("{keys:?}").contains(&a),
            "seeds never show in Debug"
        );
    }
}
