//! The gate's integration tests, one test binary: passes, quota, expiry, Redis outages and clusters.

mod support;

mod cluster;
mod eligibility;
mod expiry;
mod outage;
mod passes;
mod rate_limit;
mod two_gates;
mod used_passes;
