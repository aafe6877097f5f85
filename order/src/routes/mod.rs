//! HTTP handlers, one module per resource.

pub mod products;
pub mod reservations;
