//! Test helpers: a fresh database per test (bootstrapped, dropped afterwards), a Redis
//! key prefix per test (deleted afterwards), and development tokens.

use std::time::Duration;

use sqlx::{
    postgres::PgConnectOptions, ConnectOptions, Connection, Executor, PgConnection, PgPool,
};
use std::str::FromStr;

pub use crate::ready::{probe_ready, wait_ready, READY_TIMEOUT};
use crate::{auth::Minter, db};

/// Administrator URL for tests: `TEST_ADMIN_DATABASE_URL`, or the local default.
pub fn admin_url() -> String {
    crate::config::string(
        "TEST_ADMIN_DATABASE_URL",
        "postgres://postgres:postgres@127.0.0.1:5432/postgres",
    )
}

/// Redis for tests: `TEST_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    crate::config::string("TEST_REDIS_URL", "redis://127.0.0.1:6379/")
}

/// A database of its own for one test, with roles and schemas bootstrapped. Dropped
/// (with its connections) when the value is dropped.
pub struct TestDb {
    pub name: String,
    admin: String,
}

impl TestDb {
    pub async fn new() -> Self {
        Self::on(&admin_url()).await
    }

    /// A test database on the server `admin` (an administrator's URL) names, instead of
    /// `TEST_ADMIN_DATABASE_URL`'s: a PostgreSQL of the test's own.
    pub async fn on(admin: &str) -> Self {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let admin = admin.to_owned();
        db::create_database(&admin, &name)
            .await
            .expect("create test database");
        let this = Self { name, admin };
        db::bootstrap(&this.admin_url(), db::RolePasswords::Development)
            .await
            .expect("bootstrap test database");
        this
    }

    /// Administrator URL for this test's database, for assertions across schemas.
    pub fn admin_url(&self) -> String {
        let mut url = reqwest::Url::parse(&self.admin).expect("the administrator's URL");
        url.set_path(&format!("/{}", self.name));
        url.to_string()
    }

    /// URL for a service role (`account_app`, `order_app`, `payment_app`, `member_app`).
    pub fn role_url(&self, role: &str) -> String {
        db::role_url(&self.admin_url(), role).expect("valid url")
    }

    /// A superuser pool on this database: read any schema to check invariants.
    pub async fn admin_pool(&self) -> PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.admin_url())
            .await
            .expect("connect as admin")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime; do the async cleanup on a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let opts = PgConnectOptions::from_str(&admin)
                    .ok()?
                    .database("postgres")
                    .disable_statement_logging();
                let mut conn = PgConnection::connect_with(&opts).await.ok()?;
                let sql = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
                conn.execute(sql.as_str()).await.ok()?;
                conn.close().await.ok()
            })
        })
        .join();
    }
}

/// A Redis key prefix of its own for one test; its keys are deleted on drop.
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub fn new() -> Self {
        Self {
            url: redis_url(),
            prefix: format!("t{}:", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        }
    }
}

impl Default for TestRedis {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let url = self.url.clone();
        let pattern = format!("{}*", self.prefix);
        let _ = std::thread::spawn(move || -> Option<()> {
            let client = redis::Client::open(url).ok()?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                for chunk in keys.chunks(500) {
                    let _: () = redis::cmd("DEL")
                        .arg(chunk)
                        .query_async(&mut conn)
                        .await
                        .ok()?;
                }
                Some(())
            })
        })
        .join();
    }
}

/// A development buyer token for `member`, valid for an hour.
pub fn buyer_token(member: &str) -> String {
    Minter::dev_buyer().mint(member, Duration::from_secs(3600))
}

/// [`buyer_token`] of a member whose email is verified (its `email_verified` claim).
pub fn verified_buyer_token(member: &str) -> String {
    Minter::dev_buyer().mint_buyer(member, true, Duration::from_secs(3600))
}

/// A development service credential naming `service`, for the service `to` (no other
/// service admits it), living the longest a service credential may
/// ([`crate::credentials::MAX_SERVICE_TOKEN_LIFETIME_SECS`]). A role is signed with its
/// own development key; any other name with the operator's, which no verifier accepts
/// for it.
/// A deposit authorization of `amount` into `member`'s account under `operation_key`,
/// signed with the orchestrator's development key as if `requested_by` asked for it
/// (and `approved_by` approved it): what the account service requires of a deposit.
pub fn deposit_authorization(
    member: &str,
    amount: i64,
    operation_key: &str,
    requested_by: &str,
    approved_by: Option<&str>,
) -> String {
    crate::deposits::DepositSigner::development().sign(&crate::deposits::DepositGrant {
        member_id: member.to_owned(),
        amount,
        operation_key: operation_key.to_owned(),
        requested_by: requested_by.to_owned(),
        approved_by: approved_by.map(str::to_owned),
    })
}

pub fn service_token(service: &str, to: crate::auth::Audience) -> String {
    let signer =
        crate::auth::ServiceRole::parse(service).unwrap_or(crate::auth::ServiceRole::Operator);
    Minter::dev_service(signer, to).mint(
        service,
        Duration::from_secs(crate::credentials::MAX_SERVICE_TOKEN_LIFETIME_SECS as u64),
    )
}

