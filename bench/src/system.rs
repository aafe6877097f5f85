//! The paysaga system under test: the five real service binaries started by the
//! end-to-end harness (fresh database, Redis prefix, free ports, a fresh buyer-token key
//! in the member service), plus the setup calls a drop needs (products, buyers signed up
//! with funded accounts, the gate's quota) over the services' own APIs.

use std::{
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use futures::{stream, StreamExt, TryStreamExt};
use paysaga_common::{
    auth::{Audience, ServiceRole},
    client::{CallError, Credential},
    credentials::TokenSource,
};
use paysaga_contracts::member::{
    api::{BulkMember, BulkSignUpRequest, BulkSignedUp},
    client::MemberClient,
};
use paysaga_e2e::{Stack, StackOptions};
use paysaga_supervisor::ServiceKind;
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
    pub service_credential: Credential,
    pub gate: String,
    pub order: String,
    pub account: String,
    pub orchestrator: String,
    pub member: String,
}

/// Buyers of a started system and their accounts: buyer `i` pays from `accounts[i]`.
pub struct Seeded {
    pub buyers: Buyers,
    pub accounts: Arc<Vec<i64>>,
}

/// DEVELOPMENT ONLY: the password every seeded buyer shares (the harness's).
pub const BUYER_PASSWORD: &str = paysaga_drop::setup::BUYER_PASSWORD;
/// Members per bulk sign-up (the service takes up to `MAX_BULK_MEMBERS`).
const SEED_CHUNK: usize = 1_000;
/// Bulk sign-ups in flight at once.
const SEED_PARALLEL: usize = 3;
/// Tries of one bulk sign-up: it is idempotent (same emails, same password), and asking
/// again also opens an account the first answer came back without.
const SEED_TRIES: u32 = 3;
/// Time allowed for one bulk sign-up (a debug build opening 1,000 accounts).
const SEED_TIMEOUT: Duration = Duration::from_secs(180);

/// The email of buyer `i` of a run labelled `label`.
fn buyer_email(label: &str, i: usize) -> String {
    format!("bench-{label}-{i}@buyers.paysaga.test").to_ascii_lowercase()
}

