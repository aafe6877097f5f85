//! Scenario 5, the machine's limits: what HTTP with the services' authentication, a Redis
//! script call and a PostgreSQL commit cost here, at the run's concurrency.

pub mod http;
pub mod measure;
pub mod pg_commit;
pub mod redis_eval;
pub mod server;

use serde::Serialize;

/// Throughput ceilings (operations per second) every paysaga figure is divided by.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Ceilings {
    /// A bare handler behind the services' buyer authentication.
    pub http_auth: f64,
    /// The same handler without authentication.
    pub http_bare: f64,
    /// The authenticated handler behind the services' common middleware (metrics, limits).
    pub http_auth_stack: f64,
    /// EVALSHA of a script that returns a constant.
    pub redis_evalsha: f64,
    /// Single-row `UPDATE ... RETURNING` commits.
    pub pg_commits: f64,
}
