//! The staff contract, served by the orchestrator: staff accounts (people who sign in
//! as themselves, with a second factor, and act in roles), their sessions and the audit
//! trail of what they did: wire types and codes (`api`), the typed client (`client`).

pub mod api;
pub mod client;
