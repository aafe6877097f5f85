//! The staff product routes (admins): make a product, add units; each carried to the
//! order service by [`Catalog`](crate::catalog::Catalog) and audited.

use std::sync::Arc;

use axum::{
    extract::{FromRef, State},
    http::StatusCode,
    Json as AxumJson,
};
use paysaga_common::{
    auth::Verifier,
    extract::{Json, Path},
};
use paysaga_contracts::{
    order::api::Product,
    staff::api::{StaffAddUnits, StaffCreateProduct},
};
use paysaga_staff::{allow::ADMIN, PersonOrTool, Staff};

use crate::{
    catalog::{Catalog, Change},
    error::Result,
};

/// What the product routes need: who is asking, and the catalog.
#[derive(Clone, FromRef)]
pub struct CatalogState {
    pub verifier: Arc<Verifier>,
    pub staff: Staff,
    pub catalog: Catalog,
}

/// Make a product with its units at the order service (admins), with the reason in the
/// audit trail.
#[utoipa::path(
    post, path = "/v1/products", tag = "operator",
    request_body = StaffCreateProduct,
    responses(
        (status = 201, body = Product),
        (status = 403, description = "FORBIDDEN_ROLE: not an admin", body = paysaga_common::ErrorBody),
        (status = 422, description = "REASON_INVALID; the order service's INVALID_NAME, INVALID_PRICE, INVALID_UNITS, INVALID_RESERVATION_TTL, INVALID_ELIGIBILITY", body = paysaga_common::ErrorBody),
        (status = 503, description = "UNAVAILABLE: the order service did not answer (the product list says whether it was made)", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all)]
pub async fn create(
    State(state): State<CatalogState>,
    PersonOrTool(by): PersonOrTool<{ ADMIN }>,
    Json(req): Json<StaffCreateProduct>,
) -> Result<(StatusCode, AxumJson<Product>)> {
    let product = state
        .catalog
        .change(&by, Change::Create(req.product), &req.reason)
        .await?;
    Ok((StatusCode::CREATED, AxumJson(product)))
}

/// Add units to a product (admins), with the reason in the audit trail.
#[utoipa::path(
    post, path = "/v1/products/{id}/units", tag = "operator",
    params(("id" = i64, Path, description = "product id")),
    request_body = StaffAddUnits,
    responses(
        (status = 200, body = Product),
        (status = 403, description = "FORBIDDEN_ROLE: not an admin", body = paysaga_common::ErrorBody),
        (status = 404, description = "PRODUCT_NOT_FOUND", body = paysaga_common::ErrorBody),
        (status = 422, description = "REASON_INVALID; INVALID_UNITS", body = paysaga_common::ErrorBody),
        (status = 503, description = "UNAVAILABLE: the order service did not answer", body = paysaga_common::ErrorBody),
    ),
    security(("staff" = []))
)]
#[tracing::instrument(skip_all, fields(product_id = id))]
pub async fn add_units(
    State(state): State<CatalogState>,
    PersonOrTool(by): PersonOrTool<{ ADMIN }>,
    Path(id): Path<i64>,
    Json(req): Json<StaffAddUnits>,
) -> Result<AxumJson<Product>> {
    let change = Change::AddUnits {
        product: id,
        count: req.count,
    };
    Ok(AxumJson(
        state.catalog.change(&by, change, &req.reason).await?,
    ))
}
