//! A Redis server of our own on a loopback port, without persistence: the run command's
//! when no Redis is reachable, or a test's that it SIGKILLs and starts again empty, as a
//! lost Redis comes back. Any other Redis is never touched. It dies with the process
//! that started it.

use std::{
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use crate::process::{free_port, guarded_command, spawn_guarded};
use crate::TlsFiles;
use anyhow::{bail, Context};

/// How long a started server may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The installed `redis-server`: on `PATH`, or where distributions put it.
pub fn program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

pub struct PrivateRedis {
    port: u16,
    tls: Option<TlsFiles>,
    /// Its working directory, with its output in `redis.log` there; without one its
    /// output is dropped.
    dir: Option<PathBuf>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts `redis-server` on a free port and waits until it answers. redis-server
    /// binds the port itself, so another process may take it first: then the server
    /// exits and another port is tried.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_any(None).await
    }

    /// [`Self::start`], serving TLS only (`rediss://`) with `tls`'s certificate.
    pub async fn start_tls(tls: TlsFiles) -> anyhow::Result<Self> {
        Self::start_any(Some(tls)).await
    }

    async fn start_any(tls: Option<TlsFiles>) -> anyhow::Result<Self> {
        let mut last = None;
        for _ in 0..5 {
            match Self::launch(free_port()?, None, tls.clone()).await {
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
        Self::launch(port, None, None).await
    }

    /// Starts `redis-server` on `port` working in `dir` (created if missing), its
    /// output in `dir/redis.log`, and waits until it answers.
    pub async fn start_in(dir: &Path, port: u16) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Self::launch(port, Some(dir.to_path_buf()), None).await
    }

    async fn launch(
        port: u16,
        dir: Option<PathBuf>,
        tls: Option<TlsFiles>,
    ) -> anyhow::Result<Self> {
        let mut this = Self {
            port,
            tls,
            dir,
            child: None,
        };
        this.restart().await?;
        Ok(this)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// A connection to it (over TLS trusting its CA when it serves TLS).
    pub async fn connection(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        let client = match &self.tls {
            Some(tls) => {
                let ca = std::fs::read(&tls.ca)
                    .with_context(|| format!("reading {}", tls.ca.display()))?;
                paysaga_common::tls::Trust::from_pem(&ca)?.redis_client(&self.url())
            }
            None => redis::Client::open(self.url()),
        }
        .context("opening the private Redis")?;
        client
            .get_multiplexed_async_connection()
            .await
            .context("connecting to the private Redis")
    }

    fn log_path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("redis.log"))
    }

    /// Starts the server again (empty) on the same port, after [`PrivateRedis::kill`].
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("the private Redis is already running");
        }
        let program = program().context("redis-server is not installed")?;
        let mut cmd = guarded_command(&program);
        let port = self.port.to_string();
        match &self.tls {
            Some(tls) => cmd
                .args([
                    "--port",
                    "0",
                    "--tls-port",
                    &port,
                    "--tls-auth-clients",
                    "no",
                ])
                .arg("--tls-cert-file")
                .arg(&tls.cert)
                .arg("--tls-key-file")
                .arg(&tls.key)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca),
            None => cmd.args(["--port", &port]),
        };
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null());
        match (&self.dir, self.log_path()) {
            (Some(dir), Some(log_path)) => {
                let log = std::fs::File::create(&log_path)
                    .with_context(|| format!("cannot create {}", log_path.display()))?;
                cmd.arg("--dir")
                    .arg(dir)
                    .stdout(Stdio::from(log.try_clone()?))
                    .stderr(Stdio::from(log));
            }
            _ => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        self.child = Some(spawn_guarded(cmd).context("cannot start redis-server")?);
        self.wait_ready().await
    }

    /// Waits until our server answers (the one answering names our child's pid); fails
    /// as soon as our child has exited (its port was taken), so an answer from someone
    /// else's server on that port never counts.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let see_log = self
            .log_path()
            .map(|p| format!("; see {}", p.display()))
            .unwrap_or_default();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let Some(child) = self.child.as_mut() else {
                bail!("the private Redis is not running");
            };
            if let Some(status) = child.try_wait().context("polling redis-server")? {
                self.child = None;
                bail!(
                    "redis-server on port {} exited at start ({status}){see_log}",
                    self.port
                );
            }
            let ours = child.id();
            if self.server_pid().await.is_ok_and(|pid| pid == ours) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "the private Redis on port {} did not answer within {READY_TIMEOUT:?}{see_log}",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The pid of the server answering on the port (`INFO server`). The child is
    /// redis-server itself (the parent-death guard execs it), so ours answers with the
    /// child's pid.
    async fn server_pid(&self) -> anyhow::Result<u32> {
        let mut conn = self.connection().await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .context("INFO server")?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
            .context("INFO server names no process_id")
    }

    /// Keys held right now.
    pub async fn dbsize(&self) -> anyhow::Result<i64> {
        let mut conn = self.connection().await?;
        redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .context("DBSIZE")
    }

    /// SIGKILL: the server and everything in it are gone.
    pub fn kill(&mut self) {
        crate::process::kill_and_reap(&mut self.child);
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
