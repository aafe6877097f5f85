//! The run command itself: `paysaga up --exit-after-demo` starts the five services,
//! plays a demo drop, stops everything and exits 0, and the database it used agrees
//! with what it printed; `paysaga up` restarts a killed service, and killed itself
//! leaves no service behind.

use std::process::Command;

use paysaga_common::testkit::{self, TestDb, TestRedis};
use paysaga_drop::invariants;
use paysaga_e2e::binaries;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_plays_the_demo_and_stops_cleanly() -> anyhow::Result<()> {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let data = binaries::log_dir("run-command")?;
    // Cargo builds this package's binary for its integration tests, so it is never stale,
    // and the services run from it (`paysaga service <name>`): nothing else to build.
    let paysaga = env!("CARGO_BIN_EXE_paysaga");
    let output = tokio::task::spawn_blocking({
        let (admin, database_url, redis_url, prefix, data) = (
            testkit::admin_url(),
            db.admin_url(),
            redis.url.clone(),
            redis.prefix.clone(),
            data.clone(),
        );
        move || {
            Command::new(paysaga)
                .args([
                    "up",
                    "--exit-after-demo",
                    "--free-ports",
                    "--units",
                    "5",
                    "--buyers",
                    "40",
                ])
                .env("ADMIN_DATABASE_URL", admin)
                .env("DATABASE_URL", database_url)
                .env("REDIS_URL", redis_url)
                .env("REDIS_PREFIX", prefix)
                .env("PAYSAGA_DATA_DIR", data)
                .env_remove("CARGO")
                .output()
        }
    })
    .await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "paysaga up failed ({})\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("demo passed: every invariant holds"),
        "{stdout}"
    );
    assert!(stdout.contains("oversold units (PostgreSQL)"), "{stdout}");

    // The services it started are gone: nothing answers on their ports any more.
    let addrs: Vec<String> = stdout
        .lines()
        .filter_map(ready_line)
        .map(|(_, addr, _)| addr)
        .collect();
    assert_eq!(
        addrs.len(),
        5,
        "five services reported ready:
{stdout}"
    );
    for addr in &addrs {
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "{addr} still listening after exit"
        );
    }

    // What it printed is what the tables hold.
    let pool = db.admin_pool().await;
    let report = invariants::check(&pool).await?;
    report.assert_holds();
    assert_eq!(report.products, 1);
    assert_eq!(report.units_total, 5);
    assert!(report.units_sold >= 1);
    assert_eq!(report.units_sold, report.payments_completed);
    let sold_line = format!("{} of 5", report.units_sold);
    assert!(
        stdout.contains(&sold_line),
        "printed units sold differ from the table ({sold_line}):\n{stdout}"
    );
    Ok(())
}

