//! The event catalogue in its host's OpenAPI document, as OpenAPI 3.1
//! `webhooks`: one `POST` per event type, with its signed headers and its body.
//!
//! utoipa 5 has no field for `webhooks`; its document's extensions are written flat into
//! the top level, so the catalogue goes in there under the key `webhooks`. The payloads
//! are also components (`PaymentCompleted`, ..., and the envelope per type,
//! `PaymentCompletedEvent`, ...), which tools that skip `webhooks` still show.

use paysaga_contracts::events::{
    self, types, EventEnvelope, EventType, MemberVerificationRequested, PaymentCompleted,
    PaymentFailed, PaymentRefunded, ReservationExpired, WaitlistOfferExpired, WaitlistOfferMade,
    EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER,
};
use utoipa::{
    openapi::{
        path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn, PathItem},
        request_body::RequestBodyBuilder,
        schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type},
        ContentBuilder, Ref, Required, ResponseBuilder,
    },
    Modify, PartialSchema, ToSchema,
};

/// Each type with its payload's schema name, summary and the service it comes from.
fn catalogue() -> Vec<(&'static str, String, &'static str)> {
    vec![
        entry::<PaymentCompleted>(types::PAYMENT_COMPLETED, "A payment reached COMPLETED: the buyer was charged and the order confirmed."),
        entry::<PaymentFailed>(types::PAYMENT_FAILED, "A payment reached FAILED: nothing was charged."),
        entry::<PaymentRefunded>(types::PAYMENT_REFUNDED, "A payment reached REFUNDED: the charge was paid back."),
        entry::<ReservationExpired>(types::RESERVATION_EXPIRED, "A reservation ran out before it was paid (from the order service)."),
        entry::<WaitlistOfferMade>(types::WAITLIST_OFFER_MADE, "A returned unit was offered to the head of a product's waitlist (from the order service)."),
        entry::<WaitlistOfferExpired>(types::WAITLIST_OFFER_EXPIRED, "An offer ran out before the member took it (from the order service)."),
        entry::<MemberVerificationRequested>(types::MEMBER_VERIFICATION_REQUESTED, "A member signed up: email them the token, which verifies their address (from the member service)."),
    ]
}

fn entry<T: ToSchema>(
    event_type: &'static str,
    summary: &'static str,
) -> (&'static str, String, &'static str) {
    (event_type, T::name().into_owned(), summary)
}

/// Adds the payload schemas and the `webhooks` object.
pub struct Catalogue;

impl Modify for Catalogue {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, schema) in [
            (PaymentCompleted::name(), PaymentCompleted::schema()),
            (PaymentFailed::name(), PaymentFailed::schema()),
            (PaymentRefunded::name(), PaymentRefunded::schema()),
            (ReservationExpired::name(), ReservationExpired::schema()),
            (WaitlistOfferMade::name(), WaitlistOfferMade::schema()),
            (WaitlistOfferExpired::name(), WaitlistOfferExpired::schema()),
            (
                MemberVerificationRequested::name(),
                MemberVerificationRequested::schema(),
            ),
            (EventEnvelope::name(), EventEnvelope::schema()),
            (EventType::name(), EventType::schema()),
        ] {
            components.schemas.insert(name.into_owned(), schema);
        }
        let mut webhooks = serde_json::Map::new();
        let formatted = |format: KnownFormat, description: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(format)))
                .description(Some(description))
        };
        for (event_type, payload, summary) in catalogue() {
            let envelope = format!("{payload}Event");
            let body = ObjectBuilder::new()
                .description(Some(format!(
                    "The body of a `{event_type}` delivery; `data` is a `{payload}`."
                )))
                .property(
                    "id",
                    formatted(
                        KnownFormat::Uuid,
                        "The event id (UUIDv7): the same on every retry and replay; deduplicate on it.",
                    ),
                )
                .required("id")
                .property(
                    "type",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some([event_type])),
                )
                .required("type")
                .property(
                    "created_at",
                    formatted(KnownFormat::DateTime, "When the event happened."),
                )
                .required("created_at")
                .property("data", Ref::from_schema_name(payload.clone()))
                .required("data")
                .build();
            components.schemas.insert(envelope.clone(), body.into());
            let header = |name: &str, description: &str| {
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Header)
                    .required(Required::True)
                    .description(Some(description))
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .build()
            };
            let operation = OperationBuilder::new()
                .operation_id(Some(event_type))
                .summary(Some(summary))
                .description(Some(
                    "Sent as a `POST` to every enabled endpoint subscribed to the type. Verify \
                     `Paysaga-Signature` over the raw body before anything else (docs/events.md). \
                     Any 2xx acknowledges it; anything else, a timeout or a connection error is \
                     retried with backoff, the same event id each time, until DEAD.",
                ))
                .tag("webhooks")
                .parameter(header(EVENT_ID_HEADER, "The event id, as in the body."))
                .parameter(header(EVENT_TYPE_HEADER, "The event type, as in the body."))
                .parameter(header(
                    SIGNATURE_HEADER,
                    "`t=<unix seconds>,v1=<hex HMAC-SHA256(endpoint secret, \"<t>.<raw body>\")>`",
                ))
                .request_body(Some(
                    RequestBodyBuilder::new()
                        .required(Some(Required::True))
                        .content(
                            "application/json",
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name(envelope)))
                                .build(),
                        )
                        .build(),
                ))
                .response(
                    "2XX",
                    ResponseBuilder::new().description("Received: the delivery is done."),
                )
                .response(
                    "default",
                    ResponseBuilder::new()
                        .description("Not received: the delivery is retried, the same event id."),
                )
                .build();
            let item = PathItem::new(HttpMethod::Post, operation);
            match serde_json::to_value(item) {
                Ok(v) => {
                    webhooks.insert(event_type.to_owned(), v);
                }
                Err(e) => {
                    tracing::error!(error = %e, event_type, "webhook operation does not serialise")
                }
            }
        }
        debug_assert_eq!(webhooks.len(), events::types::ALL.len());
        openapi
            .extensions
            .get_or_insert_with(Default::default)
            .insert("webhooks".to_owned(), serde_json::Value::Object(webhooks));
    }
}

#[cfg(test)]
mod tests {
    use utoipa::OpenApi;

    #[test]
    fn every_event_type_is_a_webhook_whose_body_is_a_component() {
        let doc = serde_json::to_value(crate::ApiDoc::openapi()).expect("serialises");
        let webhooks = doc["webhooks"].as_object().expect("webhooks");
        assert_eq!(webhooks.len(), super::events::types::ALL.len());
        for t in super::events::types::ALL {
            let post = &webhooks[t]["post"];
            assert_eq!(post["operationId"], t);
            let reference = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .expect("body schema");
            let name = reference
                .strip_prefix("#/components/schemas/")
                .expect("a component");
            let envelope = &doc["components"]["schemas"][name];
            assert_eq!(envelope["properties"]["type"]["enum"][0], t);
            let payload = envelope["properties"]["data"]["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .expect("payload");
            assert!(
                doc["components"]["schemas"][payload].is_object(),
                "{payload}"
            );
            let headers: Vec<&str> = post["parameters"]
                .as_array()
                .expect("headers")
                .iter()
                .filter_map(|p| p["name"].as_str())
                .collect();
            assert_eq!(
                headers,
                [
                    "Paysaga-Event-Id",
                    "Paysaga-Event-Type",
                    "Paysaga-Signature"
                ]
            );
        }
    }
}
