//! One buyer's path over HTTP, as docs/ARCHITECTURE.md draws it: a pass from the gate,
//! a reservation from the order service, a payment through the orchestrator, and polling
//! until the payment is terminal. Each step ends in either its value or an outcome.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use reqwest::{header::CONTENT_TYPE, Client};
use uuid::Uuid;

use crate::{
    client::send,
    load::Outcome,
    wire::{is_terminal, PassIssued, Payment, ReservationMade},
};

/// Where the buyers are sent and counters of what was sent.
#[derive(Clone)]
pub struct Endpoints {
    pub http: Client,
    pub gate: Arc<str>,
    pub order: Arc<str>,
    pub orchestrator: Arc<str>,
    pub counters: Arc<Counters>,
}

/// What the buyers sent, counted on the client side.
#[derive(Default)]
pub struct Counters {
    pub pass_requests: AtomicU64,
    pub passes_issued: AtomicU64,
    pub reservation_requests: AtomicU64,
    pub payment_requests: AtomicU64,
    pub status_polls: AtomicU64,
    pub sold_out_at_gate: AtomicU64,
    pub sold_out_at_order: AtomicU64,
}

/// How long a buyer waits for a payment to become terminal before calling it an error.
const PAYMENT_PATIENCE: Duration = Duration::from_secs(120);

fn post(http: &Client, url: String, token: &str, body: String) -> reqwest::RequestBuilder {
    http.post(url)
        .bearer_auth(token)
        .header(CONTENT_TYPE, "application/json")
        .body(body)
}

/// A SOLD_OUT answer, counted in `counter`: the `sold_out` outcome.
fn sold_out(counter: &AtomicU64) -> Outcome {
    counter.fetch_add(1, Ordering::Relaxed);
    Outcome::of("sold_out")
}

impl Endpoints {
    /// `POST gate /v1/passes`: the pass, or `sold_out` (counted as at the gate).
    pub async fn pass(&self, token: &str, product: i64) -> Result<String, Outcome> {
        self.counters.pass_requests.fetch_add(1, Ordering::Relaxed);
        let reply = send(post(
            &self.http,
            format!("{}/v1/passes", self.gate),
            token,
            format!(r#"{{"product_id":{product}}}"#),
        ))
        .await?;
        match reply.status {
            201 | 200 => {
                let p: PassIssued = reply.json().ok_or(Outcome::of("error:unreadable_pass"))?;
                self.counters.passes_issued.fetch_add(1, Ordering::Relaxed);
                Ok(p.pass)
            }
            409 if reply.code().as_deref() == Some("SOLD_OUT") => {
                Err(sold_out(&self.counters.sold_out_at_gate))
            }
            _ => Err(reply.unexpected()),
        }
    }

    /// `POST order /v1/reservations`: the reservation id, or `sold_out` (counted as at order).
    pub async fn reserve(&self, token: &str, product: i64, pass: &str) -> Result<Uuid, Outcome> {
        self.counters
            .reservation_requests
            .fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({"product_id": product, "pass": pass}).to_string();
        let reply = send(post(
            &self.http,
            format!("{}/v1/reservations", self.order),
            token,
            body,
        ))
        .await?;
        match reply.status {
            201 | 200 => reply
                .json::<ReservationMade>()
                .map(|r| r.id)
                .ok_or(Outcome::of("error:unreadable_reservation")),
            409 if reply.code().as_deref() == Some("SOLD_OUT") => {
                Err(sold_out(&self.counters.sold_out_at_order))
            }
            _ => Err(reply.unexpected()),
        }
    }

    /// `POST orchestrator /v1/payments` with an Idempotency-Key, then polling until the
    /// payment is terminal: `completed`, `payment_failed` or `refunded`.
    pub async fn pay(&self, token: &str, reservation: Uuid, account: i64) -> Outcome {
        self.counters
            .payment_requests
            .fetch_add(1, Ordering::Relaxed);
        let key = Uuid::new_v4().to_string();
        let body =
            serde_json::json!({"reservation_id": reservation, "account_id": account}).to_string();
        let req = post(
            &self.http,
            format!("{}/v1/payments", self.orchestrator),
            token,
            body,
        )
        .header("Idempotency-Key", key);
        let reply = match send(req).await {
            Ok(r) => r,
            Err(o) => return o,
        };
        let payment: Payment = match reply.status {
            200..=202 => match reply.json() {
                Some(p) => p,
                None => return Outcome::of("error:unreadable_payment"),
            },
            _ => return reply.unexpected(),
        };
        let state = if is_terminal(&payment.state) {
            payment.state
        } else {
            match self.wait_terminal(token, payment.id).await {
                Ok(s) => s,
                Err(o) => return o,
            }
        };
        match state.as_str() {
            "COMPLETED" => Outcome::of("completed"),
            "FAILED" => Outcome::of("payment_failed"),
            "REFUNDED" => Outcome::of("refunded"),
            _ => Outcome::of("error:payment_state"),
        }
    }

    /// Polls `GET /v1/payments/{id}` with a backoff from 5 ms to 100 ms.
    async fn wait_terminal(&self, token: &str, id: Uuid) -> Result<String, Outcome> {
        let url = format!("{}/v1/payments/{id}", self.orchestrator);
        let give_up = tokio::time::Instant::now() + PAYMENT_PATIENCE;
        let mut pause = Duration::from_millis(5);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
            self.counters.status_polls.fetch_add(1, Ordering::Relaxed);
            let reply = send(self.http.get(&url).bearer_auth(token)).await?;
            if reply.status != 200 {
                return Err(reply.unexpected());
            }
            let p: Payment = reply
                .json()
                .ok_or(Outcome::of("error:unreadable_payment"))?;
            if is_terminal(&p.state) {
                return Ok(p.state);
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(Outcome::of("error:payment_not_terminal"));
            }
        }
    }
}
