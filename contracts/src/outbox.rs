//! The client of a service's outbox (`GET /v1/events`, `POST /v1/events/ack`), as the
//! webhook platform pulls it from the order and the member service alike.

use std::time::Instant;

use paysaga_common::client::{Answer, CallError, ServiceClient};
use reqwest::Method;

pub use paysaga_common::outbox::{
    AckEvents, OutboxEvent, OutboxPage, OutboxQuery, DEFAULT_OUTBOX_PAGE, INVALID_EVENT_IDS,
    MAX_OUTBOX_PAGE,
};

/// One service's outbox, called with that service's client (its credential is for
/// the orchestrator's role).
#[derive(Clone, Debug)]
pub struct OutboxClient {
    inner: ServiceClient,
}

impl OutboxClient {
    pub(crate) fn of(inner: &ServiceClient) -> Self {
        Self {
            inner: inner.clone(),
        }
    }

    pub fn base_url(&self) -> &str {
        self.inner.base_url()
    }

    /// `GET /v1/events?limit=N` (service: orchestrator): up to `limit` (1 to 1,000)
    /// events not yet acknowledged, oldest first.
    pub async fn pending(&self, limit: u32) -> Result<Answer<OutboxPage>, CallError> {
        self.inner.get(&format!("/v1/events?limit={limit}")).await
    }

    /// `POST /v1/events/ack` (service: orchestrator) -> 204: the named events (1 to
    /// 1,000) are not served again; ids already acknowledged or unknown are ignored.
    pub async fn ack(&self, req: &AckEvents) -> Result<Answer<()>, CallError> {
        let start = Instant::now();
        let answer = self
            .inner
            .call(Method::POST, "/v1/events/ack", Some(req))
            .await;
        no_content(answer, start)
    }
}

/// A call answered 204: the transport decodes every success body as JSON, and an empty
/// body is not JSON, so it reports a success it could not read; that is the expected
/// answer here.
fn no_content(
    answer: Result<Answer<serde_json::Value>, CallError>,
    start: Instant,
) -> Result<Answer<()>, CallError> {
    match answer {
        Ok(a) => Ok(Answer {
            status: a.status,
            body: (),
            latency: a.latency,
        }),
        Err(CallError::Unknown {
            status: Some(204), ..
        }) => Ok(Answer {
            status: 204,
            body: (),
            latency: start.elapsed(),
        }),
        Err(e) => Err(e),
    }
}
