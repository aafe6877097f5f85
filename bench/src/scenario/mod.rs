//! The benchmark's scenarios, each measured against the real services.

pub mod bots;
pub mod checkout;
pub mod claims;
pub mod drop;
pub mod gate;
pub mod gate_bench;
pub mod measure;
pub mod saga;
pub mod seeds;
pub mod sell_through;
