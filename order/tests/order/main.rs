//! The order service's integration tests, one test binary: claims, confirms, cancels, expiry, the waitlist and the outbox.

mod support;

mod bad_input;
mod batch;
mod claim_alternatives;
mod claims_batched;
mod eligibility;
mod expiry;
mod hoarding;
mod holds;
mod lifecycle;
mod outbox;
mod passes;
mod races;
mod reserve_concurrency;
mod settle;
mod timeouts;
mod waitlist;
mod waitlist_races;
