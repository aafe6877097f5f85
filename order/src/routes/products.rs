//! Product endpoints: create, add units, list, read, availability.

use axum::{extract::State, http::StatusCode};
use paysaga_common::{
    auth::{
        allow::{CONSOLE, GATE, OPERATOR, ORCHESTRATOR},
        Caller, Service, ServiceRole,
    },
    error::codes as common_codes,
    extract::{Json, Path},
    money::Amount,
    ApiError, ErrorBody,
};
use paysaga_contracts::{account::api::HoldTtl, eligibility};

use crate::{
    api::{AddUnits, Availability, CreateProduct, ErrorCode, Product, ReportPromises},
    error::{Error, Result},
    promises,
    stock::{self, MAX_UNITS_PER_CALL},
    AppState,
};

fn product_name(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            ErrorCode::InvalidName,
            "name must be 1 to 200 printable characters",
        ));
    }
    Ok(name.to_owned())
}

fn unit_count(n: i64, min: i64) -> Result<i64> {
    if n < min || n > MAX_UNITS_PER_CALL {
        return Err(Error::invalid(
            ErrorCode::InvalidUnits,
            format!("units must be {min} to {MAX_UNITS_PER_CALL}"),
        ));
    }
    Ok(n)
}

/// Outside development mode stock changes come from the orchestrator only, which
/// carries an admin's change and records it in the audit trail; the operator tools'
/// credential is refused here, so no change of what is on sale goes unrecorded.
fn changes_stock(state: &AppState, caller: ServiceRole) -> Result<()> {
    if caller == ServiceRole::Operator && !state.tools_change_stock {
        return Err(Error::Api(ApiError::new(
            StatusCode::FORBIDDEN,
            common_codes::FORBIDDEN_CALLER,
            "outside development mode products and units are changed through the \
             orchestrator's staff API (POST /v1/products), which audits each change",
        )));
    }
    Ok(())
}

/// Create a product with its units (service).
#[utoipa::path(post, path = "/v1/products", security(("service" = [])), request_body = CreateProduct,
    responses((status = 201, body = Product), (status = 422, body = ErrorBody, description = "INVALID_NAME, INVALID_PRICE, INVALID_UNITS, INVALID_RESERVATION_TTL, INVALID_ELIGIBILITY (more than 16 rules)")))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, units = req.units))]
pub async fn create(
    State(state): State<AppState>,
    caller: Service<{ OPERATOR | ORCHESTRATOR }>,
    Json(req): Json<CreateProduct>,
) -> Result<(StatusCode, Json<Product>)> {
    changes_stock(&state, caller.0)?;
    let name = product_name(&req.name)?;
    let price = Amount::new(req.price)
        .map_err(|e| Error::invalid(ErrorCode::InvalidPrice, e.to_string()))?;
    let units = unit_count(req.units, 0)?;
    let reservation_ttl_secs = req
        .reservation_ttl_secs
        .map(|t| {
            HoldTtl::new(t).map(HoldTtl::secs).map_err(|_| {
                Error::invalid(
                    ErrorCode::InvalidReservationTtl,
                    "reservation_ttl_secs must be 1 to 86400",
                )
            })
        })
        .transpose()?;
    let rules = eligibility::normalize(&req.eligibility)
        .map_err(|why| Error::invalid(ErrorCode::InvalidEligibility, why))?;
    let product = stock::create_product(
        &state.pool,
        &stock::NewProduct {
            name: &name,
            price: price.minor(),
            units,
            reservation_ttl_secs,
            eligibility: &rules,
        },
    )
    .await?;
    tracing::info!(product_id = product.id, units, "product created");
    Ok((StatusCode::CREATED, Json(product)))
}

/// Add units to a product (service).
#[utoipa::path(post, path = "/v1/products/{id}/units", security(("service" = [])), request_body = AddUnits,
    params(("id" = i64, Path, description = "product id")),
    responses((status = 200, body = Product), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(caller = %caller.0, product_id = id, count = req.count))]
pub async fn add_units(
    State(state): State<AppState>,
    caller: Service<{ OPERATOR | ORCHESTRATOR }>,
    Path(id): Path<i64>,
    Json(req): Json<AddUnits>,
) -> Result<Json<Product>> {
    changes_stock(&state, caller.0)?;
    let id = super::known_id(id)?;
    let count = unit_count(req.count, 1)?;
    let product = stock::add_units(&state.pool, id, count)
        .await?
        .ok_or(Error::ProductNotFound(id))?;
    Ok(Json(product))
}

/// Every product with its unit counts (the gate, operators, the console).
#[utoipa::path(get, path = "/v1/products", security(("service" = [])), responses((status = 200, body = [Product])))]
#[tracing::instrument(skip_all, fields(caller = %_caller.0))]
pub async fn list(
    State(state): State<AppState>,
    _caller: Service<{ GATE | OPERATOR | CONSOLE }>,
) -> Result<Json<Vec<Product>>> {
    Ok(Json(stock::list_products(&state.pool).await?))
}

/// One product with its unit counts (buyer or service).
#[utoipa::path(get, path = "/v1/products/{id}", security(("buyer" = []), ("service" = [])), params(("id" = i64, Path, description = "product id")),
    responses((status = 200, body = Product), (status = 404, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(product_id = id))]
pub async fn get(
    State(state): State<AppState>,
    _caller: Caller<{ OPERATOR }>,
    Path(id): Path<i64>,
) -> Result<Json<Product>> {
    let id = super::known_id(id)?;
    let product = stock::product(&state.pool, id)
        .await?
        .ok_or(Error::ProductNotFound(id))?;
    Ok(Json(product))
}

/// Units AVAILABLE now, for the gate's quota job (service).
#[utoipa::path(get, path = "/v1/products/{id}/availability", security(("service" = [])), params(("id" = i64, Path, description = "product id")),
    responses((status = 200, body = Availability), (status = 404, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(product_id = id))]
pub async fn availability(
    State(state): State<AppState>,
    _caller: Service<{ GATE }>,
    Path(id): Path<i64>,
) -> Result<Json<Availability>> {
    let id = super::known_id(id)?;
    let available = stock::availability(&state.pool, id)
        .await?
        .ok_or(Error::ProductNotFound(id))?;
    Ok(Json(Availability {
        product_id: id,
        available,
        waiting: 0,
    }))
}

/// The gate's passes in flight for a product (service): recorded, then the units they do
/// not cover offered to the head of the waitlist; the answer is read after that.
#[utoipa::path(post, path = "/v1/products/{id}/promises", security(("service" = [])), request_body = ReportPromises,
    params(("id" = i64, Path, description = "product id")),
    responses((status = 200, body = Availability), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[tracing::instrument(skip_all, fields(product_id = id, in_flight = req.in_flight))]
pub async fn report_promises(
    State(state): State<AppState>,
    _caller: Service<{ GATE }>,
    Path(id): Path<i64>,
    Json(req): Json<ReportPromises>,
) -> Result<Json<Availability>> {
    let id = super::known_id(id)?;
    if req.in_flight < 0 {
        return Err(Error::invalid(
            ErrorCode::InvalidUnits,
            "in_flight must be zero or more",
        ));
    }
    let reported = promises::report(&state.pool, id, req.in_flight)
        .await?
        .ok_or(Error::ProductNotFound(id))?;
    Ok(Json(Availability {
        product_id: id,
        available: reported.available,
        waiting: reported.waiting,
    }))
}
