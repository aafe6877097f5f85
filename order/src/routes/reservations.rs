//! Reservation endpoints: reserve with a pass, read, confirm, cancel.

use axum::{extract::State, http::StatusCode};
use paysaga_common::{
    auth::{
        allow::{GATE, OPERATOR, ORCHESTRATOR},
        Buyer, Caller, MemberId, Service,
    },
    extract::{Json, Path},
    pass::PassError,
    ErrorBody,
};
use uuid::Uuid;

use crate::{
    api::{hold_key, CreateReservation, ErrorCode, Reservation, UsedPasses, UsedPassesQuery},
    breach::Breach,
    claim::{Claim, NewClaim},
    error::{Error, Result},
    funds::{Funded, Source},
    reservations,
    settle::{self, Canceller, Op},
    stock, AppState,
};

/// Longer than any pass the gate issues; refused before any decoding work.
const MAX_PASS_LEN: usize = 1024;

/// How many times a claim that found every remaining unit locked looks again before
/// answering SOLD_OUT: those locks may belong to claims that roll back.
const CLAIM_ATTEMPTS: u32 = 3;

/// A pass already used: its own member gets the reservation back, anyone else a refusal.
fn replay(existing: Reservation, member: &MemberId) -> Result<(StatusCode, Json<Reservation>)> {
    if &existing.member_id == member {
        metrics::counter!("order_reservations_total", "outcome" => "replayed").increment(1);
        Ok((StatusCode::OK, Json(existing)))
    } else {
        Err(Error::PassAlreadyUsed)
    }
}

/// Reserve one unit with a gate pass (buyer). The price is held on the buyer's account
/// first (until `expires_at`, when the unit is held too); the payment's debit captures it.
#[utoipa::path(post, path = "/v1/reservations", security(("buyer" = [])), request_body = CreateReservation,
    responses(
        (status = 201, body = Reservation, description = "a unit and its price are held for you until expires_at"),
        (status = 422, body = ErrorBody, description = "INSUFFICIENT_FUNDS (your available balance does not cover the price), NO_ACCOUNT: nothing held, no unit taken"),
        (status = 503, body = ErrorBody, description = "UNAVAILABLE: the account service did not answer; nothing was reserved, retry with the same pass"),
        (status = 200, body = Reservation, description = "this pass was already used by you: the same reservation"),
        (status = 409, body = ErrorBody, description = "SOLD_OUT, PASS_ALREADY_USED, MEMBER_LIMIT_REACHED (a live reservation of the product is held, or PURCHASE_CAP units reserved and bought), CLAIM_CONFLICT (only under the benchmark's optimistic CLAIM_STRATEGY: another claim won; nothing held, retry with the same pass)"),
        (status = 403, body = ErrorBody, description = "the pass does not admit this member to this product now: PASS_MALFORMED, PASS_INVALID_SIGNATURE, PASS_EXPIRED, PASS_WRONG_PRODUCT, PASS_WRONG_MEMBER"),
        (status = 404, body = ErrorBody, description = "PRODUCT_NOT_FOUND")))]
#[tracing::instrument(skip_all, fields(member = %member, product_id = req.product_id))]
pub async fn create(
    State(state): State<AppState>,
    Buyer(member): Buyer,
    Json(req): Json<CreateReservation>,
) -> Result<(StatusCode, Json<Reservation>)> {
    super::detached(reserve(state, member, req)).await
}

