//! A fault-injecting TCP proxy on loopback: put it between two services, or in front
//! of PostgreSQL or Redis, and add latency, stall traffic (a blackhole), refuse or
//! reset connections, or cut the link for a while.
//!
//! Faults apply to connections already open as well as new ones, as a real network
//! fault would: a blackhole stalls bytes in flight (TCP would retransmit them after the
//! partition heals, so they are delayed, not lost), a cut resets every connection.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// The faults in force. `Faults::default()` is a healthy link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Added before each chunk is forwarded, in each direction.
    pub latency: Duration,
    /// Bytes are held (neither forwarded nor dropped) until the blackhole lifts; new
    /// connections are accepted and then stall the same way.
    pub blackhole: bool,
    /// New connections are accepted and immediately reset.
    pub refuse: bool,
    /// Answers to requests whose bytes contain this pattern (for HTTP, a method and path
    /// such as `POST /v1/debits`, or one operation of a batch such as `"op":"debit"`)
    /// are held this long before they are forwarded:
    /// the request arrives at once and is acted on, its answer is late. Other requests
    /// on the link are untouched. One request at a time per connection, as HTTP/1.1
    /// clients without pipelining send them.
    pub slow_answers: Option<(Vec<u8>, Duration)>,
    /// At most this many answers are held for `slow_answers` (counted from when the
    /// proxy started); `None` holds every matching answer.
    pub slow_answers_limit: Option<u64>,
    /// Bumped to reset every open connection.
    generation: u64,
    /// The proxy is shutting down.
    closed: bool,
}

/// Counters, for a test to show that a fault was actually exercised.
#[derive(Debug, Default)]
pub struct ProxyStats {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub reset: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
    /// Answers held back by `slow_answers`.
    pub slowed: AtomicU64,
}

/// A snapshot of [`ProxyStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyCounts {
    pub accepted: u64,
    pub refused: u64,
    pub reset: u64,
    pub upstream_failures: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub slowed: u64,
}

pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    faults: Arc<watch::Sender<Faults>>,
    stats: Arc<ProxyStats>,
    accept_task: JoinHandle<()>,
    heal_task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("proxy cannot bind on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        let (tx, _) = watch::channel(Faults::default());
        let faults = Arc::new(tx);
        let stats = Arc::new(ProxyStats::default());
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            faults.clone(),
            stats.clone(),
        ));
        Ok(Self {
            addr,
            upstream,
            faults,
            stats,
            accept_task,
            heal_task: std::sync::Mutex::new(None),
        })
    }

    /// Resolves `host:port` (from a URL) and starts a proxy in front of it.
    pub async fn in_front_of(host_port: &str) -> anyhow::Result<Self> {
        let upstream = tokio::net::lookup_host(host_port)
            .await
            .with_context(|| format!("cannot resolve {host_port}"))?
            .find(SocketAddr::is_ipv4)
            .with_context(|| format!("{host_port} has no IPv4 address"))?;
        Self::start(upstream).await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `http://127.0.0.1:<port>`: the proxied URL for an HTTP service.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn faults(&self) -> Faults {
        self.faults.borrow().clone()
    }

    pub fn counts(&self) -> ProxyCounts {
        let s = &self.stats;
        ProxyCounts {
            accepted: s.accepted.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            reset: s.reset.load(Ordering::Relaxed),
            upstream_failures: s.upstream_failures.load(Ordering::Relaxed),
            bytes_up: s.bytes_up.load(Ordering::Relaxed),
            bytes_down: s.bytes_down.load(Ordering::Relaxed),
            slowed: s.slowed.load(Ordering::Relaxed),
        }
    }

    fn modify(&self, f: impl FnOnce(&mut Faults)) {
        self.faults.send_modify(f);
    }

    /// Delays every chunk by `latency` in each direction (zero to remove).
    pub fn set_latency(&self, latency: Duration) {
        self.modify(|f| f.latency = latency);
    }

    /// Holds the answer to every request containing `pattern` for `delay` (see
    /// [`Faults::slow_answers`]).
    pub fn set_slow_answers(&self, pattern: &[u8], delay: Duration) {
        self.modify(|f| {
            f.slow_answers = Some((pattern.to_vec(), delay));
            f.slow_answers_limit = None;
        });
    }

    /// Holds the answer to the first request containing `pattern` for `delay`; later
    /// ones pass (a timeout that a retry or a status query then recovers from).
    pub fn slow_first_answer(&self, pattern: &[u8], delay: Duration) {
        self.modify(|f| {
            f.slow_answers = Some((pattern.to_vec(), delay));
            f.slow_answers_limit = Some(1);
        });
    }

    /// Stalls all traffic (open and new connections) until `set_blackhole(false)` or `heal`.
    pub fn set_blackhole(&self, on: bool) {
        self.modify(|f| f.blackhole = on);
    }

    /// Resets new connections as soon as they are accepted.
    pub fn set_refuse(&self, on: bool) {
        self.modify(|f| f.refuse = on);
    }

    /// Resets every open connection now; new ones are unaffected.
    pub fn reset_connections(&self) {
        self.modify(|f| f.generation += 1);
    }

    /// Cuts the link: resets every open connection and refuses new ones.
    pub fn cut(&self) {
        self.modify(|f| {
            f.refuse = true;
            f.generation += 1;
        });
    }

    /// Cuts the link for `period`, then heals it on its own.
    pub fn cut_for(&self, period: Duration) {
        self.cut();
        let faults = self.faults.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(period).await;
            faults.send_modify(|f| f.refuse = false);
        });
        if let Ok(mut slot) = self.heal_task.lock() {
            if let Some(old) = slot.replace(task) {
                old.abort();
            }
        }
    }

    /// Removes every fault (open connections that survived keep working).
    pub fn heal(&self) {
        if let Ok(mut slot) = self.heal_task.lock() {
            if let Some(old) = slot.take() {
                old.abort();
            }
        }
        self.modify(|f| {
            f.latency = Duration::ZERO;
            f.blackhole = false;
            f.refuse = false;
            f.slow_answers = None;
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        if let Ok(mut slot) = self.heal_task.lock() {
            if let Some(t) = slot.take() {
                t.abort();
            }
        }
        self.faults.send_modify(|f| f.closed = true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: Arc<watch::Sender<Faults>>,
    stats: Arc<ProxyStats>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let now = faults.borrow().clone();
        if now.closed {
            return;
        }
        if now.refuse {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            reset(client);
            continue;
        }
        stats.accepted.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(
            client,
            upstream,
            faults.subscribe(),
            stats.clone(),
            now.generation,
        ));
    }
}

/// Closes with RST rather than FIN, as a crashed peer or a firewall reject would.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    stats: Arc<ProxyStats>,
    generation: u64,
) {
    // Under a blackhole the upstream is not even dialled until it lifts.
    if !wait_passable(&mut faults, generation).await {
        stats.reset.fetch_add(1, Ordering::Relaxed);
        reset(client);
        return;
    }
    let server = match TcpStream::connect(upstream).await {
        Ok(s) => s,
        Err(_) => {
            stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
            reset(client);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set by the upward pump when a request matches `slow_answers`; the downward pump
    // holds the next answer chunk that long.
    let owed_delay = Arc::new(std::sync::Mutex::new(None));
    let up = pump(
        client_read,
        server_write,
        faults.clone(),
        generation,
        stats.clone(),
        Direction::Up(owed_delay.clone()),
    );
    let down = pump(
        server_read,
        client_write,
        faults.clone(),
        generation,
        stats.clone(),
        Direction::Down(owed_delay),
    );
    let (a, b) = tokio::join!(up, down);
    if let (Some(reader), Some(writer)) = (a.reset_halves, b.reset_halves) {
        stats.reset.fetch_add(1, Ordering::Relaxed);
        // Both directions stopped for a fault: reset both sides.
        if let (Ok(client), Ok(server)) = (reader.0.reunite(writer.1), writer.0.reunite(reader.1)) {
            reset(client);
            reset(server);
        }
    }
}

/// Waits while the link is blackholed. False if the connection must be reset instead
/// (a newer generation, or the proxy is closing).
async fn wait_passable(faults: &mut watch::Receiver<Faults>, generation: u64) -> bool {
    loop {
        {
            let f = faults.borrow_and_update();
            if f.closed || f.generation != generation {
                return false;
            }
            if !f.blackhole {
                return true;
            }
        }
        if faults.changed().await.is_err() {
            return false;
        }
    }
}

struct PumpEnd {
    /// The halves, kept when the pump stopped because of a fault so the connection can
    /// be reset rather than closed gracefully.
    reset_halves: Option<(
        tokio::net::tcp::OwnedReadHalf,
        tokio::net::tcp::OwnedWriteHalf,
    )>,
}

/// A slow answer owed on a connection, shared by its two pumps.
type OwedDelay = Arc<std::sync::Mutex<Option<Duration>>>;

enum Direction {
    /// Client to server: marks requests whose answers are to be slow.
    Up(OwedDelay),
    /// Server to client: delays the answers marked.
    Down(OwedDelay),
}

impl Direction {
    /// The extra delay for this chunk: set on a matching request going up, taken by the
    /// first answer chunk coming down.
    fn slow_answer(&self, faults: &Faults, stats: &ProxyStats, chunk: &[u8]) -> Duration {
        match self {
            Direction::Up(owed) => {
                if let Some((prefix, delay)) = &faults.slow_answers {
                    let limit = faults.slow_answers_limit.unwrap_or(u64::MAX);
                    if contains(chunk, prefix)
                        && stats
                            .slowed
                            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                                (n < limit).then_some(n + 1)
                            })
                            .is_ok()
                    {
                        if let Ok(mut owed) = owed.lock() {
                            *owed = Some(*delay);
                        }
                    }
                }
                Duration::ZERO
            }
            Direction::Down(owed) => owed
                .lock()
                .ok()
                .and_then(|mut owed| owed.take())
                .unwrap_or_default(),
        }
    }
}

