//! The typed client other processes use to call the member service.

use std::time::{Duration, Instant};

use paysaga_common::{
    client::{http_client, Answer, Audience, CallError, Credential, ServiceClient},
    jwks::{JwkSet, JWKS_PATH},
    ErrorBody,
};
use uuid::Uuid;

use super::api::{
    BulkSignUpRequest, BulkSignUpResponse, Credentials, ListMembers, Member, MemberPage,
    RefreshTokenRequest, Session, TopUpRequest, VerifyEmail,
};
use crate::{account::api::Transaction, outbox::OutboxClient};

/// Calls the member service. The service-only methods (`get_member`, `list_members`,
/// `top_up`, `bulk_sign_up`) carry the client's service credential; the buyer-facing
/// ones (`sign_up`, `sign_in`, `refresh`, `sign_out`) need none, and [`Self::me`]
/// carries the buyer token it is given. Every method returns the definite answer,
/// `CallError::Rejected` (a 4xx with its code, see `api::codes`; 429 is `Unknown`, as
/// for every client), or `CallError::Unknown`.
#[derive(Clone, Debug)]
pub struct MemberClient {
    inner: ServiceClient,
    http: reqwest::Client,
}

impl MemberClient {
    /// `base` is e.g. `http://127.0.0.1:8081`; `token` a service credential.
    pub fn new(base: impl Into<String>, token: impl Into<Credential>, timeout: Duration) -> Self {
        Self::with_http(http_client(timeout), base, token)
    }

    /// [`MemberClient::new`] on a connection pool of the caller's (one trusting a
    /// private CA, or shared by many buyers).
    pub fn with_http(
        http: reqwest::Client,
        base: impl Into<String>,
        token: impl Into<Credential>,
    ) -> Self {
        Self {
            inner: ServiceClient::with_http(Audience::Member, http.clone(), base, token),
            http,
        }
    }

    pub fn base_url(&self) -> &str {
        self.inner.base_url()
    }

    /// `POST /v1/members` -> 201 `Member`. 409 `EMAIL_TAKEN`, 422 `INVALID_EMAIL` or a
    /// password rule; 503 `ACCOUNT_PENDING` (as `Unknown`): the member exists, its
    /// account follows (retrying the same sign-up completes it); 429
    /// `TOO_MANY_SIGN_UPS` or `TOO_MANY_ATTEMPTS` (as `Unknown` with status 429).
    pub async fn sign_up(&self, req: &Credentials) -> Result<Answer<Member>, CallError> {
        self.inner.post("/v1/members", req).await
    }

    /// `POST /v1/sessions` -> 200 `Session`. 401 `INVALID_CREDENTIALS`; 429
    /// `TOO_MANY_ATTEMPTS` (as `Unknown` with status 429).
    pub async fn sign_in(&self, req: &Credentials) -> Result<Answer<Session>, CallError> {
        self.inner.post("/v1/sessions", req).await
    }

    /// `POST /v1/sessions/refresh` -> 200 `Session` with a new refresh token. 401
    /// `REFRESH_TOKEN_REUSED` (the family is now revoked) or `INVALID_REFRESH_TOKEN`.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Answer<Session>, CallError> {
        let req = RefreshTokenRequest {
            refresh_token: refresh_token.to_owned(),
        };
        self.inner.post("/v1/sessions/refresh", &req).await
    }

    /// `POST /v1/sessions/sign-out` -> 204: the token's family is revoked (an unknown
    /// token is answered the same).
    pub async fn sign_out(&self, refresh_token: &str) -> Result<Answer<()>, CallError> {
        let start = Instant::now();
        let req = RefreshTokenRequest {
            refresh_token: refresh_token.to_owned(),
        };
        let response = self
            .http
            .post(format!("{}/v1/sessions/sign-out", self.base_url()))
            .json(&req)
            .send()
            .await
            .map_err(|e| CallError::Unknown {
                status: None,
                reason: format!("request failed: {e}"),
            })?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(Answer {
                status,
                body: (),
                latency: start.elapsed(),
            });
        }
        match response.json::<ErrorBody>().await {
            Ok(body) if (400..500).contains(&status) && status != 408 && status != 429 => {
                Err(CallError::Rejected { status, body })
            }
            _ => Err(CallError::Unknown {
                status: Some(status),
                reason: format!("answered {status}"),
            }),
        }
    }

    /// `GET /v1/members/me` with a buyer's access token -> that member.
    pub async fn me(&self, access_token: &str) -> Result<Answer<Member>, CallError> {
        ServiceClient::with_http(
            Audience::Member,
            self.http.clone(),
            self.base_url(),
            access_token,
        )
        .get("/v1/members/me")
        .await
    }

    /// `GET /v1/members/{id}` -> `Member`, or 404 `MEMBER_NOT_FOUND`.
    pub async fn get_member(&self, id: Uuid) -> Result<Answer<Member>, CallError> {
        self.inner.get(&format!("/v1/members/{id}")).await
    }

    /// `GET /v1/members?limit=&after=` -> a page of members ordered by id.
    pub async fn list_members(&self, query: &ListMembers) -> Result<Answer<MemberPage>, CallError> {
        let mut path = String::from("/v1/members");
        let mut sep = '?';
        if let Some(limit) = query.limit {
            path.push_str(&format!("{sep}limit={limit}"));
            sep = '&';
        }
        if let Some(after) = query.after {
            path.push_str(&format!("{sep}after={after}"));
        }
        self.inner.get(&path).await
    }

    /// `POST /v1/members/{id}/top-ups` -> 201 `Transaction` (kind `DEPOSIT`; 200 on a
    /// replay of the key). 409 `ACCOUNT_PENDING` while the account is not open yet.
    pub async fn top_up(
        &self,
        member: Uuid,
        req: &TopUpRequest,
    ) -> Result<Answer<Transaction>, CallError> {
        self.inner
            .post(&format!("/v1/members/{member}/top-ups"), req)
            .await
    }

    /// `POST /v1/members/bulk` -> 200, one member and session per email, in order
    /// (404 unless the service runs with `MEMBER_BULK_SIGNUP=1`).
    pub async fn bulk_sign_up(
        &self,
        req: &BulkSignUpRequest,
    ) -> Result<Answer<BulkSignUpResponse>, CallError> {
        self.inner.post("/v1/members/bulk", req).await
    }

    /// `POST /v1/members/verification` (no credential: the token is one) -> 200 the
    /// member, its email verified (again 200 for a token used before). 422
    /// `TOKEN_EXPIRED` or `INVALID_TOKEN`: nothing changed.
    pub async fn verify_email(&self, token: &str) -> Result<Answer<Member>, CallError> {
        let req = VerifyEmail {
            token: token.to_owned(),
        };
        self.inner.post("/v1/members/verification", &req).await
    }

    /// The member service's outbox (service: orchestrator).
    pub fn events(&self) -> OutboxClient {
        OutboxClient::of(&self.inner)
    }

    /// `GET /.well-known/jwks.json`: the keys buyer tokens are signed with.
    pub async fn jwks(&self) -> Result<Answer<JwkSet>, CallError> {
        self.inner.get(JWKS_PATH).await
    }
}
