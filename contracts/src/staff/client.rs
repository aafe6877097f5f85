//! The typed client of the staff routes (served by the orchestrator).

use paysaga_common::client::{Answer, Audience, CallError, ServiceClient};

use super::api::{
    ActionReason, ApprovalDecided, ApprovalPage, AuditPage, CreateStaff, ListApprovals, ListAudit,
    SignIn, StaffAddUnits, StaffCreateProduct, StaffCreated, StaffSession, TopUp, TopUpAnswer,
};
use crate::order::api::Product;

/// Calls the orchestrator's staff routes with a staff session token (or, for
/// `sign_in`, with none needed).
#[derive(Clone)]
pub struct StaffClient {
    inner: ServiceClient,
}

service_client_constructors!(StaffClient, Audience::Orchestrator);

impl StaffClient {
    /// `POST /v1/staff/sessions`: a new session for the person.
    pub async fn sign_in(&self, req: &SignIn) -> Result<Answer<StaffSession>, CallError> {
        self.inner.post("/v1/staff/sessions", req).await
    }

    /// `POST /v1/staff/sessions/sign-out`: ends the session this client's token is.
    pub async fn sign_out(&self) -> Result<Answer<serde_json::Value>, CallError> {
        self.inner
            .post("/v1/staff/sessions/sign-out", &serde_json::json!({}))
            .await
    }

    /// `POST /v1/staff` (admins).
    pub async fn create(&self, req: &CreateStaff) -> Result<Answer<StaffCreated>, CallError> {
        self.inner.post("/v1/staff", req).await
    }

    /// `POST /v1/products` (admins): a product, made at the order service and audited.
    pub async fn create_product(
        &self,
        req: &StaffCreateProduct,
    ) -> Result<Answer<Product>, CallError> {
        self.inner.post("/v1/products", req).await
    }

    /// `POST /v1/products/{id}/units` (admins): more units, audited.
    pub async fn add_units(
        &self,
        product: i64,
        req: &StaffAddUnits,
    ) -> Result<Answer<Product>, CallError> {
        self.inner
            .post(&format!("/v1/products/{product}/units"), req)
            .await
    }

    /// `GET /v1/audit` with the given filters.
    pub async fn audit(&self, filter: &ListAudit) -> Result<Answer<AuditPage>, CallError> {
        let query = query_string([
            ("actor", filter.actor.clone()),
            ("action", filter.action.clone()),
            ("target", filter.target.clone()),
            ("before", filter.before.map(|b| b.to_string())),
            ("limit", filter.limit.map(|l| l.to_string())),
        ])?;
        self.inner.get(&format!("/v1/audit?{query}")).await
    }

    /// `GET /v1/approvals` with the given filters.
    pub async fn approvals(
        &self,
        filter: &ListApprovals,
    ) -> Result<Answer<ApprovalPage>, CallError> {
        let query = query_string([
            ("state", filter.state.clone()),
            ("kind", filter.kind.clone()),
            ("before", filter.before.map(|b| b.to_string())),
            ("limit", filter.limit.map(|l| l.to_string())),
        ])?;
        self.inner.get(&format!("/v1/approvals?{query}")).await
    }

    /// `POST /v1/top-ups` (admins, people only): 201 the deposit (200 on a replay of
    /// the key), or 202 the approval a second admin must give first.
    pub async fn top_up(&self, req: &TopUp) -> Result<Answer<TopUpAnswer>, CallError> {
        self.inner.post("/v1/top-ups", req).await
    }

    /// `POST /v1/approvals/{id}/approve` (admins other than the one who asked): the
    /// refund or the top-up is carried out.
    pub async fn approve(
        &self,
        id: i64,
        reason: Option<&str>,
    ) -> Result<Answer<ApprovalDecided>, CallError> {
        self.decide(id, "approve", reason).await
    }

    /// `POST /v1/approvals/{id}/reject` (admins other than the one who asked): nothing
    /// is refunded or deposited.
    pub async fn reject(
        &self,
        id: i64,
        reason: Option<&str>,
    ) -> Result<Answer<ApprovalDecided>, CallError> {
        self.decide(id, "reject", reason).await
    }

    async fn decide(
        &self,
        id: i64,
        decision: &str,
        reason: Option<&str>,
    ) -> Result<Answer<ApprovalDecided>, CallError> {
        let body = ActionReason {
            reason: reason.map(str::to_owned),
        };
        self.inner
            .post(&format!("/v1/approvals/{id}/{decision}"), &body)
            .await
    }
}

/// The given filters as an encoded query string (absent ones left out).
fn query_string<const N: usize>(pairs: [(&str, Option<String>); N]) -> Result<String, CallError> {
    let mut url = reqwest::Url::parse("http://query.invalid/").map_err(|e| CallError::Unknown {
        status: None,
        reason: e.to_string(),
    })?;
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            if let Some(v) = v {
                q.append_pair(k, &v);
            }
        }
    }
    Ok(url.query().unwrap_or_default().to_owned())
}
