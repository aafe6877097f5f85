//! The typed client for the orchestrator (end-to-end tests, the benchmark, the CLI).

use std::time::Duration;

use paysaga_common::client::{Answer, Audience, CallError, Credential, ServiceClient};
use reqwest::header::{HeaderMap, HeaderValue};
use uuid::Uuid;

use crate::staff::api::RefundAnswer;

use super::api::{
    CreatePayment, CreateWebhookEndpoint, ListDeliveries, Payment, PaymentAdmin, PaymentPage,
    PaymentTimeline, WebhookDelivery, WebhookDeliveryPage, WebhookEndpoint, WebhookEndpointCreated,
    WebhookEndpointList, WebhookSecretRotated,
};

/// An answer to `POST /v1/payments`, with whether it was a replay.
#[derive(Debug, Clone)]
pub struct PaymentAnswer {
    pub status: u16,
    pub payment: Payment,
    pub replayed: bool,
}

#[derive(Clone, Debug)]
pub struct OrchestratorClient {
    http: reqwest::Client,
    inner: ServiceClient,
    base: String,
    token: Credential,
}

impl OrchestratorClient {
    /// `token`: a buyer token for `pay`/`payment`, a service credential for the rest.
    pub fn new(base: impl Into<String>, token: impl Into<Credential>, timeout: Duration) -> Self {
        let base = base.into().trim_end_matches('/').to_owned();
        let token = token.into();
        let http = paysaga_common::client::http_client(timeout);
        Self {
            inner: ServiceClient::with_http(
                Audience::Orchestrator,
                http.clone(),
                base.clone(),
                token.clone(),
            ),
            http,
            base,
            token,
        }
    }

    /// `POST /v1/payments` with `Idempotency-Key`. 201/202 are answers; anything else
    /// is a `CallError` (4xx rejected with its code, else unknown).
    pub async fn pay(
        &self,
        idempotency_key: &str,
        req: &CreatePayment,
    ) -> Result<PaymentAnswer, CallError> {
        let mut headers = HeaderMap::new();
        let key = HeaderValue::from_str(idempotency_key).map_err(|e| CallError::Unknown {
            status: None,
            reason: format!("bad idempotency key: {e}"),
        })?;
        headers.insert("idempotency-key", key);
        let response = self
            .http
            .post(format!("{}/v1/payments", self.base))
            .bearer_auth(self.token.bearer(Audience::Orchestrator))
            .headers(headers)
            .json(req)
            .send()
            .await
            .map_err(|e| CallError::Unknown {
                status: None,
                reason: e.to_string(),
            })?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("idempotency-replayed")
            .is_some_and(|v| v == "true");
        let bytes = response.bytes().await.map_err(|e| CallError::Unknown {
            status: Some(status),
            reason: e.to_string(),
        })?;
        if status == 201 || status == 202 {
            let payment = serde_json::from_slice(&bytes).map_err(|e| CallError::Unknown {
                status: Some(status),
                reason: format!("unreadable payment: {e}"),
            })?;
            return Ok(PaymentAnswer {
                status,
                payment,
                replayed,
            });
        }
        match serde_json::from_slice::<paysaga_common::ErrorBody>(&bytes) {
            Ok(body) if (400..500).contains(&status) => Err(CallError::Rejected { status, body }),
            _ => Err(CallError::Unknown {
                status: Some(status),
                reason: format!("answered {status}"),
            }),
        }
    }

    pub async fn payment(&self, id: Uuid) -> Result<Answer<Payment>, CallError> {
        self.inner.get(&format!("/v1/payments/{id}")).await
    }

    pub async fn timeline(&self, id: Uuid) -> Result<Answer<PaymentTimeline>, CallError> {
        self.inner.get(&format!("/v1/payments/{id}/steps")).await
    }

    /// `GET /v1/payments?...` with `query` already encoded (e.g. `needs_attention=true&limit=100`).
    pub async fn list(&self, query: &str) -> Result<Answer<PaymentPage>, CallError> {
        self.inner.get(&format!("/v1/payments?{query}")).await
    }

