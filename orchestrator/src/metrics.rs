//! The orchestrator's Prometheus metrics, named `orchestrator_*`.

use std::time::Duration;

use workflows::{Action, Outcome, State};

use crate::store::Census;

/// Step latency by step and outcome (`orchestrator_step_seconds`).
pub fn step(action: Action, outcome: Outcome, latency: Duration) {
    metrics::histogram!("orchestrator_step_seconds", "step" => action.as_str(), "outcome" => outcome.as_str())
        .record(latency.as_secs_f64());
}

/// A call whose outcome was unknown (before any probe).
pub fn unknown_outcome(action: Action) {
    metrics::counter!("orchestrator_unknown_outcomes_total", "step" => action.as_str())
        .increment(1);
}

/// A recorded move into `state`.
pub fn transition(state: State) {
    metrics::counter!("orchestrator_transitions_total", "to" => state.as_str()).increment(1);
}

/// A payment flagged for an operator, by reason.
pub fn attention(reason: &'static str) {
    metrics::counter!("orchestrator_attention_total", "reason" => reason).increment(1);
}

/// A driver found its payment moved by another (its lease had been taken over).
pub fn lease_lost() {
    metrics::counter!("orchestrator_lease_lost_total").increment(1);
}

/// Payments claimed by the recovery job.
pub fn recovered(n: usize) {
    metrics::counter!("orchestrator_recoveries_total").increment(n as u64);
}

/// Open payments (work left) per state, the attention count and the recovery lag,
/// refreshed by the recovery job after each run.
pub fn census(census: &Census) {
    for state in workflows::State::ALL {
        let n = census
            .by_state
            .iter()
            .find(|(s, _)| *s == state)
            .map(|(_, n)| *n)
            .unwrap_or(0);
        metrics::gauge!("orchestrator_open_payments", "state" => state.as_str()).set(n as f64);
    }
    metrics::gauge!("orchestrator_payments_needing_attention").set(census.attention as f64);
    metrics::gauge!("orchestrator_recovery_lag_seconds").set(census.recovery_lag_seconds);
}

/// A recovery run that failed (database trouble); the next run retries.
pub fn counter_recovery_error() {
    metrics::counter!("orchestrator_recovery_errors_total").increment(1);
}
