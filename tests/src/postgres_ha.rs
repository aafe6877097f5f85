//! A highly available PostgreSQL of a test's own, the way paysaga is deployed in front
//! of one: two nodes managed by Patroni over etcd, in synchronous mode, reached through
//! HAProxy, which routes to the node Patroni's REST API names primary. Patroni alone
//! decides who is primary and promotes: nothing here promotes anything. The harness
//! only breaks things (a node's processes SIGKILLed, a node cut off the network) and
//! brings them back, and watches what Patroni and HAProxy make of it.
//!
//! Every node runs the Patroni configuration paysaga ships, `deploy/patroni/patroni.yml`,
//! as is, with a file of its own layered on top (Patroni merges the files of its
//! configuration directory in order): its name, loopback addresses, data directory, the
//! development passwords and the test's shorter timings ([`TTL_SECS`]). HAProxy runs
//! `deploy/haproxy/postgres.cfg` with the addresses replaced and a stats socket added.
//!
//! The network: each node's PostgreSQL port and Patroni REST port are reached by
//! everyone else (the other node's replication and pg_rewind, Patroni's member checks,
//! HAProxy) only through a [`FaultProxy`] each, and the node reaches etcd only through a
//! third one, so a network cut of a node is those three proxies blackholed: bytes held,
//! nothing refused, as a partition looks to TCP. Patroni talks to its own PostgreSQL
//! directly, as on one machine.
//!
//! The processes: each node (Patroni and the PostgreSQL it starts) runs in a PID
//! namespace of its own, made by `unshare` (in a user namespace mapping the user to
//! itself, so this works with and without root), with Patroni as the namespace's init.
//! SIGKILL to the node's process group kills its init, and the kernel then kills every
//! process in the namespace at once, postmaster and backends included, as a crashed
//! machine loses them; Patroni detaches PostgreSQL from itself, so nothing short of
//! that would take both. `unshare` gets a parent-death signal, so a node also dies with
//! the test process. PostgreSQL refuses to run as root: as root, the nodes run as the
//! `postgres` user. etcd (one member: it is not what the tests break) and HAProxy are
//! guarded the same way. Everything is killed and the directory removed on drop.

use std::{
    fmt::Write as _,
    fs::OpenOptions,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    str::FromStr,
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use nix::{
    sys::signal::{killpg, Signal},
    unistd::{Gid, Pid, Uid, User},
};
use sqlx::{postgres::PgConnectOptions, ConnectOptions, Connection, PgConnection};

use crate::proxy::FaultProxy;
use paysaga_supervisor::{
    haproxy,
    process::{free_port, guarded_command, kill_and_reap, spawn_guarded, tail},
};

/// The Patroni configuration every node runs (`deploy/patroni/patroni.yml`).
pub const PATRONI_CONFIG: &str = include_str!("../../deploy/patroni/patroni.yml");
/// The HAProxy configuration the services reach the cluster through
/// (`deploy/haproxy/postgres.cfg`).
pub const HAPROXY_CONFIG: &str = include_str!("../../deploy/haproxy/postgres.cfg");

/// Patroni's timings in the tests (the shipped configuration has production values):
/// the leader key lives `TTL_SECS` after its last renewal, renewed every
/// `LOOP_WAIT_SECS`; a primary that cannot reach etcd for `RETRY_TIMEOUT_SECS` demotes
/// itself (loop_wait + 2 x retry_timeout <= ttl).
pub const TTL_SECS: u64 = 10;
pub const LOOP_WAIT_SECS: u64 = 1;
pub const RETRY_TIMEOUT_SECS: u64 = 4;
/// A primary whose shutdown waits on a standby that is gone is killed after this.
pub const PRIMARY_STOP_TIMEOUT_SECS: u64 = 5;
// Patroni's rule: a primary cut off from etcd demotes itself before its key expires.
const _: () = assert!(LOOP_WAIT_SECS + 2 * RETRY_TIMEOUT_SECS <= TTL_SECS);

/// Nodes in the test cluster: a primary and its synchronous standby.
pub const NODES: usize = 2;
/// The superuser's password (a development password, for this test cluster only).
const SUPERUSER_PASSWORD: &str = "postgres";

/// How long the cluster may take to bootstrap (initdb, the replica's base backup, the
/// standby in sync) and HAProxy to route to the primary.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Connecting to a node or through HAProxy, per attempt; a request to a Patroni API.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The directory of the newest PostgreSQL installed the Debian way, or an error saying
/// how to install it.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    paysaga_supervisor::infra::postgres_bin_dirs()
        .into_iter()
        .find(|bin| bin.join("postgres").is_file() && bin.join("pg_rewind").is_file())
        .context(
            "PostgreSQL's server programs are not installed under /usr/lib/postgresql/<version>/bin: \
             install them with `sudo apt-get install postgresql` (Debian, Ubuntu)",
        )
}

