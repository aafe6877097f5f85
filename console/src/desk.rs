//! The payment desk: what the console reads and does with payments, as the saga offers
//! it. The orchestrator implements [`PaymentDesk`] with the same functions its
//! operator API runs, so the console has no business logic and no view of the saga's
//! store of its own.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use paysaga_common::ApiError;
use paysaga_contracts::orchestrator::api::{
    ListPayments, PaymentAdmin, PaymentPage, PaymentTimeline,
};
use paysaga_contracts::staff::api::{ApprovalDecided, ApprovalPage, ListApprovals, RefundAnswer};
use paysaga_staff::Acting;
use uuid::Uuid;
use workflows::State;

/// A desk call's answer, later.
pub type Answer<'a, T> = BoxFuture<'a, Result<T, DeskError>>;

/// The payments side of the console.
pub trait PaymentDesk: Send + Sync + 'static {
    /// The operator's list, with the operator API's checks (`GET /v1/payments`).
    fn list<'a>(&'a self, filter: &'a ListPayments) -> Answer<'a, PaymentPage>;
    /// One payment and its step log (`GET /v1/payments/{id}/steps`).
    fn timeline(&self, id: Uuid) -> Answer<'_, PaymentTimeline>;
    /// Resume (`POST /v1/payments/{id}/resume`) by `by`, for `reason`: named on the step
    /// log and in the audit trail.
    fn resume<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, PaymentAdmin>;
    /// Refund (`POST /v1/payments/{id}/refund`) by `by` (an operator's only up to the
    /// limit), for `reason`: named on the step log and in the audit trail. Above
    /// `STAFF_FOUR_EYES_ABOVE` the answer is the approval a second person must give.
    fn refund<'a>(
        &'a self,
        by: &'a Acting,
        id: Uuid,
        reason: Option<String>,
    ) -> Answer<'a, RefundAnswer>;
    /// The approvals (four eyes) of refunds and top-ups, newest first (`GET /v1/approvals`).
    fn approvals<'a>(&'a self, filter: &'a ListApprovals) -> Answer<'a, ApprovalPage>;
    /// Approve or reject approval `id` (`POST /v1/approvals/{id}/approve|reject`)
    /// by `by`, who must not be the one who asked, for `reason`: in the audit trail (and
    /// on an approved refund's step log).
    fn decide<'a>(
        &'a self,
        by: &'a Acting,
        id: i64,
        decision: Decision,
        reason: Option<String>,
    ) -> Answer<'a, ApprovalDecided>;
    /// Payments per product (`None`: payments older than the product column) and
    /// state, with the attention count and the last minute's rates.
    fn by_product(&self) -> Answer<'_, BTreeMap<Option<i64>, ProductPayments>>;
    /// The payment's W3C `traceparent`, if it was recorded with one.
    fn traceparent(&self, id: Uuid) -> Answer<'_, Option<String>>;
    /// Each product's payments over its drop, in time buckets (the drop page's charts).
    fn series(&self) -> Answer<'_, BTreeMap<i64, DropSeries>>;
}

/// One product's payments over its drop: from its first payment's creation, in buckets
/// of `bucket_secs`, by the time each payment was answered (its move into COMPLETED or
/// FAILED).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DropSeries {
    pub bucket_secs: i64,
    /// One per bucket from the first to the last that holds an answer, empty ones included.
    pub buckets: Vec<Bucket>,
    /// Over the whole drop: the answer latency's median and 95th percentile, in
    /// milliseconds (`None`: no payment answered yet).
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
}

/// One time bucket of a [`DropSeries`].
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Bucket {
    /// Seconds from the drop's first payment to the bucket's start.
    pub offset_secs: i64,
    /// Payments that reached COMPLETED in the bucket.
    pub completed: i64,
    /// Latency (creation to answer, COMPLETED or FAILED) of the payments answered in the
    /// bucket, in milliseconds; `None` when none was.
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
}

/// A second person's decision on an approval (of a refund or a top-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

/// One product's payments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProductPayments {
    pub by_state: BTreeMap<State, i64>,
    pub attention: i64,
    /// Created in the last minute.
    pub created_last_minute: i64,
    /// Reached COMPLETED / FAILED / REFUNDED in the last minute (their last update is
    /// the move into the terminal state).
    pub completed_last_minute: i64,
    pub failed_last_minute: i64,
    pub refunded_last_minute: i64,
}

impl ProductPayments {
    pub fn total(&self) -> i64 {
        self.by_state.values().sum()
    }
}

/// Why a desk call (or a webhook action) gave no answer.
#[derive(Debug)]
pub enum DeskError {
    /// What the operator API would answer (status, code, message): shown as it is.
    Refused(ApiError),
    /// Anything else: shown as an internal error, logged with its cause chain.
    Internal(Box<dyn std::error::Error + Send + Sync>),
}

impl DeskError {
    /// What the API answers (404 `code`) for an id that names nothing: the console's
    /// pages answer the same for an id in their path that names nothing or is no id.
    pub fn not_found(code: &'static str, message: &str) -> Self {
        DeskError::Refused(ApiError::not_found(code, message))
    }

    /// `err` as the console shows it: `api`, its client-facing answer, if it has one.
    pub fn new(api: Option<ApiError>, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        match api {
            Some(api) => DeskError::Refused(api),
            None => DeskError::Internal(Box::new(err)),
        }
    }
}

impl std::fmt::Display for DeskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeskError::Refused(api) => write!(f, "{}: {}", api.code, api.message),
            DeskError::Internal(e) => f.write_str(&paysaga_common::error::cause_chain(e.as_ref())),
        }
    }
}

impl From<paysaga_staff::Error> for DeskError {
    fn from(e: paysaga_staff::Error) -> Self {
        DeskError::new(e.api(), e)
    }
}

impl From<paysaga_webhooks::Error> for DeskError {
    fn from(e: paysaga_webhooks::Error) -> Self {
        DeskError::new(e.api(), e)
    }
}
