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
    auth::{Buyer, Minter, Verifier},
    extract::Json,
    server,
};
use tokio::net::TcpListener;
use utoipa::OpenApi;

use crate::{api::IssuePass, AppState, Config};

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
    Buyer(member): Buyer,
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
    let with_auth = |auth: Arc<Verifier>| {
        server::finish(
            Router::new()
                .route("/ceiling", post(authenticated))
                .with_state(auth),
            NoDoc::openapi(),
        )
    };
    let ceiling = serve(with_auth(state.verifier.clone())).await? + "/ceiling";
    let ceiling_uncached = serve(with_auth(verifier)).await? + "/ceiling";
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
    /// Interleaved repetitions; each row reports its median round.
    pub rounds: usize,
    pub only: Only,
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
            rounds: 3,
            only: Only::All,
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
    pub rounds: usize,
    pub micro: Micro,
    /// Median over rounds of each round's paired ratio.
    pub ratios: Ratios,
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

/// Single-threaded costs of the pieces of a pass, in microseconds per operation.
#[derive(Debug, Clone, Default)]
pub struct Micro {
    pub sign_pass_us: f64,
    pub verify_jwt_us: f64,
    pub cached_auth_us: f64,
    /// One issue script round trip, one at a time (latency, not throughput).
    pub redis_issue_us: f64,
    /// Issue scripts with 128 in flight on the one multiplexed connection: ops/s.
    pub redis_issue_per_sec: f64,
}

/// Measures the pieces of a pass one by one.
pub async fn micro(state: &AppState, tokens: &[String], product: i64) -> anyhow::Result<Micro> {
    let n = tokens.len().min(5_000);
    let member = paysaga_common::auth::MemberId::parse("micro").map_err(anyhow::Error::msg)?;
    let per = |t: Instant, n: usize| t.elapsed().as_secs_f64() * 1e6 / n as f64;

    let t = Instant::now();
    for i in 0..n {
        std::hint::black_box(state.gate.sign(product, &member, 2_000_000_000 + i as i64));
    }
    let sign_pass_us = per(t, n);

    let fresh = Verifier::development();
    let now = chrono::Utc::now().timestamp();
    let t = Instant::now();
    for tok in &tokens[..n] {
        let _ = std::hint::black_box(fresh.verify_buyer(tok));
    }
    let verify_jwt_us = per(t, n);

    let t = Instant::now();
    for tok in &tokens[..n] {
        let _ = std::hint::black_box(state.verifier.verify_buyer(tok));
    }
    let cached_auth_us = per(t, n);

    let store = &state.gate.store;
    store.set_quota(product, 1_000_000).await?;
    let t = Instant::now();
    for i in 0..n {
        store
            .issue(product, &format!("m{i}"), now, now + 60)
            .await?;
    }
    let redis_issue_us = per(t, n);

    let next = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..128)
        .map(|_| {
            let store = store.clone();
            let next = next.clone();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= 20_000 {
                        break;
                    }
                    let _ = store.issue(product, &format!("c{i}"), now, now + 60).await;
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let redis_issue_per_sec = 20_000.0 / t.elapsed().as_secs_f64();
    Ok(Micro {
        sign_pass_us,
        verify_jwt_us,
        cached_auth_us,
        redis_issue_us,
        redis_issue_per_sec,
    })
}

/// Throughput ratios, each the median over rounds of rows measured back to back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ratios {
    pub issue_vs_ceiling: f64,
    pub sold_out_vs_ceiling: f64,
    pub ceiling_vs_bare: f64,
    pub uncached_vs_ceiling: f64,
}

/// Which rows to run; the others are reported as empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    All,
    Issue,
    SoldOut,
    Ceiling,
    Micro,
}

/// The median-throughput run of each scenario across rounds.
fn median(mut runs: Vec<LoadStats>) -> LoadStats {
    runs.sort_by(|a, b| a.throughput().total_cmp(&b.throughput()));
    let mid = runs.len() / 2;
    runs.swap_remove(mid)
}

fn empty(label: &str) -> LoadStats {
    LoadStats {
        label: label.to_owned(),
        connections: 0,
        requests: 0,
        by_status: BTreeMap::new(),
        elapsed: Duration::from_secs(1),
        latencies: BTreeMap::new(),
    }
}

