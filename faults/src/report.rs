//! What one scenario run came to, as numbers, and the summary table the soak prints.

use std::{fmt::Write as _, time::Duration};

use paysaga_drop::InvariantReport;

use crate::{
    inject::{Injection, KILLS_WITH_BATCH, KILLS_WITH_GAUGE},
    run::{BOUGHT_VIA_WAITLIST, JOINED_WAITLIST, UNSOLD_WHILE_TOLD_SOLD_OUT},
    scenario::Scenario,
    settle::Settled,
};

/// The outcome of one scenario run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    pub seed: u64,
    pub buyers: usize,
    /// Buyers by what they were told.
    pub completed: usize,
    pub failed: usize,
    pub refunded: usize,
    pub sold_out: usize,
    pub rejected: usize,
    pub unanswered: usize,
    /// How long buyers waited for their definite answer: median and slowest.
    pub answer_p50: Duration,
    pub answer_max: Duration,
    pub injection: Injection,
    /// Step-log and scenario-specific counts (unknown outcomes, takeovers, refunds, ...).
    pub evidence: Vec<(String, i64)>,
    pub settled: Settled,
    /// The invariants after recovery and the post-heal wave, from PostgreSQL.
    pub invariants: InvariantReport,
    /// Every broken promise, in words; empty for a clean run.
    pub violations: Vec<String>,
    /// Units the post-heal wave sold, out of the units it offered.
    pub wave_sold: i64,
    pub wave_units: i64,
    pub elapsed: Duration,
    /// Where the services' logs are.
    pub logs: String,
}

impl ScenarioReport {
    /// The named evidence count, from the injector or the step log.
    pub fn evidence(&self, name: &str) -> i64 {
        self.injection
            .evidence
            .iter()
            .chain(&self.evidence)
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Whether the run hit what its scenario is about. A failover scenario must have
    /// failed over and struck at least one primary with payments in flight (a later
    /// wave can drain before its strike lands on a loaded machine; the failover still
    /// counts, its table row shows 0 unfinished, and every invariant is checked as ever).
    pub fn exercised(&self) -> bool {
        let n = self.evidence(self.scenario.exercised_by());
        match self.scenario.primary_fault() {
            Some(_) => n > 0 && !self.injection.failovers.is_empty(),
            None => n > 0,
        }
    }

    /// Whether a crash scenario aimed its kills at batches and hit none: the orchestrator
    /// exported the gauge of the batch aimed at, yet no kill found an operation in flight
    /// in it. An orchestrator that exports no such gauge (it does not batch there) is not
    /// held to it.
    pub fn missed_every_batch(&self) -> bool {
        self.scenario.kills_a_service()
            && self.evidence(KILLS_WITH_GAUGE) > 0
            && self.evidence(KILLS_WITH_BATCH) == 0
    }

    /// Whether the run proves nothing about its fault either way: it held every
    /// invariant, flagged nothing, and yet its fault never met the work it is about (the
    /// drop drained between the aim and the strike, or no kill caught a batch).
    pub fn missed(&self) -> bool {
        self.violations.is_empty()
            && self.settled.flagged == 0
            && (!self.exercised() || self.missed_every_batch())
    }

    /// Panics with the whole report unless the run was clean and exercised its fault.
    #[track_caller]
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{}: {} violation(s): {:#?}\nreport: {self:#?}",
            self.scenario,
            self.violations.len(),
            self.violations
        );
        assert!(
            self.exercised(),
            "{}: the fault was never exercised ({} = 0)\nreport: {self:#?}",
            self.scenario,
            self.scenario.exercised_by()
        );
        assert!(
            !self.missed_every_batch(),
            "{}: the orchestrator exported its batch gauge, yet no kill caught a batch in flight ({} = 0)\nreport: {self:#?}",
            self.scenario,
            KILLS_WITH_BATCH
        );
        assert_eq!(
            self.settled.flagged, 0,
            "{}: payments flagged for an operator after short faults\nreport: {self:#?}",
            self.scenario
        );
    }

