//! The delivery worker: fans new events out into deliveries, claims due deliveries
//! (`FOR UPDATE SKIP LOCKED` plus a lease), POSTs each signed, and records the outcome.
//! Every instance runs one; they share the work through PostgreSQL with no leader.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use chrono::Utc;
use paysaga_common::error::cause_chain;
use paysaga_contracts::{
    events::{
        signature_header, EventEnvelope, EVENT_ID_HEADER, EVENT_TYPE_HEADER, SIGNATURE_HEADER,
    },
    orchestrator::api::DeliveryFailure,
};
use rand::Rng;
use reqwest::header::CONTENT_TYPE;
use sqlx::PgPool;
use tokio::{sync::Semaphore, task::JoinSet};
use uuid::Uuid;

use crate::{
    config::WebhookConfig,
    egress::{ForbiddenAddress, NotResolved},
    metrics,
    sealing::Unsealable,
    store::{self, Claimed, Outcome},
};

/// Events fanned out per dispatch statement.
const DISPATCH_BATCH: i64 = 500;
/// How often the gauges are refreshed.
const CENSUS_INTERVAL: Duration = Duration::from_secs(5);
/// At most this much of an answer's body is read (so the connection can be reused);
/// the rest is dropped with the connection.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The full-jitter backoff after `attempts` failed attempts: a uniformly random wait
/// between zero and `base × 2^(attempts − 1)`, at most `cap`. Randomising the whole
/// wait spreads out the retries of many deliveries that failed together (a receiver
/// that was down), instead of sending them back at it in waves.
pub fn backoff(base: Duration, cap: Duration, attempts: i32, rng: &mut impl Rng) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(40);
    let ceiling = base.saturating_mul(1u32 << doublings.min(31)).min(cap);
    let ceiling_ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.gen_range(0..=ceiling_ms))
}

/// One instance's delivery worker.
pub struct Worker {
    pub pool: PgPool,
    /// The lease owner this instance writes.
    pub instance: Uuid,
    pub config: WebhookConfig,
    pub http: reqwest::Client,
    /// Cleared when the instance stops: nothing more is claimed or recorded.
    pub alive: Arc<AtomicBool>,
}

