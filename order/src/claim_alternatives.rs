//! The claim's benchmark alternatives (`CLAIM_STRATEGY`): a counter row per product, taken four ways.
//!
//! They come from the design's seed documents and are measured against the default
//! claim by the benchmark; none is the way to run a drop.
//!
//! Each alternative is one transaction per claim: it takes the product's counter row
//! (`claim_counters`) one way, then runs the default claim statement
//! ([`crate::claim`]) for the one claim in the same transaction, so the reservation and
//! unit rows, and every rule of a claim (cap, passes, the hold's window), are the
//! default's own; any answer but a reservation rolls the counter back with it.
//! - `counter-for-update` (pessimistic): `SELECT … FOR UPDATE` of the counter, then its
//!   decrement; the row stays locked until the reservation commits, so every claim of
//!   the product, sold-out ones included, waits its turn on that row.
//! - `atomic-update`: one conditional `UPDATE … SET available = available - 1 WHERE
//!   available > 0`; its row lock, too, is held until the commit.
//! - `optimistic`: the counter and its version read without a lock, then `UPDATE … WHERE
//!   version = <read>`; a claim whose version moved meanwhile is answered
//!   `CLAIM_CONFLICT` (nothing held, nothing claimed).
//! - `optimistic-retry`: the same, tried up to [`OPTIMISTIC_TRIES`] times, each in a new
//!   transaction after an exponential backoff with full jitter.
//!
//! The counter is made from the product's AVAILABLE units by its first alternative claim;
//! units that come back are not counted back (see the migration), so an alternative can
//! sell fewer units than the product has, never more.

use std::{
    collections::HashSet,
    fmt,
    str::FromStr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use paysaga_common::retry;
use rand::Rng;
use sqlx::{PgPool, Postgres, Transaction};

use crate::{
    breach::Breach,
    claim::{self, Claim, NewClaim},
    error::{self, Error, Result},
};

/// How the order service claims a unit (`CLAIM_STRATEGY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClaimStrategy {
    /// The service's claim: units locked `FOR UPDATE SKIP LOCKED`, group-committed.
    #[default]
    UnitsSkipLocked,
    /// A counter row per product locked `FOR UPDATE` for the whole reservation.
    CounterForUpdate,
    /// A conditional `UPDATE` of the counter.
    AtomicUpdate,
    /// A version check on the counter, no retry.
    Optimistic,
    /// A version check on the counter, retried with backoff and jitter.
    OptimisticRetry,
}

impl ClaimStrategy {
    pub const ALL: [ClaimStrategy; 5] = [
        ClaimStrategy::UnitsSkipLocked,
        ClaimStrategy::CounterForUpdate,
        ClaimStrategy::AtomicUpdate,
        ClaimStrategy::Optimistic,
        ClaimStrategy::OptimisticRetry,
    ];

    /// The setting's value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClaimStrategy::UnitsSkipLocked => "units-skip-locked",
            ClaimStrategy::CounterForUpdate => "counter-for-update",
            ClaimStrategy::AtomicUpdate => "atomic-update",
            ClaimStrategy::Optimistic => "optimistic",
            ClaimStrategy::OptimisticRetry => "optimistic-retry",
        }
    }
}

impl fmt::Display for ClaimStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("expected one of units-skip-locked, counter-for-update, atomic-update, optimistic, optimistic-retry")]
pub struct UnknownStrategy;

impl FromStr for ClaimStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        ClaimStrategy::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or(UnknownStrategy)
    }
}

/// Tries of `optimistic-retry`, the first included (the seed's three).
pub const OPTIMISTIC_TRIES: u32 = 3;
/// The first backoff's ceiling; it doubles with each retry, the wait drawn uniformly
/// below it (full jitter).
pub const BACKOFF_BASE: Duration = Duration::from_millis(10);

/// What taking the counter came to.
enum Counter {
    /// Decremented: claim the unit.
    Taken,
    /// No unit left to claim through the counter (or no such product).
    Empty,
    /// The optimistic version check lost to another claim.
    Lost,
}

/// A claimer taking the counter row per the strategy. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Alternatives {
    pool: PgPool,
    strategy: ClaimStrategy,
    /// Products whose counter this process has seen made, so it is made once.
    counted: Arc<Mutex<HashSet<i64>>>,
}

impl Alternatives {
    pub fn new(pool: PgPool, strategy: ClaimStrategy) -> Self {
        Self {
            pool,
            strategy,
            counted: Arc::default(),
        }
    }

    /// Claims a unit for `req`, answering as the default claim does, or
    /// [`Claim::Contended`] when the optimistic check lost (every try of it).
    pub async fn claim(&self, req: &NewClaim) -> Result<Claim> {
        if !self.count(req.product_id).await? {
            return Ok(Claim::NothingClaimable);
        }
        let tries = match self.strategy {
            ClaimStrategy::OptimisticRetry => OPTIMISTIC_TRIES,
            _ => 1,
        };
        for attempt in 0..tries {
            if attempt > 0 {
                let ceiling = BACKOFF_BASE * 2u32.pow(attempt - 1);
                let wait = rand::thread_rng().gen_range(Duration::ZERO..=ceiling);
                tokio::time::sleep(wait).await;
            }
            // A deadlock PostgreSQL broke rolled the transaction back whole.
            if let Some(answer) = retry::on_conflict(Error::is_conflict, || self.once(req)).await? {
                return Ok(answer);
            }
        }
        metrics::counter!("order_claim_conflicts_total").increment(1);
        Ok(Claim::Contended)
    }

