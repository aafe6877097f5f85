//! A Redis server of the scenario's own, on a free loopback port, without persistence:
//! it can be SIGKILLed and started again empty, as a lost Redis comes back. The shared
//! Redis other test runs use is never touched. It dies with this process.

use std::{
    process::Child,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use paysaga_e2e::process::{free_port, guarded_command, spawn_guarded};

/// How long a started server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

pub struct PrivateRedis {
    port: u16,
    child: Option<Child>,
    starts: u32,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port and waits until it answers.
    pub async fn start() -> anyhow::Result<Self> {
        let mut this = Self {
            port: free_port()?,
            child: None,
            starts: 0,
        };
        this.restart().await?;
        Ok(this)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server again (empty) on the same port, after [`PrivateRedis::kill`].
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("the private Redis is already running");
        }
        let program = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .into_iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
            .context("redis-server is not installed")?;
        let mut cmd = guarded_command(&program);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        self.child = Some(spawn_guarded(cmd).context("starting redis-server")?);
        self.starts += 1;
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(n) = self.dbsize().await {
                let _ = n;
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the private Redis on port {} did not answer within {READY_TIMEOUT:?}",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Keys held right now.
    pub async fn dbsize(&self) -> anyhow::Result<i64> {
        let client = redis::Client::open(self.url()).context("opening the private Redis")?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .context("connecting to the private Redis")?;
        redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .context("DBSIZE")
    }

    /// SIGKILL: the server and everything in it are gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
