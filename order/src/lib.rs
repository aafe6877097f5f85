//! The order service: products with one row per unit, reservations claimed with
//! `FOR UPDATE SKIP LOCKED`, expiry, and idempotent confirm and cancel.

pub mod api;
pub mod client;
