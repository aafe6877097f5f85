//! The fault suite's tests: each scenario run fast, over the real processes.

mod disconnect;
mod scenarios;
mod undersell;
