//! Shared plumbing for every paysaga service; business rules stay in their service.

pub mod auth;
pub mod batch;
pub mod client;
pub mod config;
pub mod credentials;
pub mod db;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod jwks;
pub mod keys;
pub mod limits;
pub mod money;
pub mod openapi;
pub mod outbox;
pub mod pass;
pub mod ready;
pub mod retry;
pub mod server;
pub mod service;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{ApiError, ErrorBody};