    /// A multi-line human summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} buyers -> {} completed, {} failed, {} refunded, {} sold out, {} rejected, {} unanswered",
            self.scenario,
            self.buyers,
            self.completed,
            self.failed,
            self.refunded,
            self.sold_out,
            self.rejected,
            self.unanswered
        );
        let _ = writeln!(
            s,
            "  answer time p50 {:.2}s max {:.2}s",
            self.answer_p50.as_secs_f64(),
            self.answer_max.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "  payments {} | faults injected {} | recovery {:.1}s | flagged {} | violations {}",
            self.invariants.payments,
            self.injection.faults,
            self.settled.recovery.as_secs_f64(),
            self.settled.flagged,
            self.violations.len()
        );
        for (name, v) in self.injection.evidence.iter().chain(&self.evidence) {
            let _ = writeln!(s, "  {name}: {v}");
        }
        let i = &self.invariants;
        let _ = writeln!(
            s,
            "  oversold {} | units in two live reservations {} | bad net {} | completed not debited/confirmed {} | balance drift {} | keys applied twice {} | not terminal {}",
            i.oversold_units,
            i.units_in_two_live_reservations,
            i.payments_bad_net,
            i.completed_not_debited_or_confirmed,
            i.balance_drift,
            i.operation_keys_applied_twice,
            i.payments_not_terminal
        );
        let _ = writeln!(
            s,
            "  post-heal wave sold {}/{} | took {:.1}s",
            self.wave_sold,
            self.wave_units,
            self.elapsed.as_secs_f64()
        );
        for v in &self.violations {
            let _ = writeln!(s, "  VIOLATION: {v}");
        }
        s
    }
}

/// The summary table (Markdown): one row per run.
pub fn table(reports: &[ScenarioReport]) -> String {
    let mut s = String::from(
        "| scenario | payments | completed / failed / refunded | faults injected | exercised | kills with a batch in flight | violations | flagged | recovery (s) | answer p50 / max (s) | oversold | bad net | balance drift | keys twice | told sold out: joined the waitlist / bought there / still sold out | unsold while told sold out | unsold while waiters went without | units to later arrivals |\n\
         |---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for r in reports {
        let i = &r.invariants;
        let batch_kills = if r.scenario.kills_a_service() {
            format!("{} of {}", r.evidence(KILLS_WITH_BATCH), r.injection.faults)
        } else {
            "-".to_owned()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} / {} / {} | {} | {} = {} | {} | {} | {} | {:.1} | {:.2} / {:.2} | {} | {} | {} | {} | {} / {} / {} | {} | {} | {} |",
            r.scenario,
            i.payments,
            i.payments_completed,
            i.payments_failed,
            i.payments_refunded,
            r.injection.faults,
            r.scenario.exercised_by(),
            r.evidence(r.scenario.exercised_by()),
            batch_kills,
            r.violations.len(),
            r.settled.flagged,
            r.settled.recovery.as_secs_f64(),
            r.answer_p50.as_secs_f64(),
            r.answer_max.as_secs_f64(),
            i.oversold_units,
            i.payments_bad_net,
            i.balance_drift,
            i.operation_keys_applied_twice,
            r.evidence(JOINED_WAITLIST),
            r.evidence(BOUGHT_VIA_WAITLIST),
            r.sold_out,
            r.evidence(UNSOLD_WHILE_TOLD_SOLD_OUT),
            i.unsold_while_waiters_went_without,
            i.units_to_later_arrivals,
        );
    }
    s
}

/// The failovers of the failover scenarios' runs (Markdown): one row per failover,
/// times from the strike in seconds. Empty when no run had one.
pub fn failover_table(reports: &[ScenarioReport]) -> String {
    let rows: Vec<_> = reports
        .iter()
        .flat_map(|r| r.injection.failovers.iter().map(move |f| (r, f)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "| fault | failover | from → to | payments unfinished at the fault | → new primary (s) | → HAProxy on it (s) | → first checkout (s) | → every payment terminal (s) | buyers' unknown outcomes | acknowledged lost | old primary back in sync (s) | timeline | run's violations |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let secs = |d: Option<Duration>| {
        d.map_or_else(|| "never".to_owned(), |d| format!("{:.2}", d.as_secs_f64()))
    };
    for (r, f) in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} → {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f.fault.name(),
            f.nth,
            f.from,
            f.to,
            f.unfinished_at_fault,
            secs(Some(f.to_new_primary)),
            secs(Some(f.to_routed)),
            secs(f.to_first_checkout),
            secs(f.to_all_terminal),
            f.unknown_outcomes,
            f.lost,
            secs(Some(f.to_rejoined)),
            f.timeline,
            r.violations.len(),
        );
    }
    s
}

/// The scenarios as a Markdown table: what each injects and proves (docs/faults.md).
pub fn scenario_table() -> String {
    let mut s = String::from(
        "| # | scenario | injects | proves | exercised when |\n|---|---|---|---|---|\n",
    );
    for (i, sc) in Scenario::ALL.iter().enumerate() {
        let batch = if sc.kills_a_service() {
            format!("; {KILLS_WITH_BATCH} > 0 while the orchestrator exports its batch gauge")
        } else {
            String::new()
        };
        let exercised = if sc.primary_fault().is_some() {
            format!(
                "{} = the drop's failovers, all struck with payments in flight",
                sc.exercised_by()
            )
        } else {
            format!("{} > 0{batch}", sc.exercised_by())
        };
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {exercised} |",
            i + 1,
            sc.name(),
            sc.injects(),
            sc.proves(),
        );
    }
    s
}
