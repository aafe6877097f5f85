//! A whole paysaga system for one test: a fresh database, a Redis prefix, the four real
//! service binaries on free ports, and optionally a fault proxy on any link.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use paysaga_common::testkit::{TestDb, TestRedis};
use paysaga_supervisor::{
    haproxy,
    haproxy::Haproxy,
    process::{free_port, reserve_port, Stop},
    service::ServiceKind,
    services::Services,
    wiring::Wiring,
    TlsFiles,
};
use sqlx::PgPool;

use crate::{binaries, proxy::FaultProxy, Admin, Endpoints};

/// A connection the harness can route through a [`FaultProxy`].
#[derive(Debug, Clone, Copy)]
pub struct SignUpLimitsOf {
    pub per_address: u32,
    pub total: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Link {
    /// The gate's calls to the order service (availability for the quota job).
    GateToOrder,
    /// The orchestrator's calls to the account service (debit, credit, lookups).
    OrchestratorToAccount,
    /// The orchestrator's calls to the order service (confirm, cancel, lookups).
    OrchestratorToOrder,
    /// One service's PostgreSQL connections.
    Database(ServiceKind),
    /// The gate's Redis connections.
    Redis,
}

impl Link {
    /// The three service-to-service links.
    pub const BETWEEN_SERVICES: [Link; 3] = [
        Link::GateToOrder,
        Link::OrchestratorToAccount,
        Link::OrchestratorToOrder,
    ];
}

/// How to start a [`Stack`].
#[derive(Debug, Clone)]
pub struct StackOptions {
    pub label: String,
    pub proxied: BTreeSet<Link>,
    pub common_env: Vec<(String, String)>,
    pub service_env: Vec<(ServiceKind, String, String)>,
    pub rust_log: String,
    /// The services to start (all four unless narrowed with [`StackOptions::only`]).
    pub services: BTreeSet<ServiceKind>,
    /// A Redis of the test's own (e.g. one it stops and restarts) instead of the shared
    /// `TEST_REDIS_URL`; the key prefix is fresh either way.
    pub redis_url: Option<String>,
    /// Instances of every service; more than one puts a real HAProxy in front of them
    /// (on the ports [`Stack::url`] names), through which the services call each other.
    pub instances: usize,
    /// An administrator's URL of a PostgreSQL of the test's own (e.g. one that fails
    /// over) to create the test database on, instead of `TEST_ADMIN_DATABASE_URL`.
    pub admin_database_url: Option<String>,
    /// Every service serves TLS with this certificate and the services call each other
    /// over `https`, trusting its CA (see [`StackOptions::tls`]).
    pub tls: Option<TlsFiles>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self::new("stack")
    }
}

