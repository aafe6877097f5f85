//! The gate benchmark's core, reusable by the workspace benchmark: in-process servers
//! (the gate, an authenticated constant handler as the ceiling, an unauthenticated one),
//! a closed-loop HTTP load driver, and the scenarios `gate-bench` prints.
//!
//! Every server goes through the same common middleware stack (`server::finish`), so
//! the differences between rows are the handlers' own work. The quota is seeded
//! directly in Redis: the order service is not on the pass path.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use axum::{
    http::StatusCode,
    routing::{get, post},
    Router,
};
use paysaga_common::{
    auth::{Minter, Verifier},
    extract::Json,
    server,
};
use tokio::net::TcpListener;
use utoipa::OpenApi;

use crate::{
    api::IssuePass,
    auth::{BuyerAuth, CachedBuyer},
    AppState, Config,
};

/// One request shape: where to send it and, for authenticated targets, whose tokens.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    /// `Some(body)` sends a POST with this JSON body; `None` a GET.
    pub body: Option<String>,
    /// Request `i` carries `tokens[i % len]`; empty sends no Authorization.
    pub tokens: Arc<Vec<String>>,
}

/// What a load phase measured.
#[derive(Debug, Clone)]
pub struct LoadStats {
    pub label: String,
    pub connections: usize,
    pub requests: usize,
    pub by_status: BTreeMap<u16, usize>,
    pub elapsed: Duration,
    /// Latencies in microseconds per status, sorted.
    latencies: BTreeMap<u16, Vec<u32>>,
}

impl LoadStats {
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The `q` quantile (0..=1) of all answers, or of those with `status`.
    pub fn quantile(&self, q: f64, status: Option<u16>) -> Duration {
        let mut all: Vec<u32>;
        let v = match status {
            Some(s) => match self.latencies.get(&s) {
                Some(v) => v,
                None => return Duration::ZERO,
            },
            None => {
                all = self.latencies.values().flatten().copied().collect();
                all.sort_unstable();
                &all
            }
        };
        if v.is_empty() {
            return Duration::ZERO;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        Duration::from_micros(u64::from(v[i]))
    }

    pub fn count(&self, status: u16) -> usize {
        self.by_status.get(&status).copied().unwrap_or(0)
    }
}

/// Sends `total` requests over `connections` concurrent clients (each sends its next
/// request when the previous is answered) and records status and latency of each.
pub async fn drive(
    http: &reqwest::Client,
    label: &str,
    target: &Target,
    total: usize,
    connections: usize,
) -> LoadStats {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let http = http.clone();
            let target = target.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut seen: Vec<(u16, u32)> = Vec::with_capacity(total / connections + 1);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let mut req = match &target.body {
                        Some(b) => http
                            .post(&target.url)
                            .header("content-type", "application/json")
                            .body(b.clone()),
                        None => http.get(&target.url),
                    };
                    if !target.tokens.is_empty() {
                        req = req.bearer_auth(&target.tokens[i % target.tokens.len()]);
                    }
                    let t = Instant::now();
                    let status = match req.send().await {
                        Ok(r) => {
                            let s = r.status().as_u16();
                            let _ = r.bytes().await;
                            s
                        }
                        Err(_) => 0,
                    };
                    seen.push((
                        status,
                        t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32,
                    ));
                }
                seen
            })
        })
        .collect();
    let mut by_status = BTreeMap::new();
    let mut latencies: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
    for w in workers {
        for (status, micros) in w.await.unwrap_or_default() {
            *by_status.entry(status).or_insert(0) += 1;
            latencies.entry(status).or_default().push(micros);
        }
    }
    let elapsed = start.elapsed();
    for v in latencies.values_mut() {
        v.sort_unstable();
    }
    LoadStats {
        label: label.to_owned(),
        connections,
        requests: total,
        by_status,
        elapsed,
        latencies,
    }
}

/// A pooled HTTP client for `connections` concurrent requests to loopback servers.
pub fn http_client(connections: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_default()
}

async fn serve(router: Router) -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = server::serve(listener, router, std::future::pending()).await;
    });
    Ok(url)
}

#[derive(OpenApi)]
struct NoDoc;

async fn constant() -> (StatusCode, axum::Json<serde_json::Value>) {
    (StatusCode::OK, axum::Json(serde_json::json!({"ok": true})))
}

async fn authenticated(
    CachedBuyer(member): CachedBuyer,
    Json(req): Json<IssuePass>,
) -> (StatusCode, axum::Json<serde_json::Value>) {
    let _ = (member, req);
    (StatusCode::OK, axum::Json(serde_json::json!({"ok": true})))
}

/// The servers of one benchmark run.
pub struct Servers {
    pub state: AppState,
    pub gate: String,
    /// `POST /ceiling`: buyer auth through the gate's cache and the same body parsing.
    pub ceiling: String,
    /// The same with the token cache disabled: full Ed25519 JWT verification each time.
    pub ceiling_uncached: String,
    /// `GET /bare`: no authentication.
    pub bare: String,
}

