//! Reading typed settings from the environment, with defaults that work locally.
//! Secrets (keys, service credentials, database passwords) have no defaults outside
//! development mode (`PAYSAGA_DEV_KEYS=1`): a deployment that forgets one refuses to
//! start rather than trust a public development key.

use std::{fmt::Display, str::FromStr, time::Duration};

/// A setting that is present but cannot be parsed.
#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}={value:?} is invalid: {reason}")]
pub struct ConfigError {
    pub name: String,
    pub value: String,
    pub reason: String,
}

/// The variable's value, or `default` when it is unset or empty.
pub fn string(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => default.to_owned(),
    }
}

/// The variable parsed as `T`, or `default` when unset or empty.
pub fn parse<T>(name: &str, default: T) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|e: T::Err| ConfigError {
            name: name.to_owned(),
            value: v,
            reason: e.to_string(),
        }),
        _ => Ok(default),
    }
}

/// A duration given in milliseconds.
pub fn millis(name: &str, default: Duration) -> Result<Duration, ConfigError> {
    parse(name, default.as_millis() as u64).map(Duration::from_millis)
}

/// A setting that parsed but breaks a rule the service relies on.
pub fn invalid(name: &str, value: impl ToString, reason: &str) -> ConfigError {
    ConfigError {
        name: name.to_owned(),
        value: value.to_string(),
        reason: reason.to_owned(),
    }
}

/// `value` refused unless it lies in `lo..=hi` (the reason names both bounds).
pub fn within<T: PartialOrd + Display>(
    name: &str,
    value: T,
    lo: T,
    hi: T,
) -> Result<(), ConfigError> {
    if lo <= value && value <= hi {
        Ok(())
    } else {
        Err(invalid(name, &value, &format!("must be {lo} to {hi}")))
    }
}

/// `value` refused when below `min`.
pub fn at_least<T: PartialOrd + Display>(name: &str, value: T, min: T) -> Result<(), ConfigError> {
    if value >= min {
        Ok(())
    } else {
        Err(invalid(name, &value, &format!("must be at least {min}")))
    }
}

/// A duration setting, in milliseconds, refused when below `min_ms`.
pub fn millis_at_least(name: &str, value: Duration, min_ms: u128) -> Result<(), ConfigError> {
    at_least(name, value.as_millis(), min_ms)
}

/// How logs are written: `LOG_FORMAT=json` for machines, `pretty` for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "pretty" | "text" => Ok(Self::Pretty),
            other => Err(format!("expected json or pretty, got {other}")),
        }
    }
}

/// Where each service answers by default when every service runs on one machine (the
/// defaults of `ACCOUNT_URL`, `ORDER_URL` and `MEMBER_URL` in the services that call it).
pub const DEFAULT_ACCOUNT_URL: &str = "http://127.0.0.1:8082";
pub const DEFAULT_ORDER_URL: &str = "http://127.0.0.1:8084";
pub const DEFAULT_MEMBER_URL: &str = "http://127.0.0.1:8081";

/// The variable that turns development mode on.
pub const DEV_KEYS_VAR: &str = "PAYSAGA_DEV_KEYS";

/// Whether development mode is on (`PAYSAGA_DEV_KEYS`): only then may an unset key
/// variable fall back to a public development key, or `DATABASE_URL` to the
/// development password. `1`/`true` turn it on; unset, empty, `0` or `false` leave it
/// off; anything else is refused, so a typo cannot quietly pick either mode.
pub fn dev_mode() -> Result<bool, ConfigError> {
    parse_dev_mode(std::env::var(DEV_KEYS_VAR).ok().as_deref())
}

/// [`dev_mode`] over a given value (`None`: unset).
pub fn parse_dev_mode(value: Option<&str>) -> Result<bool, ConfigError> {
    match value.map(str::trim) {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(ConfigError {
            name: DEV_KEYS_VAR.to_owned(),
            value: other.to_owned(),
            reason: "expected 1 or true (development mode), 0 or false".to_owned(),
        }),
    }
}

