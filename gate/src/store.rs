//! The shared quota in Redis (one server or a Redis Cluster): a connection that
//! reconnects on its own, a hard timeout on every call, and typed answers from the scripts.

use std::{future::Future, time::Duration};

use paysaga_common::tls::Trust;

use redis::{
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
    cluster_async::ClusterConnection,
    Cmd, Pipeline, RedisFuture, Value,
};

use crate::{
    error::{Error, Result},
    keys::ProductKeys,
    scripts,
};

/// What the issue script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueOutcome {
    /// The member already holds a live pass expiring at `exp`.
    Existing { exp: i64 },
    /// A new pass expiring at `exp`; `remaining` passes are left.
    Issued { exp: i64, remaining: i64 },
    /// The quota is used up.
    NoQuota,
    /// Redis has no quota for this product (never computed, or Redis lost its data).
    Unknown,
}

impl IssueOutcome {
    /// One member's answer from the issue scripts, `[code, exp, remaining]`; `script`
    /// names the script in the error for any other answer.
    fn from_reply(reply: &[i64], script: &str) -> Result<Self> {
        match reply {
            [1, exp, _] => Ok(Self::Existing { exp: *exp }),
            [2, exp, remaining] => Ok(Self::Issued {
                exp: *exp,
                remaining: *remaining,
            }),
            [0, _, _] => Ok(Self::NoQuota),
            [3, _, _] => Ok(Self::Unknown),
            other => Err(Error::ScriptReply(format!("{script} returned {other:?}"))),
        }
    }
}

/// What the recompute script did for one product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recomputed {
    /// The quota before, `None` when the key was absent.
    pub old: Option<i64>,
    pub new: i64,
    pub in_flight: i64,
    /// Live holders (member, expiry), returned only when the new quota is 0.
    pub holders: Vec<(String, i64)>,
}

/// Quota and live holders read together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub quota: Option<i64>,
    pub holders: Vec<(String, i64)>,
}

/// The two kinds of connection the gate can hold. Every call goes through one `match`
/// to the inner connection's own boxed future: no extra allocation, no extra round trip
/// on the single-server path.
#[derive(Clone)]
enum Conn {
    /// One Redis server, reconnecting on its own.
    Single(ConnectionManager),
    /// A Redis Cluster: commands are routed by the slot of their first key (a script's
    /// keys share one hash tag, so one slot), topology refreshed on MOVED or a lost
    /// node, `SCRIPT LOAD` sent to every master on NOSCRIPT.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the shared quota lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`REDIS_URL`).
    Single(String),
    /// A Redis Cluster reached through any of these nodes (`REDIS_CLUSTER_NODES`); the
    /// client learns the rest of the topology from them.
    Cluster(Vec<String>),
}

#[derive(Clone)]
pub struct QuotaStore {
    conn: Conn,
    prefix: String,
    timeout: Duration,
}

impl QuotaStore {
    /// Does not connect: the first command does, so the gate starts (degraded) even
    /// when Redis is down.
    /// A `rediss://` URL is verified against `trust` (`TLS_CA_FILE`).
    pub fn new(url: &str, prefix: &str, timeout: Duration, trust: &Trust) -> Result<Self> {
        let client = trust.redis_client(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self {
            conn: Conn::Single(conn),
            prefix: prefix.to_owned(),
            timeout,
        })
    }

