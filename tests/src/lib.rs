//! End-to-end harness: a whole system per test (a fresh database and Redis prefix, the
//! real service binaries started by the supervisor, fault-injecting proxies on any
//! link), the Redis Cluster and PostgreSQL failover rigs, and the drop-and-check
//! helpers the tests share. The supervisor (`paysaga-supervisor`) and the drop driver
//! and checker (`paysaga-drop`) are production crates the `paysaga` run command uses
//! too; they are re-exported here so a test names everything from one place.

pub mod binaries;
pub mod db;
pub mod drop_run;
pub mod postgres_ha;
pub mod proxy;
pub mod redis_cluster;
pub mod stack;
pub mod tamper;
pub mod waitlist;

pub use paysaga_drop::{bots, buyer, invariants, sell_through, setup, stats};
pub use paysaga_supervisor::{
    haproxy, private_postgres, private_redis, process, service, services, wiring,
};

pub use drop_run::{Answers, DropRun};
pub use paysaga_drop::{
    Admin, Attempt, Buyer, Driver, Endpoints, ErrorLog, InvariantReport, Outcome, Patience,
    WaitEnd, WaitlistPolicy, Waitlisted,
};
pub use paysaga_supervisor::{
    Haproxy, ServiceKind, ServiceProcess, ServiceSpec, Services, Stop, TlsFiles, Wiring,
};

/// The files of a test's certificates, as the servers started here take them.
pub fn tls_files(pki: &paysaga_common::testkit::PkiFiles) -> TlsFiles {
    TlsFiles {
        cert: pki.cert(),
        key: pki.key(),
        ca: pki.ca(),
    }
}
pub use proxy::{FaultProxy, Faults, ProxyCounts};
pub use stack::{Link, Stack, StackOptions};
pub use tamper::tamper;