/// A URL nothing listens on: connections to it are refused at once.
/// `probe`'s first `Some`, asked every `every`; panics naming `what` after `within` (a
/// bound against a hang, not a timing assertion).
pub async fn until_some<T, F, Fut>(what: &str, within: Duration, every: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(every).await;
    }
}

pub async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    format!("http://{addr}")
}

/// The metrics listener of this test process, as a service serves it on `METRICS_ADDR`
/// ([`crate::server::metrics_app`]), on a port of its own: its base URL. The recorder is
/// process-wide, so it shows what every service started in this process recorded.
pub async fn serve_metrics() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a metrics port");
    let base = format!("http://{}", listener.local_addr().expect("metrics address"));
    tokio::spawn(crate::server::serve_with_tls(
        listener,
        crate::server::metrics_app(),
        std::future::pending(),
        crate::limits::ServerLimits::default(),
        None,
    ));
    base
}

/// `GET /metrics` of [`serve_metrics`], as text.
pub async fn scrape_metrics() -> String {
    let base = serve_metrics().await;
    reqwest::get(format!("{base}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// A development credential of `role` renewed by its holder, as a service presents one.
pub fn service_credential(role: crate::auth::ServiceRole) -> crate::client::Credential {
    crate::credentials::TokenSource::development(role).into()
}

/// The shutdown signal handed to a service started in process.
pub use crate::server::Shutdown;

/// A service running inside the test's own process, on a port the kernel chose (the
/// listener is bound before the service starts, so no other process can take it).
/// Stopped gracefully by [`InProcess::stop`], cut off like a crash by
/// [`InProcess::kill`], and stopped when dropped.
pub struct InProcess {
    pub name: String,
    pub addr: std::net::SocketAddr,
    /// `https` when started with [`InProcess::start_tls`].
    scheme: &'static str,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl InProcess {
    /// Binds 127.0.0.1:0, runs `run(listener, shutdown)` (a service's `run` with its
    /// config captured) in a task, and waits for `/readyz`. Panics with the service's own
    /// error if it stops before it is ready.
    pub async fn start<F, Fut>(name: &str, run: F) -> Self
    where
        F: FnOnce(tokio::net::TcpListener, Shutdown) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        match Self::try_start(name, run).await {
            Ok(this) => this,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// [`InProcess::start`] for a service that serves TLS (its config's
    /// `process.tls` set): readiness is asked over `https://` trusting `trust`, and
    /// [`InProcess::url`] is `https://127.0.0.1:<port>`.
    pub async fn start_tls<F, Fut>(name: &str, trust: &crate::tls::Trust, run: F) -> Self
    where
        F: FnOnce(tokio::net::TcpListener, Shutdown) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let http = crate::client::http_client_trusting(Duration::from_secs(5), trust);
        match Self::try_start_over(name, "https", &http, run).await {
            Ok(this) => this,
            Err(e) => panic!("{e:#}"),
        }
    }

    /// [`InProcess::start`] returning the failure instead of panicking.
    pub async fn try_start<F, Fut>(name: &str, run: F) -> anyhow::Result<Self>
    where
        F: FnOnce(tokio::net::TcpListener, Shutdown) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let http = crate::client::http_client(Duration::from_secs(5));
        Self::try_start_over(name, "http", &http, run).await
    }

    async fn try_start_over<F, Fut>(
        name: &str,
        scheme: &'static str,
        http: &reqwest::Client,
        run: F,
    ) -> anyhow::Result<Self>
    where
        F: FnOnce(tokio::net::TcpListener, Shutdown) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown: Shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(run(listener, shutdown));
        let mut this = Self {
            name: name.to_owned(),
            addr,
            scheme,
            stop: Some(stop),
            task: Some(task),
        };
        let base = this.url();
        let ready = wait_ready(http, name, &base, READY_TIMEOUT, || this.exited()).await;
        if let Err(e) = ready {
            // The task's own error is the useful part when it stopped early.
            if let Some(task) = this.task.take().filter(|t| t.is_finished()) {
                return Err(match task.await {
                    Ok(Ok(())) => e.context("it returned without an error"),
                    Ok(Err(cause)) => cause.context(format!("{name} failed to start")),
                    Err(join) => anyhow::anyhow!("{name} panicked while starting: {join}"),
                });
            }
            return Err(e);
        }
        Ok(this)
    }

    fn exited(&self) -> Option<String> {
        self.task
            .as_ref()
            .filter(|t| t.is_finished())
            .map(|_| "its task ended".to_owned())
    }

    /// `http://127.0.0.1:<port>` (`https://` when started with [`InProcess::start_tls`]).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Graceful shutdown: in-flight requests finish and jobs stop; returns how the
    /// service's `run` ended.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await?,
            None => Ok(()),
        }
    }

    /// Cuts the service off mid-flight, as a crash would: its task is aborted, whatever
    /// it was doing stops where it was.
    pub fn kill(&mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Every row of `tables` (schema-qualified, each with an `id` column) as text, read in
/// one statement, table by table in the order given and by `id` within each: two equal
/// snapshots mean nothing was written to them in between.
pub async fn rows_as_text(pool: &PgPool, tables: &[&str]) -> Vec<String> {
    let parts: Vec<String> = tables
        .iter()
        .enumerate()
        .map(|(k, table)| {
            format!("SELECT {k} AS k, r.id::TEXT AS id, r::TEXT AS line FROM {table} r")
        })
        .collect();
    let sql = format!(
        r#"SELECT t.line FROM ({}) t ORDER BY t.k, t.id"#,
        parts.join(" UNION ALL ")
    );
    sqlx::query_scalar(&sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("rows of {tables:?}: {e}"))
}

/// The SQLSTATE of a database error, if any.
pub fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

/// Runs each of `statements` through `pool` (logged in as a service's role) and asserts
/// PostgreSQL refuses every one with SQLSTATE `code`.
pub async fn refused_all<S: AsRef<str>>(pool: &PgPool, statements: &[S], code: &str) {
    for sql in statements {
        let sql = sql.as_ref();
        let err = sqlx::query(sql)
            .execute(pool)
            .await
            .expect_err(&format!("{sql} must be refused"));
        assert_eq!(sqlstate(&err).as_deref(), Some(code), "{sql}: {err}");
    }
}

/// Checks a service's answer to database errors (`answer`: its path from a
/// `sqlx::Error` to a response): each outage [`db::unavailable`] recognises without a
/// server (a lost connection, a pool timed out, a closed pool) is a 503, not a 500, and a
/// mistake (`RowNotFound`) is a 500. The outages' answers, for the service's own checks.
pub fn check_database_outages(
    answer: impl Fn(sqlx::Error) -> axum::response::Response,
) -> Vec<axum::response::Response> {
    use axum::http::StatusCode;
    let lost = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    let outages = [
        sqlx::Error::Io(lost),
        sqlx::Error::PoolTimedOut,
        sqlx::Error::PoolClosed,
    ];
    let answers: Vec<_> = outages
        .into_iter()
        .map(|e| {
            assert!(db::unavailable(&e), "{e:?} is an outage");
            let what = format!("{e:?}");
            let response = answer(e);
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
            response
        })
        .collect();
    assert_eq!(
        answer(sqlx::Error::RowNotFound).status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    answers
}

/// Certificates a test makes for itself: a private CA and a server certificate it signed
/// for `localhost` and `127.0.0.1`, as PEM text, with the server's [`crate::tls::ServerTls`]
/// and a caller's [`crate::tls::Trust`] ready made.
pub struct TestPki {
    /// The CA's certificate: what a caller trusts (`TLS_CA_FILE`, `WEBHOOK_CA_FILE`).
    pub ca_pem: String,
    /// The server's certificate and key (`TLS_CERT_FILE`, `TLS_KEY_FILE`).
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestPki {
    /// A new CA and a server certificate for `localhost` and `127.0.0.1`.
    pub fn new() -> Self {
        Self::for_names(&["localhost", "127.0.0.1"])
    }

    /// A new CA and a server certificate for `names` (host names or IP addresses).
    pub fn for_names(names: &[&str]) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "paysaga test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("a server key");
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("server parameters");
        let cert = params
            .signed_by(&key, &issuer)
            .expect("the server certificate");
        Self {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// What a server presents.
    pub fn server(&self) -> crate::tls::ServerTls {
        crate::tls::ServerTls::from_pem(self.cert_pem.as_bytes(), self.key_pem.as_bytes())
            .expect("the test certificate serves")
    }

    /// What a caller trusts: the platform's roots and this CA.
    pub fn trust(&self) -> crate::tls::Trust {
        crate::tls::Trust::from_pem(self.ca_pem.as_bytes()).expect("the test CA")
    }

    /// The three PEM files in a new folder of their own (`ca.pem`, `cert.pem`,
    /// `key.pem`), for settings that name files; removed when the value is dropped.
    pub fn files(&self) -> PkiFiles {
        let dir =
            std::env::temp_dir().join(format!("paysaga-pki-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("a folder for the test certificates");
        for (name, pem) in [
            ("ca.pem", &self.ca_pem),
            ("cert.pem", &self.cert_pem),
            ("key.pem", &self.key_pem),
        ] {
            std::fs::write(dir.join(name), pem).expect("write a test certificate");
        }
        PkiFiles { dir }
    }
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

/// [`TestPki::files`]: the folder, removed on drop.
pub struct PkiFiles {
    pub dir: std::path::PathBuf,
}

impl PkiFiles {
    pub fn ca(&self) -> std::path::PathBuf {
        self.dir.join("ca.pem")
    }
    pub fn cert(&self) -> std::path::PathBuf {
        self.dir.join("cert.pem")
    }
    pub fn key(&self) -> std::path::PathBuf {
        self.dir.join("key.pem")
    }
}

impl Drop for PkiFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
