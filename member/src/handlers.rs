//! HTTP handlers: identity, parsing at the edge, and the status each outcome gets.

use std::net::{IpAddr, SocketAddr};

use axum::{
    extract::{ConnectInfo, FromRequestParts, State},
    http::{header, request::Parts, StatusCode},
    response::IntoResponse,
};
use paysaga_common::{
    auth::{
        allow::{OPERATOR, ORCHESTRATOR},
        Service,
    },
    extract::{Json, Path, Query},
    jwks::JwkSet,
    ApiError, ErrorBody,
};
use paysaga_contracts::account::api::{DepositRequest, Transaction};
use uuid::Uuid;

use crate::{
    api::{
        BulkSignUpRequest, BulkSignUpResponse, Credentials, ListMembers, Member, MemberPage,
        RefreshTokenRequest, Session, TopUpRequest, VerifyEmail, MAX_PAGE,
    },
    bulk,
    error::{Error, Result},
    members, sessions, verification, AppState,
};

/// The client's address: the connection's peer, or, when the peer is one of
/// `TRUSTED_PROXIES`, the rightmost hop of `X-Forwarded-For` that is not
/// ([`TrustedProxies::client_of`](crate::proxies::TrustedProxies::client_of)). `None`
/// when no peer is known (a router called in process without connection info).
pub struct ClientAddr(pub Option<IpAddr>);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() else {
            return Ok(Self(None));
        };
        let forwarded = parts
            .headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .map(|v| v.to_str().ok());
        Ok(Self(Some(
            state.config.trusted_proxies.client_of(peer.ip(), forwarded),
        )))
    }
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// A member signed in with a token this service signed (current or previous key).
pub struct Me(pub Uuid);

impl FromRequestParts<AppState> for Me {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer <token>"))?;
        if let Some(member) = state.keys.verify(token) {
            return Ok(Me(member));
        }
        if state.verifier.verify_service(token).is_some() {
            return Err(ApiError::forbidden(
                "this endpoint is for buyers; a service credential cannot act as a member",
            ));
        }
        Err(ApiError::unauthorized("invalid or expired token"))
    }
}

/// Sign up: creates the member and opens its account in the account service.
#[utoipa::path(post, path = "/v1/members", tag = "members", request_body = Credentials,
    responses(
        (status = 201, body = Member, description = "signed up, account open; also a retry of a sign-up whose account was pending"),
        (status = 409, body = ErrorBody, description = "EMAIL_TAKEN"),
        (status = 422, body = ErrorBody, description = "INVALID_EMAIL, PASSWORD_TOO_SHORT, PASSWORD_TOO_LONG, PASSWORD_CONTAINS_EMAIL, PASSWORD_TOO_COMMON, INVALID_BODY"),
        (status = 429, body = ErrorBody, description = "TOO_MANY_SIGN_UPS (from this address, or in total), or TOO_MANY_ATTEMPTS for a retried sign-up after wrong passwords; with Retry-After (seconds)"),
        (status = 503, body = ErrorBody, description = "ACCOUNT_PENDING: the member exists, its account is not open yet; retry the same sign-up (Retry-After)"),
    ))]
#[tracing::instrument(skip_all, fields(client = ?addr.0))]
pub async fn sign_up(
    State(state): State<AppState>,
    addr: ClientAddr,
    Json(req): Json<Credentials>,
) -> Result<impl IntoResponse> {
    let member = members::sign_up(&state, req, addr.0).await?;
    Ok((StatusCode::CREATED, Json(member)))
}

/// Verify the member's email with the token of its `member.verification_requested`
/// event. No credential: the token is one. A token used again answers the same.
#[utoipa::path(post, path = "/v1/members/verification", tag = "members", request_body = VerifyEmail,
    responses(
        (status = 200, body = Member, description = "the member, `email_verified` true (also for a token used before)"),
        (status = 401, body = ErrorBody, description = "TOKEN_EXPIRED (past its expiry), INVALID_TOKEN (garbled, forged, another kind of token, or its member or email is no more): the token is the credential; nothing was changed"),
        (status = 422, body = ErrorBody, description = "INVALID_BODY: nothing was changed"),
    ))]
