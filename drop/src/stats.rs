//! The workspace's one latency summary: an hdrhistogram of microseconds read as count,
//! p50/p95/p99/max and mean, shared by the benchmark, the fault suite and the tests.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Microsecond histogram from 1 µs to 10 minutes, three significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static histogram bounds are valid")
}

pub fn record(h: &mut Histogram<u64>, d: Duration) {
    // Saturating: a pathological outlier beyond 10 minutes is clamped, never dropped.
    h.saturating_record((d.as_micros().min(u128::from(u64::MAX)) as u64).max(1));
}

/// Latency of a set of answers, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Latency {
    pub count: u64,
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
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
            mean_us: h.mean(),
        }
    }

    /// The summary of durations measured elsewhere (e.g. each buyer's time to an answer).
    pub fn of_durations<'a>(ds: impl IntoIterator<Item = &'a Duration>) -> Self {
        let mut h = new_histogram();
        for d in ds {
            record(&mut h, *d);
        }
        Self::of(&h)
    }

    pub fn p50(&self) -> Duration {
        Duration::from_micros(self.p50_us)
    }
    pub fn p95(&self) -> Duration {
        Duration::from_micros(self.p95_us)
    }
    pub fn p99(&self) -> Duration {
        Duration::from_micros(self.p99_us)
    }
    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
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
        let ds: Vec<Duration> = (1..=100u64).map(Duration::from_millis).collect();
        let l = Latency::of_durations(&ds);
        assert_eq!(l.count, 100);
        assert!((49_000..=51_000).contains(&l.p50_us), "{l:?}");
        assert!((94_000..=96_000).contains(&l.p95_us), "{l:?}");
        assert!((99_000..=100_100).contains(&l.max_us), "{l:?}");
    }

    #[test]
    fn empty_reports_zeros() {
        assert_eq!(Latency::of(&new_histogram()), Latency::default());
        assert_eq!(Latency::of_durations(&[]), Latency::default());
    }

    #[test]
    fn human_units() {
        assert_eq!(human_us(850), "850µs");
        assert_eq!(human_us(12_345), "12.3ms");
        assert_eq!(human_us(4_200_000), "4.20s");
    }
}