/// Runs the scenarios `cfg.rounds` times, interleaved so that a noisy neighbour on the
/// machine hits every row alike, and keeps each row's median round. Each round issues
/// passes for a fresh product, so every issuance is a new pass for a new member.
pub async fn run(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let prefix = format!("bench{}:", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut config = Config::local(&cfg.redis_url, &prefix, "http://127.0.0.1:9");
    config.sold_out_cache = Duration::from_secs(1);
    let servers = start_servers(&config).await?;
    let store = servers.state.gate.store.clone();
    let client = redis::Client::open(cfg.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;

    let (sold_out_product, drop_product) = (2, 3);
    store.set_quota(sold_out_product, 0).await?;
    store.set_quota(drop_product, cfg.drop_units).await?;

    let http = http_client(cfg.connections.max(cfg.drop_connections));
    let tokens = Arc::new(mint_tokens(cfg.requests, "buyer"));
    let body = |p: i64| Some(format!(r#"{{"product_id":{p}}}"#));
    let target = |url: &str, body: Option<String>, tokens: Arc<Vec<String>>| Target {
        url: url.to_owned(),
        body,
        tokens,
    };
    let no_tokens = Arc::new(Vec::new());
    let n = cfg.requests;
    let c = cfg.connections;
    let only = cfg.only;
    let wants = |o: Only| only == Only::All || only == o;

    // Warm-up: connections open, every buyer's token verified once (a buyer's first
    // request in a drop pays the full verification; the rows below are the steady state).
    drive(
        &http,
        "warm-up",
        &target(&servers.bare, None, no_tokens.clone()),
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

    let micro_costs = if wants(Only::Micro) {
        micro(&servers.state, &tokens, 99).await?
    } else {
        Micro::default()
    };

    let (mut bare, mut ceiling, mut uncached, mut issue, mut sold_out) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut bytes_per_pass = 0.0;
    let mut used_per_pass = 0.0;
    for round in 0..cfg.rounds.max(1) {
        if only == Only::All {
            bare.push(
                drive(
                    &http,
                    "bare handler, no auth",
                    &target(&servers.bare, None, no_tokens.clone()),
                    n,
                    c,
                )
                .await,
            );
        }
        if only == Only::All {
            uncached.push(
                drive(
                    &http,
                    "authenticated ceiling, no token cache",
                    &target(&servers.ceiling_uncached, body(1), tokens.clone()),
                    n,
                    c,
                )
                .await,
            );
        }
        if wants(Only::Ceiling) {
            ceiling.push(
                drive(
                    &http,
                    "authenticated ceiling (cached auth)",
                    &target(&servers.ceiling, body(1), tokens.clone()),
                    n,
                    c,
                )
                .await,
            );
        }
        if wants(Only::Issue) {
            let product = 100 + round as i64;
            store.set_quota(product, n as i64).await?;
            let used_before = redis_used_memory(&mut conn).await?;
            issue.push(
                drive(
                    &http,
                    "pass issuance",
                    &target(&servers.gate, body(product), tokens.clone()),
                    n,
                    c,
                )
                .await,
            );
            let used_after = redis_used_memory(&mut conn).await?;
            let holders = store.keys(product).holders;
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
            bytes_per_pass = holder_bytes as f64 / in_flight.max(1) as f64;
            used_per_pass = (used_after - used_before) as f64 / in_flight.max(1) as f64;
        }
        if wants(Only::SoldOut) {
            sold_out.push(
                drive(
                    &http,
                    "sold-out answer",
                    &target(&servers.gate, body(sold_out_product), tokens.clone()),
                    n,
                    c,
                )
                .await,
            );
        }
    }

    let drop = if only == Only::All {
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
        drive(
            &http,
            "drop: each buyer once",
            &target(&servers.gate, body(drop_product), drop_tokens),
            cfg.drop_buyers,
            cfg.drop_connections,
        )
        .await
    } else {
        empty("drop")
    };

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut conn).await?;
    }
    // Ratios pair each round's rows, measured back to back, and take the median, so
    // a burst of load from elsewhere does not favour one side.
    let paired = |a: &[LoadStats], b: &[LoadStats]| {
        let mut r: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(x, y)| x.throughput() / y.throughput())
            .collect();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    };
    let ratios = Ratios {
        issue_vs_ceiling: paired(&issue, &ceiling),
        sold_out_vs_ceiling: paired(&sold_out, &ceiling),
        ceiling_vs_bare: paired(&ceiling, &bare),
        uncached_vs_ceiling: paired(&uncached, &ceiling),
    };
    let pick = |v: Vec<LoadStats>, label: &str| {
        if v.is_empty() {
            empty(label)
        } else {
            median(v)
        }
    };
    Ok(BenchReport {
        bare: pick(bare, "bare handler, no auth"),
        ceiling: pick(ceiling, "authenticated ceiling (cached auth)"),
        ceiling_uncached: pick(uncached, "authenticated ceiling, no token cache"),
        issue: pick(issue, "pass issuance"),
        sold_out: pick(sold_out, "sold-out answer"),
        drop,
        drop_units: cfg.drop_units,
        rounds: cfg.rounds.max(1),
        micro: micro_costs,
        ratios,
        redis_bytes_per_pass: bytes_per_pass,
        redis_used_memory_per_pass: used_per_pass,
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
            "Each row: the median of {} interleaved rounds, by throughput.",
            self.rounds
        );
        let _ = writeln!(out);
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
        let r = &self.ratios;
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Ratios: per round, rows measured back to back; median over rounds."
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "| ratio | value | target |");
        let _ = writeln!(out, "|---|---:|---:|");
        let _ = writeln!(
            out,
            "| issuance / authenticated ceiling | {:.2} | >= 0.50 |",
            r.issue_vs_ceiling
        );
        let _ = writeln!(
            out,
            "| sold-out / authenticated ceiling | {:.2} | >= 0.80 |",
            r.sold_out_vs_ceiling
        );
        let _ = writeln!(
            out,
            "| authenticated ceiling / bare | {:.2} | |",
            r.ceiling_vs_bare
        );
        let _ = writeln!(
            out,
            "| ceiling without token cache / with | {:.2} | |",
            r.uncached_vs_ceiling
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
        let m = &self.micro;
        let _ = writeln!(out, "| one piece, measured alone | cost |");
        let _ = writeln!(out, "|---|---:|");
        let _ = writeln!(
            out,
            "| sign a pass (Ed25519, JSON, base64) | {:.1} µs |",
            m.sign_pass_us
        );
        let _ = writeln!(
            out,
            "| verify a buyer JWT (no cache) | {:.1} µs |",
            m.verify_jwt_us
        );
        let _ = writeln!(
            out,
            "| buyer auth, cached token | {:.2} µs |",
            m.cached_auth_us
        );
        let _ = writeln!(
            out,
            "| issue script round trip, one at a time | {:.1} µs |",
            m.redis_issue_us
        );
        let _ = writeln!(
            out,
            "| issue scripts, 128 in flight | {:.0} /s |",
            m.redis_issue_per_sec
        );
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