/// Why a service's configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    #[error(transparent)]
    Missing(#[from] Missing),
}

/// Required variables that are unset outside development mode, all of them at once so
/// an operator fixes the deployment in one go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Missing(pub Vec<String>);

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let them = if self.0.len() == 1 { "it" } else { "them" };
        write!(
            f,
            "missing configuration: {} (set {them}, or {DEV_KEYS_VAR}=1 for development)",
            self.0.join(", ")
        )
    }
}

/// Reads a service's secrets (keys, credentials, database password) and remembers
/// which required ones are unset: in development mode they fall back to the development
/// values, which [`DevFallbacks`] lists for one warning at start; otherwise each is
/// missing, and [`Secrets::finish`] names them all.
#[derive(Debug)]
pub struct Secrets {
    dev: bool,
    missing: Vec<String>,
    fallbacks: Vec<String>,
}

impl Secrets {
    /// Development mode as [`dev_mode`] reads it.
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self::new(dev_mode()?))
    }

    pub fn new(dev: bool) -> Self {
        Self {
            dev,
            missing: Vec::new(),
            fallbacks: Vec::new(),
        }
    }

    pub fn is_dev(&self) -> bool {
        self.dev
    }

    /// `what` (a variable, or alternatives such as `MEMBER_JWKS_URL or JWT_PUBLIC_KEY`)
    /// is unset. True when its development value may stand in (development mode);
    /// otherwise it is recorded as missing and the caller's stand-in is never used,
    /// because [`Self::finish`] fails.
    pub fn unset(&mut self, what: &str) -> bool {
        if self.dev {
            self.fallbacks.push(what.to_owned());
        } else {
            self.missing.push(what.to_owned());
        }
        self.dev
    }

    /// A development value was configured explicitly and accepted (development mode
    /// only): it is listed in the warning like a fallback.
    pub fn development_value(&mut self, what: &str) {
        self.fallbacks.push(what.to_owned());
    }

    /// Every missing variable at once, or the development values in use.
    pub fn finish(self) -> Result<DevFallbacks, Missing> {
        if self.missing.is_empty() {
            Ok(DevFallbacks(self.fallbacks))
        } else {
            Err(Missing(self.missing))
        }
    }
}

/// The development keys and passwords a service runs with; empty outside development
/// mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevFallbacks(pub Vec<String>);

impl DevFallbacks {
    /// One loud warning naming them, if there are any. Call it once logging is set up.
    pub fn warn(&self, service: &str) {
        if self.0.is_empty() {
            return;
        }
        tracing::warn!(
            service,
            development = %self.0.join(", "),
            "{DEV_KEYS_VAR}=1: running with the public DEVELOPMENT keys/passwords for {}; \
             anyone can mint tokens and passes this service accepts. Never in production.",
            self.0.join(", ")
        );
    }
}

/// `DATABASE_URL`. Unset, it falls back to `dev_default` (which carries the development
/// password) in development mode only; outside it, a URL with the development password
/// is refused.
pub fn database_url(secrets: &mut Secrets, dev_default: &str) -> Result<String, ConfigError> {
    const VAR: &str = "DATABASE_URL";
    if let Some(url) = configured_url(secrets, VAR)? {
        return Ok(url);
    }
    if secrets.is_dev() {
        secrets.development_value("DATABASE_URL (development password)");
    } else {
        secrets.unset(VAR);
    }
    Ok(dev_default.to_owned())
}

/// `MIGRATION_DATABASE_URL`: the role that owns the service's schema, used once at
/// start to apply migrations and grants. Unset, a development system derives it from a
/// development `DATABASE_URL` (`account_app` -> `account_migrator`); elsewhere the
/// service does not migrate and refuses to start on a schema older than its code, so
/// production runs migrations with their own credential (a deploy job, or one instance
/// given the variable) while serving instances never hold DDL rights.
pub fn migration_database_url(
    secrets: &mut Secrets,
    database_url: &str,
) -> Result<Option<String>, ConfigError> {
    match configured_url(secrets, "MIGRATION_DATABASE_URL")? {
        Some(url) => Ok(Some(url)),
        None if secrets.is_dev() && has_dev_password(database_url) => {
            Ok(crate::db::dev_migrator_url(database_url))
        }
        None => Ok(None),
    }
}

