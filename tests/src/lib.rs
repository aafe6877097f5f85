//! End-to-end harness: starts the real paysaga service binaries as child processes
//! (each against its own database role, a fresh test database and Redis prefix), puts
//! fault-injecting proxies on any link, drives buyers through the public HTTP API and
//! checks the invariants in PostgreSQL itself. Shared by the end-to-end tests, the
//! fault suite, the benchmark and the `paysaga` run command.

pub mod binaries;
pub mod buyer;
pub mod drop_run;
pub mod haproxy;
pub mod invariants;
pub mod postgres_ha;
pub mod private_redis;
pub mod process;
pub mod proxy;
pub mod redis_cluster;
pub mod sell_through;
pub mod service;
pub mod services;
pub mod setup;
pub mod stack;
pub mod stats;
pub mod wiring;

pub use buyer::{
    Attempt, Buyer, Driver, Endpoints, ErrorLog, Outcome, Patience, WaitEnd, WaitlistPolicy,
    Waitlisted,
};
pub use drop_run::{Answers, DropRun};
pub use haproxy::Haproxy;
pub use invariants::InvariantReport;
pub use process::{ServiceProcess, ServiceSpec, Stop};
pub use proxy::{FaultProxy, Faults, ProxyCounts};
pub use service::ServiceKind;
pub use services::Services;
pub use setup::Admin;
pub use stack::{Link, Stack, StackOptions};
pub use wiring::Wiring;
