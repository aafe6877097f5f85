//! Batches between services: one request carrying many operations, each answered
//! separately with the status and body its own endpoint would have given. The
//! orchestrator sends its concurrent downstream operations this way (one HTTP request
//! and one database transaction per batch instead of per operation).

use std::time::{Duration, Instant};

use paysaga_common::{
    batch::Coalescer,
    client::{Answer, CallError},
    ErrorBody,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use utoipa::ToSchema;

/// The most operations one batch may carry; more is refused whole with 400
/// `BATCH_TOO_LARGE`.
pub const MAX_OPS: usize = 1000;

/// Code for a batch with no operations or more than [`MAX_OPS`].
pub const BATCH_TOO_LARGE: &str = "BATCH_TOO_LARGE";

/// One operation's answer: what its own endpoint would have answered. `body` is that
/// endpoint's success body for a 2xx, the `{code, message}` error body otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Reply {
    pub status: u16,
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
}

/// Answers in the order of the operations sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Replies {
    pub results: Vec<Reply>,
}

impl Reply {
    /// A success with its body.
    pub fn ok(status: u16, body: &impl Serialize) -> Self {
        match serde_json::to_value(body) {
            Ok(body) => Reply { status, body },
            Err(e) => Reply::error(
                500,
                paysaga_common::error::codes::INTERNAL,
                format!("answer did not serialise: {e}"),
            ),
        }
    }

    /// A refusal (or an internal error: 500 with a generic message).
    pub fn error(status: u16, code: &str, message: impl Into<String>) -> Self {
        Reply {
            status,
            body: serde_json::json!({ "code": code, "message": message.into() }),
        }
    }

    /// A refusal carried as its typed error body: the same reply as [`Reply::error`].
    pub fn refused(status: u16, body: &ErrorBody) -> Self {
        Reply::ok(status, body)
    }

    /// Classifies the answer exactly as [`paysaga_common::client::ServiceClient`]
    /// classifies a whole response: 2xx decoded as `T`, a 4xx with an error body a
    /// definite rejection, anything else an unknown outcome.
    pub fn into_answer<T: DeserializeOwned>(
        self,
        latency: Duration,
    ) -> Result<Answer<T>, CallError> {
        let status = self.status;
        if (200..300).contains(&status) {
            return serde_json::from_value(self.body)
                .map(|body| Answer {
                    status,
                    body,
                    latency,
                })
                .map_err(|e| CallError::Unknown {
                    status: Some(status),
                    reason: format!("unreadable success body in batch: {e}"),
                });
        }
        if (400..500).contains(&status) && status != 408 && status != 429 {
            if let Ok(body) = serde_json::from_value::<ErrorBody>(self.body) {
                return Err(CallError::Rejected { status, body });
            }
        }
        Err(CallError::Unknown {
            status: Some(status),
            reason: format!("batch operation answered {status}"),
        })
    }
}

/// Sends `op` with the next batch of `batcher` and answers it as if it had been its own
/// call: its reply classified by [`Reply::into_answer`], and a batch request that failed
/// as a whole an unknown outcome for each of its operations.
pub async fn submit<O, T>(
    batcher: &Coalescer<O, Reply, CallError>,
    op: O,
) -> Result<Answer<T>, CallError>
where
    O: Send + 'static,
    T: DeserializeOwned,
{
    let start = Instant::now();
    match batcher.submit(op).await {
        Ok(reply) => reply.into_answer(start.elapsed()),
        Err(failure) => Err(CallError::Unknown {
            status: failure.flush_error().and_then(CallError::status),
            reason: failure.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_classify_like_whole_responses() {
        let ok = Reply::ok(201, &serde_json::json!({"x": 1}));
        let a: Answer<serde_json::Value> = ok.into_answer(Duration::ZERO).expect("2xx");
        assert_eq!(a.status, 201);
        let refused = Reply::error(422, "INSUFFICIENT_FUNDS", "no");
        assert!(matches!(
            refused.into_answer::<serde_json::Value>(Duration::ZERO),
            Err(CallError::Rejected { status: 422, .. })
        ));
        let typed = Reply::refused(
            422,
            &ErrorBody {
                code: "INSUFFICIENT_FUNDS".into(),
                message: "no".into(),
            },
        );
        assert_eq!(typed, Reply::error(422, "INSUFFICIENT_FUNDS", "no"));
        for status in [500, 503, 408, 429] {
            let r = Reply::error(status, "X", "y");
            assert!(matches!(
                r.into_answer::<serde_json::Value>(Duration::ZERO),
                Err(CallError::Unknown { .. })
            ));
        }
    }
}
