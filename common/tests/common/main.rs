//! The shared plumbing's integration tests: servers, service tokens, key sets, retries and metrics.

mod conflict_retry;
mod db_unavailable;
mod docs;
mod jwks_rotation;
mod metric_labels;
mod server;
mod service_tokens;
