//! Waitlist endpoints (buyers): join, read and leave a product's line; take an offer.

use axum::{extract::State, http::StatusCode};
use paysaga_common::{
    auth::{Buyer, BuyerIdentity},
    extract::{Json, Path},
    ErrorBody,
};
use paysaga_contracts::eligibility::{self, MemberFacts};
use uuid::Uuid;

use crate::{
    api::{Reservation, WaitlistEntry},
    error::{Error, Result},
    stock,
    waitlist::{self, JoinRequest, Joined, Take, TakeRequest},
    AppState,
};

/// Join a sold-out product's waitlist (buyer). A unit that comes back (a reservation
/// expired or cancelled, an order refunded, units added) is offered to the head of the
/// line and held for them until the offer's deadline.
#[utoipa::path(post, path = "/v1/products/{id}/waitlist", security(("buyer" = [])),
    params(("id" = i64, Path, description = "product id")),
    responses(
        (status = 201, body = WaitlistEntry, description = "in line: `WAITING` with its position"),
        (status = 200, body = WaitlistEntry, description = "already in line: the member's live entry, unchanged"),
        (status = 409, body = ErrorBody, description = "NOT_SOLD_OUT (units on sale: reserve one), MEMBER_LIMIT_REACHED (the member holds or bought PURCHASE_CAP units)"),
        (status = 403, body = ErrorBody, description = "ACCOUNT_TOO_NEW: the product admits only accounts created before a time; EMAIL_NOT_VERIFIED: only members whose email is verified (its eligibility rules)"),
        (status = 404, body = ErrorBody, description = "PRODUCT_NOT_FOUND")))]
#[tracing::instrument(skip_all, fields(member = %buyer.member, product_id = id))]
pub async fn join(
    State(state): State<AppState>,
    buyer: BuyerIdentity,
    Path(id): Path<i64>,
) -> Result<(StatusCode, Json<WaitlistEntry>)> {
    let id = super::known_id(id)?;
    // The same judge as the gate's: a member who may not take a pass may not wait for
    // a unit either.
    let rules = stock::eligibility(&state.pool, id)
        .await?
        .ok_or(Error::ProductNotFound(id))?;
    eligibility::judge(&rules, &MemberFacts::of(&buyer))?;
    let member = buyer.member;
    let joined = super::detached(async move {
        waitlist::join(
            &state.pool,
            &JoinRequest {
                product_id: id,
                member: &member,
                cap: state.purchase_cap,
                offer_ttl: state.offer_ttl,
            },
        )
        .await
    })
    .await?;
    Ok(match joined {
        Joined::Created(e) => (StatusCode::CREATED, Json(e)),
        Joined::Existing(e) => (StatusCode::OK, Json(e)),
    })
}

/// The caller's entry in a product's waitlist (buyer): the live one, else the latest,
/// with its position while waiting and the offer made to it, if any.
#[utoipa::path(get, path = "/v1/products/{id}/waitlist/me", security(("buyer" = [])),
    params(("id" = i64, Path, description = "product id")),
    responses(
        (status = 200, body = WaitlistEntry),
        (status = 404, body = ErrorBody, description = "NOT_ON_WAITLIST: never joined (or PRODUCT_NOT_FOUND for an impossible id)")))]
#[tracing::instrument(skip_all, fields(member = %member, product_id = id))]
pub async fn me(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    Path(id): Path<i64>,
) -> Result<Json<WaitlistEntry>> {
    let id = super::known_id(id)?;
    waitlist::entry(&state.pool, id, &member)
        .await?
        .map(Json)
        .ok_or(Error::NotOnWaitlist)
}

/// Leave a product's waitlist (buyer). An offer held is released and its unit passes to
/// the next in line, or back on sale.
#[utoipa::path(delete, path = "/v1/products/{id}/waitlist/me", security(("buyer" = [])),
    params(("id" = i64, Path, description = "product id")),
    responses(
        (status = 200, body = WaitlistEntry, description = "the entry, now `LEFT` (its offer, if any, `RELEASED`)"),
        (status = 404, body = ErrorBody, description = "NOT_ON_WAITLIST: no live entry (or PRODUCT_NOT_FOUND for an impossible id)")))]
#[tracing::instrument(skip_all, fields(member = %member, product_id = id))]
pub async fn leave(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    Path(id): Path<i64>,
) -> Result<Json<WaitlistEntry>> {
    let id = super::known_id(id)?;
    super::detached(async move { waitlist::leave(&state.pool, id, &member).await })
        .await?
        .map(Json)
        .ok_or(Error::NotOnWaitlist)
}

/// Take an offer (buyer: the offer's member, before its deadline): the price is held on
/// the buyer's account and the offered unit becomes a reservation, paid like any other
/// (`POST orchestrator /v1/payments`).
#[utoipa::path(post, path = "/v1/offers/{offer_id}/reservation", security(("buyer" = [])),
    params(("offer_id" = Uuid, Path, description = "offer id")),
    responses(
        (status = 201, body = Reservation, description = "the offered unit is held for you until expires_at"),
        (status = 200, body = Reservation, description = "the offer was already taken by you: the same reservation"),
        (status = 409, body = ErrorBody, description = "OFFER_EXPIRED (the deadline passed; the unit went to the next in line), OFFER_RELEASED (you left the waitlist), MEMBER_LIMIT_REACHED"),
        (status = 422, body = ErrorBody, description = "INSUFFICIENT_FUNDS, NO_ACCOUNT: nothing held, the offer stays yours until its deadline"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: nothing was taken; retry"),
        (status = 404, body = ErrorBody, description = "OFFER_NOT_FOUND (unknown, or another member's)")))]
#[tracing::instrument(skip_all, fields(member = %member, offer_id = %offer_id))]
pub async fn take(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    Path(offer_id): Path<Uuid>,
) -> Result<(StatusCode, Json<Reservation>)> {
    let taken = super::detached(async move {
        waitlist::take(
            &state,
            &TakeRequest {
                offer_id,
                member: &member,
                ttl: state.ttl,
                cap: state.purchase_cap,
            },
        )
        .await
    })
    .await?;
    Ok(match taken {
        Take::Created(r) => (StatusCode::CREATED, Json(r)),
        Take::Taken(r) => (StatusCode::OK, Json(r)),
    })
}
