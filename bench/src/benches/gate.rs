//! The gate's benchmark: in-process servers (the gate, an authenticated constant handler
//! as the ceiling, an unauthenticated one) under the shared closed-loop driver, pass
//! issuance and sold-out answers against that ceiling, a drop, and the pieces of a pass
//! measured alone.
//!
//! Every server goes through the same common middleware stack (`server::finish`), so
//! the differences between rows are the handlers' own work. The quota is seeded
//! directly in Redis: the order service is not on the pass path.

use std::{
    fmt::Write as _,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use axum::{
    http::StatusCode,
    routing::{get, post},
    Router,
};
use clap::{builder::TypedValueParser as _, Args, ValueEnum};
use gate::{AppState, Config};
use paysaga_common::{
    auth::{Buyer, Minter, Verifier},
    extract::Json,
    server,
};
use paysaga_contracts::gate::api::IssuePass;
use tokio::net::TcpListener;
use utoipa::OpenApi;

use crate::{
    load::{self, Load, Outcome},
    stats::{self, RunSummary},
};

/// No phase of this bench is bounded by time, only by its request count.
const NO_TIME_BOUND: Duration = Duration::from_secs(3600);

/// One request shape: where to send it and, for authenticated targets, whose tokens.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    /// `Some(body)` sends a POST with this JSON body; `None` a GET.
    pub body: Option<String>,
    /// Request `i` carries `tokens[i % len]`; empty sends no Authorization.
    pub tokens: Arc<Vec<String>>,
}

/// An HTTP status as an outcome label: 2xx by code, 409 as `sold_out`, others errors.
pub fn status_outcome(status: u16) -> Outcome {
    match status {
        200 => Outcome::of("http_200"),
        201 => Outcome::of("http_201"),
        409 => Outcome::of("sold_out"),
        0 => Outcome::error("transport"),
        other => Outcome::error(format!("http_{other}")),
    }
}

/// Sends `total` requests to `target` from `connections` closed-loop clients.
pub async fn drive(
    http: &reqwest::Client,
    label: &str,
    target: &Target,
    total: usize,
    connections: usize,
    progress: bool,
) -> RunSummary {
    let load = Load {
        show_progress: progress,
        ..Load::new(label, connections, total as u64, NO_TIME_BOUND)
    };
    let (http, target) = (http.clone(), target.clone());
    load::run(&load, move |ctx| {
        let i = ctx.seq as usize;
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
        async move {
            let status = match req.send().await {
                Ok(r) => {
                    let s = r.status().as_u16();
                    let _ = r.bytes().await;
                    s
                }
                Err(_) => 0,
            };
            status_outcome(status)
        }
    })
    .await
}

/// A pooled HTTP client for `connections` concurrent requests to loopback servers.
pub fn http_client(connections: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .no_proxy()
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
    let verifier = Arc::new(Verifier::development(paysaga_common::auth::Audience::Gate));
    let state = AppState::with_verifier(config, verifier.clone())?;
    let gate = serve(gate::app(state.clone())).await?;
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

/// Which rows to run; the others are reported as empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Only {
    All,
    Issue,
    SoldOut,
    Ceiling,
    Micro,
}

/// `gate-bench`'s settings.
#[derive(Debug, Clone, Args)]
pub struct BenchConfig {
    /// Redis for the quota; every key carries a prefix of this run's, deleted at the end.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379/")]
    pub redis_url: String,
    /// Concurrent clients (and HTTP connections) in the throughput rows.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    pub connections: usize,
    /// Requests per row.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..).map(|n| n as usize))]
    pub requests: usize,
    /// Units in the drop.
    #[arg(long, default_value_t = 100)]
    pub drop_units: i64,
    /// Buyers in the drop, each asking once.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..).map(|n| n as usize))]
    pub drop_buyers: usize,
    /// Concurrent clients in the drop.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from))]
    pub drop_connections: usize,
    /// Interleaved repetitions; each row reports its median round.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=20).map(usize::from))]
    pub rounds: usize,
    /// Run only these rows.
    #[arg(long, value_enum, default_value_t = Only::All)]
    pub only: Only,
    /// Progress bars while a row runs (hidden anyway when stderr is not a terminal).
    #[arg(skip = true)]
    pub progress: bool,
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
            progress: true,
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub bare: RunSummary,
    pub ceiling: RunSummary,
    pub ceiling_uncached: RunSummary,
    pub issue: RunSummary,
    pub sold_out: RunSummary,
    pub drop: RunSummary,
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

impl BenchReport {
    /// The load rows, in table order.
    pub fn rows(&self) -> [&RunSummary; 6] {
        [
            &self.bare,
            &self.ceiling,
            &self.ceiling_uncached,
            &self.issue,
            &self.sold_out,
            &self.drop,
        ]
    }
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
    let per = |t: Instant, n: usize| t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;