/// `name` in /usr/bin or /usr/sbin, or an error naming the Debian package.
fn program(name: &str, package: &str) -> anyhow::Result<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!("`{name}` is not installed: install it with `sudo apt-get install {package}` (Debian, Ubuntu)")
        })
}

/// A node's Patroni REST answer to `GET /cluster`, the parts read here.
#[derive(Debug, serde::Deserialize)]
struct ClusterView {
    members: Vec<Member>,
}

#[derive(Debug, serde::Deserialize)]
struct Member {
    name: String,
    role: String,
    state: String,
    #[serde(default)]
    timeline: Option<i64>,
}

/// One node: Patroni and the PostgreSQL it runs.
pub struct PgNode {
    /// Its Patroni name (`pg-1`, `pg-2`), also its server name in HAProxy.
    pub name: String,
    /// Where its PostgreSQL listens (reached directly only by its own Patroni and by
    /// the harness, to observe).
    pub pg_port: u16,
    /// Where its Patroni REST API listens (the same).
    pub api_port: u16,
    /// Its PostgreSQL as the others reach it.
    pg_link: FaultProxy,
    /// Its Patroni REST API as the others reach it.
    api_link: FaultProxy,
    /// Its way to etcd.
    etcd_link: FaultProxy,
    /// Its configuration directory (`10-paysaga.yml`, `20-node.yml`).
    config: PathBuf,
    /// Patroni's and PostgreSQL's output.
    pub log: PathBuf,
    /// `unshare`, the parent of the node's PID namespace; its process group's leader.
    child: Option<Child>,
}

impl PgNode {
    /// A superuser's URL straight to this node (not through HAProxy or its link).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:{SUPERUSER_PASSWORD}@127.0.0.1:{}/postgres",
            self.pg_port
        )
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn api(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.api_port)
    }

    fn links(&self) -> [&FaultProxy; 3] {
        [&self.pg_link, &self.api_link, &self.etcd_link]
    }

    /// Whether the node is cut off the network.
    pub fn is_cut(&self) -> bool {
        self.pg_link.faults().blackhole
    }

    /// SIGKILL to the node's process group: `unshare` and Patroni, the init of the
    /// node's PID namespace, whose death makes the kernel kill every other process in
    /// it (the postmaster and its backends) at once.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// etcd, one member (the tests break PostgreSQL nodes, not the consensus store).
