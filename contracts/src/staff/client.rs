//! The typed client of the staff routes (served by the orchestrator).

use paysaga_common::client::{Answer, Audience, CallError, ServiceClient};

use super::api::{AuditPage, CreateStaff, ListAudit, SignIn, StaffCreated, StaffSession};

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

    /// `GET /v1/audit` with the given filters.
    pub async fn audit(&self, filter: &ListAudit) -> Result<Answer<AuditPage>, CallError> {
        let mut url =
            reqwest::Url::parse("http://query.invalid/").map_err(|e| CallError::Unknown {
                status: None,
                reason: e.to_string(),
            })?;
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in [
                ("actor", filter.actor.clone()),
                ("action", filter.action.clone()),
                ("target", filter.target.clone()),
                ("before", filter.before.map(|b| b.to_string())),
                ("limit", filter.limit.map(|l| l.to_string())),
            ] {
                if let Some(v) = v {
                    q.append_pair(k, &v);
                }
            }
        }
        let query = url.query().unwrap_or_default().to_owned();
        self.inner.get(&format!("/v1/audit?{query}")).await
    }
}