/// Starts the gate (no recompute job; quotas are seeded) and the reference handlers.
pub async fn start_servers(config: &Config) -> anyhow::Result<Servers> {
    let verifier = Arc::new(Verifier::development());
    let state = AppState::with_verifier(config, verifier.clone())?;
    let gate = serve(crate::app(state.clone())).await?;
    let with_auth = |auth: Arc<BuyerAuth>| {
        server::finish(
            Router::new()
                .route("/ceiling", post(authenticated))
                .with_state(auth),
            NoDoc::openapi(),
        )
    };
    let ceiling = serve(with_auth(state.auth.clone())).await? + "/ceiling";
    let ceiling_uncached =
        serve(with_auth(Arc::new(BuyerAuth::new(verifier, 0)))).await? + "/ceiling";
    let bare = serve(server::finish(
        Router::new().route("/bare", get(constant)),
        NoDoc::openapi(),
    ))
    .await?
        + "/bare";
    Ok(Servers {
        state,
        gate: gate + "/v1/passes",
        ceiling,
        ceiling_uncached,
        bare,
    })
}

/// Buyer tokens for `n` distinct members.
pub fn mint_tokens(n: usize, tag: &str) -> Vec<String> {
    let minter = Minter::dev_buyer();
    (0..n)
        .map(|i| minter.mint(&format!("{tag}-{i}"), Duration::from_secs(3600)))
        .collect()
}

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub redis_url: String,
    pub connections: usize,
    pub requests: usize,
    pub drop_units: i64,
    pub drop_buyers: usize,
    pub drop_connections: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            redis_url: paysaga_common::config::string("REDIS_URL", "redis://127.0.0.1:6379/"),
            connections: 128,
            requests: 20_000,
            drop_units: 100,
            drop_buyers: 10_000,
            drop_connections: 256,
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub bare: LoadStats,
    pub ceiling: LoadStats,
    pub ceiling_uncached: LoadStats,
    pub issue: LoadStats,
    pub sold_out: LoadStats,
    pub drop: LoadStats,
    pub drop_units: i64,
    /// `MEMORY USAGE` of the holders set divided by the passes in it.
    pub redis_bytes_per_pass: f64,
    /// Growth of Redis `used_memory` during issuance divided by passes issued.
    pub redis_used_memory_per_pass: f64,
}

async fn redis_used_memory(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<i64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO memory has no used_memory"))
}