async fn reserve(
    state: AppState,
    member: MemberId,
    req: CreateReservation,
) -> Result<(StatusCode, Json<Reservation>)> {
    if req.pass.len() > MAX_PASS_LEN {
        return Err(Error::Pass(PassError::Malformed));
    }
    // Signature first, expiry by hand: an expired pass that already made a reservation
    // is a replay (a client retrying after a timeout), and it gets its reservation back.
    let claims = state
        .passes
        .verify(&req.pass, i64::MIN)
        .map_err(Error::Pass)?;
    if claims.prd != req.product_id {
        return Err(Error::PassWrongProduct {
            pass: claims.prd,
            asked: req.product_id,
        });
    }
    let expired = claims.exp <= chrono::Utc::now().timestamp();
    if expired || claims.mem != member.as_str() {
        if let Some(existing) = reservations::by_pass(&state.pool, claims.pid).await? {
            return replay(existing, &member);
        }
        return Err(if expired {
            Error::Pass(PassError::Expired)
        } else {
            Error::PassWrongMember
        });
    }

    let terms = state
        .terms
        .get(&state.pool, req.product_id)
        .await?
        .ok_or(Error::ProductNotFound(req.product_id))?;
    // The price is held first: a buyer who cannot pay never takes a unit.
    let funded = state
        .funds
        .hold_for(
            &state.pool,
            Source::Pass(claims.pid),
            &member,
            terms.price,
            terms.ttl(state.ttl),
        )
        .await;
    let held = match funded {
        Ok(Funded::Held(held)) => held,
        Ok(Funded::Reserved(existing)) => return replay(existing, &member),
        Err(e @ (Error::InsufficientFunds { .. } | Error::NoAccount)) => {
            // The gate need not keep this pass's unit for it.
            reservations::refuse_unfunded(&state.pool, claims.pid, req.product_id, &member).await?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let key = hold_key(held.reservation_id);
    let claim = NewClaim {
        id: held.reservation_id,
        product_id: req.product_id,
        member: member.clone(),
        pass_id: claims.pid,
        expires_at: held.hold.expires_at,
        claim_by: held.claim_by,
        cap: state.purchase_cap,
        account_id: Some(held.hold.account_id),
    };
    let claimed = claim_with(&state, &claim).await;
    // Whatever kept this claim from a unit, the hold it placed is given back, unless the
    // pass's own reservation is what it holds for.
    match &claimed {
        Ok(Claimed::Created(_)) => {}
        Ok(Claimed::Replay(r)) if r.id == held.reservation_id => {}
        Ok(Claimed::Replay(_)) | Err(_) => state.funds.abandon(&key).await,
    }
    match claimed? {
        Claimed::Created(r) => {
            metrics::counter!("order_reservations_total", "outcome" => "created").increment(1);
            Ok((StatusCode::CREATED, Json(r)))
        }
        Claimed::Replay(existing) => replay(existing, &member),
    }
}

/// How a claim with a held price ended well.
enum Claimed {
    Created(Reservation),
    /// The pass had made a reservation already.
    Replay(Reservation),
}

/// The claim, looked at again while every remaining unit is locked by others (those
/// locks may belong to claims that roll back).
async fn claim_with(state: &AppState, claim: &NewClaim) -> Result<Claimed> {
    let pass = claim.pass_id;
    for _ in 0..CLAIM_ATTEMPTS {
        match state.claims.claim(claim.clone()).await? {
            Claim::Created(r) => return Ok(Claimed::Created(r)),
            Claim::PassUsed => {
                let existing =
                    reservations::by_pass(&state.pool, pass)
                        .await?
                        .ok_or_else(|| {
                            Error::Invariant(Breach::missing("reservation of used pass", pass))
                        })?;
                return Ok(Claimed::Replay(existing));
            }
            Claim::MemberLimit => {
                // A replay of the pass that made the member's reservation is that
                // reservation, not a second one.
                if let Some(existing) = reservations::by_pass(&state.pool, pass).await? {
                    return Ok(Claimed::Replay(existing));
                }
                metrics::counter!("order_reservations_total", "outcome" => "member_limit")
                    .increment(1);
                return Err(Error::MemberLimit);
            }
            Claim::Contended => {
                metrics::counter!("order_reservations_total", "outcome" => "conflict").increment(1);
                return Err(Error::ClaimConflict);
            }
            Claim::TooLate => {
                metrics::counter!("order_reservations_total", "outcome" => "too_late").increment(1);
                return Err(Error::ClaimTooLate);
            }
            Claim::NothingClaimable => {
                if let Some(existing) = reservations::by_pass(&state.pool, pass).await? {
                    return Ok(Claimed::Replay(existing));
                }
                match stock::probe(&state.pool, claim.product_id).await? {
                    None => return Err(Error::ProductNotFound(claim.product_id)),
                    Some(false) => break,
                    Some(true) => continue,
                }
            }
        }
    }
    metrics::counter!("order_reservations_total", "outcome" => "sold_out").increment(1);
    Err(Error::SoldOut)
}

/// One reservation (buyer: own only; service: any).
#[utoipa::path(get, path = "/v1/reservations/{id}", security(("buyer" = []), ("service" = [])), params(("id" = Uuid, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 404, body = ErrorBody, description = "RESERVATION_NOT_FOUND")))]
#[tracing::instrument(skip_all, fields(reservation_id = %id))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller<{ ORCHESTRATOR | OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<Json<Reservation>> {
    match reservations::get(&state.pool, id).await? {
        Some(r) if caller.may_access(r.member_id.as_str()) => Ok(Json(r)),
        _ => Err(Error::ReservationNotFound),
    }
}

/// Confirm a paid reservation: the unit is sold and an order written (service).
#[utoipa::path(post, path = "/v1/reservations/{id}/confirm", security(("service" = [])), params(("id" = Uuid, Path, description = "reservation id")),
    responses(
        (status = 200, body = Reservation, description = "CONFIRMED (the same answer on every repeat)"),
        (status = 409, body = ErrorBody, description = "RESERVATION_EXPIRED, RESERVATION_CANCELLED: definite, refund"),
        (status = 404, body = ErrorBody, description = "RESERVATION_NOT_FOUND")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, reservation_id = %id))]
