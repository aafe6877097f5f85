//! The account service's integration tests, one test binary: the ledger's rules, batches, rights and bad input, against a real PostgreSQL.

mod support;

mod access;
mod bad_input;
mod batch;
mod batch_paths;
mod concurrency;
mod deposit_authorizations;
mod deposits;
mod holds;
mod idempotency;
mod ledger_rights;
mod lookup_cost;
mod money_conserved;
mod refunds;
mod tls;
mod transfers;
