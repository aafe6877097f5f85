//! End-to-end tests, one test binary: the real service processes started by the harness.

mod api_docs;
mod bots;
mod browser;
mod charts;
mod console;
mod console_staff;
mod crash;
mod drop;
mod expiry;
mod fairness;
mod harness;
mod holds_crash;
mod instances;
mod invariant_checks;
mod postgres_ha;
mod proxy;
mod rotation;
mod service_callers;
mod slow_client;
mod startup_refusals;
mod tls_links;
mod traces;
mod transfers_crash;
mod waitlist_crash;
mod waitlist_drop;
mod wall;
