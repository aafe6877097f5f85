//! The benchmark crate's tests: the ceilings and invariant checks it reports, against real services.

mod ceilings;
mod gate_bench;
mod invariants;
