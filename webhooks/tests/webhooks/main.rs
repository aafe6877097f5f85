//! The webhook platform's integration tests, one test binary: its tables against real
//! PostgreSQL.

mod support;

mod store;