/// A running `paysaga up`: the child killed on drop (its services die with it through
/// their parent-death signal), its stdout read line by line on a thread.
struct RunningUp {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl RunningUp {
    fn start(db: &TestDb, redis: &TestRedis, data: &std::path::Path) -> anyhow::Result<Self> {
        use std::io::{BufRead, BufReader};

        let mut child = Command::new(env!("CARGO_BIN_EXE_paysaga"))
            .args(["up", "--no-demo", "--free-ports"])
            .env("ADMIN_DATABASE_URL", testkit::admin_url())
            .env("DATABASE_URL", db.admin_url())
            .env("REDIS_URL", &redis.url)
            .env("REDIS_PREFIX", &redis.prefix)
            .env("PAYSAGA_DATA_DIR", data)
            .env_remove("CARGO")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// The next line for which `pick` gives something; fails (with everything printed so
    /// far) if `up` exits first or nothing comes within `within`: a hang guard, not a
    /// timing assertion.
    fn until<T>(
        &mut self,
        within: std::time::Duration,
        mut pick: impl FnMut(&str) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = pick(&line);
                    self.seen.push(line);
                    if let Some(found) = found {
                        return Ok(found);
                    }
                }
                Err(e) => anyhow::bail!(
                    "paysaga up printed no expected line ({e}); its output so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

impl Drop for RunningUp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `  order         http://127.0.0.1:41234  pid 5678     ready` -> ("order", addr, pid).
fn ready_line(line: &str) -> Option<(String, String, u32)> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [name, url, "pid", pid, "ready"] => Some((
            (*name).to_owned(),
            url.trim_start_matches("http://").to_owned(),
            pid.parse().ok()?,
        )),
        _ => None,
    }
}

/// `paysaga up` supervises its services: the order service SIGKILLed comes back as a new
/// process on the same port, serves a whole purchase (checked in PostgreSQL), and the
/// other services were never restarted. Then `up` itself SIGKILLed (no destructor runs)
/// leaves no service behind: each is started with a parent-death signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_service_is_restarted_and_a_killed_run_command_leaves_none() -> anyhow::Result<()>
{
    use std::{collections::BTreeMap, time::Duration};

    use nix::{sys::signal, unistd::Pid};
    use paysaga_drop::{Admin, Driver, Endpoints, Outcome};

    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let data = binaries::log_dir("run-command-supervise")?;
    let mut up = tokio::task::block_in_place(|| RunningUp::start(&db, &redis, &data))?;
    let mut started = BTreeMap::new();
    tokio::task::block_in_place(|| {
        up.until(Duration::from_secs(180), |line| {
            if let Some((name, addr, pid)) = ready_line(line) {
                started.insert(name, (addr, pid));
            }
            line.contains("Press Ctrl-C").then_some(())
        })
    })?;
    assert_eq!(
        started.len(),
        5,
        "five services reported ready: {started:?}"
    );
    let url = |name: &str| format!("http://{}", started[name].0);
    let (order_addr, order_pid) = started["order"].clone();

    signal::kill(Pid::from_raw(order_pid as i32), signal::Signal::SIGKILL)?;
    let exit = format!("order (pid {order_pid}) exited: signal: 9 (SIGKILL)");
    tokio::task::block_in_place(|| {
        up.until(Duration::from_secs(60), |line| {
            line.contains(&exit).then_some(())
        })
    })?;
    let new_pid = tokio::task::block_in_place(|| {
        up.until(Duration::from_secs(120), |line| {
            line.strip_prefix("paysaga: order pid ")
                .filter(|rest| rest.contains("ready again (restart #1)"))
                .and_then(|rest| rest.split_whitespace().next()?.parse::<u32>().ok())
        })
    })?;
    assert_ne!(new_pid, order_pid, "a new order process");
    let restarted: Vec<&String> = up
        .seen
        .iter()
        .filter(|l| l.contains(" exited: ") || l.contains(" restarted as pid "))
        .collect();
    assert_eq!(
        restarted.len(),
        2,
        "only order exited and was restarted, once: {restarted:?}"
    );

    // A whole purchase through the restarted order service, reached on its old port by
    // the buyer and by the gate and the orchestrator, which were wired to that port.
    let endpoints = Endpoints {
        member: url("member"),
        gate: url("gate"),
        order: format!("http://{order_addr}"),
        account: url("account"),
        orchestrator: url("orchestrator"),
    };
    let admin = Admin::new(
        endpoints.clone(),
        paysaga_common::client::http_client(Duration::from_secs(10)),
    );
    let product = admin.create_product("after-restart", 2_500, 3).await?;
    let buyer = admin.open_buyer("after-restart-buyer", 10_000).await?;
    admin
        .wait_for_quota(product.id, 3, Duration::from_secs(60))
        .await?;
    let attempt = Driver::new(endpoints, Duration::from_secs(5))
        .buy(&buyer, product.id)
        .await;
    assert_eq!(attempt.outcome, Outcome::Completed, "{attempt:?}");

    let pool = db.admin_pool().await;
    let (orders, sold): (i64, i64) = sqlx::query_as(
        r#"
        SELECT
            (SELECT count(*) FROM order_service.orders
              WHERE product_id = $1 AND member_id = $2 AND state = 'CONFIRMED'),
            (SELECT count(*) FROM order_service.product_stock
              WHERE product_id = $1 AND state = 'SOLD')
        "#,
    )
    .bind(product.id)
    .bind(&attempt.member)
    .fetch_one(&pool)
    .await?;
    assert_eq!((orders, sold), (1, 1), "one confirmed order, one unit sold");
    invariants::check(&pool).await?.assert_holds();

    // `up` itself killed: the kernel delivers the parent-death signal to every service
    // as it exits, after which nothing may listen on their ports.
    up.child.kill()?;
    up.child.wait()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for (addr, _) in started.values() {
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "{addr} outlived the killed run command"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
