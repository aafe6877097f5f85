//! The gate on a real Redis Cluster (3 masters, 3 replicas on loopback): products whose
//! keys live on different masters each get exactly their stock in passes, scripts are
//! reloaded per node after a flush, and a master SIGKILLed mid-drop is covered by the
//! fallback limiter until its replica is promoted and the quota rebuilt, with no unit
//! oversold in PostgreSQL.

use crate::support;

use std::{
    collections::{BTreeMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use tokio::sync::watch;

use crate::support::{
    create_product, fund, order_buyer, start_order, start_ready_gate, wait_ready_status, Service,
};
use gate::Config;
use paysaga_common::testkit::{buyer_token, TestDb};
use paysaga_contracts::order::client::OrderClient;
use paysaga_e2e::redis_cluster::RedisCluster;
use redis::AsyncCommands;
use sqlx::PgPool;

/// The degraded gauge is process-wide, and two clusters at once would only crowd the
/// two cores: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PREFIX: &str = "cl:";

fn quota_key(product: i64) -> String {
    format!("{PREFIX}{{p:{product}}}:quota")
}

fn holders_key(product: i64) -> String {
    format!("{PREFIX}{{p:{product}}}:holders")
}

fn cluster_config(cluster: &RedisCluster, order: &Service) -> Config {
    let mut config = Config::local("redis://127.0.0.1:1/", PREFIX, &order.url);
    config.redis_cluster_nodes = cluster.node_urls();
    config
}

/// `(reserved or sold units, unit rows, reservations that hold a unit, distinct units
/// they hold)` of one product, from PostgreSQL.
async fn stock(pool: &PgPool, product: i64) -> (i64, i64, i64, i64) {
    let (taken, rows): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*) FILTER (WHERE state <> 'AVAILABLE'), COUNT(*)
           FROM order_service.product_stock WHERE product_id = $1"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await
    .expect("count units");
    let (live, units): (i64, i64) = sqlx::query_as(
        r#"SELECT COUNT(*), COUNT(DISTINCT unit_id) FROM order_service.reservations
           WHERE product_id = $1 AND state IN ('RESERVED', 'CONFIRMED')"#,
    )
    .bind(product)
    .fetch_one(pool)
    .await
    .expect("count reservations");
    (taken, rows, live, units)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn products_on_different_masters_never_get_more_passes_than_stock() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start().await.expect("redis cluster");
    let db = TestDb::new().await;
    let order = start_order(&db).await;

    // Products until their hash tags cover all three masters (ids are sequential, slots
    // spread evenly, so a handful suffice).
    let mut by_master: BTreeMap<u16, i64> = BTreeMap::new();
    for _ in 0..40 {
        let product = create_product(&order, 10).await;
        let slot = cluster.keyslot(&quota_key(product)).await.expect("keyslot");
        assert_eq!(cluster.keyslot(&holders_key(product)).await.unwrap(), slot);
        let master = cluster.master_of(slot).await.expect("master");
        by_master.entry(master).or_insert(product);
        if by_master.len() == 3 {
            break;
        }
    }
    assert_eq!(by_master.len(), 3, "products on all three masters");
    let products: Vec<i64> = by_master.values().copied().collect();

    let mut config = cluster_config(&cluster, &order);
    config.recompute_interval = Duration::from_secs(3600);
    config.redis_timeout = Duration::from_secs(10);
    let gate = start_ready_gate(config).await;

    // The scripts were loaded by the first recompute; flush them on every master: the
    // next EVALSHA hears NOSCRIPT and the script is loaded again on its node.
    for shard in cluster.shards().await.expect("shards") {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", shard.master)).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async::<()>(&mut c)
            .await
            .expect("script flush");
    }

    // 30 buyers per product at once, 10 units each, all three products together.
    let mut tasks = Vec::new();
    for &product in &products {
        for i in 0..30 {
            let member = format!("p{product}-b{i}");
            let client = gate.buyer(&member);
            tasks.push(tokio::spawn(async move {
                (product, member, client.issue_pass(product).await)
            }));
        }
    }
    let mut passes: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    for t in tasks {
        let (product, member, result) = t.await.expect("task");
        match result {
            Ok(answer) => passes
                .entry(product)
                .or_default()
                .push((member, answer.body.pass)),
            Err(e) => assert_eq!(e.code(), Some("SOLD_OUT"), "{member}: {e}"),
        }
    }

    // The cluster itself: quota 0 and 10 holders per product, each product's keys on
    // the master the test placed it on.
    let mut conn = cluster.client().await.expect("cluster client");
    let pool = db.admin_pool().await;
    for (&master, &product) in &by_master {
        assert_eq!(passes[&product].len(), 10, "product {product} on {master}");
        let quota: i64 = conn.get(quota_key(product)).await.expect("quota");
        let holders: i64 = conn.zcard(holders_key(product)).await.expect("holders");
        assert_eq!((quota, holders), (0, 10), "product {product}");
        let direct = redis::Client::open(format!("redis://127.0.0.1:{master}/")).unwrap();
        let mut direct = direct.get_multiplexed_async_connection().await.unwrap();
        let there: i64 = direct.exists(quota_key(product)).await.expect("exists");
        assert_eq!(there, 1, "product {product}'s quota lives on {master}");

        // Every pass buys a unit at the real order service; PostgreSQL agrees.
        for (member, pass) in &passes[&product] {
            order_buyer(&order, member)
                .await
                .reserve(product, pass)
                .await
                .expect("reservation");
        }
        let (taken, rows, live, units) = stock(&pool, product).await;
        assert_eq!((taken, rows, live, units), (10, 10, 10, 10));
    }
}

/// How far the drop has got: passes issued so far, and buyer workers still running
/// (the kill waits on this, not on the clock).
#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    passes: usize,
    workers: usize,
}

