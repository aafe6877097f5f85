//! Figures that are not kept anywhere over time (each product's waitlist length and
//! payments needing attention), sampled when the drop page reads them, in bounded memory.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};

/// Samples kept per product (two minutes at one a second).
pub const SAMPLES: usize = 120;
/// Products kept: past it, the one sampled longest ago is forgotten.
pub const PRODUCTS: usize = 32;
/// At most one sample a second, however many pages are open.
const EVERY: Duration = Duration::from_secs(1);

/// One product's figures at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub waiting: i64,
    pub attention: i64,
}

/// The samples, shared by every page of one console.
#[derive(Clone, Default)]
pub struct History {
    inner: Arc<Mutex<BTreeMap<i64, VecDeque<Sample>>>>,
}

impl History {
    /// Records `sample` for `product` (unless the last is younger than a second, which it
    /// then replaces, so the newest figures are always shown) and answers its samples,
    /// oldest first.
    pub fn record(&self, product: i64, sample: Sample) -> Vec<Sample> {
        let mut all = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !all.contains_key(&product) && all.len() >= PRODUCTS {
            let stalest = all
                .iter()
                .min_by_key(|(_, s)| s.back().map(|s| s.at))
                .map(|(p, _)| *p);
            if let Some(p) = stalest {
                all.remove(&p);
            }
        }
        let samples = all.entry(product).or_default();
        let recent = samples
            .back()
            .is_some_and(|last| (sample.at - last.at).to_std().unwrap_or_default() < EVERY);
        if recent {
            samples.pop_back();
        }
        samples.push_back(sample);
        while samples.len() > SAMPLES {
            samples.pop_front();
        }
        samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, waiting: i64) -> Sample {
        Sample {
            at: DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap(),
            waiting,
            attention: 0,
        }
    }

    #[test]
    fn bounded_and_newest_last() {
        let h = History::default();
        for i in 0..(SAMPLES as i64 + 10) {
            h.record(1, at(i, i));
        }
        let s = h.record(1, at(SAMPLES as i64 + 10, 7));
        assert_eq!(s.len(), SAMPLES);
        assert_eq!(s.last().unwrap().waiting, 7);
        // Within a second the last sample is replaced, not added.
        let s = h.record(
            1,
            Sample {
                waiting: 9,
                ..*s.last().unwrap()
            },
        );
        assert_eq!(s.len(), SAMPLES);
        assert_eq!(s.last().unwrap().waiting, 9);
    }

    #[test]
    fn forgets_the_stalest_product() {
        let h = History::default();
        for p in 0..(PRODUCTS as i64 + 1) {
            h.record(p, at(p, 1));
        }
        let all = h.inner.lock().unwrap();
        assert_eq!(all.len(), PRODUCTS);
        assert!(!all.contains_key(&0));
    }
}