    pub async fn resume(&self, id: Uuid) -> Result<Answer<PaymentAdmin>, CallError> {
        self.resume_because(id, None).await
    }

    /// Refund: the payment (200), or for one above `STAFF_FOUR_EYES_ABOVE` the approval
    /// a second person must give first (202).
    pub async fn refund(&self, id: Uuid) -> Result<Answer<RefundAnswer>, CallError> {
        self.refund_because(id, None).await
    }

    /// Resume, saying why (kept in the audit trail and on the step log).
    pub async fn resume_because(
        &self,
        id: Uuid,
        reason: Option<&str>,
    ) -> Result<Answer<PaymentAdmin>, CallError> {
        self.operator_action(id, "resume", reason).await
    }

    /// Refund, saying why (kept in the audit trail and on the step log).
    pub async fn refund_because(
        &self,
        id: Uuid,
        reason: Option<&str>,
    ) -> Result<Answer<RefundAnswer>, CallError> {
        self.operator_action(id, "refund", reason).await
    }

    /// `POST /v1/payments/{id}/{action}` with the operator's reason.
    async fn operator_action<T: serde::de::DeserializeOwned>(
        &self,
        id: Uuid,
        action: &str,
        reason: Option<&str>,
    ) -> Result<Answer<T>, CallError> {
        self.inner
            .post(
                &format!("/v1/payments/{id}/{action}"),
                &serde_json::json!({ "reason": reason }),
            )
            .await
    }

    /// `POST /v1/webhook-endpoints`: 201 with the endpoint's secret (shown this once).
    pub async fn create_webhook_endpoint(
        &self,
        req: &CreateWebhookEndpoint,
    ) -> Result<Answer<WebhookEndpointCreated>, CallError> {
        self.inner.post("/v1/webhook-endpoints", req).await
    }

    /// `POST /v1/webhook-endpoints/{id}/rotate-secret`: a new signing secret (shown this
    /// once); the previous one is still signed with for the grace period.
    pub async fn rotate_webhook_secret(
        &self,
        id: Uuid,
    ) -> Result<Answer<WebhookSecretRotated>, CallError> {
        self.post_empty(&format!("/v1/webhook-endpoints/{id}/rotate-secret"))
            .await
    }

    /// `GET /v1/webhook-endpoints`, oldest first.
    pub async fn webhook_endpoints(&self) -> Result<Answer<WebhookEndpointList>, CallError> {
        self.inner.get("/v1/webhook-endpoints").await
    }

    /// `POST /v1/webhook-endpoints/{id}/disable` (`enabled: false`) or `/enable`.
    pub async fn set_webhook_endpoint_enabled(
        &self,
        id: Uuid,
        enabled: bool,
    ) -> Result<Answer<WebhookEndpoint>, CallError> {
        let verb = if enabled { "enable" } else { "disable" };
        self.post_empty(&format!("/v1/webhook-endpoints/{id}/{verb}"))
            .await
    }

    /// `GET /v1/webhook-deliveries` with the given filters, newest first.
    pub async fn webhook_deliveries(
        &self,
        filter: &ListDeliveries,
    ) -> Result<Answer<WebhookDeliveryPage>, CallError> {
        let query = crate::query_string([
            ("state", filter.state.clone()),
            ("endpoint_id", filter.endpoint_id.map(|e| e.to_string())),
            ("limit", filter.limit.map(|l| l.to_string())),
        ])?;
        self.inner
            .get(&format!("/v1/webhook-deliveries?{query}"))
            .await
    }

    /// `POST /v1/webhook-deliveries/{id}/replay`: a DEAD delivery is due again, its
    /// attempts counted afresh.
    pub async fn replay_webhook_delivery(
        &self,
        id: Uuid,
    ) -> Result<Answer<WebhookDelivery>, CallError> {
        self.post_empty(&format!("/v1/webhook-deliveries/{id}/replay"))
            .await
    }

    /// `POST path` with an empty body.
    async fn post_empty<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Answer<T>, CallError> {
        self.inner.post(path, &serde_json::json!({})).await
    }
}