impl StackOptions {
    /// The gate recomputes its quota and the orchestrator recovers every second, and
    /// the order service releases a hold left without its reservation after 3 s, so a
    /// test's drop settles in seconds rather than at the production intervals.
    pub fn quick_loops(self) -> Self {
        self.env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 1000)
            .env(ServiceKind::Orchestrator, "RECOVERY_INTERVAL_MS", 1000)
            .env(ServiceKind::Order, "HOLD_ORPHAN_GRACE_MS", 3000)
    }

    /// The member service behind a trusted proxy on 127.0.0.1 (the caller, which sends
    /// each request's client address in `X-Forwarded-For`), with these sign-up limits
    /// (per address, in all; the service's own, say) rather than the raised ones the
    /// wiring seeds with.
    pub fn member_behind_local_proxy(self, per_address: u32, total: u32) -> Self {
        self.env(ServiceKind::Member, "TRUSTED_PROXIES", "127.0.0.1")
            .env(ServiceKind::Member, "SIGNUP_MAX_PER_ADDRESS", per_address)
            .env(ServiceKind::Member, "SIGNUP_MAX_TOTAL", total)
    }

    /// [`StackOptions::quick_loops`], and the orchestrator gives up on a downstream call
    /// after 2 s and on a payment's lease after 6 s, so a payment a killed instance was
    /// driving is taken over within a test's patience.
    pub fn quick_takeover(self) -> Self {
        self.quick_loops()
            .env(ServiceKind::Orchestrator, "DOWNSTREAM_TIMEOUT_MS", 2000)
            .env(ServiceKind::Orchestrator, "LEASE_MS", 6000)
    }

    /// Passes live `pass_ttl_secs`, and every `every_ms` the gate recomputes its quota
    /// and the order service sweeps out what expired, so a unit no one paid for is back
    /// on sale within a test's patience.
    pub fn units_come_back(self, pass_ttl_secs: u32, every_ms: u32) -> Self {
        self.env(ServiceKind::Gate, "PASS_TTL_SECS", pass_ttl_secs)
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", every_ms)
            .env(ServiceKind::Order, "SWEEP_INTERVAL_MS", every_ms)
    }

    /// The gate recomputes its quota every 200 ms, so a product's units are on sale
    /// moments after it is created.
    pub fn quick_quota(self) -> Self {
        self.env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 200)
    }

    /// `label` names the log directory (`target/e2e-logs/<label>-...`).
    pub fn new(label: &str) -> Self {
        Self {
            label: label.to_owned(),
            proxied: BTreeSet::new(),
            common_env: Vec::new(),
            service_env: Vec::new(),
            rust_log: "info".into(),
            services: ServiceKind::ALL.into_iter().collect(),
            redis_url: None,
            instances: 1,
            admin_database_url: None,
            tls: None,
        }
    }

    /// Every service serves TLS with `files`' certificate (for `127.0.0.1`) and calls
    /// the others over `https`, trusting its CA. The test's own clients trust it the
    /// way every client here trusts roots beyond the platform's: the CA must be in the
    /// test process's `SSL_CERT_FILE`. Not with several instances or fault proxies.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }

    /// Creates the test database on the PostgreSQL `admin_url` (an administrator's URL)
    /// names instead of the shared one; the services connect to the same host and port.
    pub fn database(mut self, admin_url: impl Into<String>) -> Self {
        self.admin_database_url = Some(admin_url.into());
        self
    }

    /// Uses the Redis at `url` instead of the shared one.
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.redis_url = Some(url.into());
        self
    }

    /// Runs `n` instances of every service behind HAProxy (needs `haproxy` installed;
    /// not combined with fault proxies).
    pub fn instances(mut self, n: usize) -> Self {
        self.instances = n.max(1);
        self
    }

    /// Starts only these services (a test of one link, or a service under repair).
    pub fn only(mut self, kinds: &[ServiceKind]) -> Self {
        self.services = kinds.iter().copied().collect();
        self
    }

    /// Sets a variable for one service (wins over everything the harness sets).
    pub fn env(mut self, kind: ServiceKind, name: &str, value: impl ToString) -> Self {
        self.service_env
            .push((kind, name.to_owned(), value.to_string()));
        self
    }

    /// Sets a variable for every service.
    pub fn env_all(mut self, name: &str, value: impl ToString) -> Self {
        self.common_env.push((name.to_owned(), value.to_string()));
        self
    }

    /// Routes `link` through a fault proxy (healthy until a test injects a fault).
    pub fn proxy(mut self, link: Link) -> Self {
        self.proxied.insert(link);
        self
    }

    /// Routes the three service-to-service links through fault proxies.
    pub fn proxy_between_services(mut self) -> Self {
        self.proxied.extend(Link::BETWEEN_SERVICES);
        self
    }

    /// Routes every link, PostgreSQL and Redis included, through fault proxies.
    pub fn proxy_everything(mut self) -> Self {
        self.proxied.extend(Link::BETWEEN_SERVICES);
        self.proxied.extend(
            [
                ServiceKind::Account,
                ServiceKind::Order,
                ServiceKind::Orchestrator,
            ]
            .map(Link::Database),
        );
        self.proxied.insert(Link::Redis);
        self
    }

    pub fn rust_log(mut self, filter: &str) -> Self {
        self.rust_log = filter.to_owned();
        self
    }
}

/// The running system. Dropping it kills every process, stops the proxies and drops
/// the database and the Redis keys, in that order (field order is drop order).
pub struct Stack {
    pub services: Services,
    /// The load balancer, when every service runs as several instances.
    pub haproxy: Option<Haproxy>,
    proxies: BTreeMap<Link, FaultProxy>,
    wiring: Wiring,
    pub redis: TestRedis,
    pub db: TestDb,
}

