//! The OpenAPI document the orchestrator serves: the saga's API (payments, the
//! operators' inspection API) with the webhook platform's merged in (its operators'
//! routes and the event catalogue as `webhooks`).

use utoipa::{
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    Modify, OpenApi,
};

use paysaga_contracts::orchestrator::api;

/// The two bearer schemes: buyer tokens and service credentials.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        // `staff`: a staff session token (`pss_…`, `POST /v1/staff/sessions`), not a JWT;
        // documented as one bearer scheme beside the others.
        for name in ["buyer", "service", "staff"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("JWT")
                        .build(),
                ),
            );
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "paysaga orchestrator",
        description = "The payment saga: idempotent checkout payments, recovery, and the operators' inspection API; the events it publishes as signed webhooks (see `webhooks`) and the operators' webhook API."
    ),
    modifiers(&SecuritySchemes),
    paths(
        crate::routes::payments::create,
        crate::routes::payments::get,
        crate::routes::operator::list,
        crate::routes::operator::steps,
        crate::routes::operator::resume,
        crate::routes::operator::refund,
        crate::routes::operator::top_up,
        crate::routes::operator::approvals,
        crate::routes::operator::approve,
        crate::routes::operator::reject,
        crate::routes::products::create,
        crate::routes::products::add_units,
    ),
    components(schemas(
        api::CreatePayment,
        api::Payment,
        api::PaymentAdmin,
        api::Step,
        api::PaymentTimeline,
        api::PaymentPage,
        paysaga_contracts::staff::api::Approval,
        paysaga_contracts::staff::api::ApprovalKind,
        paysaga_contracts::staff::api::ApprovalState,
        paysaga_contracts::staff::api::TopUp,
        paysaga_contracts::staff::api::TopUpAnswer,
        paysaga_contracts::staff::api::ApprovalPage,
        paysaga_contracts::staff::api::ApprovalDecided,
        paysaga_contracts::staff::api::StaffCreateProduct,
        paysaga_contracts::staff::api::StaffAddUnits,
        paysaga_contracts::order::api::CreateProduct,
        paysaga_contracts::order::api::Product,
        paysaga_contracts::eligibility::EligibilityRule,
        paysaga_common::ErrorBody,
    ))
)]
pub struct ApiDoc;

/// The document the orchestrator serves: the saga's API, and the webhook platform's
/// (its operators' routes and the event catalogue).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    paysaga_webhooks::ApiDoc::merge_into(&mut doc);
    doc.merge(<paysaga_staff::routes::ApiDoc as OpenApi>::openapi());
    doc
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_holds_the_saga_the_webhook_api_and_the_catalogue() {
        let doc = serde_json::to_value(super::openapi()).expect("serialises");
        for path in [
            "/v1/payments",
            "/v1/payments/{id}",
            "/v1/payments/{id}/steps",
            "/v1/payments/{id}/resume",
            "/v1/payments/{id}/refund",
            "/v1/webhook-endpoints",
            "/v1/webhook-endpoints/{id}/disable",
            "/v1/webhook-endpoints/{id}/enable",
            "/v1/webhook-endpoints/{id}/rotate-secret",
            "/v1/webhook-deliveries",
            "/v1/webhook-deliveries/{id}/replay",
            "/v1/staff",
            "/v1/staff/sessions",
            "/v1/staff/sessions/sign-out",
            "/v1/audit",
            "/v1/top-ups",
            "/v1/approvals",
            "/v1/approvals/{id}/approve",
            "/v1/approvals/{id}/reject",
        ] {
            assert!(doc["paths"][path].is_object(), "{path}");
        }
        assert_eq!(
            doc["webhooks"].as_object().map(|w| w.len()),
            Some(paysaga_contracts::events::types::ALL.len())
        );
        for scheme in ["buyer", "service"] {
            assert!(doc["components"]["securitySchemes"][scheme].is_object());
        }
        for schema in [
            "PaymentPage",
            "WebhookDeliveryPage",
            "PaymentCompletedEvent",
        ] {
            assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
        }
    }
}
