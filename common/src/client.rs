//! Calling another paysaga service: timeouts, the service credential, the caller's
//! trace context (`traceparent`, when tracing is on), and the one distinction a saga
//! needs: a definite answer versus an unknown outcome.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde::{de::DeserializeOwned, Serialize};

pub use crate::auth::Audience;
pub use crate::credentials::Credential;
use crate::error::ErrorBody;
use crate::tls::Trust;

/// What came of a call that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The service answered with a 4xx: a definite, final answer (declined, rejected,
    /// not found). Retrying the same request gives the same answer.
    #[error("{status}: {} ({})", body.code, body.message)]
    Rejected { status: u16, body: ErrorBody },
    /// Timeout, connection failure, 5xx or an unreadable answer: the operation may or
    /// may not have happened. Never treat this as failure; ask for the truth.
    #[error("unknown outcome: {reason}")]
    Unknown { status: Option<u16>, reason: String },
}

impl CallError {
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Rejected { status, .. } => Some(*status),
            CallError::Unknown { status, .. } => *status,
        }
    }
    pub fn code(&self) -> Option<&str> {
        match self {
            CallError::Rejected { body, .. } => Some(&body.code),
            CallError::Unknown { .. } => None,
        }
    }
    /// The status and code of a definite refusal; `None` for an unknown outcome.
    pub fn refusal(&self) -> Option<(u16, &str)> {
        match self {
            CallError::Rejected { status, body } => Some((*status, &body.code)),
            CallError::Unknown { .. } => None,
        }
    }
    pub fn is_not_found(&self) -> bool {
        matches!(self, CallError::Rejected { status: 404, .. })
    }
}

/// A successful answer and how long it took.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub status: u16,
    pub body: T,
    pub latency: Duration,
}

/// A typed client's transport: the service it calls (the audience of the credentials it
/// sends), base URL, credential (fixed, or renewed by its holder), per-request timeout.
#[derive(Clone, Debug)]
pub struct ServiceClient {
    http: reqwest::Client,
    to: Audience,
    base: String,
    credential: Credential,
}

/// How long a pooled connection may sit idle before the client drops it. Shorter than
/// the servers' `HTTP_HEADER_READ_TIMEOUT_MS` (which also closes idle keep-alive
/// connections), so the client closes first and never sends a request on a connection
/// the server is closing.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection-pooling HTTP client with the given per-request timeout; `https://`
/// URLs are verified against the platform's roots.
pub fn http_client(timeout: Duration) -> reqwest::Client {
    http_client_trusting(timeout, &Trust::default())
}

/// [`http_client`] trusting `trust`'s extra roots too (`TLS_CA_FILE`: a private CA).
/// Certificates are always verified, host name included.
pub fn http_client_trusting(timeout: Duration, trust: &Trust) -> reqwest::Client {
    trust
        .apply(reqwest::Client::builder())
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(2)))
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()
        .expect("an HTTP client with checked roots always builds")
}

impl ServiceClient {
    /// A client of the service `to` at `base`.
    pub fn new(
        to: Audience,
        base: impl Into<String>,
        credential: impl Into<Credential>,
        timeout: Duration,
    ) -> Self {
        Self::with_http(to, http_client(timeout), base, credential)
    }

    pub fn with_http(
        to: Audience,
        http: reqwest::Client,
        base: impl Into<String>,
        credential: impl Into<Credential>,
    ) -> Self {
        Self {
            http,
            to,
            base: base.into().trim_end_matches('/').to_owned(),
            credential: credential.into(),
        }
    }

    /// The credential this client presents.
    pub fn credential(&self) -> &Credential {
        &self.credential
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The service this client calls.
    pub fn audience(&self) -> Audience {
        self.to
    }

    /// The bearer token this client sends now.
    pub fn bearer(&self) -> std::sync::Arc<str> {
        self.credential.bearer(self.to)
    }

    /// Sends `body` (if any) as JSON and decodes a 2xx answer as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&(impl Serialize + Sync)>,
    ) -> Result<Answer<T>, CallError> {
        self.call_with_headers(method, path, &[], body).await
    }

    /// [`ServiceClient::call`] with more request headers (name, value), such as an
    /// `Idempotency-Key`.
    pub async fn call_with_headers<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&(impl Serialize + Sync)>,
    ) -> Result<Answer<T>, CallError> {
        let start = Instant::now();
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(self.credential.bearer(self.to));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Some(parent) = crate::telemetry::current_traceparent() {
            req = req.header(crate::telemetry::TRACEPARENT, parent);
        }
        let response = req.send().await.map_err(|e| CallError::Unknown {
            status: None,
            reason: if e.is_timeout() {
                "timed out".into()
            } else {
                format!("request failed: {e}")
            },
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| CallError::Unknown {
            status: Some(status.as_u16()),
            reason: format!("reading the answer failed: {e}"),
        })?;
        let latency = start.elapsed();
        if status.is_success() {
            let body = serde_json::from_slice(&bytes).map_err(|e| CallError::Unknown {
                status: Some(status.as_u16()),
                reason: format!("unreadable success body: {e}"),
            })?;
            return Ok(Answer {
                status: status.as_u16(),
                body,
                latency,
            });
        }
        if status.is_client_error()
            && status != StatusCode::REQUEST_TIMEOUT
            && status != StatusCode::TOO_MANY_REQUESTS
        {
            if let Ok(body) = serde_json::from_slice::<ErrorBody>(&bytes) {
                return Err(CallError::Rejected {
                    status: status.as_u16(),
                    body,
                });
            }
        }
        Err(CallError::Unknown {
            status: Some(status.as_u16()),
            reason: format!("answered {status}"),
        })
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<Answer<T>, CallError> {
        self.call::<T>(Method::GET, path, None::<&()>).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl Serialize + Sync),
    ) -> Result<Answer<T>, CallError> {
        self.call::<T>(Method::POST, path, Some(body)).await
    }
}
