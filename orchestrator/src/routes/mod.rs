//! HTTP handlers: the buyer's payment endpoints, the operators' inspection API and
//! their webhook API.

pub mod operator;
pub mod payments;
pub mod webhooks;

use std::{sync::Arc, time::Duration};

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use paysaga_common::{error::codes as common_codes, ApiError};
use tokio::task::JoinHandle;
use tracing::Instrument;
use uuid::Uuid;

use crate::{
    answer::AnswerSlot,
    driver::Engine,
    error::{Error, Result},
    store::{self, PaymentRow},
};

/// A page of an operator list when the query names no `limit`, and the most one may ask.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// A 400 `INVALID_QUERY` for an operator list's query.
pub(crate) fn invalid_query(message: String) -> Error {
    ApiError::bad_request(common_codes::INVALID_QUERY, message).into()
}

/// The page size an operator list's query asks for, checked (both lists, API and
/// console, take the same limits).
pub(crate) fn page_limit(asked: Option<i64>) -> Result<i64> {
    let limit = asked.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid_query(format!("limit must be 1 to {MAX_LIMIT}")));
    }
    Ok(limit)
}

/// The payment `id`, or `PAYMENT_NOT_FOUND`.
pub(crate) async fn load_payment(pool: &sqlx::PgPool, id: Uuid) -> Result<PaymentRow> {
    store::load(pool, id).await?.ok_or(Error::PaymentNotFound)
}

/// A JSON body with the given status, serialised once so it can be stored and replayed.
pub(crate) fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Starts driving `row` in a task of its own (it outlives the request, which only
/// waits for it a while) if this instance holds its lease. With a `slot`, the move that
/// settles the payment stores the waiting request's answer too.
pub(crate) fn spawn_drive(
    engine: &Arc<Engine>,
    row: &PaymentRow,
    slot: Option<AnswerSlot>,
) -> Option<JoinHandle<Result<PaymentRow>>> {
    if row.lease_owner != Some(engine.instance) || row.pending_action.is_none() {
        return None;
    }
    let engine = engine.clone();
    let row = row.clone();
    // In the caller's span: the drive is part of the request that started it.
    Some(tokio::spawn(
        async move { engine.drive_answering(row, slot).await }.in_current_span(),
    ))
}

/// Waits up to `wait` for the payment to reach a terminal state: on the driver this
/// request started, or by re-reading the row when someone else drives it.
pub(crate) async fn wait_for_terminal(
    engine: &Engine,
    id: Uuid,
    handle: Option<JoinHandle<Result<PaymentRow>>>,
    wait: Duration,
) -> Result<PaymentRow> {
    let deadline = tokio::time::Instant::now() + wait;
    if let Some(mut handle) = handle {
        match tokio::time::timeout_at(deadline, &mut handle).await {
            Ok(Ok(Ok(row))) if row.is_terminal() => return Ok(row),
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(payment_id = %id, error = %e, "driver stopped; recovery resumes the payment")
            }
            Ok(Err(e)) => {
                tracing::warn!(payment_id = %id, error = %e, "driver task failed; recovery resumes the payment")
            }
            // Still running: it carries on after the answer.
            Err(_) => {}
        }
    }
    // Someone else (recovery, another instance, a retry) is driving it: re-read with a
    // growing pause, so thousands of waiting buyers do not hammer the database.
    let mut pause = Duration::from_millis(20);
    loop {
        let row = store::load(&engine.pool, id)
            .await?
            .ok_or(Error::PaymentNotFound)?;
        let now = tokio::time::Instant::now();
        if row.is_terminal() || now >= deadline {
            return Ok(row);
        }
        tokio::time::sleep_until(deadline.min(now + pause)).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}
