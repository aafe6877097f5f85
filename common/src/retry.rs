//! Running a transaction again after PostgreSQL rolled it back to break a deadlock or a
//! serialization conflict.
//!
//! Taking locks in one order keeps deadlocks rare, not impossible: row-lock waiters
//! queue on a heavyweight tuple lock, and two statements that meet there in the
//! opposite order from their row locks still form a cycle. PostgreSQL then aborts one
//! of them whole, so nothing it did remains, and running the same work again is the
//! documented remedy.

use std::{future::Future, time::Duration};

use rand::Rng;

/// Tries in all, the first included. A cycle needs two unlucky interleavings in a row
/// to recur; four tries make a fifth meeting vanishingly rare, and a caller that still
/// meets one is told to try again (503) rather than an internal error.
pub const ATTEMPTS: u32 = 4;

/// 40001 serialization_failure and 40P01 deadlock_detected: the transaction was rolled
/// back whole, and the same work may simply be run again.
pub fn is_rolled_back_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

/// Runs `work` until it succeeds, fails for another reason than `conflict`, or has been
/// tried [`ATTEMPTS`] times. Each retry waits a few random milliseconds, longer each
/// time, so the two parties of a deadlock do not meet again in step.
pub async fn on_conflict<T, E, F, Fut>(conflict: impl Fn(&E) -> bool, mut work: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match work().await {
            Err(e) if attempt < ATTEMPTS && conflict(&e) => {
                metrics::counter!("db_conflict_retries_total").increment(1);
                tracing::info!(
                    attempt,
                    "transaction rolled back by a lock conflict; running it again"
                );
                let jitter = rand::thread_rng().gen_range(1..=10u64);
                tokio::time::sleep(Duration::from_millis(jitter * u64::from(attempt))).await;
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}