/// One bulk sign-up, asked again while its outcome is unknown or a member came back
/// without an account.
async fn seed_chunk(client: &MemberClient, req: &BulkSignUpRequest) -> Result<Vec<BulkSignedUp>> {
    let mut last = String::new();
    for attempt in 1..=SEED_TRIES {
        match client.bulk_sign_up(req).await {
            Ok(a) if a.body.members.len() != req.members.len() => {
                return Err(setup(
                    "seeding buyers",
                    format!(
                        "asked for {} members, got {}",
                        req.members.len(),
                        a.body.members.len()
                    ),
                ))
            }
            Ok(a) if a.body.members.iter().all(|m| m.member.account_id.is_some()) => {
                return Ok(a.body.members)
            }
            Ok(_) => last = "a member came back without an account".into(),
            Err(e @ CallError::Rejected { .. }) => {
                return Err(setup("seeding buyers (POST /v1/members/bulk)", e))
            }
            Err(e) => last = e.to_string(),
        }
        if attempt < SEED_TRIES {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Err(setup(
        "seeding buyers (POST /v1/members/bulk)",
        format!("{SEED_TRIES} tries: {last}"),
    ))
}

/// Variables for every service of a benchmark's system (see [`System::start`]).
const SERVICE_ENV: &str = "BENCH_SERVICE_ENV";

/// `BENCH_TLS=1`: every service serves TLS and calls the others over `https`, with a
/// certificate made for the run (PostgreSQL and Redis stay as they are configured).
/// Without it every link is plain, the services' PostgreSQL links included (see
/// [`plain_unless_named`]).
const TLS_VAR: &str = "BENCH_TLS";

/// `admin_url` with `sslmode=disable` when it names no `sslmode`. A URL without one means
/// libpq's `prefer`, which encrypts every link to a server that offers TLS (Debian's
/// PostgreSQL does, out of the box): a run without `BENCH_TLS` would then measure TLS on
/// the busiest links while saying it measured none. An `sslmode` the URL names is kept.
pub fn plain_unless_named(admin_url: &str) -> Result<String> {
    let mut url = reqwest::Url::parse(admin_url)
        .map_err(|e| setup("TEST_ADMIN_DATABASE_URL", format!("not a URL: {e}")))?;
    if !url.query_pairs().any(|(k, _)| k == "sslmode") {
        url.query_pairs_mut().append_pair("sslmode", "disable");
    }
    Ok(url.to_string())
}

/// The administrator's URL this run's databases are reached with: `admin_url` as it is
/// under `BENCH_TLS=1`, else plain unless it names an `sslmode` (see
/// [`plain_unless_named`]). The services' links and the benchmark's own are carried
/// alike.
pub fn run_database_url(admin_url: &str) -> Result<String> {
    match run_tls() {
        Some(_) => Ok(admin_url.to_owned()),
        None => plain_unless_named(admin_url),
    }
}

/// The run's certificate when `BENCH_TLS=1`, made on the first call. Its CA goes into
/// this process's `SSL_CERT_FILE`, so the benchmark's own clients trust it as clients
/// trust any root beyond the platform's: call this before the first client is made
/// (`main` does).
pub fn run_tls() -> Option<&'static paysaga_common::testkit::PkiFiles> {
    static TLS: OnceLock<Option<paysaga_common::testkit::PkiFiles>> = OnceLock::new();
    TLS.get_or_init(|| {
        let on = std::env::var(TLS_VAR).is_ok_and(|v| v.trim() == "1");
        on.then(|| {
            let files = paysaga_common::testkit::TestPki::for_names(&["127.0.0.1"]).files();
            std::env::set_var("SSL_CERT_FILE", files.ca());
            files
        })
    })
    .as_ref()
}

fn setup(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Setup(format!("{what}: {e}"))
}

/// `options` with the variables of `BENCH_SERVICE_ENV` (`NAME=VALUE` pairs,
/// space-separated) set for every service.
pub fn with_service_env(mut options: StackOptions) -> Result<StackOptions> {
    for pair in std::env::var(SERVICE_ENV)
        .unwrap_or_default()
        .split_whitespace()
    {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| setup(SERVICE_ENV, format!("{pair:?} is not NAME=VALUE")))?;
        options = options.env_all(name, value);
    }
    Ok(options)
}

impl System {
    /// The buyer-facing services of this system, called through `http`, with counters of
    /// their own.
    pub fn endpoints(&self, http: Client) -> crate::flow::Endpoints {
        crate::flow::Endpoints {
            http,
            gate: self.gate.as_str().into(),
            order: self.order.as_str().into(),
            orchestrator: self.orchestrator.as_str().into(),
            counters: Arc::new(crate::flow::Counters::default()),
        }
    }

    /// Starts the five services (release binaries beside this one) with logs at `warn`,
    /// so per-request logging does not become the thing measured.
    /// `BENCH_SERVICE_ENV` (`NAME=VALUE` pairs, space-separated) sets variables for
    /// every service, to measure a tuning (`CLAIM_FLUSHES=1 WRITE_FLUSHES=1`) without a
    /// rebuild.
    pub async fn start(label: &str, http: Client) -> Result<Self> {
        Self::start_with(label, http, |o| o).await
    }

