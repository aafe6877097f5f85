//! A drop whose buyers arrive in waves the injector lets in, so one drop lasts through
//! several faults that each take longer than a whole wave to heal (a PostgreSQL
//! failover takes seconds; a wave of buyers is served in under one).

use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use paysaga_drop::{Attempt, Buyer, Driver};
use tokio::sync::watch;

/// The buyers split into waves; the first is let in at once, each later one when the
/// injector says.
#[derive(Debug)]
pub struct Waves {
    /// Waves let in so far.
    let_in: watch::Sender<usize>,
    per_wave: usize,
    buyers: usize,
}

impl Waves {
    /// `buyers` in `waves` waves of equal size (the last may be smaller).
    pub fn new(buyers: usize, waves: usize) -> Self {
        let waves = waves.max(1);
        Self {
            let_in: watch::Sender::new(1),
            per_wave: buyers.div_ceil(waves).max(1),
            buyers,
        }
    }

    /// Buyers in one wave.
    pub fn per_wave(&self) -> usize {
        self.per_wave
    }

    /// Lets the next wave in.
    pub fn next(&self) {
        self.let_in.send_modify(|n| *n = n.saturating_add(1));
    }

    /// Lets every buyer in (the injector is done, or failed).
    pub fn all(&self) {
        self.let_in.send_replace(usize::MAX);
    }

    /// Buyers let in so far.
    pub fn let_in(&self) -> usize {
        self.per_wave
            .saturating_mul(*self.let_in.borrow())
            .min(self.buyers)
    }

    /// Runs the drop: each buyer checks out once its wave is let in, at most
    /// `concurrency` at once (0: no limit). Every answer is also pushed to `answers` as
    /// it comes, for an injector that checks what buyers were told before a fault.
    pub async fn run(
        &self,
        driver: &Driver,
        buyers: &[Buyer],
        product_id: i64,
        concurrency: usize,
        answers: Arc<Mutex<Vec<Attempt>>>,
    ) -> Vec<Attempt> {
        let limit = if concurrency == 0 {
            buyers.len().max(1)
        } else {
            concurrency
        };
        let per_wave = self.per_wave;
        futures::stream::iter(buyers.iter().cloned().enumerate())
            .map(|(i, buyer)| {
                let mut let_in = self.let_in.subscribe();
                let driver = driver.clone();
                let answers = answers.clone();
                async move {
                    // A closed channel (the waves dropped) lets everyone in.
                    let _ = let_in.wait_for(|n| *n > i / per_wave).await;
                    let a = driver.buy(&buyer, product_id).await;
                    if let Ok(mut all) = answers.lock() {
                        all.push(a.clone());
                    }
                    a
                }
            })
            .buffer_unordered(limit)
            .collect()
            .await
    }
}
