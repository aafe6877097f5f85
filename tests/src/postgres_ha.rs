//! A PostgreSQL primary with a synchronous streaming standby of a test's own, behind a
//! HAProxy that sends connections only to the node that accepts writes: the shape of a
//! highly available PostgreSQL in front of paysaga, small enough for one test.
//!
//! Both nodes run Debian's PostgreSQL (the newest version under `/usr/lib/postgresql`)
//! on free loopback ports with their data in a temporary directory: the primary made
//! with `initdb`, the standby with `pg_basebackup -R` from it. Only the primary runs with
//! `synchronous_standby_names = '*'` (given on its command line, so the standby's copy
//! of the configuration does not carry it): a commit it acknowledges is on the standby.
//! HAProxy checks each node with an external command that asks `pg_is_in_recovery()`,
//! so only a writable node is in rotation, and cuts the sessions of a node marked down.
//! PostgreSQL refuses to run as root: as root, every PostgreSQL program runs as the
//! `postgres` user. Everything is killed and the directory removed on drop; the
//! processes also die with the test process (parent-death signal).

use std::{
    fmt::Write as _,
    fs::OpenOptions,
    os::unix::{fs::PermissionsExt, process::CommandExt},
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

use paysaga_supervisor::{
    haproxy,
    process::{free_port, guarded_command, spawn_guarded, tail},
};

/// How long a node may take to accept connections after it is spawned, the standby to
/// stream in sync, and HAProxy to route to the primary.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// HAProxy checks each node this often; `FALL` failed checks in a row take a node out of
/// rotation, `RISE` passed ones put it in.
pub const CHECK_INTERVAL_MS: u64 = 200;
pub const FALL: u32 = 2;
pub const RISE: u32 = 2;
/// Connecting through HAProxy or to a node, per attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The directory of the newest PostgreSQL installed the Debian way, or an error saying
/// how to install it.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    paysaga_supervisor::infra::postgres_bin_dirs()
        .into_iter()
        .find(|bin| bin.join("postgres").is_file())
        .context(
        "PostgreSQL's server programs are not installed under /usr/lib/postgresql/<version>/bin: \
         install them with `sudo apt-get install postgresql` (Debian, Ubuntu)",
    )
}

/// Which node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Standby,
}

/// One PostgreSQL server (a postmaster and its processes, one process group).
pub struct PgNode {
    pub name: &'static str,
    pub port: u16,
    pub data: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl PgNode {
    /// A superuser's URL straight to this node (not through HAProxy).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/postgres",
            self.port
        )
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL to the postmaster and every backend at once (its process group), as a
    /// crashed machine takes them: nothing is shut down, nothing more is written.
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

/// The primary, its synchronous standby and the HAProxy in front of them.
pub struct PostgresHa {
    pub primary: PgNode,
    pub standby: PgNode,
    /// HAProxy's port: the one address the services are given.
    pub port: u16,
    haproxy: Option<Child>,
    haproxy_log: PathBuf,
    bin: PathBuf,
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

impl PostgresHa {
    /// Creates and starts both nodes and HAProxy; returns once the standby streams in
    /// sync and HAProxy routes to the primary. `log_dir` gets the servers' and HAProxy's
    /// logs (they outlive the data directory, for a failure's diagnosis).
    pub async fn start(log_dir: &Path) -> anyhow::Result<Self> {
        let bin = bin_dir()?;
        let program = haproxy::find().context(haproxy::INSTALL_HINT)?;
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
            "paysaga-postgres-ha-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid.as_raw()), Some(gid.as_raw()))
                .with_context(|| format!("giving {} to the postgres user", dir.display()))?;
        }
        let node = |name: &'static str| PgNode {
            name,
            port: 0,
            data: dir.join(name),
            log: log_dir.join(format!("postgres-{name}.log")),
            child: None,
        };
        let mut this = Self {
            primary: node("primary"),
            standby: node("standby"),
            port: 0,
            haproxy: None,
            haproxy_log: log_dir.join("haproxy-postgres.log"),
            bin,
            owner,
            dir,
        };
        this.run_tool(
            "initdb",
            &[
                &paysaga_supervisor::infra::INITDB_ARGS[..],
                &[this.primary.data.display().to_string().as_str()],
            ]
            .concat(),
        )
        .await?;
        this.spawn_until_ready(Role::Primary).await?;
        this.run_tool(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &this.primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &this.standby.data.display().to_string(),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        )
        .await?;
        this.spawn_until_ready(Role::Standby).await?;
        this.wait_in_sync().await?;
        this.start_haproxy(&program, log_dir).await?;
        this.wait_routed_to(Role::Primary, READY_TIMEOUT).await?;
        Ok(this)
    }