    /// A store on a Redis Cluster reached through `nodes` (any subset of its nodes).
    /// Like [`Self::new`] it does not wait for the cluster: the topology is loaded in
    /// the background, and a call before it is known (or while a master is lost and its
    /// replica not yet promoted) fails within the timeout, which degrades the gate.
    pub fn cluster(
        nodes: &[String],
        prefix: &str,
        timeout: Duration,
        trust: &Trust,
    ) -> Result<Self> {
        let mut builder = ClusterClientBuilder::new(nodes.iter().map(String::as_str));
        if let Some(certs) = trust.redis_certificates() {
            builder = builder.certs(certs);
        }
        let client = builder
            .connection_timeout(timeout)
            .response_timeout(timeout)
            // A call that finds its master gone is retried after a topology refresh,
            // but only briefly: the gate's own timeout bounds it anyway, and the
            // fallback limiter answers better than a buyer waiting on a failover.
            .retries(2)
            .min_retry_wait(20)
            .max_retry_wait(100)
            .build()?;
        let conn = client.get_pending_async_connection_with_config(
            redis::cluster::ClusterConfig::new()
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout),
        );
        Ok(Self {
            conn: Conn::Cluster(conn),
            prefix: prefix.to_owned(),
            timeout,
        })
    }

    /// [`Self::new`] or [`Self::cluster`], as `target` says.
    pub fn open(
        target: &RedisTarget,
        prefix: &str,
        timeout: Duration,
        trust: &Trust,
    ) -> Result<Self> {
        match target {
            RedisTarget::Single(url) => Self::new(url, prefix, timeout, trust),
            RedisTarget::Cluster(nodes) => Self::cluster(nodes, prefix, timeout, trust),
        }
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub fn keys(&self, product_id: i64) -> ProductKeys {
        ProductKeys::new(&self.prefix, product_id)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(Error::from),
            Err(_) => Err(Error::RedisTimeout(self.timeout)),
        }
    }

    pub async fn issue(
        &self,
        product_id: i64,
        member: &str,
        now: i64,
        exp: i64,
    ) -> Result<IssueOutcome> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::ISSUE.key(&k.quota);
        inv.key(&k.holders).arg(member).arg(now).arg(exp);
        let v: Vec<i64> = self.bounded(inv.invoke_async(&mut conn)).await?;
        IssueOutcome::from_reply(&v, "issue")
    }

    /// [`Self::issue`] for several members in one script call; one outcome per member.
    pub async fn issue_many(
        &self,
        product_id: i64,
        members: &[String],
        now: i64,
        exp: i64,
    ) -> Result<Vec<IssueOutcome>> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::ISSUE_MANY.key(&k.quota);
        inv.key(&k.holders).arg(now).arg(exp);
        for m in members {
            inv.arg(m);
        }
        let v: Vec<i64> = self.bounded(inv.invoke_async(&mut conn)).await?;
        if v.len() != members.len() * 3 {
            return Err(Error::ScriptReply(format!(
                "issue_many returned {} numbers for {} members",
                v.len(),
                members.len()
            )));
        }
        v.chunks(3)
            .map(|c| IssueOutcome::from_reply(c, "issue_many"))
            .collect()
    }

    /// The live passes (member, expiry) of a product, expiring at or after `cutoff`.
    pub async fn holders(&self, product_id: i64, cutoff: i64) -> Result<Vec<(String, i64)>> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::HOLDERS.key(&k.holders);
        inv.arg(cutoff);
        let v: Value = self.bounded(inv.invoke_async(&mut conn)).await?;
        pairs(&v)
    }

    /// Sets the quota from `available` (read from the order service after `used` was
    /// learned, at `cutoff + skew`), marking `used` members' current passes as used and
    /// re-adding `resync` passes Redis may not know.
    pub async fn recompute(
        &self,
        product_id: i64,
        available: i64,
        cutoff: i64,
        now: i64,
        used: &[String],
        resync: &[(String, i64)],
    ) -> Result<Recomputed> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::RECOMPUTE.key(&k.quota);
        inv.key(&k.holders)
            .key(&k.used)
            .arg(available)
            .arg(cutoff)
            .arg(now)
            .arg(used.len());
        for member in used {
            inv.arg(member);
        }
        for (member, exp) in resync {
            inv.arg(member).arg(*exp);
        }
        let v: Value = self.bounded(inv.invoke_async(&mut conn)).await?;
        let parts = array(&v)?;
        let [old, new, in_flight, live] = parts else {
            return Err(Error::ScriptReply(format!("recompute returned {v:?}")));
        };
        let old = int(old)?;
        Ok(Recomputed {
            old: (old >= 0).then_some(old),
            new: int(new)?,
            in_flight: int(in_flight)?,
            holders: pairs(live)?,
        })
    }

    pub async fn snapshot(&self, product_id: i64, now: i64) -> Result<Snapshot> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::SNAPSHOT.key(&k.quota);
        inv.key(&k.holders).arg(now);
        let v: Value = self.bounded(inv.invoke_async(&mut conn)).await?;
        let [q, live] = array(&v)? else {
            return Err(Error::ScriptReply(format!("snapshot returned {v:?}")));
        };
        let q = int(q)?;
        Ok(Snapshot {
            quota: (q >= 0).then_some(q),
            holders: pairs(live)?,
        })
    }

    /// `(quota, live passes)`, or `None` when Redis holds no quota for the product.
    pub async fn read(&self, product_id: i64, now: i64) -> Result<Option<(i64, i64)>> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        let mut inv = scripts::READ.key(&k.quota);
        inv.key(&k.holders).key(&k.used).arg(now);
        let v: Vec<i64> = self.bounded(inv.invoke_async(&mut conn)).await?;
        match v.as_slice() {
            [-1, _] => Ok(None),
            [q, n] => Ok(Some((*q, *n))),
            other => Err(Error::ScriptReply(format!("read returned {other:?}"))),
        }
    }

    /// Sets a product's quota directly. For seeding benchmarks and operator repair; the
    /// recompute job overwrites it from the order service's availability.
    pub async fn set_quota(&self, product_id: i64, quota: i64) -> Result<()> {
        let k = self.keys(product_id);
        let mut conn = self.conn.clone();
        self.bounded(
            redis::cmd("SET")
                .arg(&k.quota)
                .arg(quota)
                .query_async::<()>(&mut conn),
        )
        .await
    }

    /// `PING`, bounded by the timeout.
    pub async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        self.bounded(redis::cmd("PING").query_async::<()>(&mut conn))
            .await
    }
}

fn array(v: &Value) -> Result<&[Value]> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(Error::ScriptReply(format!(
            "expected an array, got {other:?}"
        ))),
    }
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| Error::ScriptReply(format!("expected an integer, got {v:?}"))),
        other => Err(Error::ScriptReply(format!(
            "expected an integer, got {other:?}"
        ))),
    }
}

/// A flat `[member, score, member, score, ...]` reply.
fn pairs(v: &Value) -> Result<Vec<(String, i64)>> {
    let items = array(v)?;
    items
        .chunks(2)
        .map(|pair| match pair {
            [Value::BulkString(m), score] => {
                Ok((String::from_utf8_lossy(m).into_owned(), int(score)?))
            }
            other => Err(Error::ScriptReply(format!(
                "expected member and score, got {other:?}"
            ))),
        })
        .collect()
}
