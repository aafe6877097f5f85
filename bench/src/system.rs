//! The paysaga system under test: the four real service binaries started by the
//! end-to-end harness (fresh database, Redis prefix, free ports), plus the setup calls a
//! drop needs (products, funded accounts, the gate's quota) over the services' own APIs.

use std::{sync::Arc, time::Duration};

use futures::{stream, StreamExt, TryStreamExt};
use paysaga_e2e::{ServiceKind, Stack, StackOptions};
use reqwest::Client;
use serde_json::json;
use sqlx::PgPool;

use crate::{
    client::{send, Buyers},
    error::{Error, Result},
    wire::{Created, Quota},
};

pub struct System {
    pub stack: Stack,
    pub http: Client,
    pub service_token: String,
    pub gate: String,
    pub order: String,
    pub account: String,
    pub orchestrator: String,
}

fn setup(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Setup(format!("{what}: {e}"))
}

impl System {
    /// Starts the four services (release binaries beside this one) with logs at `warn`,
    /// so per-request logging does not become the thing measured.
    pub async fn start(label: &str, http: Client) -> Result<Self> {
        let options = StackOptions::new(label).rust_log("warn");
        let stack = Stack::start(options)
            .await
            .map_err(|e| setup("starting the services", format!("{e:#}")))?;
        let service_token = paysaga_common::auth::Minter::dev_service()
            .mint("paysaga-bench", Duration::from_secs(4 * 3600));
        Ok(Self {
            gate: stack.url(ServiceKind::Gate),
            order: stack.url(ServiceKind::Order),
            account: stack.url(ServiceKind::Account),
            orchestrator: stack.url(ServiceKind::Orchestrator),
            stack,
            http,
            service_token,
        })
    }

    /// `(name, pid)` of each running service.
    pub fn pids(&self) -> Vec<(String, u32)> {
        ServiceKind::ALL
            .iter()
            .filter_map(|k| {
                self.stack
                    .services
                    .process(*k)
                    .and_then(|p| p.pid())
                    .map(|pid| (k.name().to_owned(), pid))
            })
            .collect()
    }

    pub async fn admin_pool(&self) -> PgPool {
        self.stack.admin_pool().await
    }

    pub fn redis_prefix(&self) -> &str {
        &self.stack.redis.prefix
    }

    async fn service_post<T: serde::de::DeserializeOwned>(
        &self,
        url: String,
        body: serde_json::Value,
    ) -> Result<T> {
        let req = self
            .http
            .post(&url)
            .bearer_auth(&self.service_token)
            .json(&body);
        let reply = send(req).await.map_err(|o| setup(&url, o.0))?;
        if !(200..300).contains(&reply.status) {
            return Err(setup(
                &url,
                format!(
                    "answered {} {}",
                    reply.status,
                    String::from_utf8_lossy(&reply.body)
                ),
            ));
        }
        reply.json().ok_or_else(|| setup(&url, "unreadable answer"))
    }

    /// A product with `units` units at `price` (minor units).
    pub async fn create_product(&self, name: &str, price: i64, units: u64) -> Result<i64> {
        let p: Created = self
            .service_post(
                format!("{}/v1/products", self.order),
                json!({"name": name, "price": price, "units": units}),
            )
            .await?;
        Ok(p.id)
    }

    /// One funded account per buyer, opened `concurrency` at a time; ids in buyer order.
    pub async fn open_accounts(
        &self,
        buyers: &Buyers,
        count: usize,
        balance: i64,
        concurrency: usize,
    ) -> Result<Arc<Vec<i64>>> {
        let ids: Vec<i64> = stream::iter(0..count)
            .map(|i| async move {
                let a: Created = self
                    .service_post(
                        format!("{}/v1/accounts", self.account),
                        json!({"member_id": buyers.member(i), "opening_balance": balance}),
                    )
                    .await?;
                Ok::<_, Error>(a.id)
            })
            .buffered(concurrency.clamp(1, 64))
            .try_collect()
            .await?;
        Ok(Arc::new(ids))
    }

    pub async fn quota(&self, product: i64) -> Result<Quota> {
        let url = format!("{}/v1/quota/{product}", self.gate);
        let reply = send(self.http.get(&url).bearer_auth(&self.service_token))
            .await
            .map_err(|o| setup(&url, o.0))?;
        if reply.status != 200 {
            return Err(setup(&url, format!("answered {}", reply.status)));
        }
        reply.json().ok_or_else(|| setup(&url, "unreadable answer"))
    }

    /// Waits until the gate's quota job has published `expected` for `product`.
    pub async fn wait_quota(&self, product: i64, expected: i64, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.quota(product).await {
                Ok(q) if q.quota == expected => return Ok(()),
                Ok(q) if tokio::time::Instant::now() >= deadline => {
                    return Err(setup(
                        "gate quota",
                        format!(
                            "product {product}: quota {} after {within:?}, expected {expected}",
                            q.quota
                        ),
                    ))
                }
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// `POST /v1/reservations` requests the order service has counted (its
    /// `http_requests_total`, all statuses): what reached order, whoever sent it.
    pub async fn reservation_requests_seen_by_order(&self) -> Result<u64> {
        let url = format!("{}/metrics", self.order);
        let reply = send(self.http.get(&url))
            .await
            .map_err(|o| setup(&url, o.0))?;
        Ok(sum_counter(
            &String::from_utf8_lossy(&reply.body),
            "http_requests_total",
            &[r#"method="POST""#, r#"route="/v1/reservations""#],
        ))
    }
}

/// Sums a Prometheus counter over the series whose labels include all of `labels`.
pub fn sum_counter(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[cfg(test)]
mod tests {
    use super::sum_counter;

    #[test]
    fn sums_only_matching_series() {
        let text = "\
# TYPE http_requests_total counter
http_requests_total{method=\"POST\",route=\"/v1/reservations\",status=\"201\"} 100
http_requests_total{method=\"POST\",route=\"/v1/reservations\",status=\"409\"} 7
http_requests_total{method=\"GET\",route=\"/v1/reservations/{id}\",status=\"200\"} 50
http_requests_total_other{method=\"POST\",route=\"/v1/reservations\"} 1000
http_request_duration_seconds_count{method=\"POST\",route=\"/v1/reservations\",status=\"201\"} 100
";
        assert_eq!(
            sum_counter(
                text,
                "http_requests_total",
                &[r#"method="POST""#, r#"route="/v1/reservations""#]
            ),
            107
        );
        assert_eq!(
            sum_counter(text, "http_requests_total", &[r#"route="/v1/none""#]),
            0
        );
    }
}