    /// An administrator's URL through HAProxy: whichever node is writable.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres:postgres@127.0.0.1:{}/postgres",
            self.port
        )
    }

    pub fn node(&self, role: Role) -> &PgNode {
        match role {
            Role::Primary => &self.primary,
            Role::Standby => &self.standby,
        }
    }

    fn node_mut(&mut self, role: Role) -> &mut PgNode {
        match role {
            Role::Primary => &mut self.primary,
            Role::Standby => &mut self.standby,
        }
    }

    /// Runs one of PostgreSQL's programs to completion, as the `postgres` user when root.
    async fn run_tool(&self, name: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut cmd = tokio::process::Command::new(self.bin.join(name));
        cmd.args(args)
            .current_dir(&self.dir)
            // Its own home: libpq looks for a password file there (none is needed).
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        let out = cmd
            .output()
            .await
            .with_context(|| format!("cannot run {name}"))?;
        if !out.status.success() {
            bail!(
                "{name} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Starts `role`'s server on a free port and waits until it accepts connections; a
    /// port taken between choosing and binding it makes the server exit, and another is
    /// tried.
    async fn spawn_until_ready(&mut self, role: Role) -> anyhow::Result<()> {
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            match self.spawn_on(role, port).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no free port for PostgreSQL")))
    }

    async fn spawn_on(&mut self, role: Role, port: u16) -> anyhow::Result<()> {
        let postgres = self.bin.join("postgres");
        let owner = self.owner;
        let node = self.node_mut(role);
        node.port = port;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("cannot open {}", node.log.display()))?;
        let mut cmd = guarded_command(&postgres);
        cmd.arg("-D")
            .arg(&node.data)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            // TCP only: no socket file in a shared directory.
            .args(["-c", "unix_socket_directories="])
            .args(["-c", &format!("cluster_name=paysaga-{}", node.name)])
            .env("HOME", node.data.parent().unwrap_or(Path::new("/")))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            // Its own process group, so a kill takes every backend with the postmaster.
            .process_group(0);
        if role == Role::Primary {
            // Every commit waits until a standby has it; on the command line only, so the
            // standby's copy of the configuration does not make it wait for a standby of
            // its own once it is promoted.
            cmd.args(["-c", "synchronous_standby_names=*"])
                .args(["-c", "synchronous_commit=on"]);
        }
        if let Some((uid, gid)) = owner {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        node.child = Some(spawn_guarded(cmd).context("starting postgres")?);
        let url = node.url();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let node = self.node_mut(role);
            if let Some(status) = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                node.child = None;
                bail!(
                    "postgres ({}) on port {port} exited at start ({status}):\n{}",
                    node.name,
                    tail(&node.log, 20)
                );
            }
            match connect(&url).await {
                Ok(conn) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!(
                        "postgres ({}) did not accept connections within {READY_TIMEOUT:?}:\n{}",
                        node.name,
                        tail(&node.log, 20)
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Waits until the primary reports the standby streaming as its synchronous standby.
    async fn wait_in_sync(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let mut conn = connect(&self.primary.url()).await?;
            let sync: i64 = sqlx::query_scalar(
                r#"SELECT COUNT(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'"#,
            )
            .fetch_one(&mut conn)
            .await?;
            let _ = conn.close().await;
            if sync > 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the standby did not stream in sync within {READY_TIMEOUT:?}:\n{}",
                    tail(&self.standby.log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The external check: passes only on a node that accepts connections and is not in
    /// recovery (a standby answers `t`, a dead node nothing).
    fn check_script(&self) -> String {
        format!(
            "#!/bin/sh\n\
             # HAProxy external check: $3 and $4 are the server's address and port. Passes only\n\
             # on the node that accepts writes (pg_is_in_recovery() is false).\n\
             [ \"$(PGCONNECT_TIMEOUT=2 '{}' -X -w -h \"$3\" -p \"$4\" -U postgres -d postgres \\\n    \
             -tAc 'SELECT pg_is_in_recovery()' 2>/dev/null)\" = f ]\n",
            self.bin.join("psql").display()
        )
    }

    /// Writes the check script and HAProxy's configuration, starts HAProxy on a free port.
    async fn start_haproxy(&mut self, program: &Path, log_dir: &Path) -> anyhow::Result<()> {
        let script = self.dir.join("is-writable.sh");
        std::fs::write(&script, self.check_script())
            .with_context(|| format!("cannot write {}", script.display()))?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let mut last = None;
        for _ in 0..5 {
            self.port = free_port()?;
            let config = log_dir.join("haproxy-postgres.cfg");
            let body = config_for(self.port, &script, &self.stats_socket(), &self.nodes());
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
    /// `UP 1/2`), from `show stat` on its stats socket.
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
                (name == self.primary.name || name == self.standby.name).then(|| {
                    (
                        name.to_owned(),
                        cols.get(17).copied().unwrap_or("").to_owned(),
                    )
                })
            })
            .collect())
    }

    fn nodes(&self) -> [(&'static str, u16); 2] {
        [
            (self.primary.name, self.primary.port),
            (self.standby.name, self.standby.port),
        ]
    }

    async fn spawn_haproxy(&mut self, program: &Path, config: &Path) -> anyhow::Result<()> {
        paysaga_supervisor::haproxy::check_config(program, config)?;
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
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self
                .haproxy
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.haproxy = None;
                bail!(
                    "HAProxy exited with {status}:\n{}",
                    tail(&self.haproxy_log, 20)
                );
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("HAProxy does not listen on port {}", self.port);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until HAProxy has `role`'s node alone in rotation (it starts with every
    /// node up until their checks fail, so at first a connection may reach a standby) and
    /// a new connection through it reaches that node, writable; returns how long that
    /// took.
    pub async fn wait_routed_to(&self, role: Role, timeout: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let want = self.node(role);
        let url = self.admin_url();
        loop {
            let last = match self.server_states().await {
                Ok(states)
                    if states.iter().all(|(name, state)| {
                        if name == want.name {
                            state == "UP"
                        } else {
                            // `DOWN`, or `DOWN 1/2` while rising: out of rotation either way.
                            state.starts_with("DOWN")
                        }
                    }) =>
                {
                    match reached(&url).await {
                        Ok((port, false)) if port == want.port => return Ok(started.elapsed()),
                        Ok((port, standby)) => format!("reached port {port} (standby: {standby})"),
                        Err(e) => format!("{e:#}"),
                    }
                }
                Ok(states) => format!("HAProxy: {states:?}"),
                Err(e) => format!("{e:#}"),
            };
            if started.elapsed() >= timeout {
                bail!(
                    "HAProxy did not route to the writable {} within {timeout:?} (last: {last})\n{}",
                    self.node(role).name,
                    tail(&self.haproxy_log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs the primary's postmaster and backends together.
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// Promotes the standby (`pg_promote()`, waiting until it has left recovery).
    pub async fn promote_standby(&self) -> anyhow::Result<()> {
        let mut conn = connect(&self.standby.url()).await?;
        let promoted: bool = sqlx::query_scalar(r#"SELECT pg_promote(true, 60)"#)
            .fetch_one(&mut conn)
            .await
            .context("pg_promote on the standby")?;
        let _ = conn.close().await;
        anyhow::ensure!(promoted, "the standby was not promoted within 60 s");
        Ok(())
    }

    /// HAProxy's log, for a failure message.
    pub fn haproxy_log(&self) -> &Path {
        &self.haproxy_log
    }
}

/// HAProxy in TCP mode in front of `nodes`, each checked by `script`, its state readable
/// on `stats`.
fn config_for(port: u16, script: &Path, stats: &Path, nodes: &[(&str, u16)]) -> String {
    let mut c = format!(
        "# Generated by paysaga's test harness: PostgreSQL behind HAProxy, only the writable\n\
         # node in rotation.\n\
         global\n    \
         maxconn 1024\n    \
         log stderr format raw local0 info\n    \
         stats socket {}\n    \
         # External checks fork a program, which HAProxy forbids unless told.\n    \
         external-check\n    \
         insecure-fork-wanted\n\n\
         defaults\n    \
         mode tcp\n    \
         log global\n    \
         timeout connect 1s\n    \
         # Pooled connections sit idle between statements.\n    \
         timeout client 1h\n    \
         timeout server 1h\n    \
         timeout check 3s\n\n\
         listen postgres\n    \
         bind 127.0.0.1:{port}\n    \
         option external-check\n    \
         external-check path \"/usr/bin:/bin\"\n    \
         external-check command {}\n    \
         # A node marked down loses its sessions at once: a demoted or cut-off primary\n    \
         # must not keep taking writes through connections opened before.\n    \
         default-server inter {CHECK_INTERVAL_MS}ms fastinter {CHECK_INTERVAL_MS}ms downinter {CHECK_INTERVAL_MS}ms fall {FALL} rise {RISE} on-marked-down shutdown-sessions\n",
        stats.display(),
        script.display()
    );
    for (name, port) in nodes {
        let _ = writeln!(c, "    server {name} 127.0.0.1:{port} check");
    }
    c
}

impl Drop for PostgresHa {
    fn drop(&mut self) {
        if let Some(mut child) = self.haproxy.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.primary.kill();
        self.standby.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_checked_nodes_and_cut_sessions_when_marked_down() {
        let c = config_for(
            5000,
            Path::new("/tmp/x/is-writable.sh"),
            Path::new("/tmp/x/haproxy.sock"),
            &[("primary", 5001), ("standby", 5002)],
        );
        assert!(c.contains("bind 127.0.0.1:5000"), "{c}");
        assert!(c.contains("insecure-fork-wanted"), "{c}");
        assert!(
            c.contains("external-check command /tmp/x/is-writable.sh"),
            "{c}"
        );
        assert!(c.contains("on-marked-down shutdown-sessions"), "{c}");
        assert!(c.contains("server primary 127.0.0.1:5001 check"), "{c}");
        assert!(c.contains("server standby 127.0.0.1:5002 check"), "{c}");
    }
}