/// What the buyers of the drop heard.
#[derive(Default)]
struct Tally {
    progress: watch::Sender<Progress>,
    reserved: AtomicUsize,
    sold_out_at_order: AtomicUsize,
    sold_out_at_gate: AtomicUsize,
    unavailable: AtomicUsize,
}

impl Tally {
    fn passes(&self) -> usize {
        self.progress.borrow().passes
    }
}

/// A buyer worker's presence in [`Progress::workers`]: counted out when the worker ends,
/// however it ends, so a wait on the drop never outlives it.
struct Working(Arc<Tally>);

impl Working {
    fn start(tally: Arc<Tally>) -> Self {
        tally.progress.send_modify(|p| p.workers += 1);
        Working(tally)
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.0.progress.send_modify(|p| p.workers -= 1);
    }
}

/// Waits until the gate answers from Redis again (`/readyz` says "ready"): what a buyer
/// told `QUOTA_UNAVAILABLE` is waiting for (the fallback limiter's share is spent until
/// then). Fails the test if that takes longer than `within`.
async fn until_ready(http: &reqwest::Client, gate_url: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        if readyz_at(http, gate_url).await.as_deref() == Some("ready") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{gate_url}/readyz did not say ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One buyer: asks the gate for a pass (on 503 `QUOTA_UNAVAILABLE`, asking again once
/// the gate is back on Redis, at most `tries` times) and reserves with it at once.
async fn buy(
    gate_url: String,
    order_url: String,
    http: reqwest::Client,
    product: i64,
    member: String,
    tally: Arc<Tally>,
    tries: usize,
) {
    let gate = paysaga_contracts::gate::client::GateClient::with_http(
        http.clone(),
        &gate_url,
        buyer_token(&member),
    );
    for _ in 0..tries {
        match gate.issue_pass(product).await {
            Ok(pass) => {
                tally.progress.send_modify(|p| p.passes += 1);
                let order = OrderClient::with_http(http.clone(), &order_url, buyer_token(&member));
                match order.reserve(product, &pass.body.pass).await {
                    Ok(_) => {
                        tally.reserved.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.code() == Some("SOLD_OUT") => {
                        tally.sold_out_at_order.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{member}: reservation refused: {e}"),
                }
                return;
            }
            Err(e) if e.code() == Some("SOLD_OUT") => {
                tally.sold_out_at_gate.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // 503 `QUOTA_UNAVAILABLE` (the client reports a 503 as an unknown outcome).
            Err(e) if e.status() == Some(503) => {
                tally.unavailable.fetch_add(1, Ordering::Relaxed);
                until_ready(&http, &gate_url, RECOVERY_WITHIN).await;
            }
            Err(e) => panic!("{member}: {e}"),
        }
    }
}

/// How long the gate may take to answer from Redis again after the master's loss:
/// automatic failover (up to 15 s before a takeover is forced), the takeover itself (up
/// to 30 s), then a recompute.
const RECOVERY_WITHIN: Duration = Duration::from_secs(60);

async fn readyz_at(http: &reqwest::Client, gate_url: &str) -> Option<String> {
    let r = http
        .get(format!("{gate_url}/readyz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let body: serde_json::Value = r.json().await.ok()?;
    body["status"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_drop_is_covered_and_nothing_is_oversold() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::start().await.expect("redis cluster");
    let db = TestDb::new().await;
    let order = start_order(&db).await;
    const UNITS: i64 = 120;
    let product = create_product(&order, UNITS).await;
    let slot = cluster.keyslot(&quota_key(product)).await.expect("keyslot");
    let master = cluster.master_of(slot).await.expect("master");

    let mut config = cluster_config(&cluster, &order);
    config.recompute_interval = Duration::from_millis(200);
    config.redis_timeout = Duration::from_millis(500);
    let gate = start_ready_gate(config).await;

    // 400 buyers, 24 at a time; the master holding the product's slot is SIGKILLed
    // once a third of the stock has passes.
    for i in 0..400 {
        fund(&order, &format!("drop-{i}")).await;
    }
    let http = reqwest::Client::new();
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicUsize::new(0));
    let drop_done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..24)
        .map(|_| {
            let working = Working::start(tally.clone());
            let (tally, next, http) = (tally.clone(), next.clone(), http.clone());
            let (gate_url, order_url) = (gate.url().to_owned(), order.url.clone());
            tokio::spawn(async move {
                let _working = working;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= 400 {
                        break;
                    }
                    buy(
                        gate_url.clone(),
                        order_url.clone(),
                        http.clone(),
                        product,
                        format!("drop-{i}"),
                        tally.clone(),
                        50,
                    )
                    .await;
                }
            })
        })
        .collect();

    let third = (UNITS / 3) as usize;
    let mut progress = tally.progress.subscribe();
    let at_kill = tokio::time::timeout(
        Duration::from_secs(120),
        progress.wait_for(|p| p.passes >= third || p.workers == 0),
    )
    .await
    .expect("a third of the stock had no passes within 120 s")
    .map(|p| *p)
    .expect("the tally outlives the wait");
    assert!(
        at_kill.passes >= third,
        "the drop ended before a third of the stock had passes: {at_kill:?}"
    );
    let passes_at_kill = at_kill.passes;
    let killed_at = Instant::now();
    cluster.kill(master).expect("SIGKILL the master");

    // The gate notices (a buyer's call or the job fails), then comes back on its own once
    // the replica is promoted and a whole recompute succeeds.
    let watcher = {
        let http = http.clone();
        let url = gate.url().to_owned();
        let drop_done = drop_done.clone();
        tokio::spawn(async move {
            let mut degraded_at = None;
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline
                && !(drop_done.load(Ordering::Relaxed) && degraded_at.is_none())
            {
                let r = http
                    .get(format!("{url}/readyz"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await;
                let status = match r {
                    Ok(r) => r
                        .json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|b| b["status"].as_str().map(str::to_owned)),
                    Err(_) => None,
                };
                match (status.as_deref(), degraded_at) {
                    (Some("degraded"), None) => degraded_at = Some(killed_at.elapsed()),
                    (Some("ready"), Some(d)) => return Some((d, killed_at.elapsed())),
                    _ => {}
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        })
    };

    // The cluster promotes the replica on its own (node timeout 1 s); a takeover is
    // forced only if it has not within 15 s.
    let (promoted, forced) = match cluster
        .wait_promoted(slot, master, Duration::from_secs(15))
        .await
    {
        Ok(port) => (port, false),
        Err(_) => {
            let shards = cluster.shards().await.expect("shards");
            let replica = shards
                .iter()
                .flat_map(|s| s.replicas.iter().copied())
                .find(|&r| r != master)
                .expect("a replica");
            cluster.takeover(replica).await.expect("takeover");
            let port = cluster
                .wait_promoted(slot, master, Duration::from_secs(30))
                .await
                .expect("promoted after TAKEOVER");
            (port, true)
        }
    };
    let promoted_after = killed_at.elapsed();

    for w in workers {
        w.await.expect("buyer worker");
    }
    drop_done.store(true, Ordering::Relaxed);
    let recovery = watcher.await.expect("watcher");
    let (degraded_after, back_after) = recovery.expect("the gate went degraded and came back");

    // The quota is rebuilt: quota == max(0, available - in flight) on the new master.
    wait_ready_status(gate.url(), "ready").await;
    let order_ops = support::order_client(&order);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = gate.quota(product).await;
        let available = order_ops
            .product(product)
            .await
            .expect("product")
            .body
            .available;
        if q.quota == (available - q.in_flight).max(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "quota not rebuilt: {q:?}, available {available}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Late buyers take whatever the outage left: every unit ends up reserved.
    for i in 0..(UNITS as usize) {
        until_ready(&http, gate.url(), RECOVERY_WITHIN).await;
        let before = tally.sold_out_at_gate.load(Ordering::Relaxed);
        buy(
            gate.url().to_owned(),
            order.url.clone(),
            http.clone(),
            product,
            format!("late-{i}"),
            tally.clone(),
            50,
        )
        .await;
        if tally.sold_out_at_gate.load(Ordering::Relaxed) > before {
            break;
        }
    }

    let pool = db.admin_pool().await;
    let (taken, rows, live, units) = stock(&pool, product).await;
    let passes = tally.passes();
    let reserved = tally.reserved.load(Ordering::Relaxed);
    let sold_out_at_order = tally.sold_out_at_order.load(Ordering::Relaxed);
    eprintln!(
        "cluster master loss: stock {UNITS}, master {master} killed after {passes_at_kill} passes; \
         replica {promoted} promoted after {promoted_after:?} ({}); gate degraded after \
         {degraded_after:?}, answering from Redis again after {back_after:?} from the SIGKILL; passes {passes}, reserved {reserved}, \
         refused at order (sold out) {sold_out_at_order}, SOLD_OUT at gate {}, \
         QUOTA_UNAVAILABLE answers {}",
        if forced { "forced with CLUSTER FAILOVER TAKEOVER" } else { "automatic failover" },
        tally.sold_out_at_gate.load(Ordering::Relaxed),
        tally.unavailable.load(Ordering::Relaxed),
    );
    assert_eq!(rows, UNITS);
    assert!(taken <= rows, "oversold: {taken} of {rows}");
    assert_eq!(live, units, "no unit in two live reservations");
    // Every pass answered was a reservation, unless the units had run out.
    assert_eq!(reserved + sold_out_at_order, passes);
    assert_eq!(reserved as i64, live);
    assert_eq!(reserved, passes.min(UNITS as usize));
    assert_eq!(live, UNITS, "every unit sold once the quota was rebuilt");
    assert!(degraded_after <= back_after);
    let distinct: HashSet<_> = [master, promoted].into_iter().collect();
    assert_eq!(distinct.len(), 2);
}
