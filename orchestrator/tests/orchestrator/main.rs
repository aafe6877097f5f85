//! The orchestrator's integration tests, one test binary: payments, the step log, webhooks and limits.

mod support;

mod census;
mod payments;
mod rate_limit;
mod step_log;
mod webhooks;
mod webhooks_store;