/// Runs every scenario once, in order, against fresh products under a private prefix.
pub async fn run(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let prefix = format!("bench{}:", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut config = Config::local(&cfg.redis_url, &prefix, "http://127.0.0.1:9");
    config.sold_out_cache = Duration::from_secs(1);
    let servers = start_servers(&config).await?;
    let store = servers.state.gate.store.clone();
    let client = redis::Client::open(cfg.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;

    let (issue_product, sold_out_product, drop_product) = (1, 2, 3);
    store
        .set_quota(issue_product, cfg.requests as i64 * 2)
        .await?;
    store.set_quota(sold_out_product, 0).await?;
    store.set_quota(drop_product, cfg.drop_units).await?;

    let http = http_client(cfg.connections.max(cfg.drop_connections));
    let tokens = Arc::new(mint_tokens(cfg.requests.max(cfg.drop_buyers), "buyer"));
    let body = |p: i64| Some(format!(r#"{{"product_id":{p}}}"#));
    let target = |url: &str, body: Option<String>, tokens: Arc<Vec<String>>| Target {
        url: url.to_owned(),
        body,
        tokens,
    };
    let n = cfg.requests;
    let c = cfg.connections;

    // Warm-up: connections open, every buyer's token verified once (a buyer's first
    // request in a drop pays the full verification; the rows below are the steady state).
    drive(
        &http,
        "warm-up",
        &target(&servers.bare, None, Arc::new(Vec::new())),
        n / 4,
        c,
    )
    .await;
    drive(
        &http,
        "warm-up",
        &target(&servers.ceiling, body(0), tokens.clone()),
        tokens.len(),
        c,
    )
    .await;

    let bare = drive(
        &http,
        "bare handler, no auth",
        &target(&servers.bare, None, Arc::new(Vec::new())),
        n,
        c,
    )
    .await;
    let ceiling = drive(
        &http,
        "authenticated ceiling (cached auth)",
        &target(&servers.ceiling, body(issue_product), tokens.clone()),
        n,
        c,
    )
    .await;
    let uncached = drive(
        &http,
        "authenticated ceiling, no token cache",
        &target(
            &servers.ceiling_uncached,
            body(issue_product),
            tokens.clone(),
        ),
        n,
        c,
    )
    .await;

    let used_before = redis_used_memory(&mut conn).await?;
    let issue = drive(
        &http,
        "pass issuance",
        &target(&servers.gate, body(issue_product), tokens.clone()),
        n,
        c,
    )
    .await;
    let used_after = redis_used_memory(&mut conn).await?;
    let holders = store.keys(issue_product).holders;
    let holder_bytes: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&holders)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await?;
    let in_flight: i64 = redis::cmd("ZCARD")
        .arg(&holders)
        .query_async(&mut conn)
        .await?;

    let sold_out = drive(
        &http,
        "sold-out answer",
        &target(&servers.gate, body(sold_out_product), tokens.clone()),
        n,
        c,
    )
    .await;

    let drop_tokens = Arc::new(mint_tokens(cfg.drop_buyers, "drop"));
    // Their tokens are verified once beforehand, as buyers waiting for a drop are.
    drive(
        &http,
        "warm-up",
        &target(&servers.ceiling, body(0), drop_tokens.clone()),
        drop_tokens.len(),
        c,
    )
    .await;
    let drop = drive(
        &http,
        "drop: each buyer once",
        &target(&servers.gate, body(drop_product), drop_tokens),
        cfg.drop_buyers,
        cfg.drop_connections,
    )
    .await;

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut conn).await?;
    }
    Ok(BenchReport {
        bare,
        ceiling,
        ceiling_uncached: uncached,
        issue,
        sold_out,
        drop,
        drop_units: cfg.drop_units,
        redis_bytes_per_pass: holder_bytes as f64 / in_flight.max(1) as f64,
        redis_used_memory_per_pass: (used_after - used_before) as f64 / in_flight.max(1) as f64,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

impl BenchReport {
    /// The results as markdown tables.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| scenario | conns | requests | answers | req/s | p50 ms | p95 ms | p99 ms |"
        );
        let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---:|---:|");
        for s in [
            &self.bare,
            &self.ceiling,
            &self.ceiling_uncached,
            &self.issue,
            &self.sold_out,
        ] {
            let answers: Vec<String> = s
                .by_status
                .iter()
                .map(|(k, v)| format!("{k}×{v}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.0} | {} | {} | {} |",
                s.label,
                s.connections,
                s.requests,
                answers.join(" "),
                s.throughput(),
                ms(s.quantile(0.5, None)),
                ms(s.quantile(0.95, None)),
                ms(s.quantile(0.99, None)),
            );
        }
        let ratio = |a: &LoadStats, b: &LoadStats| a.throughput() / b.throughput();
        let _ = writeln!(out);
        let _ = writeln!(out, "| ratio | value | target |");
        let _ = writeln!(out, "|---|---:|---:|");
        let _ = writeln!(
            out,
            "| issuance / authenticated ceiling | {:.2} | >= 0.50 |",
            ratio(&self.issue, &self.ceiling)
        );
        let _ = writeln!(
            out,
            "| sold-out / authenticated ceiling | {:.2} | >= 0.80 |",
            ratio(&self.sold_out, &self.ceiling)
        );
        let _ = writeln!(
            out,
            "| authenticated ceiling / bare | {:.2} | |",
            ratio(&self.ceiling, &self.bare)
        );
        let _ = writeln!(
            out,
            "| ceiling without token cache / with | {:.2} | |",
            ratio(&self.ceiling_uncached, &self.ceiling)
        );
        let _ = writeln!(out);
        let d = &self.drop;
        let _ = writeln!(out, "| drop | value |");
        let _ = writeln!(out, "|---|---:|");
        let _ = writeln!(out, "| units | {} |", self.drop_units);
        let _ = writeln!(
            out,
            "| buyers (each asks once, {} connections) | {} |",
            d.connections, d.requests
        );
        let _ = writeln!(out, "| passes issued (201) | {} |", d.count(201));
        let _ = writeln!(out, "| SOLD_OUT answers (409) | {} |", d.count(409));
        let _ = writeln!(
            out,
            "| other answers | {} |",
            d.requests - d.count(201) - d.count(409)
        );
        let _ = writeln!(
            out,
            "| loser p50 / p95 / p99 ms to learn SOLD_OUT | {} / {} / {} |",
            ms(d.quantile(0.5, Some(409))),
            ms(d.quantile(0.95, Some(409))),
            ms(d.quantile(0.99, Some(409)))
        );
        let _ = writeln!(out, "| whole drop answered in ms | {} |", ms(d.elapsed));
        let _ = writeln!(out);
        let _ = writeln!(out, "| Redis memory per in-flight pass | bytes |");
        let _ = writeln!(out, "|---|---:|");
        let _ = writeln!(
            out,
            "| MEMORY USAGE of the holders set / passes | {:.0} |",
            self.redis_bytes_per_pass
        );
        let _ = writeln!(
            out,
            "| INFO used_memory growth during issuance / passes | {:.0} |",
            self.redis_used_memory_per_pass
        );
        out
    }
}
