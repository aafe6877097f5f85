//! The webhook platform's integration tests, one test binary: its tables against real
//! PostgreSQL, and the pull of a real service's outbox.

mod support;

mod ingest;
mod store;