    /// [`System::start`] with `tweak` applied to the stack's options (a setting of one
    /// service, say).
    pub async fn start_with(
        label: &str,
        http: Client,
        tweak: impl FnOnce(StackOptions) -> StackOptions,
    ) -> Result<Self> {
        let mut options = with_service_env(tweak(StackOptions::new(label).rust_log("warn")))?;
        if let Some(files) = run_tls() {
            options = options.tls(paysaga_e2e::tls_files(files));
        }
        if options.admin_database_url.is_none() {
            options = options.database(run_database_url(&paysaga_common::testkit::admin_url())?);
        }
        let stack = Stack::start(options)
            .await
            .map_err(|e| setup("starting the services", format!("{e:#}")))?;
        let service_credential = TokenSource::development(ServiceRole::Operator).into();
        Ok(Self {
            gate: stack.url(ServiceKind::Gate),
            order: stack.url(ServiceKind::Order),
            account: stack.url(ServiceKind::Account),
            orchestrator: stack.url(ServiceKind::Orchestrator),
            member: stack.url(ServiceKind::Member),
            stack,
            http,
            service_credential,
        })
    }

    /// `(name, pid)` of each running service.
    pub fn pids(&self) -> Vec<(String, u32)> {
        stack_pids(&self.stack)
    }

    pub async fn admin_pool(&self) -> PgPool {
        self.stack.admin_pool().await
    }

