//! A Redis Cluster of a test's own on loopback: 3 masters and 3 replicas, each a
//! `redis-server` without persistence on free ports, joined with `redis-cli --cluster
//! create`. A master can be SIGKILLed (its replica is promoted by the cluster itself);
//! every process is killed and the config directory removed on drop, also when the
//! test panics. The processes die with the test process too (parent-death signal).

use std::{
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};
use redis::aio::MultiplexedConnection;

use paysaga_supervisor::process::{free_port, guarded_command, spawn_guarded};

/// How long the cluster may take to form (every node `cluster_state:ok`, replicas in sync).
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// `cluster-node-timeout`: how long a master may be unreachable before it is judged
/// failed and its replica promoted.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// One `redis-server` of the cluster.
pub struct ClusterNode {
    /// Its config file is `nodes-<index>.conf`, kept across a restart.
    index: usize,
    pub port: u16,
    /// The cluster bus port (`--cluster-port`, chosen free rather than `port + 10000`).
    pub bus_port: u16,
    child: Option<Child>,
}

impl ClusterNode {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

/// A master and the slots it serves, as the cluster reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub master: u16,
    pub replicas: Vec<u16>,
    /// Inclusive slot ranges.
    pub slots: Vec<(u16, u16)>,
}

impl Shard {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

pub struct RedisCluster {
    pub nodes: Vec<ClusterNode>,
    dir: PathBuf,
}

fn program(name: &str) -> anyhow::Result<PathBuf> {
    ["/usr/bin", "/usr/local/bin"]
        .into_iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} is not installed (Debian package redis-server)"))
}

async fn connect(port: u16) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .with_context(|| format!("connecting to 127.0.0.1:{port} timed out"))??;
    Ok(conn)
}

/// The node's `CLUSTER INFO` answer.
async fn cluster_info(c: &mut MultiplexedConnection) -> anyhow::Result<String> {
    Ok(redis::cmd("CLUSTER").arg("INFO").query_async(c).await?)
}

/// `field:value` lines of an INFO or CLUSTER INFO answer.
fn info_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