    let t = Instant::now();
    for i in 0..n {
        std::hint::black_box(state.gate.sign(product, &member, 2_000_000_000 + i as i64));
    }
    let sign_pass_us = per(t, n);

    let fresh = Verifier::development(paysaga_common::auth::Audience::Gate);
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

/// The median-throughput run of a row across rounds, or an empty row.
fn median(mut runs: Vec<RunSummary>, label: &str) -> RunSummary {
    if runs.is_empty() {
        return RunSummary {
            name: label.to_owned(),
            concurrency: 0,
            ops: 0,
            elapsed_s: 0.0,
            per_s: 0.0,
            latency: stats::Latency::default(),
            outcomes: Default::default(),
        };
    }
    runs.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
    let mid = runs.len() / 2;
    runs.swap_remove(mid)
}

/// Runs the rows `cfg.rounds` times, interleaved so that a noisy neighbour on the
/// machine hits every row alike, and keeps each row's median round. Each round issues
/// passes for a fresh product, so every issuance is a new pass for a new member.
pub async fn run(cfg: &BenchConfig) -> anyhow::Result<BenchReport> {
    let prefix = format!("bench{}:", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut config = Config::local(&cfg.redis_url, &prefix, "http://127.0.0.1:9");
    config.sold_out_cache = Duration::from_secs(1);
    let servers = start_servers(&config).await?;
    let store = servers.state.gate.store.clone();
    let client = redis::Client::open(cfg.redis_url.as_str())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")?;

    let (sold_out_product, drop_product) = (2, 3);
    store.set_quota(sold_out_product, 0).await?;
    store.set_quota(drop_product, cfg.drop_units).await?;
    let issue_product = |round: usize| 100 + round as i64;
    let rounds = cfg.rounds.max(1);
    // The gate admits only to products its catalogue lists (the recompute job learns it
    // from the order service, which this bench does not start): listed here instead.
    let mut listed = vec![(sold_out_product, 0), (drop_product, cfg.drop_units)];
    listed.extend((0..rounds).map(|r| (issue_product(r), cfg.requests as i64)));
    servers.state.gate.products.set_catalogue(&listed, 1);

    let http = http_client(cfg.connections.max(cfg.drop_connections));
    let tokens = Arc::new(mint_tokens(cfg.requests, "buyer"));
    let body = |p: i64| Some(format!(r#"{{"product_id":{p}}}"#));
    let target = |url: &str, body: Option<String>, tokens: Arc<Vec<String>>| Target {
        url: url.to_owned(),
        body,
        tokens,
    };
    let no_tokens = Arc::new(Vec::new());
    let (n, c, progress) = (cfg.requests, cfg.connections, cfg.progress);
    let only = cfg.only;
    let wants = |o: Only| only == Only::All || only == o;

    // Warm-up: connections open, every buyer's token verified once (a buyer's first
    // request in a drop pays the full verification; the rows below are the steady state).
    let bare_target = target(&servers.bare, None, no_tokens.clone());
    drive(&http, "warm-up", &bare_target, (n / 4).max(1), c, false).await;
    let warm_auth = target(&servers.ceiling, body(0), tokens.clone());
    drive(&http, "warm-up", &warm_auth, tokens.len(), c, false).await;

    let micro_costs = if wants(Only::Micro) {
        micro(&servers.state, &tokens, 99).await?
    } else {
        Micro::default()
    };

    const BARE: &str = "bare handler, no auth";
    const UNCACHED: &str = "authenticated ceiling, no token cache";
    const CEILING: &str = "authenticated ceiling (cached auth)";
    const ISSUE: &str = "pass issuance";
    const SOLD_OUT: &str = "sold-out answer";
    let (mut bare, mut ceiling, mut uncached, mut issue, mut sold_out) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut bytes_per_pass = 0.0;
    let mut used_per_pass = 0.0;
    for round in 0..rounds {
        if only == Only::All {
            bare.push(drive(&http, BARE, &bare_target, n, c, progress).await);
            let t = target(&servers.ceiling_uncached, body(1), tokens.clone());
            uncached.push(drive(&http, UNCACHED, &t, n, c, progress).await);
        }
        if wants(Only::Ceiling) {
            let t = target(&servers.ceiling, body(1), tokens.clone());
            ceiling.push(drive(&http, CEILING, &t, n, c, progress).await);
        }
        if wants(Only::Issue) {
            let product = issue_product(round);
            store.set_quota(product, n as i64).await?;
            let used_before = redis_used_memory(&mut conn).await?;
            let t = target(&servers.gate, body(product), tokens.clone());
            issue.push(drive(&http, ISSUE, &t, n, c, progress).await);
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
            let t = target(&servers.gate, body(sold_out_product), tokens.clone());
            sold_out.push(drive(&http, SOLD_OUT, &t, n, c, progress).await);
        }
    }

    let drop = if only == Only::All {
        let drop_tokens = Arc::new(mint_tokens(cfg.drop_buyers, "drop"));
        // Their tokens are verified once beforehand, as buyers waiting for a drop are.
        let warm = target(&servers.ceiling, body(0), drop_tokens.clone());
        drive(&http, "warm-up", &warm, drop_tokens.len(), c, false).await;
        let t = target(&servers.gate, body(drop_product), drop_tokens);
        let name = "drop: each buyer once";
        drive(
            &http,
            name,
            &t,
            cfg.drop_buyers,
            cfg.drop_connections,
            progress,
        )
        .await
    } else {
        median(Vec::new(), "drop: each buyer once")
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
    let paired = |a: &[RunSummary], b: &[RunSummary]| {
        let mut r: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(x, y)| x.per_s / y.per_s.max(1e-9))
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
    Ok(BenchReport {
        bare: median(bare, BARE),
        ceiling: median(ceiling, CEILING),
        ceiling_uncached: median(uncached, UNCACHED),
        issue: median(issue, ISSUE),
        sold_out: median(sold_out, SOLD_OUT),
        drop,
        drop_units: cfg.drop_units,
        rounds: cfg.rounds.max(1),
        micro: micro_costs,
        ratios,
        redis_bytes_per_pass: bytes_per_pass,
        redis_used_memory_per_pass: used_per_pass,
    })
}

impl BenchReport {
    /// The results as markdown tables.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Each row: the median of {} interleaved rounds, by throughput.\n",
            self.rounds
        );
        let rows: Vec<RunSummary> = self.rows().into_iter().cloned().collect();
        out.push_str(&stats::markdown_table(&rows));
        let r = &self.ratios;
        let _ = writeln!(
            out,
            "\nRatios: per round, rows measured back to back; median over rounds.\n"
        );
        let _ = writeln!(out, "| ratio | value | target |");
        let _ = writeln!(out, "|---|---:|---:|");
        // The target column ends in its own space so an empty one prints as `| |`.
        for (ratio, value, target) in [
            (
                "issuance / authenticated ceiling",
                r.issue_vs_ceiling,
                ">= 0.50 ",
            ),
            (
                "sold-out / authenticated ceiling",
                r.sold_out_vs_ceiling,
                ">= 0.80 ",
            ),
            ("authenticated ceiling / bare", r.ceiling_vs_bare, ""),
            (
                "ceiling without token cache / with",
                r.uncached_vs_ceiling,
                "",
            ),
        ] {
            let _ = writeln!(out, "| {ratio} | {value:.2} | {target}|");
        }
        let d = &self.drop;
        let issued = d.count("http_201");
        let sold_out = d.count("sold_out");
        let losers = d.outcome("sold_out").map(|o| o.latency).unwrap_or_default();
        let _ = writeln!(out, "\n| drop | value |");
        let _ = writeln!(out, "|---|---:|");
        let _ = writeln!(out, "| units | {} |", self.drop_units);
        let _ = writeln!(
            out,
            "| buyers (each asks once, {} connections) | {} |",
            d.concurrency, d.ops
        );
        let _ = writeln!(out, "| passes issued (201) | {issued} |");
        let _ = writeln!(out, "| SOLD_OUT answers (409) | {sold_out} |");
        let _ = writeln!(out, "| other answers | {} |", d.ops - issued - sold_out);
        let _ = writeln!(
            out,
            "| loser p50 / p95 / p99 to learn SOLD_OUT | {} / {} / {} |",
            stats::human_us(losers.p50_us),
            stats::human_us(losers.p95_us),
            stats::human_us(losers.p99_us)
        );
        let _ = writeln!(out, "| whole drop answered in | {:.2}s |", d.elapsed_s);
        let m = &self.micro;
        let _ = writeln!(out, "\n| one piece, measured alone | cost |");
        let _ = writeln!(out, "|---|---:|");
        for (piece, cost) in [
            (
                "sign a pass (Ed25519, JSON, base64)",
                format!("{:.1} µs", m.sign_pass_us),
            ),
            (
                "verify a buyer JWT (no cache)",
                format!("{:.1} µs", m.verify_jwt_us),
            ),
            (
                "buyer auth, cached token",
                format!("{:.2} µs", m.cached_auth_us),
            ),
            (
                "issue script round trip, one at a time",
                format!("{:.1} µs", m.redis_issue_us),
            ),
            (
                "issue scripts, 128 in flight",
                format!("{:.0} /s", m.redis_issue_per_sec),
            ),
        ] {
            let _ = writeln!(out, "| {piece} | {cost} |");
        }
        let _ = writeln!(out, "\n| Redis memory per in-flight pass | bytes |");
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

/// The `gate-bench` binary: its flags, the run, the markdown on stdout.
pub async fn main() -> anyhow::Result<()> {
    let cfg: BenchConfig = super::start(
        "gate-bench",
        "The gate's benchmark, in process against the shared Redis.",
    );
    eprintln!("gate-bench: {cfg:?}");
    let report = run(&cfg).await?;
    println!("{}", report.markdown());
    Ok(())
}
