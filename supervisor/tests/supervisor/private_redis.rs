//! The private Redis the run command starts when none is reachable (and the tests kill):
//! it works and logs in its directory, comes back empty after a kill, and a port already
//! served by another Redis fails its start instead of quietly using that server.

use std::path::PathBuf;

use paysaga_supervisor::{process::free_port, PrivateRedis};

fn scratch_dir(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "paysaga-supervisor-{label}-{}",
        uuid::Uuid::new_v4().simple()
    ))
}

async fn set(redis: &PrivateRedis, key: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(redis.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("1")
        .query_async(&mut conn)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_private_redis_in_a_directory_logs_there_and_comes_back_empty() -> anyhow::Result<()> {
    let dir = scratch_dir("logs");
    let mut redis = PrivateRedis::start_in(&dir, free_port()?).await?;
    set(&redis, "k").await?;
    assert_eq!(redis.dbsize().await?, 1);
    let log = std::fs::read_to_string(dir.join("redis.log"))?;
    assert!(
        log.contains("Ready to accept connections"),
        "redis.log: {log}"
    );

    redis.kill();
    assert!(
        redis.dbsize().await.is_err(),
        "a killed Redis still answers"
    );
    redis.restart().await?;
    assert_eq!(redis.dbsize().await?, 0, "a restarted Redis kept its keys");
    drop(redis);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::test]
async fn a_port_another_redis_serves_fails_the_start_and_names_the_log() -> anyhow::Result<()> {
    let first = PrivateRedis::start().await?;
    set(&first, "theirs").await?;
    let dir = scratch_dir("taken");
    let err = match PrivateRedis::start_in(&dir, first.port()).await {
        Ok(_) => anyhow::bail!("a second Redis started on a port already served"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("exited at start"), "{err}");
    assert!(
        err.contains(&dir.join("redis.log").display().to_string()),
        "{err}"
    );
    // The other server is untouched.
    assert_eq!(first.dbsize().await?, 1);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
