//! How big one scenario run is: the drop (buyers, units, price), how hard the fault hits
//! (how often, for how long) and how long recovery may take.

use std::time::Duration;

/// The size of one scenario run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub buyers: usize,
    pub units: i64,
    /// Minor units per unit.
    pub price: i64,
    /// Every n-th buyer holds one minor unit less than the price: refused a unit at
    /// their reservation (their account cannot hold the price; nothing held), under
    /// every fault.
    pub underfunded_every: usize,
    /// Buyers in flight at once (the rest queue), so the drop lasts while faults hit.
    pub concurrency: usize,
    /// How many times the fault is injected in one drop (kills, pulses, cuts).
    pub repeats: u32,
    /// PostgreSQL failovers in one drop (the failover scenarios): the first from the
    /// original primary, each later one to the node that rejoined after the one before.
    pub failovers: u32,
    /// How long each injected fault lasts before it heals.
    pub fault_for: Duration,
    /// After the last heal, how long every payment has to become terminal (or be
    /// flagged for an operator with a cause).
    pub recovery_bound: Duration,
    /// Buyers and units of the small drop run after healing, to show the system serves again.
    pub wave_buyers: usize,
    pub wave_units: i64,
    /// Seed for the random moments of faults and client retries (printed with a failure).
    pub seed: u64,
}

impl Plan {
    /// The variant run by `cargo test`: small but real.
    pub fn fast() -> Self {
        Self {
            buyers: 150,
            units: 50,
            price: 12_900,
            underfunded_every: 4,
            concurrency: 40,
            repeats: 3,
            failovers: 2,
            fault_for: Duration::from_millis(2500),
            recovery_bound: Duration::from_secs(90),
            wave_buyers: 20,
            wave_units: 10,
            seed: rand::random(),
        }
    }

    /// The on-demand soak: a bigger drop and more faults per drop.
    pub fn soak() -> Self {
        Self {
            buyers: 600,
            units: 200,
            concurrency: 80,
            repeats: 6,
            failovers: 4,
            fault_for: Duration::from_secs(4),
            recovery_bound: Duration::from_secs(180),
            wave_buyers: 40,
            wave_units: 20,
            ..Self::fast()
        }
    }

    /// Opening balance of buyer `i`.
    pub fn balance(&self, i: usize) -> i64 {
        if self.underfunded_every > 0 && i % self.underfunded_every == self.underfunded_every - 1 {
            self.price - 1
        } else {
            self.price * 2
        }
    }
}
