//! The member service's contract: its wire types and error codes (`api`) and the typed
//! client other processes call it with (`client`).

pub mod api;
pub mod client;