    /// Makes the product's counter from its AVAILABLE units unless it exists; false when
    /// there is no such product.
    async fn count(&self, product_id: i64) -> Result<bool> {
        if self.counted().contains(&product_id) {
            return Ok(true);
        }
        let exists: bool = sqlx::query_scalar(
            r#"
            WITH p AS (SELECT id FROM products WHERE id = $1),
            made AS (
                INSERT INTO claim_counters (product_id, available)
                SELECT p.id, (SELECT COUNT(*) FROM product_stock s
                              WHERE s.product_id = p.id AND s.state = 'AVAILABLE')
                FROM p
                ON CONFLICT (product_id) DO NOTHING
            )
            SELECT EXISTS (SELECT 1 FROM p)
            "#,
        )
        .bind(product_id)
        .fetch_one(&self.pool)
        .await?;
        if exists {
            self.counted().insert(product_id);
        }
        Ok(exists)
    }

    fn counted(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        // A panic elsewhere while holding it cannot leave the set half-written.
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One try: the counter, then the claim statement, in one transaction. `None` when
    /// the optimistic check lost (nothing written).
    async fn once(&self, req: &NewClaim) -> Result<Option<Claim>> {
        let mut tx = self.pool.begin().await?;
        let counter = self.take(&mut tx, req.product_id).await?;
        // From here until the commit or rollback, the counter row is locked.
        let locked = Instant::now();
        match counter {
            Counter::Lost => return Ok(None),
            Counter::Empty => {
                tx.rollback().await?;
                held(locked);
                return Ok(Some(Claim::NothingClaimable));
            }
            Counter::Taken => {}
        }
        let ids = [req.id];
        let rows = claim::statement(&mut tx, std::slice::from_ref(req), &ids)
            .await
            .map_err(error::from_statement)?;
        let (mut answers, conflicted) = claim::read_answers(&rows, &ids)?;
        if matches!(answers.first(), Some(Ok(Claim::Created(_)))) {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        held(locked);
        if !conflicted.is_empty() {
            claim::resolve(
                &self.pool,
                std::slice::from_ref(req),
                &conflicted,
                &mut answers,
            )
            .await?;
        }
        answers
            .pop()
            .ok_or_else(|| Error::Invariant(Breach::count("claim", "answers", 1, 0)))?
            .map(Some)
    }

    /// Takes one from the product's counter, per the strategy.
    async fn take(&self, tx: &mut Transaction<'_, Postgres>, product_id: i64) -> Result<Counter> {
        Ok(match self.strategy {
            // Never routed here (see `claim::Claims`); as the counter's pessimistic
            // reading should it be.
            ClaimStrategy::UnitsSkipLocked | ClaimStrategy::CounterForUpdate => {
                let available: Option<i64> = sqlx::query_scalar(
                    r#"SELECT available FROM claim_counters WHERE product_id = $1 FOR UPDATE"#,
                )
                .bind(product_id)
                .fetch_optional(&mut **tx)
                .await?;
                if available.unwrap_or(0) <= 0 {
                    return Ok(Counter::Empty);
                }
                sqlx::query(
                    r#"UPDATE claim_counters SET available = available - 1 WHERE product_id = $1"#,
                )
                .bind(product_id)
                .execute(&mut **tx)
                .await?;
                Counter::Taken
            }
            ClaimStrategy::AtomicUpdate => {
                let update = sqlx::query(
                    r#"
                    UPDATE claim_counters SET available = available - 1
                    WHERE product_id = $1 AND available > 0
                    "#,
                )
                .bind(product_id);
                taken_or(tx, update, Counter::Empty).await?
            }
            ClaimStrategy::Optimistic | ClaimStrategy::OptimisticRetry => {
                let read: Option<(i64, i64)> = sqlx::query_as(
                    r#"SELECT available, version FROM claim_counters WHERE product_id = $1"#,
                )
                .bind(product_id)
                .fetch_optional(&mut **tx)
                .await?;
                let Some((available, version)) = read.filter(|(a, _)| *a > 0) else {
                    return Ok(Counter::Empty);
                };
                let update = sqlx::query(
                    r#"
                    UPDATE claim_counters SET available = $3 - 1, version = version + 1
                    WHERE product_id = $1 AND version = $2
                    "#,
                )
                .bind(product_id)
                .bind(version)
                .bind(available);
                taken_or(tx, update, Counter::Lost).await?
            }
        })
    }
}

/// `Taken` if `update` changed the counter row, else `otherwise`.
async fn taken_or(
    tx: &mut Transaction<'_, Postgres>,
    update: sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments>,
    otherwise: Counter,
) -> Result<Counter> {
    let changed = update.execute(&mut **tx).await?.rows_affected();
    Ok(if changed == 1 {
        Counter::Taken
    } else {
        otherwise
    })
}

/// Records how long the counter row was held (its lock taken until the transaction
/// ended): the time every other claim of the product waits behind.
fn held(since: Instant) {
    metrics::histogram!("order_claim_counter_held_seconds").record(since.elapsed().as_secs_f64());
}
