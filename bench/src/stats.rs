//! Latency histograms and the summaries a run reports: percentiles, throughput, outcomes.

use std::{collections::BTreeMap, time::Duration};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Microsecond histogram from 1 µs to 10 minutes, three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static histogram bounds are valid")
}

pub fn record(h: &mut Histogram<u64>, d: Duration) {
    // Saturating: a pathological outlier beyond 10 minutes is clamped, never dropped.
    h.saturating_record((d.as_micros() as u64).max(1));
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }
}

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
}

/// Microseconds as a short human figure: `850µs`, `12.3ms`, `4.20s`.
pub fn human_us(us: u64) -> String {
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{:.1}ms", us as f64 / 1_000.0),
        _ => format!("{:.2}s", us as f64 / 1_000_000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_values() {
        let mut h = new_histogram();
        for ms in 1..=100u64 {
            record(&mut h, Duration::from_millis(ms));
        }
        let l = Latency::of(&h);
        assert!((49_000..=51_000).contains(&l.p50_us), "{l:?}");
        assert!((94_000..=96_000).contains(&l.p95_us), "{l:?}");
        assert!((99_000..=100_100).contains(&l.max_us), "{l:?}");
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        assert_eq!(Latency::of(&new_histogram()), Latency::default());
    }

    #[test]
    fn human_units() {
        assert_eq!(human_us(850), "850µs");
        assert_eq!(human_us(12_345), "12.3ms");
        assert_eq!(human_us(4_200_000), "4.20s");
    }
}
