//! The account service: member accounts, the merchant account, and an idempotent
//! double-entry ledger of debits and refunds.

pub mod api;
pub mod client;

pub use client::AccountClient;