/// The HTTP client deliveries go out with (`config`'s timeout, egress rule and roots):
/// the whole request bounded by `WEBHOOK_TIMEOUT_MS`; names resolved through the egress
/// rule's resolver (an address it forbids is never dialled, over `https` as over
/// `http`: TLS runs on the connection the resolver's address opened); no redirects (a
/// redirect is an answer other than 2xx, so a failed attempt, as with Stripe, and it
/// cannot lead inside); no proxy from the environment (through one, the resolver would
/// judge the proxy's name instead of the endpoint's); `https` endpoints verified
/// against the platform's roots and `WEBHOOK_CA_FILE`'s, host name included.
pub fn http_client(config: &WebhookConfig) -> reqwest::Client {
    let (timeout, egress) = (config.timeout, config.egress);
    config
        .trust
        .apply(reqwest::Client::builder())
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(egress.resolver())
        .user_agent(concat!("paysaga-webhooks/", env!("CARGO_PKG_VERSION")))
        .pool_idle_timeout(paysaga_common::client::POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        .build()
        .expect("an HTTP client with checked roots always builds")
}

impl Worker {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Runs until the instance stops (the task is also aborted then). A delivery cut off
    /// mid-flight stays claimed until its lease ends, then any instance sends it again.
    pub async fn run(self: Arc<Self>) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency));
        let mut tasks = JoinSet::new();
        let mut census_due = Instant::now();
        while self.alive() {
            while tasks.try_join_next().is_some() {}
            let mut busy = false;
            match store::dispatch(&self.pool, DISPATCH_BATCH).await {
                Ok(Some(d)) => {
                    busy |= d.events == DISPATCH_BATCH;
                    if d.events > 0 {
                        tracing::debug!(
                            events = d.events,
                            deliveries = d.deliveries,
                            "events dispatched"
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %cause_chain(&e), "dispatch failed; retried next round")
                }
            }
            let free = slots.available_permits();
            if free > 0 && self.alive() {
                let n = i64::try_from(free).unwrap_or(i64::MAX);
                match store::claim(&self.pool, self.instance, self.config.lease, n).await {
                    Ok(claimed) => {
                        busy |= claimed.len() == free;
                        for c in claimed {
                            let Ok(permit) = slots.clone().try_acquire_owned() else {
                                break;
                            };
                            let worker = self.clone();
                            tasks.spawn(async move {
                                worker.deliver(c).await;
                                drop(permit);
                            });
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %cause_chain(&e), "claim failed; retried next round")
                    }
                }
            }
            if Instant::now() >= census_due {
                census_due = Instant::now() + CENSUS_INTERVAL;
                match store::census(&self.pool).await {
                    Ok(census) => metrics::census(&census),
                    Err(e) => tracing::debug!(error = %cause_chain(&e), "webhook census failed"),
                }
            }
            // Saturated or more waiting: go on as soon as a slot frees. Idle: wait for
            // the poll interval, or for a delivery to finish (it may be what held the
            // next event of its subject back).
            let saturated = slots.available_permits() == 0;
            if busy && !saturated {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.poll_interval) => {}
                _ = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        tasks.abort_all();
    }

    /// One attempt: sign, POST, record.
    #[tracing::instrument(skip_all, fields(delivery_id = %c.id, event_id = %c.event_id, attempt = c.attempts))]
    async fn deliver(&self, c: Claimed) {
        let envelope = EventEnvelope {
            id: c.event_id,
            event_type: c.event_type.clone(),
            created_at: c.occurred_at,
            data: c.data.clone(),
        };
        let body = match serde_json::to_vec(&envelope) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "event does not serialise");
                return;
            }
        };
        let started = Instant::now();
        let answer = self.post(&c, body).await;
        metrics::attempt(started.elapsed());
        if !self.alive() {
            return;
        }
        let outcome = match answer {
            Ok(status) if (200..300).contains(&status) => Outcome::Delivered {
                status: i32::from(status),
            },
            other => {
                let (status, error) = match other {
                    Ok(status) => (Some(i32::from(status)), DeliveryFailure::HttpStatus),
                    Err(Attempt::Failed(class)) => (None, class),
                    Err(Attempt::Unsigned(e)) => {
                        // The key cannot open this endpoint's secret: nothing can be
                        // signed, and no attempt is recorded (it is the service's
                        // configuration that is wrong, not the receiver); the delivery
                        // is tried again after its lease.
                        tracing::error!(endpoint_id = %c.endpoint_id, error = %e, "webhook delivery not signed");
                        return;
                    }
                };
                let retry_in = (c.attempts < self.config.max_attempts).then(|| {
                    backoff(
                        self.config.backoff_base,
                        self.config.backoff_cap,
                        c.attempts,
                        &mut rand::thread_rng(),
                    )
                });
                Outcome::Failed {
                    status,
                    error,
                    retry_in,
                }
            }
        };
        match store::record(&self.pool, c.id, self.instance, &outcome).await {
            Ok(true) => match &outcome {
                Outcome::Delivered { .. } => metrics::outcome("delivered"),
                Outcome::Failed { retry_in: None, error, .. } => {
                    metrics::outcome("dead");
                    tracing::warn!(attempts = c.attempts, url = %c.url, %error, "webhook delivery DEAD; an operator can replay it");
                }
                Outcome::Failed { retry_in: Some(d), error, .. } => {
                    metrics::outcome("failed");
                    tracing::info!(attempts = c.attempts, retry_in_ms = d.as_millis() as u64, %error, "webhook delivery failed; retrying");
                }
            },
            Ok(false) => tracing::info!(
                "delivery claimed again by another instance meanwhile; its outcome is theirs to record"
            ),
            Err(e) => tracing::warn!(error = %cause_chain(&e), "could not record the outcome; the delivery is retried after its lease"),
        }
    }

    /// The secrets a delivery to `c` is signed with: the current one, then the previous
    /// one while its rotation grace lasts.
    fn secrets(&self, c: &Claimed) -> Result<Vec<String>, Unsealable> {
        let key = &self.config.secret_key;
        let current = match (&c.secret_sealed, &c.secret) {
            (Some(sealed), _) => key.open(c.endpoint_id, sealed)?,
            // Made before secrets were sealed, and not sealed yet (another instance's
            // start-up does it): its plaintext signs as before.
            (None, Some(plain)) => plain.clone(),
            (None, None) => return Err(Unsealable),
        };
        let mut secrets = vec![current];
        if let Some(previous) = &c.previous_secret_sealed {
            secrets.push(key.open(c.endpoint_id, previous)?);
        }
        Ok(secrets)
    }

    /// POSTs `body` to the endpoint; the status, or why there is none.
    async fn post(&self, c: &Claimed, body: Vec<u8>) -> Result<u16, Attempt> {
        // A literal address is dialled without the resolver: it is checked here.
        if let Some(ip) = literal_address(&c.url) {
            if !self.config.egress.permits(ip) {
                tracing::info!(endpoint_id = %c.endpoint_id, "webhook endpoint is a forbidden address; not sent");
                return Err(Attempt::Failed(DeliveryFailure::ForbiddenAddress));
            }
        }
        let secrets = self.secrets(c).map_err(Attempt::Unsigned)?;
        let signature = signature_header(&secrets, Utc::now().timestamp(), &body);
        let sent = self
            .http
            .post(&c.url)
            .header(CONTENT_TYPE, "application/json")
            .header(EVENT_ID_HEADER, c.event_id.to_string())
            .header(EVENT_TYPE_HEADER, &c.event_type)
            .header(SIGNATURE_HEADER, signature)
            .body(body)
            .send()
            .await;
        let mut response = sent.map_err(|e| Attempt::Failed(classify(&e)))?;
        let status = response.status().as_u16();
        // Read a little of the answer so the connection can serve the next delivery.
        // What it says is never kept: only the status counts.
        let mut read = 0;
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    read += chunk.len();
                    if read > MAX_ANSWER_BYTES {
                        break;
                    }
                }
                Ok(None) => break,
                // The status decides: a 2xx whose body was cut off was still received,
                // and any other status is the failure, whatever came after it.
                Err(e) => {
                    tracing::debug!(status, error = %e, "answer body cut off");
                    break;
                }
            }
        }
        Ok(status)
    }
}