/// The database URL in `var`, if set: one with the development password is refused
/// outside development mode, and listed among the development values in it.
fn configured_url(secrets: &mut Secrets, var: &str) -> Result<Option<String>, ConfigError> {
    let url = match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => return Ok(None),
    };
    if has_dev_password(&url) {
        if !secrets.is_dev() {
            return Err(ConfigError {
                name: var.to_owned(),
                value: "<redacted>".to_owned(),
                reason: format!(
                    "its password is the public development password; give the role \
                     its own password (or set {DEV_KEYS_VAR}=1 for development)"
                ),
            });
        }
        secrets.development_value(&format!("{var} (development password)"));
    }
    Ok(Some(url))
}

/// `DB_STATEMENT_TIMEOUT_MS` (default 5000) and `DB_IDLE_IN_TRANSACTION_MS` (default
/// 30000): the limits on every connection a service makes as its runtime role.
pub fn db_limits() -> Result<crate::db::Limits, ConfigError> {
    let d = crate::db::Limits::default();
    Ok(crate::db::Limits {
        statement_timeout_ms: parse("DB_STATEMENT_TIMEOUT_MS", d.statement_timeout_ms)?,
        idle_in_transaction_ms: parse("DB_IDLE_IN_TRANSACTION_MS", d.idle_in_transaction_ms)?,
    })
}

/// Whether a `postgres://user:password@host/...` URL's password is the development
/// one (percent-encoding decoded).
pub fn has_dev_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let Some((userinfo, _)) = authority.rsplit_once('@') else {
        return false;
    };
    let Some((_, password)) = userinfo.split_once(':') else {
        return false;
    };
    percent_decode(password) == crate::db::DEV_ROLE_PASSWORD
}

fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_mode_is_parsed_strictly() {
        assert!(!parse_dev_mode(None).unwrap());
        assert!(!parse_dev_mode(Some("")).unwrap());
        assert!(!parse_dev_mode(Some("0")).unwrap());
        assert!(!parse_dev_mode(Some("false")).unwrap());
        assert!(parse_dev_mode(Some("1")).unwrap());
        assert!(parse_dev_mode(Some("true")).unwrap());
        for junk in ["yes", "2", "TRUEISH", "on", "development"] {
            let e = parse_dev_mode(Some(junk)).unwrap_err();
            assert_eq!(e.name, DEV_KEYS_VAR, "{junk}");
        }
    }

    #[test]
    fn missing_variables_are_named_together() {
        let mut s = Secrets::new(false);
        assert!(!s.unset("SERVICE_KEYS"));
        assert!(!s.unset("PASS_PUBLIC_KEY"));
        let e = s.finish().unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing configuration: SERVICE_KEYS, PASS_PUBLIC_KEY \
             (set them, or PAYSAGA_DEV_KEYS=1 for development)"
        );

        let mut dev = Secrets::new(true);
        assert!(dev.unset("SERVICE_KEYS"));
        assert_eq!(
            dev.finish().unwrap(),
            DevFallbacks(vec!["SERVICE_KEYS".into()])
        );
        assert_eq!(
            Secrets::new(false).finish().unwrap(),
            DevFallbacks::default()
        );
    }

    #[test]
    fn the_development_password_is_recognised() {
        assert!(has_dev_password(
            "postgres://order_app:paysaga-dev@127.0.0.1:5432/paysaga"
        ));
        assert!(has_dev_password(
            "postgres://order_app:paysaga%2Ddev@db/paysaga?sslmode=disable"
        ));
        assert!(!has_dev_password(
            "postgres://order_app:s3cret@127.0.0.1:5432/paysaga"
        ));
        assert!(!has_dev_password("postgres://order_app@127.0.0.1/paysaga"));
        assert!(!has_dev_password("host=/tmp dbname=paysaga"));
    }
}
