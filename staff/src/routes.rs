//! The staff routes the orchestrator serves: sign-in and sign-out (for the `paysaga`
//! CLI; the console signs in through its own pages), staff accounts (admins) and the
//! audit trail.

use std::sync::Arc;

use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json as AxumJson, Router,
};
use paysaga_common::{
    auth::Verifier,
    extract::{Json, Query},
};
use paysaga_contracts::staff::api::{
    AuditPage, CreateStaff, ListAudit, SignIn, StaffCreated, StaffSession,
};
use utoipa::OpenApi;

use crate::{allow::ANY, error::Result, extract::ClientAddr, FirstAdminOrPerson, Person, Staff};

/// The staff routes' state: staff sessions, and the verifier of the operator tools'
/// service credential (which may create staff accounts, so a system's first admin can
/// be made).
#[derive(Clone)]
pub struct StaffApi {
    pub staff: Staff,
    pub verifier: Arc<Verifier>,
}

impl FromRef<StaffApi> for Staff {
    fn from_ref(s: &StaffApi) -> Self {
        s.staff.clone()
    }
}

impl FromRef<StaffApi> for Arc<Verifier> {
    fn from_ref(s: &StaffApi) -> Self {
        s.verifier.clone()
    }
}

/// The staff routes, with their state.
pub fn routes(state: StaffApi) -> Router {
    Router::new()
        .route("/v1/staff/sessions", post(sign_in))
        .route("/v1/staff/sessions/sign-out", post(sign_out))
        .route("/v1/staff", post(create))
        .route("/v1/audit", get(audit))
        .with_state(state)
}

/// Sign in: email, password and a second-factor code (TOTP or a recovery code) give a
/// session token for `Authorization: Bearer` on the staff routes.
#[utoipa::path(
    post, path = "/v1/staff/sessions", tag = "staff",
    request_body = SignIn,
    responses(
        (status = 201, body = StaffSession),
        (status = 401, description = "STAFF_SIGN_IN_FAILED", body = paysaga_common::ErrorBody),
        (status = 429, description = "TOO_MANY_SIGN_IN_ATTEMPTS, with Retry-After", body = paysaga_common::ErrorBody),
    )
)]
#[tracing::instrument(skip_all)]
pub async fn sign_in(
    State(staff): State<Staff>,
    ClientAddr(from): ClientAddr,
    Json(req): Json<SignIn>,
) -> Result<Response> {
    let session = staff
        .sign_in(&req.email, req.password, &req.code, from)
        .await?;
    Ok((StatusCode::CREATED, AxumJson(StaffSession::from(session))).into_response())
}

/// Sign out: the session ends at once.
#[utoipa::path(
    post, path = "/v1/staff/sessions/sign-out", tag = "staff",
    responses(
        (status = 200, description = "signed out: `{\"signed_out\": true}`"),
        (status = 401, description = "UNAUTHENTICATED", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn sign_out(
    State(staff): State<Staff>,
    Person(me): Person<{ ANY }>,
) -> Result<AxumJson<serde_json::Value>> {
    staff.sign_out(&me).await?;
    Ok(AxumJson(serde_json::json!({ "signed_out": true })))
}

/// Create a staff account (admins, or the operator tools' service credential, which is
/// how a system's first admin is made). The answer holds the second factor's secret and the
/// recovery codes, shown this once.
#[utoipa::path(
    post, path = "/v1/staff", tag = "staff",
    request_body = CreateStaff,
    responses(
        (status = 201, body = StaffCreated),
        (status = 403, description = "FORBIDDEN_ROLE", body = paysaga_common::ErrorBody),
        (status = 409, description = "STAFF_EMAIL_TAKEN", body = paysaga_common::ErrorBody),
        (status = 422, description = "STAFF_EMAIL_INVALID, PASSWORD_TOO_SHORT, PASSWORD_TOO_LONG, PASSWORD_CONTAINS_EMAIL, PASSWORD_TOO_COMMON, REASON_INVALID", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn create(
    State(staff): State<Staff>,
    FirstAdminOrPerson(admin): FirstAdminOrPerson,
    Json(req): Json<CreateStaff>,
) -> Result<Response> {
    let created = staff.create(&admin, req).await?;
    Ok((StatusCode::CREATED, AxumJson(created)).into_response())
}

/// The audit trail, newest first, filtered by actor, action and target.
#[utoipa::path(
    get, path = "/v1/audit", tag = "staff",
    params(ListAudit),
    responses(
        (status = 200, body = AuditPage),
        (status = 400, description = "INVALID_AUDIT_QUERY", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn audit(
    State(staff): State<Staff>,
    _viewer: Person<{ ANY }>,
    Query(filter): Query<ListAudit>,
) -> Result<AxumJson<AuditPage>> {
    Ok(AxumJson(staff.audit(&filter).await?))
}

/// The staff routes' part of the orchestrator's OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(sign_in, sign_out, create, audit),
    components(schemas(
        SignIn,
        StaffSession,
        paysaga_contracts::staff::api::StaffMember,
        paysaga_contracts::staff::api::StaffRole,
        CreateStaff,
        StaffCreated,
        AuditPage,
        paysaga_contracts::staff::api::AuditEntry,
        paysaga_contracts::staff::api::AuditAction,
        paysaga_contracts::staff::api::AuditOutcome,
    ))
)]
pub struct ApiDoc;