struct Etcd {
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

/// The Patroni cluster, its etcd and the HAProxy in front.
pub struct PostgresHa {
    pub nodes: Vec<PgNode>,
    /// HAProxy's port: the one address the services are given.
    pub port: u16,
    etcd: Etcd,
    haproxy: Option<Child>,
    haproxy_log: PathBuf,
    http: reqwest::Client,
    patroni: PathBuf,
    unshare: PathBuf,
    /// Uid and gid of the `postgres` user when running as root.
    owner: Option<(Uid, Gid)>,
    dir: PathBuf,
}

/// A superuser's connection to `url`, within [`CONNECT_TIMEOUT`].
async fn connect(url: &str) -> anyhow::Result<PgConnection> {
    let options = PgConnectOptions::from_str(url)?.disable_statement_logging();
    tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .with_context(|| format!("connecting to {url} timed out"))?
        .with_context(|| format!("connecting to {url}"))
}

/// The port of the server a new connection to `url` reached and whether it is a
/// standby.
async fn reached(url: &str) -> anyhow::Result<(u16, bool)> {
    let mut conn = connect(url).await?;
    let (port, in_recovery): (i32, bool) =
        sqlx::query_as(r#"SELECT inet_server_port(), pg_is_in_recovery()"#)
            .fetch_one(&mut conn)
            .await?;
    let _ = conn.close().await;
    Ok((u16::try_from(port)?, in_recovery))
}

/// Polls `probe` every 50 ms until it returns `Some`, or fails with `what` and the last
/// thing it said after `timeout`.
async fn poll<T>(
    what: impl Fn() -> String,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Result<Option<T>, String>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "not yet".to_owned(),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            bail!("{} within {timeout:?} (last: {last})", what());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl PostgresHa {
    /// Starts etcd, the first node (Patroni bootstraps the cluster on it: it becomes
    /// primary), the second (Patroni makes it a replica by base backup; it becomes the
    /// synchronous standby) and HAProxy; returns once the standby is in sync and HAProxy
    /// routes to the primary. `log_dir` gets every process's log (they outlive the data
    /// directory, for a failure's diagnosis).
    pub async fn start(log_dir: &Path) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        let patroni = program("patroni", "patroni")?;
        let etcd = program("etcd", "etcd-server")?;
        let unshare = program("unshare", "util-linux")?;
        let haproxy_program = haproxy::find().context(haproxy::INSTALL_HINT)?;
        let owner = if Uid::effective().is_root() {
            let user = User::from_name("postgres")
                .context("looking up the postgres user")?
                .context(
                    "running as root, and PostgreSQL refuses to run as root: create a `postgres` \
                     user (the Debian package does) or run as an ordinary user",
                )?;
            Some((user.uid, user.gid))
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "paysaga-patroni-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut this = Self {
            nodes: Vec::new(),
            port: 0,
            etcd: Etcd {
                port: 0,
                log: log_dir.join("etcd.log"),
                child: None,
            },
            haproxy: None,
            haproxy_log: log_dir.join("haproxy-postgres.log"),
            http: reqwest::Client::builder()
                .timeout(CONNECT_TIMEOUT)
                .build()
                .context("building an HTTP client")?,
            patroni,
            unshare,
            owner,
            dir,
        };
        this.start_etcd(&etcd).await?;
        for i in 0..NODES {
            let node = this.make_node(i, &bin, log_dir).await?;
            this.nodes.push(node);
        }
        this.spawn(0)?;
        this.wait_primary(None, READY_TIMEOUT).await?;
        for i in 1..NODES {
            this.spawn(i)?;
            this.wait_sync_standby(i, READY_TIMEOUT).await?;
        }
        this.start_haproxy(&haproxy_program, log_dir).await?;
        this.wait_routed_to(0, READY_TIMEOUT).await?;
        Ok(this)
    }

    /// An administrator's URL through HAProxy: whichever node is primary.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:{SUPERUSER_PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    pub fn node(&self, i: usize) -> &PgNode {
        &self.nodes[i]
    }

    /// The other node of the pair.
    pub fn other(&self, i: usize) -> usize {
        (i + 1) % self.nodes.len()
    }

    async fn start_etcd(&mut self, program: &Path) -> anyhow::Result<()> {
        let data = self.dir.join("etcd");
        let mut last = None;
        for _ in 0..5 {
            let (client, peer) = (free_port()?, free_port()?);
            let log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.etcd.log)?;
            let mut cmd = guarded_command(program);
            cmd.args(["--name", "etcd-1", "--data-dir"])
                .arg(&data)
                .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster=etcd-1=http://127.0.0.1:{peer}"))
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone()?))
                .stderr(Stdio::from(log));
            self.etcd.child = Some(spawn_guarded(cmd).context("starting etcd")?);
            self.etcd.port = client;
            let health = format!("http://127.0.0.1:{client}/health");
            let ready = poll(
                || "etcd did not answer /health".to_owned(),
                Duration::from_secs(20),
                async || {
                    if let Some(status) = self
                        .etcd
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten())
                    {
                        return Err(format!("etcd exited with {status}"));
                    }
                    match self.http.get(&health).send().await {
                        Ok(r) if r.status().is_success() => Ok(Some(())),
                        Ok(r) => Err(format!("HTTP {}", r.status())),
                        Err(e) => Err(e.to_string()),
                    }
                },
            )
            .await;
            match ready {
                Ok(()) => return Ok(()),
                Err(e) => {
                    if let Some(mut c) = self.etcd.child.take() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    let _ = std::fs::remove_dir_all(&data);
                    last = Some(e.context(tail(&self.etcd.log, 20)));
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("etcd did not start")))
    }

    /// Node `i`'s ports, links and configuration directory (not started).
    async fn make_node(&self, i: usize, bin: &Path, log_dir: &Path) -> anyhow::Result<PgNode> {
        let name = format!("pg-{}", i + 1);
        let (pg_port, api_port) = (free_port()?, free_port()?);
        let pg_link = FaultProxy::start(([127, 0, 0, 1], pg_port).into()).await?;
        let api_link = FaultProxy::start(([127, 0, 0, 1], api_port).into()).await?;
        let etcd_link = FaultProxy::start(([127, 0, 0, 1], self.etcd.port).into()).await?;
        let home = self.dir.join(&name);
        let config = home.join("config");
        std::fs::create_dir_all(&config)
            .with_context(|| format!("creating {}", config.display()))?;
        std::fs::write(config.join("10-paysaga.yml"), PATRONI_CONFIG)?;
        // JSON is YAML: Patroni merges this over the shipped file.
        let node = serde_json::json!({
            "name": name,
            "restapi": {
                "listen": format!("127.0.0.1:{api_port}"),
                "connect_address": format!("127.0.0.1:{}", api_link.port()),
            },
            "etcd3": {
                "hosts": format!("127.0.0.1:{}", etcd_link.port()),
                // The address given is the way to etcd: never switch to the members'
                // own addresses, which would go around the link.
                "use_proxies": true,
            },
            "bootstrap": {"dcs": {
                "ttl": TTL_SECS,
                "loop_wait": LOOP_WAIT_SECS,
                "retry_timeout": RETRY_TIMEOUT_SECS,
                "primary_stop_timeout": PRIMARY_STOP_TIMEOUT_SECS,
            }},
            "postgresql": {
                "listen": format!("127.0.0.1:{pg_port}"),
                "connect_address": format!("127.0.0.1:{}", pg_link.port()),
                "data_dir": home.join("data"),
                "bin_dir": bin,
                "pgpass": home.join("pgpass"),
                "authentication": {
                    "superuser": {"password": SUPERUSER_PASSWORD},
                    "replication": {"password": "replicator-dev"},
                    "rewind": {"password": "rewinder-dev"},
                },
                // TCP only: no socket file in a shared directory.
                "parameters": {"unix_socket_directories": ""},
            },
        });
        std::fs::write(
            config.join("20-node.yml"),
            serde_json::to_string_pretty(&node)?,
        )?;
        if let Some((uid, gid)) = self.owner {
            for path in [&home, &config] {
                std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                    .with_context(|| format!("giving {} to the postgres user", path.display()))?;
            }
        }
        Ok(PgNode {
            log: log_dir.join(format!("patroni-{name}.log")),
            name,
            pg_port,
            api_port,
            pg_link,
            api_link,
            etcd_link,
            config,
            child: None,
        })
    }

    /// Starts node `i`'s Patroni in a PID namespace of its own (see the module's doc).
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        if node.child.is_some() {
            bail!("{} is already running", node.name);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("cannot open {}", node.log.display()))?;
        let mut cmd = guarded_command(&self.unshare);
        cmd.args([
            "--user",
            "--map-current-user",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--",
        ])
        .arg(&self.patroni)
        .arg(&node.config)
        .env("HOME", node.config.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        // Its own process group, so one signal reaches unshare and Patroni together.
        .process_group(0);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        let child = spawn_guarded(cmd).context("starting Patroni")?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// Fails with the end of its log if node `i`, started, has exited.
    fn check_alive(&mut self, i: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        if let Some(status) = node
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            node.child = None;
            return Err(format!(
                "Patroni ({}) exited ({status}):\n{}",
                node.name,
                tail(&node.log, 30)
            ));
        }
        Ok(())
    }

    /// SIGKILLs every process of node `i` at once (Patroni and PostgreSQL: see
    /// [`PgNode::kill`]) and waits until its PostgreSQL no longer accepts connections.
    pub async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].kill();
        let url = self.nodes[i].url();
        poll(
            || "the killed node's PostgreSQL still accepted connections".to_owned(),
            Duration::from_secs(10),
            async || match connect(&url).await {
                Ok(conn) => {
                    let _ = conn.close().await;
                    Ok(None)
                }
                Err(_) => Ok(Some(())),
            },
        )
        .await
    }

    /// Starts node `i` again after a kill, on its data directory: Patroni finds another
    /// leader and rejoins as its replica (pg_rewind first if it had diverged).
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.spawn(i)
    }

    /// Cuts node `i` off the network: its PostgreSQL and REST API unreachable to
    /// everyone else, etcd unreachable to it. Bytes in flight are held, not refused.
    pub fn cut(&self, i: usize) {
        for link in self.nodes[i].links() {
            link.set_blackhole(true);
        }
    }

    /// Ends node `i`'s network cut.
    pub fn heal(&self, i: usize) {
        for link in self.nodes[i].links() {
            link.heal();
        }
    }

    /// The node whose Patroni holds the leader key and whose PostgreSQL accepts
    /// writes, asked of each node directly (not across the links).
    pub async fn primary(&self) -> Option<usize> {
        for (i, node) in self.nodes.iter().enumerate() {
            if self.is_writable_leader(node).await.unwrap_or(false) {
                return Some(i);
            }
        }
        None
    }

    async fn is_writable_leader(&self, node: &PgNode) -> Result<bool, String> {
        let status = self
            .http
            .get(node.api("/primary"))
            .send()
            .await
            .map_err(|e| format!("{}: {e}", node.name))?
            .status();
        if !status.is_success() {
            return Ok(false);
        }
        let (_, standby) = reached(&node.url())
            .await
            .map_err(|e| format!("{}: {e:#}", node.name))?;
        Ok(!standby)
    }

    /// Waits until a node other than `not` is primary (Patroni's leader, PostgreSQL out
    /// of recovery); returns it.
    pub async fn wait_primary(
        &mut self,
        not: Option<usize>,
        timeout: Duration,
    ) -> anyhow::Result<usize> {
        let candidates: Vec<usize> = (0..self.nodes.len()).filter(|i| Some(*i) != not).collect();
        let names: Vec<String> = candidates
            .iter()
            .map(|i| self.nodes[*i].name.clone())
            .collect();
        poll(
            || format!("none of {names:?} became primary"),
            timeout,
            async || {
                let mut last = String::new();
                for &i in &candidates {
                    if self.nodes[i].child.is_some() {
                        self.check_alive(i)?;
                    }
                    match self.is_writable_leader(&self.nodes[i]).await {
                        Ok(true) => return Ok(Some(i)),
                        Ok(false) => {}
                        Err(e) => last = e,
                    }
                }
                Err(last)
            },
        )
        .await
    }

    /// The cluster as the node at `i` sees it (`GET /cluster` on its REST API).
    async fn cluster_view(&self, i: usize) -> Result<ClusterView, String> {
        self.http
            .get(self.nodes[i].api("/cluster"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits until node `i` is a running replica that Patroni has recorded as the
    /// leader's synchronous standby (so it may be promoted, and every commit waits for
    /// it) and that the primary reports streaming in sync. Returns the timeline.
    pub async fn wait_sync_standby(&mut self, i: usize, timeout: Duration) -> anyhow::Result<i64> {
        let name = self.nodes[i].name.clone();
        poll(
            || format!("{name} did not become the synchronous standby"),
            timeout,
            async || {
                self.check_alive(i)?;
                let leader = self.other(i);
                let view = self.cluster_view(leader).await?;
                let Some(me) = view.members.iter().find(|m| m.name == name) else {
                    return Err(format!("{name} is not a member yet: {view:?}"));
                };
                if me.role != "sync_standby" || !matches!(me.state.as_str(), "running" | "streaming")
                {
                    return Err(format!("{name}: {me:?}"));
                }
                let mut conn = connect(&self.nodes[leader].url())
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                let in_sync: i64 = sqlx::query_scalar(
                    r#"SELECT COUNT(*) FROM pg_stat_replication
                       WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'"#,
                )
                .bind(&name)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
                let _ = conn.close().await;
                if in_sync == 0 {
                    return Err(format!("{name} is not streaming in sync yet"));
                }
                Ok(Some(me.timeline.unwrap_or(0)))
            },
        )
        .await
        .map_err(|e| e.context(tail(&self.nodes[i].log, 30)))
    }

    /// Writes HAProxy's configuration and starts it on a free port.
    async fn start_haproxy(&mut self, program: &Path, log_dir: &Path) -> anyhow::Result<()> {
        let mut last = None;
        for _ in 0..5 {
            self.port = free_port()?;
            let config = log_dir.join("haproxy-postgres.cfg");
            let servers: Vec<(String, u16, u16)> = self
                .nodes
                .iter()
                .map(|n| (n.name.clone(), n.pg_link.port(), n.api_link.port()))
                .collect();
            let body = haproxy_config(self.port, &self.stats_socket(), &servers);
            std::fs::write(&config, body)
                .with_context(|| format!("cannot write {}", config.display()))?;
            match self.spawn_haproxy(program, &config).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no free port for HAProxy")))
    }

    /// HAProxy's stats socket: where the harness reads which nodes are in rotation.
    fn stats_socket(&self) -> PathBuf {
        self.dir.join("haproxy.sock")
    }

    /// Each node's state as HAProxy sees it (`UP`, `DOWN`, or a transition such as
    /// `UP 1/3`), from `show stat` on its stats socket.
    pub async fn server_states(&self) -> anyhow::Result<Vec<(String, String)>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut sock = tokio::net::UnixStream::connect(self.stats_socket())
            .await
            .context("connecting to HAProxy's stats socket")?;
        sock.write_all(b"show stat\n").await?;
        let mut out = String::new();
        sock.read_to_string(&mut out).await?;
        // CSV: pxname, svname, ... with `status` in the 18th column.
        Ok(out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let cols: Vec<&str> = l.split(',').collect();
                let name = *cols.get(1)?;
                self.nodes.iter().any(|n| n.name == name).then(|| {
                    (
                        name.to_owned(),
                        cols.get(17).copied().unwrap_or("").to_owned(),
                    )
                })
            })
            .collect())
    }

    async fn spawn_haproxy(&mut self, program: &Path, config: &Path) -> anyhow::Result<()> {
        haproxy::check_config(program, config)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.haproxy_log)?;
        let mut cmd = guarded_command(program);
        cmd.arg("-db")
            .arg("-f")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        self.haproxy = Some(spawn_guarded(cmd).context("cannot start HAProxy")?);
        let port = self.port;
        let result = poll(
            || format!("HAProxy does not listen on port {port}"),
            Duration::from_secs(10),
            async || {
                if let Some(status) = self
                    .haproxy
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten())
                {
                    return Err(format!("HAProxy exited with {status}"));
                }
                Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(|_| ()))
            },
        )
        .await;
        if result.is_err() {
            if let Some(mut c) = self.haproxy.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        result.map_err(|e| e.context(tail(&self.haproxy_log, 20)))
    }

    /// Waits until HAProxy has node `i` alone in rotation (it starts with every node up
    /// until their checks fail, so at first a connection may reach a standby) and a new
    /// connection through it reaches that node, writable; returns how long that took.
    pub async fn wait_routed_to(&self, i: usize, timeout: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let want = &self.nodes[i];
        let url = self.admin_url();
        poll(
            || format!("HAProxy did not route to the writable {}", want.name),
            timeout,
            async || {
                let states = self.server_states().await.map_err(|e| format!("{e:#}"))?;
                let alone = states.iter().all(|(name, state)| {
                    if *name == want.name {
                        state == "UP"
                    } else {
                        // `DOWN`, or `DOWN 1/2` while rising: out of rotation either way.
                        state.starts_with("DOWN")
                    }
                });
                if !alone {
                    return Err(format!("HAProxy: {states:?}"));
                }
                match reached(&url).await {
                    Ok((port, false)) if port == want.pg_port => Ok(Some(started.elapsed())),
                    Ok((port, standby)) => Err(format!("reached port {port} (standby: {standby})")),
                    Err(e) => Err(format!("{e:#}")),
                }
            },
        )
        .await
        .map_err(|e| e.context(tail(&self.haproxy_log, 20)))
    }

    /// HAProxy's log, for a failure message.
    pub fn haproxy_log(&self) -> &Path {
        &self.haproxy_log
    }

    /// The directory holding every node's configuration and data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `deploy/haproxy/postgres.cfg` for the test cluster: bound to `127.0.0.1:port`, a
