//! One service as a child process: started with a fixed environment and port, handed
//! its listening socket, its output captured to a log file, stoppable by signal and
//! restartable, and always killed and reaped when dropped.

use std::{
    collections::BTreeMap,
    fs::{File, OpenOptions},
    io::Write,
    net::{Ipv4Addr, SocketAddr},
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context};
use command_fds::{CommandFdExt, FdMapping};
use nix::{sys::signal, unistd::Pid};
use socket2::{Domain, Protocol, Socket, Type};

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
    /// Which of several instances of `kind` this is; `None` when the service runs as one
    /// process.
    pub instance: Option<usize>,
    /// The executable: the service's own binary, or a multi-call one such as `paysaga`.
    pub program: PathBuf,
    /// Its arguments (`["service", "order"]` for `paysaga service order`; none for a
    /// service's own binary).
    pub args: Vec<String>,
    /// The port on 127.0.0.1. The supervisor binds it and hands the socket to the child.
    pub port: u16,
    /// The whole environment of the child: inherited variables are cleared so a
    /// developer's shell cannot change what the system runs with.
    pub env: Vec<(String, String)>,
    pub log_path: PathBuf,
}

impl ServiceSpec {
    /// The service's name, with the instance number when there are several
    /// (`order`, or `order-1`).
    pub fn label(&self) -> String {
        label(self.kind, self.instance)
    }

    /// Where it answers: `https` when it serves TLS (`TLS_CERT_FILE` in its environment).
    pub fn url(&self) -> String {
        let scheme = if self.env_var(paysaga_common::tls::CERT_FILE_VAR).is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A variable of its environment.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The port of its metrics listener, when `METRICS_ADDR` names one on 127.0.0.1: the
    /// supervisor binds it and hands it over beside the API's socket.
    pub fn metrics_port(&self) -> Option<u16> {
        let addr: SocketAddr = self.env_var("METRICS_ADDR")?.parse().ok()?;
        (addr.ip() == Ipv4Addr::LOCALHOST).then_some(addr.port())
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `kind`, or `kind-<instance>` for one of several instances.
pub fn label(kind: ServiceKind, instance: Option<usize>) -> String {
    match instance {
        Some(i) => format!("{kind}-{i}"),
        None => kind.name().to_owned(),
    }
}

/// What one `/readyz` probe found.
#[derive(Debug)]
pub enum Readiness {
    Ready,
    /// Running, not ready yet: the last answer or connection error.
    NotYet(String),
    /// The process has exited.
    Exited(ExitStatus),
}

/// A running (or stopped) service process.
pub struct ServiceProcess {
    spec: ServiceSpec,
    child: Option<Child>,
    starts: u32,
}

/// How long a service may take to answer `/readyz` with 200 after it is spawned.
pub use paysaga_common::ready::READY_TIMEOUT;

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

    /// Sets one variable of the environment the next start uses (a configuration change,
    /// applied by restarting).
    pub fn set_env(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self.spec.env.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = value,
            None => self.spec.env.push((name.to_owned(), value)),
        }
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
            "===== paysaga supervisor: start #{} of {} on port {} at {} =====",
            self.starts,
            self.spec.label(),
            self.spec.port,
            chrono::Utc::now().to_rfc3339()
        );
        let socket = take_reserved(self.spec.port)
            .map(Ok)
            .unwrap_or_else(|| listen_on(self.spec.port).map(OwnedFd::from))
            .with_context(|| {
                format!(
                    "cannot listen on port {} for {}: is another process using it?",
                    self.spec.port, self.spec.kind
                )
            })?;
        let metrics = match self.spec.metrics_port() {
            Some(port) => Some(
                take_reserved(port)
                    .map(Ok)
                    .unwrap_or_else(|| listen_on(port).map(OwnedFd::from))
                    .with_context(|| {
                        format!(
                            "cannot listen on metrics port {port} for {}: is another process using it?",
                            self.spec.kind
                        )
                    })?,
            ),
            None => None,
        };
        let child = spawn_child(&self.spec, log, socket, metrics)?;
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

    /// Asks `/readyz` once (for at most `timeout`), after checking the process still runs.
    pub async fn probe_ready(&mut self, http: &reqwest::Client, timeout: Duration) -> Readiness {
        if let Some(status) = self.exit_status() {
            return Readiness::Exited(status);
        }
        match paysaga_common::ready::probe_ready(http, &self.url(), timeout).await {
            Ok(()) => Readiness::Ready,
            Err(last) => Readiness::NotYet(last),
        }
    }

    /// Waits until `/readyz` answers 200 (every caller's one readiness rule). Fails
    /// early, with the end of the log, if the process exits or the timeout passes.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let base = self.url();
        let name = self.spec.label();
        let ready = paysaga_common::ready::wait_ready(http, &name, &base, timeout, || {
            self.exit_status()
                .map(|status| format!("exit status {status}"))
        })
        .await;
        ready.map_err(|e| self.failure(&format!("did not become ready: {e:#}")))
    }

