//! The run command itself: `paysaga up --exit-after-demo` starts the four services,
//! plays a demo drop, stops everything and exits 0, and the database it used agrees
//! with what it printed.

use std::process::Command;

use paysaga_common::testkit::{self, TestDb, TestRedis};
use paysaga_e2e::{binaries, invariants};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_plays_the_demo_and_stops_cleanly() -> anyhow::Result<()> {
    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let data = binaries::log_dir("run-command")?;
    // Cargo builds this package's binary for its integration tests, so it is never stale;
    // the services it starts come from `cargo build --workspace --bins`.
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
                    "--no-build",
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
    for line in stdout.lines().filter(|l| l.trim_end().ends_with("ready")) {
        let url = line.split_whitespace().nth(1).unwrap_or_default();
        let addr = url.trim_start_matches("http://");
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

/// Even a `paysaga up` killed with SIGKILL (no destructor runs) leaves no service
/// behind: each is started with a parent-death signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_die_with_a_killed_run_command() -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    let db = TestDb::new().await;
    let redis = TestRedis::new();
    let data = binaries::log_dir("run-command-kill")?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_paysaga"))
        .args(["up", "--no-demo", "--free-ports", "--no-build"])
        .env("ADMIN_DATABASE_URL", testkit::admin_url())
        .env("DATABASE_URL", db.admin_url())
        .env("REDIS_URL", &redis.url)
        .env("REDIS_PREFIX", &redis.prefix)
        .env("PAYSAGA_DATA_DIR", &data)
        .env_remove("CARGO")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped stdout");
    let addrs = tokio::task::spawn_blocking(move || {
        let mut addrs = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim_end().ends_with("ready") {
                if let Some(url) = line.split_whitespace().nth(1) {
                    addrs.push(url.trim_start_matches("http://").to_owned());
                }
            }
            if line.contains("Press Ctrl-C") {
                break;
            }
        }
        addrs
    })
    .await?;
    assert_eq!(addrs.len(), 4, "four services reported ready");
    for a in &addrs {
        assert!(
            std::net::TcpStream::connect(a).is_ok(),
            "{a} listening while up runs"
        );
    }

    child.kill()?;
    child.wait()?;
    // The kernel delivers the parent-death signal as the process exits; give the
    // services a moment to be torn down, then nothing may listen on their ports.
    let deadline = Instant::now() + Duration::from_secs(10);
    for a in &addrs {
        while std::net::TcpStream::connect(a).is_ok() {
            assert!(
                Instant::now() < deadline,
                "{a} outlived the killed run command"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
