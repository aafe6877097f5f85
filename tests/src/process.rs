//! One service as a child process: started with a fixed environment and port, its
//! output captured to a log file, stoppable by signal and restartable, and always
//! killed and reaped when dropped.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context};
use nix::{sys::signal, unistd::Pid};

use crate::service::ServiceKind;

/// How to stop a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGKILL: a crash. Nothing runs after it; in-flight work is cut wherever it was.
    Kill,
    /// SIGTERM: a graceful shutdown (in-flight requests finish, jobs stop).
    Term,
}

/// Everything needed to (re)start one service.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    pub kind: ServiceKind,
    pub binary: PathBuf,
    pub port: u16,
    /// The whole environment of the child: the harness clears inherited variables so a
    /// developer's shell cannot change what a test runs against.
    pub env: Vec<(String, String)>,
    pub log_path: PathBuf,
}

impl ServiceSpec {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// A running (or stopped) service process.
pub struct ServiceProcess {
    spec: ServiceSpec,
    child: Option<Child>,
    starts: u32,
}

/// How long a service may take to answer `/readyz` with 200 after it is spawned.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

impl ServiceProcess {
    /// Spawns the process (not waiting for readiness).
    pub fn spawn(spec: ServiceSpec) -> anyhow::Result<Self> {
        let mut this = Self {
            spec,
            child: None,
            starts: 0,
        };
        this.start()?;
        Ok(this)
    }

    pub fn spec(&self) -> &ServiceSpec {
        &self.spec
    }

    pub fn kind(&self) -> ServiceKind {
        self.spec.kind
    }

    pub fn url(&self) -> String {
        self.spec.url()
    }

    pub fn log_path(&self) -> &Path {
        &self.spec.log_path
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How many times this service has been started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// Starts the process again after a stop, on the same port with the same environment.
    pub fn start(&mut self) -> anyhow::Result<()> {
        if self.is_running() {
            bail!(
                "{} is already running (pid {:?})",
                self.spec.kind,
                self.pid()
            );
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log_path)
            .with_context(|| format!("cannot open log file {}", self.spec.log_path.display()))?;
        self.starts += 1;
        let _ = writeln!(
            log,
            "===== paysaga harness: start #{} of {} on port {} at {} =====",
            self.starts,
            self.spec.kind,
            self.spec.port,
            chrono::Utc::now().to_rfc3339()
        );
        let child = spawn_child(&self.spec, log)?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the process is alive (reaping it if it has exited).
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none() && self.child.is_some()
    }

    /// The exit status if the process has exited; `None` while it runs or was never started.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Stops the process with `how` and waits until it has exited. A SIGTERM that is not
    /// honoured within `grace` is followed by SIGKILL.
    pub async fn stop(&mut self, how: Stop, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let Some(child) = self.child.as_mut() else {
            return Ok(None);
        };
        if let Ok(Some(status)) = child.try_wait() {
            self.child = None;
            return Ok(Some(status));
        }
        let pid = Pid::from_raw(i32::try_from(child.id()).context("pid out of range")?);
        let sig = match how {
            Stop::Kill => signal::Signal::SIGKILL,
            Stop::Term => signal::Signal::SIGTERM,
        };
        signal::kill(pid, sig)
            .with_context(|| format!("cannot signal {} (pid {pid})", self.spec.kind))?;
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = child.try_wait().context("waiting for a child process")? {
                self.child = None;
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let status = child.wait().context("waiting for a killed child process")?;
                self.child = None;
                return Ok(Some(status));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `/readyz` answers 200. Fails early, with the end of the log, if the
    /// process exits or the timeout passes.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let url = format!("{}/readyz", self.url());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Err(self.failure(&format!("exited with {status} before it was ready")));
            }
            let last = match http.get(&url).timeout(Duration::from_secs(2)).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "not ready after {timeout:?}; last /readyz: {last}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An error naming the service, its log file and the end of that log.
    pub fn failure(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "{} {what}\nlog: {}\n--- last lines ---\n{}",
            self.spec.kind,
            self.spec.log_path.display(),
            tail(&self.spec.log_path, 40)
        )
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The last `lines` lines of a file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Children are spawned from one long-lived thread and, where `setpriv` exists, with a
/// parent-death signal: if this process dies without running destructors (SIGKILL, an
/// aborted test run), the kernel kills the services too, so no orphan keeps a port or a
/// database. The signal is tied to the spawning thread, hence one thread that never exits.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("paysaga-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning a thread at start-up succeeds");
        Mutex::new(tx)
    })
}

fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            ["/usr/bin/setpriv", "/bin/setpriv"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .as_deref()
}

fn spawn_child(spec: &ServiceSpec, log: File) -> anyhow::Result<Child> {
    let stderr = log
        .try_clone()
        .context("cannot duplicate the log file handle")?;
    let mut cmd = guarded_command(&spec.binary);
    cmd.env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(stderr));
    spawn_guarded(cmd)
        .with_context(|| format!("cannot start {} from {}", spec.kind, spec.binary.display()))
}

/// A command for `program` that dies with this process: where `setpriv` exists it
/// runs the program with a parent-death SIGKILL. Add arguments, environment and
/// standard streams as usual, then start it with [`spawn_guarded`]. For any helper
/// process that must not outlive its caller (a service, a private redis-server).
pub fn guarded_command(program: &Path) -> Command {
    match setpriv() {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.arg("--pdeathsig").arg("KILL").arg("--").arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Spawns `cmd` from the long-lived spawner thread (the parent-death signal is tied
/// to the thread that spawned the child, so that thread must never exit).
pub fn spawn_guarded(cmd: Command) -> anyhow::Result<Child> {
    let (tx, rx) = mpsc::channel();
    spawner()
        .lock()
        .map_err(|_| anyhow!("the spawner lock is poisoned"))?
        .send((cmd, tx))
        .map_err(|_| anyhow!("the spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| anyhow!("the spawner thread is gone"))?
        .map_err(Into::into)
}

/// A free TCP port on loopback. The port is released before the service binds it;
/// another process could take it in between, which on loopback in a test run is rare
/// enough that a failed start saying "address in use" is the honest answer.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot bind a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}