    /// An error naming the service, its log file and the end of that log.
    pub fn failure(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "{} {what}\nlog: {}\n--- last lines ---\n{}",
            self.spec.label(),
            self.spec.log_path.display(),
            tail(&self.spec.log_path, 40)
        )
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
    }
}

/// Kills the child in `slot`, if there is one, and waits for it, so no zombie is left.
pub fn kill_and_reap(slot: &mut Option<Child>) {
    if let Some(mut child) = slot.take() {
        let _ = child.kill();
        let _ = child.wait();
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

/// The child gets its listening sockets as systemd hands them over: the API's on fd 3
/// and, when there is one, the metrics listener's on fd 4, announced by `LISTEN_FDS`
/// (`paysaga_common::server::listener` and `metrics_listener` take them). No
/// `LISTEN_PID`: the child's pid is not known before it is spawned, and the receiving
/// side accepts its absence. The parent's copies close once the child is spawned (the
/// command owns them), so while the child is down nothing listens and connections are
/// refused.
fn spawn_child(
    spec: &ServiceSpec,
    log: File,
    socket: OwnedFd,
    metrics: Option<OwnedFd>,
) -> anyhow::Result<Child> {
    let stderr = log
        .try_clone()
        .context("cannot duplicate the log file handle")?;
    let mut sockets = vec![FdMapping {
        parent_fd: socket,
        child_fd: 3,
    }];
    if let Some(metrics) = metrics {
        sockets.push(FdMapping {
            parent_fd: metrics,
            child_fd: 4,
        });
    }
    let mut cmd = guarded_command(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("LISTEN_FDS", sockets.len().to_string())
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES")
        .env_remove("LISTEN_FDS_FIRST_FD")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(stderr));
    cmd.fd_mappings(sockets)
        .map_err(|e| anyhow!("cannot hand the sockets to {}: {e}", spec.kind))?;
    spawn_guarded(cmd)
        .with_context(|| format!("cannot start {} as `{}`", spec.kind, spec.command_line()))
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

/// A free TCP port on loopback, released before it is returned: for a program that
/// binds its port itself (a private redis-server). Another process could take the port
/// in between; for a service use [`reserve_port`], which leaves no such window.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot bind a free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// Listening sockets bound ahead of their service's start, by port.
fn reserved() -> &'static Mutex<BTreeMap<u16, OwnedFd>> {
    static RESERVED: OnceLock<Mutex<BTreeMap<u16, OwnedFd>>> = OnceLock::new();
    RESERVED.get_or_init(Default::default)
}

/// Binds a listening socket on 127.0.0.1 (`port` 0: any free port) and keeps it for the
/// service that will be started on that port, which is handed this very socket: the
/// port is never free between choosing it and the service serving it. Until then
/// connections queue (they are not refused). Returns the port.
pub fn reserve_port(port: u16) -> anyhow::Result<u16> {
    let socket = listen_on(port).with_context(|| {
        if port == 0 {
            "cannot bind a free port on 127.0.0.1".to_owned()
        } else {
            format!("port {port} on 127.0.0.1 is in use")
        }
    })?;
    let bound = socket
        .local_addr()?
        .as_socket()
        .map(|a| a.port())
        .context("the reserved socket has no IP address")?;
    reserved()
        .lock()
        .map_err(|_| anyhow!("the port reservations lock is poisoned"))?
        .insert(bound, socket.into());
    Ok(bound)
}

fn take_reserved(port: u16) -> Option<OwnedFd> {
    reserved().lock().ok()?.remove(&port)
}

/// A listening TCP socket on 127.0.0.1:`port`, as tokio would make it (address reuse,
/// so a port left in TIME_WAIT by a killed service can be bound again; backlog 1024),
/// close-on-exec except in the child it is handed to.
fn listen_on(port: u16) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())?;
    socket.listen(1024)?;
    Ok(socket)
}
