//! The orchestrator's integration tests, one test binary: payments, the step log, limits, and
//! the webhook platform end to end inside the running service.

mod support;

mod census;
mod payments;
mod products;
mod rate_limit;
mod series;
mod staff;
mod staff_secrets;
mod staff_tools;
mod step_log;
mod top_ups;
mod webhooks;