/// Whether `needle` occurs in `chunk`: a request line (`POST /v1/debits`) or a piece of
/// a body (`"op":"debit"`, one operation inside a batch).
fn contains(chunk: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || chunk.windows(needle.len()).any(|w| w == needle)
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Faults>,
    generation: u64,
    stats: Arc<ProxyStats>,
    direction: Direction,
) -> PumpEnd {
    let upward = matches!(direction, Direction::Up(_));
    let mut buf = vec![0u8; 16 * 1024];
    let fault_end = |from, to| PumpEnd {
        reset_halves: Some((from, to)),
    };
    loop {
        if !wait_passable(&mut faults, generation).await {
            return fault_end(from, to);
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return PumpEnd { reset_halves: None };
                }
                Ok(n) => n,
            },
            _ = faults.changed() => continue,
        };
        let latency = {
            let f = faults.borrow();
            f.latency + direction.slow_answer(&f, &stats, &buf[..n])
        };
        if !latency.is_zero() {
            let mut sleeping = std::pin::pin!(tokio::time::sleep(latency));
            loop {
                tokio::select! {
                    _ = &mut sleeping => break,
                    r = faults.changed() => {
                        let stop = r.is_err() || { let f = faults.borrow(); f.closed || f.generation != generation };
                        if stop {
                            return fault_end(from, to);
                        }
                    }
                }
            }
        }
        // A chunk read before a blackhole began is held until it lifts, not dropped.
        if !wait_passable(&mut faults, generation).await {
            return fault_end(from, to);
        }
        // Counted before the write, so a peer that has read the bytes sees them counted.
        let counter = if upward {
            &stats.bytes_up
        } else {
            &stats.bytes_down
        };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() {
            return PumpEnd { reset_halves: None };
        }
    }
}