/// Why an attempt got no status.
#[derive(Debug)]
enum Attempt {
    /// Sent (or refused before sending), and failed: its class.
    Failed(DeliveryFailure),
    /// Not sent: the endpoint's secret does not open.
    Unsigned(Unsealable),
}

/// The host of `url` if it is an IP address (dialled directly, never resolved).
fn literal_address(url: &str) -> Option<std::net::IpAddr> {
    let url = reqwest::Url::parse(url).ok()?;
    url.host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The class of a failed request: the error's chain is searched for the egress
/// resolver's own errors (a forbidden address, a name that did not resolve); the rest
/// is told apart by what reqwest says of it. The error's text is never kept.
pub fn classify(e: &reqwest::Error) -> DeliveryFailure {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<ForbiddenAddress>() {
            return DeliveryFailure::ForbiddenAddress;
        }
        if c.is::<NotResolved>() {
            return DeliveryFailure::Dns;
        }
        cause = c.source();
    }
    if e.is_timeout() {
        DeliveryFailure::Timeout
    } else if e.is_connect() {
        DeliveryFailure::Connect
    } else {
        DeliveryFailure::Request
    }
}

/// Starts the worker in a task of its own.
pub fn spawn(worker: Worker) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Arc::new(worker).run())
}

#[cfg(test)]
mod tests {
    use rand::{rngs::StdRng, SeedableRng};

    use super::*;

    #[test]
    fn backoff_is_full_jitter_under_a_doubling_ceiling_and_the_cap() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_millis(1_000);
        let mut rng = StdRng::seed_from_u64(7);
        for attempts in 1..=12 {
            let ceiling = (base * 2u32.pow(u32::try_from(attempts - 1).expect("small"))).min(cap);
            let waits: Vec<Duration> = (0..500)
                .map(|_| backoff(base, cap, attempts, &mut rng))
                .collect();
            assert!(waits.iter().all(|w| *w <= ceiling), "attempt {attempts}");
            // Spread over the whole range, not clustered at the ceiling.
            assert!(waits.iter().any(|w| *w < ceiling / 4), "attempt {attempts}");
            assert!(
                waits.iter().any(|w| *w > ceiling * 3 / 4),
                "attempt {attempts}"
            );
        }
    }

    #[test]
    fn backoff_never_overflows() {
        let mut rng = StdRng::seed_from_u64(1);
        let cap = Duration::from_secs(3600);
        for attempts in [0, 1, 63, 64, 1000, i32::MAX] {
            assert!(backoff(Duration::from_secs(30), cap, attempts, &mut rng) <= cap);
        }
    }
}
