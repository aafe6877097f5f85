//! What a load phase measured (throughput, the workspace's latency summary per outcome)
//! and the one way every benchmark prints it: a progress line and a markdown table.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::Serialize;

pub use paysaga_drop::stats::{human_us, new_histogram, record, Latency};

/// One kind of answer within a run (`ok`, `sold_out`, `http_500`, ...).
#[derive(Debug, Clone, Serialize)]
pub struct OutcomeSummary {
    pub count: u64,
    pub per_s: f64,
    pub latency: Latency,
    /// Seconds from the start of the run until the last answer of this kind arrived:
    /// "every loser knew by ..." for a drop.
    pub last_answer_s: f64,
}

/// What a load phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub name: String,
    pub concurrency: usize,
    pub ops: u64,
    pub elapsed_s: f64,
    pub per_s: f64,
    pub latency: Latency,
    pub outcomes: BTreeMap<String, OutcomeSummary>,
}

impl RunSummary {
    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes.get(outcome).map_or(0, |o| o.count)
    }
    pub fn outcome(&self, outcome: &str) -> Option<&OutcomeSummary> {
        self.outcomes.get(outcome)
    }
    /// Answers that were neither a success nor an expected business answer.
    pub fn errors(&self) -> u64 {
        self.outcomes
            .iter()
            .filter(|(k, _)| k.starts_with("error"))
            .map(|(_, o)| o.count)
            .sum()
    }
    /// Throughput of one kind of answer over the whole phase.
    pub fn per_s_of(&self, outcome: &str) -> f64 {
        self.outcome(outcome).map_or(0.0, |o| o.per_s)
    }

    /// The one-line form printed as each phase ends.
    pub fn line(&self) -> String {
        let [p50, p95, p99, max] = quantiles(&self.latency);
        format!(
            "  {:<34} {:>9.0} ops/s  p50 {:>8}  p95 {:>8}  p99 {:>8}  max {:>8}  errors {}",
            self.name,
            self.per_s,
            p50,
            p95,
            p99,
            max,
            self.errors()
        )
    }
}

/// p50, p95, p99 and max of `l`, each in its human unit.
fn quantiles(l: &Latency) -> [String; 4] {
    [l.p50_us, l.p95_us, l.p99_us, l.max_us].map(human_us)
}

/// The phases as one markdown table: throughput, latency, and each outcome's count,
/// p95 and the time its last answer arrived.
pub fn markdown_table(runs: &[RunSummary]) -> String {
    let mut md = String::from(
        "| phase | clients | ops | ops/s | p50 | p95 | p99 | max | outcomes (count, p95, last answer at) |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in runs {
        let outcomes = r
            .outcomes
            .iter()
            .map(|(k, o)| {
                format!(
                    "{k}: {} ({}, {:.2}s)",
                    o.count,
                    human_us(o.latency.p95_us),
                    o.last_answer_s
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let [p50, p95, p99, max] = quantiles(&r.latency);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            r.name, r.concurrency, r.ops, r.per_s, p50, p95, p99, max, outcomes
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn summary() -> RunSummary {
        let mut h = new_histogram();
        for ms in 1..=10u64 {
            record(&mut h, Duration::from_millis(ms));
        }
        let latency = Latency::of(&h);
        let ok = OutcomeSummary {
            count: 9,
            per_s: 9.0,
            latency,
            last_answer_s: 1.0,
        };
        let err = OutcomeSummary {
            count: 1,
            ..ok.clone()
        };
        RunSummary {
            name: "phase".into(),
            concurrency: 2,
            ops: 10,
            elapsed_s: 1.0,
            per_s: 10.0,
            latency,
            outcomes: [("ok".to_owned(), ok), ("error:http_500".to_owned(), err)]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn errors_and_rates_come_from_the_outcomes() {
        let s = summary();
        assert_eq!(s.errors(), 1);
        assert_eq!(s.count("ok"), 9);
        assert_eq!(s.per_s_of("ok"), 9.0);
        assert_eq!(s.per_s_of("sold_out"), 0.0);
    }

    #[test]
    fn one_row_per_phase() {
        let md = markdown_table(&[summary(), summary()]);
        assert_eq!(md.lines().count(), 4);
        assert!(md.contains("| phase | 2 | 10 | 10 |"), "{md}");
        assert!(md.contains("error:http_500: 1"), "{md}");
    }
}
