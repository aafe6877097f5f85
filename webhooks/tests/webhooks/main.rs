//! The webhook platform's integration tests, one test binary: its tables against real
//! PostgreSQL, the pull of a real service's outbox, and the delivery worker against
//! real receivers (egress rules, failure classes, sealed and rotated secrets).

mod support;

mod delivery;
mod ingest;
mod store;
