//! Fault-injection scenarios over the real running system: each starts the four service
//! binaries (through the end-to-end harness), runs a drop with concurrent buyers while
//! injecting one fault, heals it, waits for recovery and reads the invariants from
//! PostgreSQL, returning them as numbers.

pub mod evidence;
pub mod impatient;
pub mod inject;
pub mod plan;
pub mod report;
pub mod run;
pub mod scenario;
pub mod settle;
pub mod waves;

pub use plan::Plan;
pub use report::{failover_table, scenario_table, table, ScenarioReport};
pub use run::run;
pub use scenario::Scenario;
