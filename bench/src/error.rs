//! The benchmark's one error type: anything that stops a run from producing honest numbers.

/// Why a benchmark run could not complete. A failed request during a load phase is not an
/// error: it is an outcome, counted and reported.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("refusing to send traffic to {0}: the benchmark talks to loopback only")]
    NotLoopback(String),
    #[error("PostgreSQL: {0}")]
    Database(#[from] sqlx::Error),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("setup: {0}")]
    Setup(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
