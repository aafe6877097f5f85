//! The typed client for the gate, sharing its wire types with the server.

use paysaga_common::client::{Answer, CallError, ServiceClient};

use super::api::{IssuePass, PassIssued, QuotaView};

/// Calls the gate with one bearer token: a buyer's for `issue_pass`, a service
/// credential for `quota`.
#[derive(Clone, Debug)]
pub struct GateClient {
    inner: ServiceClient,
}

service_client_constructors!(GateClient, paysaga_common::auth::Audience::Gate);

impl GateClient {
    /// `POST /v1/passes` (buyer): 201 with a pass (the same one while it lives).
    /// Rejections: 409 `SOLD_OUT`, 404 `PRODUCT_NOT_FOUND`, 422 `INVALID_PRODUCT_ID`;
    /// 503 `QUOTA_UNAVAILABLE` arrives as an unknown outcome (retry).
    pub async fn issue_pass(&self, product_id: i64) -> Result<Answer<PassIssued>, CallError> {
        self.inner
            .post("/v1/passes", &IssuePass { product_id })
            .await
    }

    /// `GET /v1/quota/{product_id}` (service).
    pub async fn quota(&self, product_id: i64) -> Result<Answer<QuotaView>, CallError> {
        self.inner.get(&format!("/v1/quota/{product_id}")).await
    }
}
