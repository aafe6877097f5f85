//! HTTP handlers, one module per resource.

pub mod batch;
pub mod products;
pub mod reservations;
pub mod waitlist;

use std::future::Future;

use tracing::Instrument;

use crate::error::{Error, Result};

/// Runs a state-changing request to its end even if the client hangs up. axum drops a
/// handler's future when its connection closes; the work is spawned instead, so a
/// transaction is committed or rolled back on its own terms, and the client's retry
/// (same pass, same reservation id) finds the outcome.
pub async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(work.instrument(tracing::Span::current())).await?
}

/// A product id from a path: ids are positive; anything else cannot name a product.
pub(crate) fn known_id(id: i64) -> Result<i64> {
    if id <= 0 {
        return Err(Error::ProductNotFound(id));
    }
    Ok(id)
}