fn host_port(url: &str) -> anyhow::Result<String> {
    let u = reqwest::Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    let host = u.host_str().context("URL without host")?;
    let port = u.port_or_known_default().or(match u.scheme() {
        "postgres" | "postgresql" => Some(5432),
        "redis" => Some(6379),
        _ => None,
    });
    Ok(format!("{host}:{}", port.context("URL without port")?))
}

fn resolve(host_port: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    host_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host_port}"))?
        .find(std::net::SocketAddr::is_ipv4)
        .with_context(|| format!("{host_port} has no IPv4 address"))
}

/// `url` with its host and port replaced by the proxy's.
fn via(url: &str, proxy: &FaultProxy) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url).with_context(|| format!("not a URL: {url}"))?;
    u.set_host(Some("127.0.0.1")).context("cannot set host")?;
    u.set_port(Some(proxy.port()))
        .map_err(|()| anyhow::anyhow!("cannot set port on {url}"))?;
    Ok(u.to_string())
}

impl Stack {
    /// Creates the database and Redis prefix, starts the proxies and the four services,
    /// and returns once every service answers `/readyz`.
    pub async fn start(options: StackOptions) -> anyhow::Result<Self> {
        let db = match &options.admin_database_url {
            Some(url) => TestDb::on(url).await,
            None => TestDb::new().await,
        };
        let redis = match &options.redis_url {
            Some(url) => TestRedis {
                url: url.clone(),
                prefix: format!("t{}:", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            },
            None => TestRedis::new(),
        };
        let several = options.instances > 1;
        anyhow::ensure!(
            !several || options.proxied.is_empty(),
            "fault proxies and several instances are not combined"
        );
        anyhow::ensure!(
            options.tls.is_none() || (!several && options.proxied.is_empty()),
            "TLS is not combined with several instances or fault proxies"
        );
        let mut instances = Vec::new();
        if several {
            for _ in 0..options.instances {
                let mut own = BTreeMap::new();
                for kind in ServiceKind::ALL {
                    own.insert(kind, reserve_port(0)?);
                }
                instances.push(own);
            }
        }
        // A service is handed the socket reserved here. HAProxy binds its own ports, so
        // theirs are chosen free only after every instance's port is held (a port
        // chosen and let go first could be handed to an instance next), and distinct.
        let mut ports = BTreeMap::new();
        for kind in ServiceKind::ALL {
            let port = if several {
                loop {
                    let port = free_port()?;
                    if !ports.values().any(|&p| p == port) {
                        break port;
                    }
                }
            } else {
                reserve_port(0)?
            };
            ports.insert(kind, port);
        }
        let mut proxies = BTreeMap::new();
        for &link in &options.proxied {
            let upstream = match link {
                Link::GateToOrder | Link::OrchestratorToOrder => {
                    format!("127.0.0.1:{}", ports[&ServiceKind::Order])
                }
                Link::OrchestratorToAccount => {
                    format!("127.0.0.1:{}", ports[&ServiceKind::Account])
                }
                Link::Database(_) => host_port(&db.admin_url())?,
                Link::Redis => host_port(&redis.url)?,
            };
            // Upstream services are not listening yet; the proxy dials per connection.
            let upstream = resolve(&upstream)?;
            proxies.insert(link, FaultProxy::start(upstream).await?);
        }

        let mut database_urls = BTreeMap::new();
        for kind in ServiceKind::ALL {
            if let Some(role) = kind.db_role() {
                let url = db.role_url(role);
                let url = match proxies.get(&Link::Database(kind)) {
                    Some(p) => via(&url, p)?,
                    None => url,
                };
                database_urls.insert(kind, url);
            }
        }
        let redis_url = match proxies.get(&Link::Redis) {
            Some(p) => via(&redis.url, p)?,
            None => redis.url.clone(),
        };
        let mut wiring = Wiring::direct(database_urls, redis_url, redis.prefix.clone(), ports);
        if let Some(tls) = &options.tls {
            wiring.serve_tls(tls.clone());
        }
        wiring.instances = instances;
        if let Some(p) = proxies.get(&Link::GateToOrder) {
            wiring.gate_order_url = p.http_url();
        }
        if let Some(p) = proxies.get(&Link::OrchestratorToOrder) {
            wiring.orchestrator_order_url = p.http_url();
        }
        if let Some(p) = proxies.get(&Link::OrchestratorToAccount) {
            wiring.orchestrator_account_url = p.http_url();
        }
        wiring.rust_log = options.rust_log.clone();
        wiring.common_env = options.common_env.clone();
        wiring.service_env = options.service_env.clone();

        let log_dir = binaries::log_dir(&options.label)?;
        eprintln!(
            "paysaga harness: database {} , redis prefix {} , logs in {}",
            db.name,
            redis.prefix,
            log_dir.display()
        );
        let (haproxy, specs) = if several {
            let program = haproxy::find().context(haproxy::INSTALL_HINT)?;
            let lb = Haproxy::start(&program, &wiring, &log_dir).await?;
            let specs = wiring
                .specs(&log_dir)?
                .into_iter()
                .filter(|s| options.services.contains(&s.kind))
                .collect();
            (Some(lb), specs)
        } else {
            let specs = options
                .services
                .iter()
                .map(|&kind| wiring.spec(kind, &log_dir))
                .collect::<anyhow::Result<Vec<_>>>()?;
            (None, specs)
        };
        let services = Services::launch(specs, log_dir).await?;
        if let Some(lb) = &haproxy {
            let kinds = options.services.iter().copied();
            lb.wait_routing(&wiring, kinds, std::time::Duration::from_secs(30))
                .await?;
        }
        Ok(Self {
            services,
            haproxy,
            proxies,
            wiring,
            redis,
            db,
        })
    }

    /// The URL buyers and operators use for `kind` (never through a fault proxy; through
    /// HAProxy when there are several instances).
    pub fn url(&self, kind: ServiceKind) -> String {
        self.wiring.url(kind)
    }

    /// Where `kind` serves `/metrics` (a listener of its own; see [`Wiring::metrics_url`]).
    pub fn metrics_url(&self, kind: ServiceKind) -> String {
        self.wiring.metrics_url(kind)
    }

    pub fn wiring(&self) -> &Wiring {
        &self.wiring
    }

    /// The system's endpoints, and an operator on them (products, buyers, quota).
    pub fn operator(&self) -> (Endpoints, Admin) {
        let endpoints = Endpoints::from_wiring(&self.wiring);
        let http = paysaga_common::client::http_client(std::time::Duration::from_secs(10));
        (endpoints.clone(), Admin::new(endpoints, http))
    }

    /// The proxy on `link`, if the stack was started with one there.
    pub fn proxy(&self, link: Link) -> Option<&FaultProxy> {
        self.proxies.get(&link)
    }

    /// A superuser pool on this test's database, for invariant checks across schemas.
    pub async fn admin_pool(&self) -> PgPool {
        self.db.admin_pool().await
    }

    pub async fn stop(&mut self, kind: ServiceKind, how: Stop) -> anyhow::Result<()> {
        self.services.stop(kind, how).await
    }

    pub async fn start_service(&mut self, kind: ServiceKind) -> anyhow::Result<()> {
        self.services.start(kind).await
    }

    pub async fn restart(&mut self, kind: ServiceKind, how: Stop) -> anyhow::Result<()> {
        self.services.restart(kind, how).await
    }

    /// Restarts `kind` (gracefully) with `vars` changed in its environment, as an operator
    /// applies a configuration change. The other services keep running.
    pub async fn reconfigure(
        &mut self,
        kind: ServiceKind,
        vars: &[(&str, String)],
    ) -> anyhow::Result<()> {
        self.services.stop(kind, Stop::Term).await?;
        let proc = self
            .services
            .process_mut(kind)
            .with_context(|| format!("{kind} is not part of this system"))?;
        for (k, v) in vars {
            proc.set_env(k, v.clone());
        }
        self.services.start(kind).await
    }

    /// Log file locations, for a failure message.
    pub fn log_paths(&self) -> String {
        self.services.log_paths()
    }

    /// The running process id of `kind`, if it is running.
    pub fn pid(&self, kind: ServiceKind) -> Option<u32> {
        self.services.process(kind).and_then(|p| p.pid())
    }

    /// How many times `kind` has been started, if it is part of this system.
    pub fn starts(&self, kind: ServiceKind) -> Option<u32> {
        self.services.process(kind).map(|p| p.starts())
    }
}
