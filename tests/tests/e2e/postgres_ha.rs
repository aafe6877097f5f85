//! The harness's Patroni cluster: Patroni (not the test) fails over when the primary's
//! processes are SIGKILLed, commits the primary acknowledged are on the node it
//! promotes, HAProxy routes new connections there and cuts the old ones, the killed
//! node rejoins as the synchronous standby with every commit, and dropping the cluster
//! leaves no process and no directory behind.

use std::time::{Duration, Instant};

use nix::{sys::signal, unistd::Pid};
use paysaga_e2e::{binaries, postgres_ha::PostgresHa};
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection};

fn alive(pid: u32) -> bool {
    signal::kill(Pid::from_raw(pid as i32), None).is_ok()
}

/// Processes whose command line names `dir` (Patroni, by its configuration directory;
/// PostgreSQL, by its data directory; etcd, by its own).
fn pids_under(dir: &std::path::Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

async fn count(url: &str) -> anyhow::Result<i64> {
    let mut conn = PgConnection::connect(url).await?;
    let n = sqlx::query_scalar(r#"SELECT COUNT(*) FROM acked"#)
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok(n)
}

#[tokio::test]
async fn patroni_fails_over_when_the_primary_dies_and_the_old_primary_rejoins() -> anyhow::Result<()>
{
    let logs = binaries::log_dir("postgres-ha")?;
    let mut ha = PostgresHa::start(&logs).await?;
    let dir = ha.dir().to_path_buf();
    let url = ha.admin_url();
    let old = ha.primary().await.expect("a primary after start");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .connect(&url)
        .await?;
    sqlx::query(r#"CREATE TABLE acked (n INTEGER PRIMARY KEY)"#)
        .execute(&pool)
        .await?;
    // Each INSERT returns only once the synchronous standby has its commit.
    for n in 0..200 {
        sqlx::query(r#"INSERT INTO acked (n) VALUES ($1)"#)
            .bind(n)
            .execute(&pool)
            .await?;
    }
    let mut held = PgConnection::connect(&url).await?;
    let (port,): (i32,) = sqlx::query_as(r#"SELECT inet_server_port()"#)
        .fetch_one(&mut held)
        .await?;
    assert_eq!(port, i32::from(ha.node(old).pg_port));

    let killed = Instant::now();
    ha.kill(old).await?;
    let new = ha.wait_primary(Some(old), Duration::from_secs(60)).await?;
    let promoted = killed.elapsed();
    let routed = ha.wait_routed_to(new, Duration::from_secs(30)).await? + promoted;
    eprintln!(
        "postgres-ha: Patroni promoted {} {:.0} ms after the SIGKILL of {}, HAProxy routed to it {:.0} ms after it",
        ha.node(new).name,
        promoted.as_secs_f64() * 1000.0,
        ha.node(old).name,
        routed.as_secs_f64() * 1000.0
    );

    // The connection opened to the old primary is gone, not silently moved.
    assert!(
        sqlx::query(r#"SELECT 1"#).execute(&mut held).await.is_err(),
        "a connection to the killed primary still answered"
    );
    // The pool drops its broken connections and reaches the new primary through HAProxy.
    let deadline = Instant::now() + Duration::from_secs(30);
    let on_new: i64 = loop {
        match sqlx::query_scalar(r#"SELECT COUNT(*) FROM acked"#)
            .fetch_one(&pool)
            .await
        {
            Ok(n) => break n,
            Err(e) if Instant::now() < deadline => {
                eprintln!("postgres-ha: pool after the failover: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    assert_eq!(on_new, 200, "acknowledged commits lost in the failover");
    sqlx::query(r#"INSERT INTO acked (n) VALUES (200)"#)
        .execute(&pool)
        .await?;

    // The killed node comes back as the new primary's synchronous standby, with the
    // commit made after the failover too.
    let restarted = Instant::now();
    ha.restart(old)?;
    let timeline = ha.wait_sync_standby(old, Duration::from_secs(180)).await?;
    eprintln!(
        "postgres-ha: {} back as the synchronous standby {:.0} ms after its restart (timeline {timeline})",
        ha.node(old).name,
        restarted.elapsed().as_secs_f64() * 1000.0
    );
    sqlx::query(r#"INSERT INTO acked (n) VALUES (201)"#)
        .execute(&pool)
        .await?;
    // That INSERT returned once the rejoined standby had it on disk
    // (`synchronous_commit: on`); it shows there once replayed, a moment later.
    let standby = ha.node(old).url();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = count(&standby).await?;
    while seen < 202 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = count(&standby).await?;
    }
    assert_eq!(
        seen, 202,
        "the commit the standby acknowledged is replayed there"
    );
    pool.close().await;

    let pids = pids_under(&dir);
    assert!(pids.len() > 2, "the cluster is running: {pids:?}");
    drop(ha);
    for pid in pids {
        // A process killed with its namespace is reaped a moment later; wait for it.
        let until = Instant::now() + Duration::from_secs(10);
        while alive(pid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(pid), "process {pid} outlived the cluster");
    }
    assert!(!dir.exists(), "{} was not removed", dir.display());
    Ok(())
}
