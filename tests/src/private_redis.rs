//! A Redis server of a test's own, on a loopback port, without persistence: it can be
//! SIGKILLed and started again empty, as a lost Redis comes back. The shared Redis other
//! tests use is never touched. It dies with the process that started it.

use std::{
    process::Child,
    time::{Duration, Instant},
};

use crate::process::{free_port, guarded_command, spawn_guarded};
use anyhow::{bail, Context};

/// How long a started server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

pub struct PrivateRedis {
    port: u16,
    child: Option<Child>,
    starts: u32,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port and waits until it answers. redis-server
    /// binds the port itself, so another process may take it first: then the server
    /// exits and another port is tried.
    pub async fn start() -> anyhow::Result<Self> {
        let mut last = None;
        for _ in 0..5 {
            match Self::start_on(free_port()?).await {
                Ok(this) => return Ok(this),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .expect("at least one attempt")
            .context("no free port for a private Redis"))
    }

    /// Starts `redis-server` on `port` (a test that configured a service with this port
    /// before the server existed) and waits until it answers.
    pub async fn start_on(port: u16) -> anyhow::Result<Self> {
        let mut this = Self {
            port,
            child: None,
            starts: 0,
        };
        this.restart().await?;
        Ok(this)
    }

    pub fn port(&self) -> u16 {
        self.port
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

    /// Waits until the server answers; fails as soon as our child has exited (its port
    /// was taken), so an answer from someone else's server on that port never counts.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait().context("polling redis-server")? {
                    self.child = None;
                    bail!(
                        "redis-server on port {} exited at start ({status})",
                        self.port
                    );
                }
            }
            if self.dbsize().await.is_ok() {
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
