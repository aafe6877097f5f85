//! Memory during a run: resident size of service processes sampled from /proc, and the
//! Redis footprint both server-wide (INFO) and of exactly our keys (MEMORY USAGE).

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use serde::Serialize;

use crate::{error::Result, machine::kib_field};

/// One process's memory over a sampled interval.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    pub name: String,
    pub pid: u32,
    /// Highest VmRSS seen while sampling.
    pub peak_rss_kib: u64,
    /// VmRSS when sampling stopped.
    pub end_rss_kib: u64,
    /// VmHWM: the kernel's own peak since the process started.
    pub hwm_kib: u64,
}

fn status(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

pub fn rss_kib(pid: u32) -> Option<u64> {
    status(pid).and_then(|s| kib_field(&s, "VmRSS:"))
}

/// Samples VmRSS of some processes every 25 ms until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<ProcessMemory>>,
}

impl Sampler {
    pub fn start(processes: Vec<(String, u32)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut rows: Vec<ProcessMemory> = processes
                .into_iter()
                .map(|(name, pid)| ProcessMemory {
                    name,
                    pid,
                    peak_rss_kib: 0,
                    end_rss_kib: 0,
                    hwm_kib: 0,
                })
                .collect();
            loop {
                for row in &mut rows {
                    if let Some(rss) = rss_kib(row.pid) {
                        row.peak_rss_kib = row.peak_rss_kib.max(rss);
                        row.end_rss_kib = rss;
                    }
                }
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            for row in &mut rows {
                row.hwm_kib = status(row.pid)
                    .and_then(|s| kib_field(&s, "VmHWM:"))
                    .unwrap_or(0);
            }
            rows
        });
        Self { stop, task }
    }

    pub async fn stop(self) -> Vec<ProcessMemory> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

/// Redis memory, server-wide. The server is shared, so these include others' keys.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RedisInfo {
    pub used_memory: u64,
    pub used_memory_rss: u64,
    pub used_memory_peak: u64,
}

pub async fn redis_info(conn: &mut redis::aio::MultiplexedConnection) -> Result<RedisInfo> {
    let text: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(RedisInfo {
        used_memory: field("used_memory"),
        used_memory_rss: field("used_memory_rss"),
        used_memory_peak: field("used_memory_peak"),
    })
}

/// Keys under `prefix` and the bytes Redis accounts to them (MEMORY USAGE, exact for
/// collections with SAMPLES 0): what our keys cost, whoever else shares the server.
pub async fn redis_prefix_usage(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> Result<(u64, u64)> {
    let pattern = format!("{prefix}*");
    let mut cursor: u64 = 0;
    let (mut keys, mut bytes) = (0u64, 0u64);
    loop {
        let (next, batch) = scan(conn, cursor, &pattern).await?;
        for key in batch {
            let used: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(conn)
                .await?;
            keys += 1;
            bytes += used.unwrap_or(0);
        }
        if next == 0 {
            return Ok((keys, bytes));
        }
        cursor = next;
    }
}

/// One `SCAN` step over the keys matching `pattern`: the next cursor and a batch.
async fn scan(
    conn: &mut redis::aio::MultiplexedConnection,
    cursor: u64,
    pattern: &str,
) -> Result<(u64, Vec<String>)> {
    Ok(redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .query_async(conn)
        .await?)
}

/// Deletes every key under `prefix`.
pub async fn redis_delete_prefix(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> Result<()> {
    let pattern = format!("{prefix}*");
    let mut cursor: u64 = 0;
    loop {
        let (next, batch) = scan(conn, cursor, &pattern).await?;
        if !batch.is_empty() {
            let _: () = redis::cmd("DEL").arg(&batch).query_async(conn).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn samples_this_process() {
        let pid = std::process::id();
        let sampler = Sampler::start(vec![("self".into(), pid)]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let rows = sampler.stop().await;
        assert_eq!(rows.len(), 1);
        assert!(rows[0].peak_rss_kib > 0);
        assert!(rows[0].hwm_kib >= rows[0].end_rss_kib);
    }

    #[tokio::test]
    async fn measures_and_deletes_exactly_our_keys() {
        let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let prefix = format!(
            "benchtest{}:",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        for i in 0..10 {
            let _: () = redis::cmd("SET")
                .arg(format!("{prefix}{i}"))
                .arg("x".repeat(100))
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let (keys, bytes) = redis_prefix_usage(&mut conn, &prefix).await.unwrap();
        assert_eq!(keys, 10);
        assert!(bytes >= 10 * 100, "{bytes}");
        redis_delete_prefix(&mut conn, &prefix).await.unwrap();
        assert_eq!(
            redis_prefix_usage(&mut conn, &prefix).await.unwrap(),
            (0, 0)
        );
        assert!(redis_info(&mut conn).await.unwrap().used_memory > 0);
    }
}