/// stats socket at `stats`, and the shipped `server` lines replaced by one per node
/// (`name`, its PostgreSQL's address, its Patroni API's), all on loopback. Every other
/// line, the checks and timings included, is the shipped file's.
pub fn haproxy_config(port: u16, stats: &Path, servers: &[(String, u16, u16)]) -> String {
    let mut c = String::from(
        "# Generated by paysaga's test harness from deploy/haproxy/postgres.cfg: the same\n\
         # settings, loopback addresses.\n",
    );
    for line in HAPROXY_CONFIG.lines() {
        let t = line.trim();
        if t.starts_with("server ") {
            continue;
        }
        if t.starts_with("bind ") {
            let _ = writeln!(c, "    bind 127.0.0.1:{port}");
            continue;
        }
        let _ = writeln!(c, "{line}");
        if t == "global" {
            let _ = writeln!(c, "    stats socket {}", stats.display());
        }
    }
    for (name, pg, api) in servers {
        let _ = writeln!(c, "    server {name} 127.0.0.1:{pg} check port {api}");
    }
    c
}

impl Drop for PostgresHa {
    fn drop(&mut self) {
        kill_and_reap(&mut self.haproxy);
        for node in &mut self.nodes {
            node.kill();
        }
        kill_and_reap(&mut self.etcd.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_runs_the_shipped_checks_on_loopback() {
        let c = haproxy_config(
            5000,
            Path::new("/tmp/x/haproxy.sock"),
            &[("pg-1".into(), 5001, 5002), ("pg-2".into(), 5003, 5004)],
        );
        assert!(c.contains("    bind 127.0.0.1:5000\n"), "{c}");
        assert!(!c.contains("bind :5432"), "{c}");
        assert!(c.contains("stats socket /tmp/x/haproxy.sock"), "{c}");
        assert!(
            c.contains("server pg-1 127.0.0.1:5001 check port 5002"),
            "{c}"
        );
        assert!(
            c.contains("server pg-2 127.0.0.1:5003 check port 5004"),
            "{c}"
        );
        assert!(
            !c.contains("pg-1:5432"),
            "the shipped servers are replaced: {c}"
        );
        // What decides routing comes from the shipped file unchanged.
        for line in [
            "option httpchk OPTIONS /primary",
            "http-check expect status 200",
            "on-marked-down shutdown-sessions",
            "timeout client 1h",
        ] {
            assert!(HAPROXY_CONFIG.contains(line), "deploy file lacks {line}");
            assert!(c.contains(line), "{c}");
        }
    }

    #[test]
    fn the_shipped_patroni_configuration_is_synchronous_with_rewind() {
        for setting in [
            "synchronous_mode: true",
            "use_pg_rewind: true",
            "wal_log_hints: \"on\"",
            "synchronous_commit: \"on\"",
            "etcd3:",
        ] {
            assert!(
                PATRONI_CONFIG.contains(setting),
                "deploy/patroni/patroni.yml lacks {setting}"
            );
        }
    }
}