pub async fn confirm(
    State(state): State<AppState>,
    caller: Service<{ ORCHESTRATOR }>,
    Path(id): Path<Uuid>,
) -> Result<Json<Reservation>> {
    settled(state, Op::Confirm(id)).await
}

/// Cancel a reservation; its unit goes back on sale (buyer: own, while unpaid; service:
/// any, also a confirmed one for an operator refund). Idempotent.
#[utoipa::path(post, path = "/v1/reservations/{id}/cancel", security(("buyer" = []), ("service" = [])), params(("id" = Uuid, Path, description = "reservation id")),
    responses(
        (status = 200, body = Reservation, description = "CANCELLED, or EXPIRED if expiry came first"),
        (status = 409, body = ErrorBody, description = "RESERVATION_CONFIRMED (buyer only)"),
        (status = 404, body = ErrorBody, description = "RESERVATION_NOT_FOUND")))]
#[tracing::instrument(skip_all, fields(reservation_id = %id))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller<{ ORCHESTRATOR | OPERATOR }>,
    Path(id): Path<Uuid>,
) -> Result<Json<Reservation>> {
    let who = match caller {
        Caller::Buyer(m) => Canceller::Buyer(m),
        Caller::Service(_) => Canceller::Service,
    };
    settled(state, Op::Cancel(id, who)).await
}

/// A confirm or cancel, answered as its endpoint answers it (see [`settle::one`]).
async fn settled(state: AppState, op: Op) -> Result<Json<Reservation>> {
    let reservation = super::detached(async move { settle::one(&state.pool, op).await }).await?;
    Ok(Json(reservation))
}

/// Most pass ids one `passes/used` call may ask about (1,000 ids is ~40 KB, inside the
/// common 64 KB body limit).
pub const MAX_PASS_IDS: usize = 1_000;

/// Which of these passes have made a reservation, or were refused because their holder
/// could not pay (service; the gate's quota job: it stops counting them in flight).
#[utoipa::path(post, path = "/v1/passes/used", security(("service" = [])), request_body = UsedPassesQuery,
    responses((status = 200, body = UsedPasses), (status = 422, body = ErrorBody, description = "TOO_MANY_PASS_IDS")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, asked = req.pass_ids.len()))]
pub async fn used_passes(
    State(state): State<AppState>,
    caller: Service<{ GATE }>,
    Json(req): Json<UsedPassesQuery>,
) -> Result<Json<UsedPasses>> {
    if req.pass_ids.len() > MAX_PASS_IDS {
        return Err(Error::invalid(
            ErrorCode::TooManyPassIds,
            format!("at most {MAX_PASS_IDS} pass ids per call"),
        ));
    }
    let used = reservations::spent_passes(&state.pool, &req.pass_ids).await?;
    Ok(Json(UsedPasses { used }))
}