#[tracing::instrument(skip_all)]
pub async fn verify_email(
    State(state): State<AppState>,
    Json(req): Json<VerifyEmail>,
) -> Result<Json<Member>> {
    Ok(Json(verification::verify_email(&state, &req.token).await?))
}

/// Sign in: a session (access token and refresh token).
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = Credentials,
    responses(
        (status = 200, body = Session),
        (status = 401, body = ErrorBody, description = "INVALID_CREDENTIALS: unknown email or wrong password, the same answer"),
        (status = 429, body = ErrorBody, description = "TOO_MANY_ATTEMPTS, with Retry-After (seconds)"),
    ))]
#[tracing::instrument(skip_all, fields(client = ?addr.0))]
pub async fn sign_in(
    State(state): State<AppState>,
    addr: ClientAddr,
    Json(req): Json<Credentials>,
) -> Result<Json<Session>> {
    Ok(Json(sessions::sign_in(&state, req, addr.0).await?))
}

/// Refresh: spends the refresh token and returns a new session with the next one.
#[utoipa::path(post, path = "/v1/sessions/refresh", tag = "sessions", request_body = RefreshTokenRequest,
    responses(
        (status = 200, body = Session),
        (status = 401, body = ErrorBody, description = "REFRESH_TOKEN_REUSED (the family is revoked), INVALID_REFRESH_TOKEN"),
    ))]
#[tracing::instrument(skip_all)]
pub async fn refresh(
    State(state): State<AppState>,
    Json(req): Json<RefreshTokenRequest>,
) -> Result<Json<Session>> {
    Ok(Json(sessions::refresh(&state, &req.refresh_token).await?))
}

/// Sign out: revokes the refresh token's family. An unknown token is answered the same.
#[utoipa::path(post, path = "/v1/sessions/sign-out", tag = "sessions", request_body = RefreshTokenRequest,
    responses((status = 204, description = "revoked, or nothing to revoke")))]
#[tracing::instrument(skip_all)]
pub async fn sign_out(
    State(state): State<AppState>,
    Json(req): Json<RefreshTokenRequest>,
) -> Result<StatusCode> {
    sessions::sign_out(&state, &req.refresh_token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The signed-in member.
#[utoipa::path(get, path = "/v1/members/me", security(("buyer" = [])), tag = "members",
    responses(
        (status = 200, body = Member),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "service credential"),
        (status = 404, body = ErrorBody, description = "MEMBER_NOT_FOUND"),
    ))]
#[tracing::instrument(skip_all, fields(member = %me.0))]
pub async fn me(State(state): State<AppState>, me: Me) -> Result<Json<Member>> {
    Ok(Json(members::by_id(&state.pool, me.0).await?.into()))
}

/// A member by id (service credential).
#[utoipa::path(get, path = "/v1/members/{id}", security(("service" = [])), tag = "members",
    params(("id" = Uuid, Path, description = "member id")),
    responses(
        (status = 200, body = Member),
        (status = 404, body = ErrorBody, description = "MEMBER_NOT_FOUND"),
        (status = 400, body = ErrorBody, description = "INVALID_PATH"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "buyer token"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, member = %id))]
pub async fn get_member(
    State(state): State<AppState>,
    service: Service<{ OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<Json<Member>> {
    Ok(Json(members::by_id(&state.pool, id).await?.into()))
}

/// Members ordered by id, a page at a time (service credential).
#[utoipa::path(get, path = "/v1/members", security(("service" = [])), tag = "members", params(ListMembers),
    responses(
        (status = 200, body = MemberPage),
        (status = 400, body = ErrorBody, description = "INVALID_QUERY"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "buyer token"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0))]
pub async fn list_members(
    State(state): State<AppState>,
    service: Service<{ OPERATOR }>,
    Query(q): Query<ListMembers>,
) -> Result<Json<MemberPage>> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(
            paysaga_common::error::codes::INVALID_QUERY,
            format!("limit must be 1 to {MAX_PAGE}"),
        )
        .into());
    }
    let members = members::page(&state.pool, limit, q.after).await?;
    let next_after = (members.len() == limit as usize)
        .then(|| members.last().map(|m| m.id))
        .flatten();
    Ok(Json(MemberPage {
        members,
        next_after,
    }))
}