impl RedisCluster {
    /// Starts 6 nodes, creates the cluster (`--cluster-replicas 1`) and waits until every
    /// node reports `cluster_state:ok`, knows all six, and every replica is in sync.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "paysaga-redis-cluster-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut this = Self {
            nodes: Vec::new(),
            dir,
        };
        for i in 0..6 {
            let node = this.spawn_node(i).await?;
            this.nodes.push(node);
        }
        let mut create = std::process::Command::new(program("redis-cli")?);
        create.arg("--cluster").arg("create");
        for n in &this.nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("running redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        this.wait_healthy(FORM_TIMEOUT).await?;
        Ok(this)
    }

    /// Spawns node `i` on free ports; retries other ports when the server exits at
    /// start (another process took a port between choosing and binding it).
    async fn spawn_node(&self, i: usize) -> anyhow::Result<ClusterNode> {
        let mut last = None;
        for _ in 0..5 {
            let (port, bus_port) = (free_port()?, free_port()?);
            if port == bus_port {
                continue;
            }
            let mut node = ClusterNode {
                index: i,
                port,
                bus_port,
                child: None,
            };
            match self.spawn_on(&mut node).await {
                Ok(()) => return Ok(node),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no free ports for a cluster node")))
    }

    /// Starts `node`'s server on its ports with its config file and waits until it
    /// answers.
    async fn spawn_on(&self, node: &mut ClusterNode) -> anyhow::Result<()> {
        let server = program("redis-server")?;
        let (i, port, bus_port) = (node.index, node.port, node.bus_port);
        {
            let mut cmd = guarded_command(&server);
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-port", &bus_port.to_string()])
                .arg("--cluster-config-file")
                .arg(self.dir.join(format!("nodes-{i}.conf")))
                .arg("--dir")
                .arg(&self.dir)
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args([
                    "--cluster-node-timeout",
                    &NODE_TIMEOUT.as_millis().to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            node.child = Some(spawn_guarded(cmd).context("starting redis-server")?);
        }
        Self::wait_answers(node).await
    }

    /// Starts a killed node again on its ports, empty but with its cluster config file:
    /// it rejoins the cluster and, its slots having moved to the promoted replica, becomes
    /// that master's replica. Waits until the whole cluster is healthy again (every
    /// shard with an in-sync replica).
    pub async fn restart(&mut self, port: u16) -> anyhow::Result<()> {
        let at = self
            .nodes
            .iter()
            .position(|n| n.port == port)
            .with_context(|| format!("no cluster node on port {port}"))?;
        if self.nodes[at].is_running() {
            bail!("the cluster node on port {port} is running");
        }
        let mut node = ClusterNode {
            index: self.nodes[at].index,
            port,
            bus_port: self.nodes[at].bus_port,
            child: None,
        };
        let started = self.spawn_on(&mut node).await;
        self.nodes[at] = node;
        started?;
        self.wait_healthy(FORM_TIMEOUT).await
    }

    async fn wait_answers(node: &mut ClusterNode) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(child) = node.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    node.child = None;
                    bail!(
                        "redis-server on port {} exited at start ({status})",
                        node.port
                    );
                }
            }
            if let Ok(mut c) = connect(node.port).await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                bail!("redis-server on port {} did not answer", node.port);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The node URLs of the running nodes, for `REDIS_CLUSTER_NODES` (comma-joined).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(ClusterNode::url)
            .collect()
    }

    /// `REDIS_CLUSTER_NODES` for a service: every node, comma-separated.
    pub fn nodes_env(&self) -> String {
        self.nodes
            .iter()
            .map(ClusterNode::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A cluster-aware connection, for a test to read keys back.
    pub async fn client(&self) -> anyhow::Result<redis::cluster_async::ClusterConnection> {
        let client = redis::cluster::ClusterClientBuilder::new(self.node_urls())
            .connection_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2))
            .build()?;
        Ok(client.get_async_connection().await?)
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    pub async fn keyslot(&self, key: &str) -> anyhow::Result<u16> {
        let port = self.any_running()?;
        let mut c = connect(port).await?;
        Ok(redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut c)
            .await?)
    }

    fn any_running(&self) -> anyhow::Result<u16> {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(|n| n.port)
            .context("no node of the cluster is running")
    }

    /// The shards as a running node sees them (`CLUSTER SHARDS`): masters that are
    /// marked failed are left out, replicas only when online.
    pub async fn shards(&self) -> anyhow::Result<Vec<Shard>> {
        let port = self.any_running()?;
        let mut c = connect(port).await?;
        let v: redis::Value = redis::cmd("CLUSTER")
            .arg("SHARDS")
            .query_async(&mut c)
            .await?;
        parse_shards(&v)
    }

    /// The port of the master serving `slot`.
    pub async fn master_of(&self, slot: u16) -> anyhow::Result<u16> {
        self.shards()
            .await?
            .into_iter()
            .find(|s| s.serves(slot))
            .map(|s| s.master)
            .with_context(|| format!("no master serves slot {slot}"))
    }

    /// SIGKILLs the node on `port` (its data is gone: no persistence).
    pub fn kill(&mut self, port: u16) -> anyhow::Result<()> {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .with_context(|| format!("no cluster node on port {port}"))?;
        if let Some(mut child) = node.child.take() {
            child.kill().context("SIGKILL to redis-server")?;
            child.wait().context("reaping redis-server")?;
        }
        Ok(())
    }

    /// Waits until a running node other than `old` is master of `slot` and every
    /// running node says `cluster_state:ok`. Returns the new master's port.
    pub async fn wait_promoted(
        &self,
        slot: u16,
        old: u16,
        timeout: Duration,
    ) -> anyhow::Result<u16> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(master) = self.master_of(slot).await {
                if master != old && self.all_ok().await.unwrap_or(false) {
                    return Ok(master);
                }
            }
            if Instant::now() >= deadline {
                bail!("no replica took slot {slot} over from port {old} within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `CLUSTER FAILOVER TAKEOVER` on the replica at `port`: promotes it at once, without
    /// the other masters' agreement.
    pub async fn takeover(&self, port: u16) -> anyhow::Result<()> {
        let mut c = connect(port).await?;
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query_async::<()>(&mut c)
            .await?;
        Ok(())
    }

    async fn all_ok(&self) -> anyhow::Result<bool> {
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            let mut c = connect(n.port).await?;
            if info_field(&cluster_info(&mut c).await?, "cluster_state") != Some("ok") {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Every node `cluster_state:ok` and knowing all nodes; three masters covering all
    /// 16384 slots, each with an online replica that is in sync.
    async fn wait_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last;
        loop {
            match self.healthy().await {
                Ok(None) => return Ok(()),
                Ok(Some(why)) => last = why,
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= deadline {
                bail!("the Redis Cluster did not form within {timeout:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn healthy(&self) -> anyhow::Result<Option<String>> {
        for n in &self.nodes {
            let mut c = connect(n.port).await?;
            let info = cluster_info(&mut c).await?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Ok(Some(format!("node {} not ok yet", n.port)));
            }
            if info_field(&info, "cluster_known_nodes") != Some("6") {
                return Ok(Some(format!("node {} does not know all nodes yet", n.port)));
            }
            let repl: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await?;
            if info_field(&repl, "role") == Some("slave")
                && info_field(&repl, "master_link_status") != Some("up")
            {
                return Ok(Some(format!("replica {} not in sync yet", n.port)));
            }
        }
        let shards = self.shards().await?;
        let slots: u32 = shards
            .iter()
            .flat_map(|s| &s.slots)
            .map(|&(lo, hi)| u32::from(hi - lo) + 1)
            .sum();
        if shards.len() != 3 || slots != 16384 || shards.iter().any(|s| s.replicas.len() != 1) {
            return Ok(Some(format!("shards not formed yet: {shards:?}")));
        }
        Ok(None)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A RESP map or a flat key/value array, as `(key, value)` pairs.
fn entries(v: &redis::Value) -> Vec<(String, &redis::Value)> {
    use redis::Value;
    let name = |k: &Value| match k {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (name(k), v)).collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| match c {
                [k, v] => Some((name(k), v)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn text(v: &redis::Value) -> String {
    match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn int(v: &redis::Value) -> Option<i64> {
    match v {
        redis::Value::Int(i) => Some(*i),
        other => text(other).parse().ok(),
    }
}

/// `CLUSTER SHARDS`: per shard `slots` (flat start/end list) and `nodes` (each with
/// `port`, `role`, `health`).
fn parse_shards(v: &redis::Value) -> anyhow::Result<Vec<Shard>> {
    let redis::Value::Array(shards) = v else {
        bail!("CLUSTER SHARDS answered {v:?}");
    };
    let mut out = Vec::new();
    for shard in shards {
        let fields = entries(shard);
        let mut slots = Vec::new();
        let mut master = None;
        let mut replicas = Vec::new();
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("slots", redis::Value::Array(bounds)) => {
                    for pair in bounds.chunks(2) {
                        if let [lo, hi] = pair {
                            let (lo, hi) = (int(lo), int(hi));
                            if let (Some(lo), Some(hi)) = (lo, hi) {
                                slots.push((u16::try_from(lo)?, u16::try_from(hi)?));
                            }
                        }
                    }
                }
                ("nodes", redis::Value::Array(nodes)) => {
                    for node in nodes {
                        let f = entries(node);
                        let get = |name: &str| f.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
                        let port = get("port")
                            .and_then(int)
                            .and_then(|p| u16::try_from(p).ok());
                        let role = get("role").map(text);
                        let health = get("health").map(text);
                        match (port, role.as_deref(), health.as_deref()) {
                            (Some(p), Some("master"), Some("online")) => master = Some(p),
                            (Some(p), Some("replica"), Some("online")) => replicas.push(p),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if let (Some(master), false) = (master, slots.is_empty()) {
            out.push(Shard {
                master,
                replicas,
                slots,
            });
        }
    }
    Ok(out)
}
