//! Reading typed settings from the environment, with defaults that work locally.

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