/// Top up a member's account (the orchestrator only, carrying out a staff top-up): a
/// deposit in the account service, once per operation key, with the orchestrator's
/// deposit authorization passed on as it came (the account service checks it).
#[utoipa::path(post, path = "/v1/members/{id}/top-ups", security(("service" = [])), tag = "members", request_body = TopUpRequest,
    params(("id" = Uuid, Path, description = "member id")),
    responses(
        (status = 201, body = Transaction, description = "deposited (kind DEPOSIT)"),
        (status = 200, body = Transaction, description = "replay of the same key"),
        (status = 403, body = ErrorBody, description = "DEPOSIT_NOT_APPROVED (the account service's: no valid authorization); FORBIDDEN_CALLER (the orchestrator only)"),
        (status = 404, body = ErrorBody, description = "MEMBER_NOT_FOUND"),
        (status = 409, body = ErrorBody, description = "ACCOUNT_PENDING (the account is not open yet), OPERATION_KEY_REUSED"),
        (status = 422, body = ErrorBody, description = "INVALID_BODY, AMOUNT_OUT_OF_RANGE"),
        (status = 503, body = ErrorBody, description = "ACCOUNT_UNAVAILABLE: retry with the same key"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, member = %id, operation_key = %req.operation_key))]
pub async fn top_up(
    State(state): State<AppState>,
    service: Service<{ ORCHESTRATOR }>,
    Path(id): Path<Uuid>,
    Json(req): Json<TopUpRequest>,
) -> Result<impl IntoResponse> {
    let row = members::by_id(&state.pool, id).await?;
    let account_id = row.account_id.ok_or(Error::AccountNotOpen)?;
    let deposit = DepositRequest {
        operation_key: req.operation_key,
        account_id,
        amount: req.amount,
        authorization: req.authorization,
    };
    let answer = state
        .accounts
        .deposit(&deposit)
        .await
        .map_err(Error::account_call)?;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    Ok((status, Json(answer.body)))
}

/// Seeding only (`MEMBER_BULK_SIGNUP=1`, service credential): up to 5,000 members sharing
/// one password hash, each answered with a signed-in session.
#[utoipa::path(post, path = "/v1/members/bulk", security(("service" = [])), tag = "members", request_body = BulkSignUpRequest,
    responses(
        (status = 200, body = BulkSignUpResponse, description = "one member and session per email, in order"),
        (status = 404, body = ErrorBody, description = "NOT_FOUND: bulk sign-up is off"),
        (status = 409, body = ErrorBody, description = "EMAIL_TAKEN: an email belongs to a member with another password"),
        (status = 422, body = ErrorBody, description = "BULK_TOO_LARGE, INVALID_EMAIL, INVALID_OPENING_BALANCE, a password rule"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "buyer token"),
    ))]
#[tracing::instrument(skip_all, fields(caller = %service.0, members = req.members.len()))]
pub async fn bulk_sign_up(
    State(state): State<AppState>,
    service: Service<{ OPERATOR }>,
    Json(req): Json<BulkSignUpRequest>,
) -> Result<Json<BulkSignUpResponse>> {
    Ok(Json(bulk::sign_up(&state, req).await?))
}

/// The public keys buyer tokens are signed with: the current key first, then the
/// previous ones still accepted.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "keys",
    responses((status = 200, body = JwkSet, description = "Cache-Control: max-age=60")))]
pub async fn jwks(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "public, max-age=60")],
        Json(state.keys.jwks().clone()),
    )
}

/// Ready when PostgreSQL answers.
pub async fn readyz(State(state): State<AppState>) -> axum::response::Response {
    let db = paysaga_common::server::check_db(&state.pool).await;
    paysaga_common::server::readiness(vec![("postgres", db)], false)
}
