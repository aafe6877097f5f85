//! A drop whose buyers arrive in waves the injector lets in, so one drop lasts through
//! several faults that each take longer than a whole wave to heal (a PostgreSQL
//! failover takes seconds; a wave of buyers is served in under one). Within a wave the
//! buyers may arrive spaced out, so payments are in flight all through it rather than
//! in one burst.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use paysaga_drop::{Attempt, Buyer, Driver};
use tokio::sync::watch;

/// The buyers split into waves; the first is let in at once, each later one when the
/// injector says.
#[derive(Debug)]
pub struct Waves {
    /// When each wave let in so far was let in.
    let_in: watch::Sender<Vec<Instant>>,
    per_wave: usize,
    waves: usize,
    buyers: usize,
    /// Between two buyers' arrivals within a wave.
    spacing: Duration,
}

impl Waves {
    /// `buyers` in `waves` waves of equal size (the last may be smaller), each buyer of
    /// a wave arriving `spacing` after the one before.
    pub fn new(buyers: usize, waves: usize, spacing: Duration) -> Self {
        let waves = waves.max(1);
        Self {
            let_in: watch::Sender::new(vec![Instant::now()]),
            per_wave: buyers.div_ceil(waves).max(1),
            waves,
            buyers,
            spacing,
        }
    }

    /// Every buyer at once, as one wave.
    pub fn at_once(buyers: usize) -> Self {
        Self::new(buyers, 1, Duration::ZERO)
    }

    /// Buyers in one wave.
    pub fn per_wave(&self) -> usize {
        self.per_wave
    }

    /// Lets the next wave in.
    pub fn next(&self) {
        self.let_in.send_modify(|at| at.push(Instant::now()));
    }

    /// Lets every wave in now (the injector is done, or failed).
    pub fn all(&self) {
        let now = Instant::now();
        self.let_in
            .send_modify(|at| at.resize(at.len().max(self.waves), now));
    }

    /// Buyers let in so far.
    pub fn let_in(&self) -> usize {
        self.per_wave
            .saturating_mul(self.let_in.borrow().len())
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
        let (per_wave, spacing) = (self.per_wave, self.spacing);
        futures::stream::iter(buyers.iter().cloned().enumerate())
            .map(|(i, buyer)| {
                let mut let_in = self.let_in.subscribe();
                let driver = driver.clone();
                let answers = answers.clone();
                async move {
                    let (wave, place) = (i / per_wave, i % per_wave);
                    // A closed channel (the waves dropped) lets everyone in at once.
                    let start = let_in
                        .wait_for(|at| at.len() > wave)
                        .await
                        .map(|at| at[wave])
                        .unwrap_or_else(|_| Instant::now());
                    let offset = spacing.saturating_mul(u32::try_from(place).unwrap_or(u32::MAX));
                    tokio::time::sleep_until((start + offset).into()).await;
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
