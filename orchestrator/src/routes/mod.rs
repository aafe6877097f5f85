//! The saga's HTTP handlers: the buyer's payment endpoints and the operators'
//! inspection API, over their narrow state.

pub mod operator;
pub mod payments;
pub mod products;
mod state;

use axum::{
    routing::{get, post},
    Router,
};

pub use products::CatalogState;
pub use state::SagaState;

/// The saga's routes, with their state.
pub fn routes(state: SagaState) -> Router {
    Router::new()
        .route("/v1/payments", post(payments::create).get(operator::list))
        .route("/v1/payments/{id}", get(payments::get))
        .route("/v1/payments/{id}/steps", get(operator::steps))
        .route("/v1/payments/{id}/resume", post(operator::resume))
        .route("/v1/payments/{id}/refund", post(operator::refund))
        .route("/v1/top-ups", post(operator::top_up))
        .route("/v1/approvals", get(operator::approvals))
        .route("/v1/approvals/{id}/approve", post(operator::approve))
        .route("/v1/approvals/{id}/reject", post(operator::reject))
        .with_state(state)
}

/// The staff product routes, with their state.
pub fn product_routes(state: CatalogState) -> Router {
    Router::new()
        .route("/v1/products", post(products::create))
        .route("/v1/products/{id}/units", post(products::add_units))
        .with_state(state)
}
