//! Runs the paysaga services on this machine, as the `paysaga` run command, the
//! end-to-end harness, the benchmark and the fault suite all do: PostgreSQL and Redis
//! found or started ([`infra`]), each service's environment wired in one place
//! ([`wiring`]), each service a child process that dies with its parent on a port
//! reserved for it ([`process`]), the set started, stopped and supervised together
//! ([`services`]), and HAProxy in front when every service runs as several instances
//! ([`haproxy`]).

pub mod binaries;
pub mod haproxy;
pub mod infra;
pub mod private_postgres;
pub mod private_redis;
pub mod process;
pub mod service;
pub mod services;
pub mod wiring;

pub use haproxy::Haproxy;

/// The PEM files a server of ours serves TLS with (certificate chain and key), and the
/// CA its clients verify it against.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
}
pub use infra::{Infra, InfraChoice, Origin};
pub use private_postgres::PrivatePostgres;
pub use private_redis::PrivateRedis;
pub use process::{ServiceProcess, ServiceSpec, Stop};
pub use service::ServiceKind;
pub use services::{Backoff, Event, Services};
pub use wiring::{Launcher, Wiring};
