//! The gate's integration tests, one test binary: passes, quota, expiry, Redis outages, clusters and TLS.

mod support;

mod cluster;
mod eligibility;
mod expiry;
mod outage;
mod passes;
mod rate_limit;
mod redis_tls;
mod two_gates;
mod used_passes;
