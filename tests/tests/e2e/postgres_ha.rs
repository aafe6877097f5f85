//! The harness's PostgreSQL failover pair: commits the primary acknowledged are on the
//! standby once it is promoted, HAProxy routes new connections to it and cuts the old
//! ones, and dropping the pair leaves no process and no directory behind.

use std::time::{Duration, Instant};

use nix::{sys::signal, unistd::Pid};
use paysaga_e2e::{binaries, postgres_ha::PostgresHa, postgres_ha::Role};
use sqlx::{postgres::PgPoolOptions, Connection, PgConnection};

fn alive(pid: u32) -> bool {
    signal::kill(Pid::from_raw(pid as i32), None).is_ok()
}

fn postgres_pids(dir: &std::path::Path) -> Vec<u32> {
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

#[tokio::test]
async fn acknowledged_commits_survive_the_primarys_death_and_haproxy_follows() -> anyhow::Result<()>
{
    let logs = binaries::log_dir("postgres-ha")?;
    let ha = PostgresHa::start(&logs).await?;
    let url = ha.admin_url();
    let data_dir = ha
        .primary
        .data
        .parent()
        .expect("a node's data directory is in the pair's directory")
        .to_path_buf();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(3))
        .connect(&url)
        .await?;
    sqlx::query(r#"CREATE TABLE acked (n INTEGER PRIMARY KEY)"#)
        .execute(&pool)
        .await?;
    // Each INSERT returns only once the standby has its commit (synchronous standby).
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
    assert_eq!(port, i32::from(ha.primary.port));

    let mut ha = ha;
    let killed = Instant::now();
    ha.kill_primary();
    ha.promote_standby().await?;
    let promoted = killed.elapsed();
    let routed = ha
        .wait_routed_to(Role::Standby, Duration::from_secs(30))
        .await?
        + promoted;
    eprintln!(
        "postgres-ha: standby promoted {:.0} ms after the SIGKILL, routed by HAProxy {:.0} ms after it",
        promoted.as_secs_f64() * 1000.0,
        routed.as_secs_f64() * 1000.0
    );

    // The connection opened to the old primary is gone, not silently moved.
    assert!(
        sqlx::query(r#"SELECT 1"#).execute(&mut held).await.is_err(),
        "a connection to the killed primary still answered"
    );
    // The pool drops its broken connections and reaches the new primary through HAProxy.
    let deadline = Instant::now() + Duration::from_secs(30);
    let count: i64 = loop {
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
    assert_eq!(count, 200, "acknowledged commits lost in the failover");
    sqlx::query(r#"INSERT INTO acked (n) VALUES (200)"#)
        .execute(&pool)
        .await?;
    pool.close().await;

    let pids = postgres_pids(&data_dir);
    assert!(!pids.is_empty(), "the promoted standby is running");
    drop(ha);
    for pid in pids {
        // A killed backend is reaped by init a moment after its postmaster; wait for it.
        let until = Instant::now() + Duration::from_secs(10);
        while alive(pid) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(pid), "postgres process {pid} outlived the pair");
    }
    assert!(!data_dir.exists(), "{} was not removed", data_dir.display());
    Ok(())
}
