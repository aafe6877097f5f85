//! The typed client other services (and tests, and the benchmark) use to call the
//! order service; it shares its wire types with the server.

use paysaga_common::client::{Answer, CallError, ServiceClient};
use reqwest::Method;
use uuid::Uuid;

use crate::{batch::Replies, outbox::OutboxClient};

use super::api::{
    AckEvents, AddUnits, Availability, CreateProduct, CreateReservation, OrderBatch, OutboxPage,
    Product, ReportPromises, Reservation, UsedPasses, UsedPassesQuery, WaitlistEntry,
};

/// Calls the order service with one bearer token: a service credential for the
/// internal endpoints, or a buyer token for `reserve`, `reservation` and `cancel`.
#[derive(Clone, Debug)]
pub struct OrderClient {
    inner: ServiceClient,
}

/// Confirm and cancel take no fields; an empty JSON object keeps the request well formed.
#[derive(serde::Serialize)]
struct Empty {}

service_client_constructors!(OrderClient, paysaga_common::auth::Audience::Order);

impl OrderClient {
    /// `POST /v1/products` (service).
    pub async fn create_product(&self, req: &CreateProduct) -> Result<Answer<Product>, CallError> {
        self.inner.post("/v1/products", req).await
    }

    /// `POST /v1/products/{id}/units` (service).
    pub async fn add_units(
        &self,
        product_id: i64,
        count: i64,
    ) -> Result<Answer<Product>, CallError> {
        self.inner
            .post(
                &format!("/v1/products/{product_id}/units"),
                &AddUnits { count },
            )
            .await
    }

    /// `GET /v1/products` (service).
    pub async fn list_products(&self) -> Result<Answer<Vec<Product>>, CallError> {
        self.inner.get("/v1/products").await
    }

    /// `GET /v1/products/{id}` (buyer or service).
    pub async fn product(&self, product_id: i64) -> Result<Answer<Product>, CallError> {
        self.inner.get(&format!("/v1/products/{product_id}")).await
    }

    /// `GET /v1/products/{id}/availability` (service): units AVAILABLE now.
    pub async fn availability(&self, product_id: i64) -> Result<Answer<Availability>, CallError> {
        self.inner
            .get(&format!("/v1/products/{product_id}/availability"))
            .await
    }

    /// `POST /v1/products/{id}/promises` (gate): reports the product's passes in flight;
    /// the answer is read after the units no longer promised went to the waitlist.
    pub async fn report_promises(
        &self,
        product_id: i64,
        in_flight: i64,
    ) -> Result<Answer<Availability>, CallError> {
        self.inner
            .post(
                &format!("/v1/products/{product_id}/promises"),
                &ReportPromises { in_flight },
            )
            .await
    }

    /// `POST /v1/reservations` (buyer token): 201 new, 200 when the same member replays
    /// the pass. Rejections: 409 `SOLD_OUT` / `PASS_ALREADY_USED`, 422 `PASS_*`,
    /// 404 `PRODUCT_NOT_FOUND`.
    pub async fn reserve(
        &self,
        product_id: i64,
        pass: &str,
    ) -> Result<Answer<Reservation>, CallError> {
        let body = CreateReservation {
            product_id,
            pass: pass.to_owned(),
        };
        self.inner.post("/v1/reservations", &body).await
    }

    /// `GET /v1/reservations/{id}` (buyer: own only; service: any). 404
    /// `RESERVATION_NOT_FOUND`.
    pub async fn reservation(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        self.inner.get(&format!("/v1/reservations/{id}")).await
    }

    /// `POST /v1/reservations/{id}/confirm` (service). CONFIRMED (same on repeat), or
    /// the definite rejections 409 `RESERVATION_EXPIRED` / `RESERVATION_CANCELLED`,
    /// 404 `RESERVATION_NOT_FOUND`.
    pub async fn confirm(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        self.inner
            .post(&format!("/v1/reservations/{id}/confirm"), &Empty {})
            .await
    }