    /// How the services' PostgreSQL links are carried, read from the server
    /// (`pg_stat_ssl`), not assumed from their URLs: `"24 plain"`, `"24 TLS"`.
    pub async fn database_links(&self) -> Result<String> {
        let pool = self.admin_pool().await;
        let rows: Vec<(bool, i64)> = sqlx::query_as(
            r#"SELECT s.ssl, COUNT(*)
               FROM pg_stat_ssl s
               JOIN pg_stat_activity a ON a.pid = s.pid
               WHERE a.datname = current_database() AND a.usename <> current_user
               GROUP BY s.ssl
               ORDER BY s.ssl"#,
        )
        .fetch_all(&pool)
        .await
        .map_err(|e| setup("reading the services' PostgreSQL links", e))?;
        pool.close().await;
        Ok(links_line(&rows))
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
            .bearer_auth(self.service_credential.bearer(Audience::Order))
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

    /// `count` buyers signed up through the member service in bulk, each with a funded
    /// account holding `balance` and a signed-in session, in buyer order: buyer `i` is
    /// `bench-<label>-<i>@buyers.paysaga.test`, its member id (the token's subject) the
    /// member's id. Setup, never timed: prints how long it took.
    pub async fn seed_buyers(&self, label: &str, count: usize, balance: i64) -> Result<Seeded> {
        let started = Instant::now();
        let client = MemberClient::new(&self.member, &self.service_credential, SEED_TIMEOUT);
        let chunks: Vec<Vec<usize>> = (0..count)
            .collect::<Vec<_>>()
            .chunks(SEED_CHUNK)
            .map(<[usize]>::to_vec)
            .collect();
        let seeded: Vec<Vec<BulkSignedUp>> = stream::iter(chunks)
            .map(|chunk| {
                let client = client.clone();
                async move {
                    let req = BulkSignUpRequest {
                        password: BUYER_PASSWORD.to_owned(),
                        members: chunk
                            .iter()
                            .map(|&i| BulkMember {
                                email: buyer_email(label, i),
                            })
                            .collect(),
                        opening_balance: Some(balance),
                    };
                    seed_chunk(&client, &req).await
                }
            })
            .buffered(SEED_PARALLEL)
            .try_collect()
            .await?;
        let (mut members, mut tokens, mut accounts) = (
            Vec::with_capacity(count),
            Vec::with_capacity(count),
            Vec::with_capacity(count),
        );
        for m in seeded.into_iter().flatten() {
            let account = m.member.account_id.ok_or_else(|| {
                setup(
                    "seeding buyers",
                    format!("member {} has no account", m.member.id),
                )
            })?;
            members.push(m.member.id.to_string());
            tokens.push(m.session.access_token);
            accounts.push(account);
        }
        let took = started.elapsed().as_secs_f64();
        eprintln!(
            "  setup: seeded {count} buyers through the member service (signed in, accounts opened with {balance}) in {took:.1}s, {:.0} members/s",
            count as f64 / took.max(1e-9)
        );
        Ok(Seeded {
            buyers: Buyers::new(members, tokens),
            accounts: Arc::new(accounts),
        })
    }

    pub async fn quota(&self, product: i64) -> Result<Quota> {
        let url = format!("{}/v1/quota/{product}", self.gate);
        let reply = send(
            self.http
                .get(&url)
                .bearer_auth(self.service_credential.bearer(Audience::Gate)),
        )
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

    /// The order service's metrics page.
    pub async fn order_metrics(&self) -> Result<String> {
        let url = format!("{}/metrics", self.stack.metrics_url(ServiceKind::Order));
        let reply = send(self.http.get(&url))
            .await
            .map_err(|o| setup(&url, o.0))?;
        Ok(String::from_utf8_lossy(&reply.body).into_owned())
    }

    /// `POST /v1/reservations` requests the order service has counted (its
    /// `http_requests_total`, all statuses): what reached order, whoever sent it.
    pub async fn reservation_requests_seen_by_order(&self) -> Result<u64> {
        let url = format!("{}/metrics", self.stack.metrics_url(ServiceKind::Order));
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

/// Sums a Prometheus series `name` (with or without labels) over all its series.
pub fn sum_series(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sums a Prometheus counter over the series whose labels include all of `labels`.
pub fn sum_counter(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `(name, pid)` of each running service of `stack`.
pub fn stack_pids(stack: &Stack) -> Vec<(String, u32)> {
    ServiceKind::ALL
        .iter()
        .filter_map(|k| {
            stack
                .services
                .process(*k)
                .and_then(|p| p.pid())
                .map(|pid| (k.name().to_owned(), pid))
        })
        .collect()
}

/// `(encrypted, connections)` rows as `"12 plain, 12 TLS"`.
fn links_line(rows: &[(bool, i64)]) -> String {
    if rows.is_empty() {
        return "none open".to_owned();
    }
    rows.iter()
        .map(|(tls, n)| format!("{n} {}", if *tls { "TLS" } else { "plain" }))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::{links_line, plain_unless_named, sum_counter, sum_series};

    #[test]
    fn a_database_url_without_sslmode_is_made_plain_and_a_named_one_kept() {
        let plain = plain_unless_named("postgres://postgres:pw@127.0.0.1:5432/postgres").unwrap();
        assert_eq!(
            plain,
            "postgres://postgres:pw@127.0.0.1:5432/postgres?sslmode=disable"
        );
        let named = "postgres://p@127.0.0.1/postgres?sslmode=require&application_name=x";
        assert_eq!(plain_unless_named(named).unwrap(), named);
        let other =
            plain_unless_named("postgres://p@127.0.0.1/postgres?connect_timeout=5").unwrap();
        assert!(
            other.ends_with("?connect_timeout=5&sslmode=disable"),
            "{other}"
        );
        assert!(plain_unless_named("not a url").is_err());
    }

    #[test]
    fn links_are_counted_by_transport() {
        assert_eq!(links_line(&[]), "none open");
        assert_eq!(links_line(&[(false, 24)]), "24 plain");
        assert_eq!(links_line(&[(false, 3), (true, 21)]), "3 plain, 21 TLS");
    }

    #[test]
    fn sums_a_series_with_or_without_labels() {
        let text = "\
order_claim_flush_seconds_sum 1.5
order_claim_flush_seconds_count 3
order_claim_flush_seconds_sum_other 100
order_claim_counter_held_seconds_sum{service=\"order\"} 0.25
";
        assert_eq!(sum_series(text, "order_claim_flush_seconds_sum"), 1.5);
        assert_eq!(sum_series(text, "order_claim_flush_seconds_count"), 3.0);
        assert_eq!(
            sum_series(text, "order_claim_counter_held_seconds_sum"),
            0.25
        );
        assert_eq!(sum_series(text, "absent"), 0.0);
    }

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
