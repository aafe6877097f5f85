//! The HTTP handlers: pass issue (buyers), quota view (services), readiness.

use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use paysaga_common::{
    auth::{
        allow::{CONSOLE, OPERATOR},
        BuyerIdentity, Service,
    },
    error::{with_retry_after, ErrorBody},
    extract::{Json, Path},
    server::readiness,
};

use crate::{
    admission::{unix_now, Grant},
    api::{IssuePass, PassIssued, QuotaView},
    error::{Error, Result},
    AppState,
};

/// Grant a pass for one unit of a product (one live pass per member and product).
#[utoipa::path(
    post,
    path = "/v1/passes",
    request_body = IssuePass,
    responses(
        (status = 201, description = "A pass: new, or the member's live one again", body = PassIssued),
        (status = 401, description = "UNAUTHENTICATED", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: a service credential; ACCOUNT_TOO_NEW, EMAIL_NOT_VERIFIED: the product's eligibility rules refuse this member (no quota spent; with Retry-After, see 409)", body = ErrorBody),
        (status = 404, description = "PRODUCT_NOT_FOUND", body = ErrorBody),
        (status = 409, description = "SOLD_OUT, with Retry-After: the refusal stands that long for this member and product, and a request sooner is held until then before it is judged again", body = ErrorBody),
        (status = 422, description = "INVALID_PRODUCT_ID / INVALID_BODY", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED: too many requests from this member, or asked again while a refusal stands and the gate holds as many such requests as it may (with Retry-After)", body = ErrorBody),
        (status = 503, description = "QUOTA_UNAVAILABLE: retry (never means sold out)", body = ErrorBody),
    ),
    security(("buyer" = []))
)]
#[tracing::instrument(skip_all, fields(product_id = tracing::field::Empty, member = tracing::field::Empty))]
pub async fn issue_pass(
    State(state): State<AppState>,
    buyer: BuyerIdentity,
    Json(req): Json<IssuePass>,
) -> std::result::Result<(StatusCode, Json<PassIssued>), Response> {
    let member = &buyer.member;
    let span = tracing::Span::current();
    span.record("product_id", req.product_id);
    span.record("member", member.as_str());
    // Before any work: a member over their rate costs the gate no Redis call.
    state
        .limiter
        .check(member)
        .map_err(IntoResponse::into_response)?;
    if req.product_id <= 0 {
        return Err(Error::InvalidProductId.into_response());
    }
    // A refusal stands for its pace: asked again sooner, the answer waits until then.
    state
        .pacer
        .wait_turn(req.product_id, member.as_str())
        .await
        .map_err(IntoResponse::into_response)?;
    let refused = |e: Error| {
        state.pacer.refused(req.product_id, member.as_str());
        with_retry_after(e.into_response(), state.pacer.retry_after_secs())
    };
    let grant: Grant = match state.gate.admit(req.product_id, &buyer).await {
        Ok(grant) => grant,
        Err(e @ Error::SoldOut(_)) => {
            // The buyer may join the waitlist on this answer: the order service must
            // know the units still on sale there are promised to passes in flight.
            state.recompute.ensure_reported(req.product_id).await;
            return Err(refused(e));
        }
        Err(e @ Error::Ineligible(_)) => return Err(refused(e)),
        Err(e) => return Err(e.into_response()),
    };
    Ok((
        StatusCode::CREATED,
        Json(state.gate.sign(req.product_id, member, grant.exp())),
    ))
}

/// The shared quota of a product and its passes in flight.
#[utoipa::path(
    get,
    path = "/v1/quota/{product_id}",
    params(("product_id" = i64, Path, minimum = 1)),
    responses(
        (status = 200, body = QuotaView),
        (status = 400, description = "INVALID_PATH", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: a buyer token", body = ErrorBody),
        (status = 404, description = "PRODUCT_NOT_FOUND", body = ErrorBody),
        (status = 422, description = "INVALID_PRODUCT_ID: not a positive integer", body = ErrorBody),
        (status = 503, description = "QUOTA_UNAVAILABLE: Redis unreachable", body = ErrorBody),
    ),
    security(("service" = []))
)]
#[tracing::instrument(skip_all, fields(product_id = tracing::field::Empty))]
pub async fn quota(
    State(state): State<AppState>,
    Service(_caller): Service<{ OPERATOR | CONSOLE }>,
    Path(product_id): Path<i64>,
) -> Result<Json<QuotaView>> {
    tracing::Span::current().record("product_id", product_id);
    if product_id <= 0 {
        return Err(Error::InvalidProductId);
    }
    match state.gate.store.read(product_id, unix_now()).await {
        Ok(Some((quota, in_flight))) => Ok(Json(QuotaView {
            product_id,
            quota,
            in_flight,
        })),
        Ok(None) => {
            let listed = state
                .gate
                .products
                .get(product_id)
                .is_some_and(|p| p.in_catalogue());
            if listed || !state.gate.products.catalogue_loaded() {
                Err(Error::QuotaUnavailable(
                    "the shared quota for this product is not computed yet",
                ))
            } else {
                Err(Error::ProductNotFound(product_id))
            }
        }
        Err(e) if e.is_redis_outage() => {
            state.gate.health.degrade(&e);
            Err(Error::QuotaUnavailable("the shared quota is unreachable"))
        }
        Err(e) => Err(e),
    }
}

/// Ready while the gate can answer; `degraded` while it runs on the fallback limiter.
pub async fn readyz(State(state): State<AppState>) -> Response {
    readiness(
        vec![("shared_quota", Ok(()))],
        state.gate.health.is_degraded(),
    )
}