    /// `POST /v1/reservations/{id}/cancel` (buyer own while RESERVED; service any).
    /// CANCELLED, or EXPIRED if expiry won; idempotent.
    pub async fn cancel(&self, id: Uuid) -> Result<Answer<Reservation>, CallError> {
        self.inner
            .post(&format!("/v1/reservations/{id}/cancel"), &Empty {})
            .await
    }

    /// `POST /v1/batch` (service) -> 200 `Replies`, one per operation in order (see
    /// [`crate::batch::Reply::into_answer`]). A non-2xx answer concerns the whole batch.
    pub async fn batch(&self, req: &OrderBatch) -> Result<Answer<Replies>, CallError> {
        self.inner.post("/v1/batch", req).await
    }

    /// `POST /v1/passes/used` (service): which of `pass_ids` (at most 1,000) have made a
    /// reservation. Ask this before reading availability: a pass used in between is
    /// then counted twice for one run (quota too low), never zero times (too high).
    pub async fn used_passes(&self, pass_ids: &[Uuid]) -> Result<Answer<UsedPasses>, CallError> {
        self.inner
            .post(
                "/v1/passes/used",
                &UsedPassesQuery {
                    pass_ids: pass_ids.to_vec(),
                },
            )
            .await
    }

    /// `POST /v1/products/{id}/waitlist` (buyer): 201 a new entry, 200 the member's live
    /// one, whenever no unit is on sale (even with every unit paid for: a refund or a
    /// cancellation brings one back). Refusals: 409 `NOT_SOLD_OUT` (units on sale: buy
    /// one), `MEMBER_LIMIT_REACHED`; 404 `PRODUCT_NOT_FOUND`.
    pub async fn join_waitlist(&self, product_id: i64) -> Result<Answer<WaitlistEntry>, CallError> {
        self.inner
            .post(&format!("/v1/products/{product_id}/waitlist"), &Empty {})
            .await
    }

    /// `GET /v1/products/{id}/waitlist/me` (buyer): the member's latest entry of the
    /// product (live if any), its position while `WAITING` and its offer if one was
    /// made. 404 `NOT_ON_WAITLIST` if the member never joined.
    pub async fn waitlist_entry(
        &self,
        product_id: i64,
    ) -> Result<Answer<WaitlistEntry>, CallError> {
        self.inner
            .get(&format!("/v1/products/{product_id}/waitlist/me"))
            .await
    }

    /// `DELETE /v1/products/{id}/waitlist/me` (buyer): leave; a unit offered to the
    /// member passes to the next in line. 200 the entry, `LEFT`; 404 `NOT_ON_WAITLIST`
    /// when no live entry.
    pub async fn leave_waitlist(
        &self,
        product_id: i64,
    ) -> Result<Answer<WaitlistEntry>, CallError> {
        self.inner
            .call(
                Method::DELETE,
                &format!("/v1/products/{product_id}/waitlist/me"),
                None::<&()>,
            )
            .await
    }

    /// `POST /v1/offers/{offer_id}/reservation` (buyer, the offer's member, before its
    /// deadline): the offered unit becomes the member's reservation, paid like any other.
    /// 201 new, 200 when already taken (the same reservation). Refusals: 409
    /// `OFFER_EXPIRED`, `OFFER_RELEASED`, `MEMBER_LIMIT_REACHED`; 404 `OFFER_NOT_FOUND`.
    pub async fn take_offer(&self, offer_id: Uuid) -> Result<Answer<Reservation>, CallError> {
        self.inner
            .post(&format!("/v1/offers/{offer_id}/reservation"), &Empty {})
            .await
    }

    /// The order service's outbox (service: orchestrator).
    pub fn events(&self) -> OutboxClient {
        OutboxClient::of(&self.inner)
    }

    /// `GET /v1/events?limit=N` (service: orchestrator): see [`OutboxClient::pending`].
    pub async fn outbox(&self, limit: u32) -> Result<Answer<OutboxPage>, CallError> {
        self.events().pending(limit).await
    }

    /// `POST /v1/events/ack` (service: orchestrator) -> 204: see [`OutboxClient::ack`].
    pub async fn ack_outbox(&self, req: &AckEvents) -> Result<Answer<()>, CallError> {
        self.events().ack(req).await
    }
}
