//! Starts the real account service and the member service on free ports against a
//! database of their own, and reads the tables back as an administrator for assertions.
#![allow(dead_code)]

use paysaga_common::auth::Audience;
use std::time::Duration;

use member::{config::Argon2Params, AppState, Config};
use paysaga_common::{
    auth::{BuyerKeySource, Verifier},
    client::CallError,
    credentials::ServiceKeys,
    jwks::JWKS_PATH,
    testkit::{dead_url, service_token, InProcess, TestDb},
};
use paysaga_contracts::member::{
    api::{codes, Credentials, Member, Session},
    client::MemberClient,
};
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

pub const PASSWORD: &str = "plum-orbit-canyon-47";

pub struct Stack {
    pub base: String,
    pub http: reqwest::Client,
    /// Calls the member service with a service credential.
    pub client: MemberClient,
    pub admin: PgPool,
    /// The settings the member service was started with.
    pub config: Config,
    /// Where the account service is (or, with none started, a port nothing listens on).
    pub account_url: String,
    pub member: InProcess,
    pub account: Option<InProcess>,
    // Last: dropped after the services have stopped using it.
    pub db: TestDb,
}

pub async fn start_account(db: &TestDb) -> InProcess {
    let mut config = account::Config::local(db.role_url("account_app"));
    config.database.max_connections = 8;
    InProcess::start("account", |listener, shutdown| {
        account::run(config, listener, shutdown)
    })
    .await
}

pub fn creds(email: &str, password: &str) -> Credentials {
    Credentials {
        email: email.into(),
        password: password.into(),
    }
}

/// A unique address for one test.
pub fn email(name: &str) -> String {
    format!(
        "{name}.{}@example.com",
        &Uuid::new_v4().simple().to_string()[..8]
    )
}

impl Stack {
    /// Account and member services, cheap Argon2 parameters.
    pub async fn start() -> Self {
        Self::start_with(true, |_| {}).await
    }

    /// The member service alone, pointed at a port nothing listens on for the account
    /// service: sign-ups store their member and leave its account pending.
    pub async fn without_account() -> Self {
        Self::start_with(false, |_| {}).await
    }

    /// [`Self::without_account`] with a member signed up at a fresh address made from
    /// `name`: stored, its account pending. The address.
    pub async fn with_pending_member(name: &str) -> (Self, String) {
        let s = Self::without_account().await;
        let address = email(name);
        s.sign_up_pending(&address).await;
        (s, address)
    }

    /// With `account` false the member service is pointed at a port nothing listens on.
    pub async fn start_with(account: bool, tune: impl FnOnce(&mut Config)) -> Self {
        if std::env::var_os("RUST_LOG").is_some() {
            paysaga_common::telemetry::init_tracing(paysaga_common::config::LogFormat::Pretty);
        }
        let db = TestDb::new().await;
        let admin = db.admin_pool().await;
        let (account, account_url) = if account {
            let a = start_account(&db).await;
            let url = a.url();
            (Some(a), url)
        } else {
            (None, dead_url().await)
        };
        let mut config = Config::local(db.role_url("member_app"), &account_url);
        config.database.max_connections = 8;
        config.argon2 = Argon2Params::TEST_ONLY_CHEAP;
        config.account_timeout = Duration::from_secs(5);
        // Every test signs its members up from 127.0.0.1: the sign-up limits stay out
        // of the way unless a test sets them.
        config.sign_up.per_address = 10_000;
        config.sign_up.total = 10_000;
        tune(&mut config);
        let (member, client) = Self::start_member(config.clone()).await;
        Self {
            base: member.url(),
            http: paysaga_common::client::http_client(Duration::from_secs(30)),
            client,
            admin,
            config,
            account_url,
            member,
            account,
            db,
        }
    }

    /// Another member service instance with `config`, and a client for it.
    pub async fn start_member(config: Config) -> (InProcess, MemberClient) {
        let member = InProcess::start("member", |listener, shutdown| {
            member::run(config, listener, shutdown)
        })
        .await;
        let client = MemberClient::new(
            member.url(),
            service_token("operator", Audience::Member),
            Duration::from_secs(30),
        );
        (member, client)
    }

    /// The member service's state on this database with `config`, for calling its jobs.
    pub async fn state(config: &Config) -> AppState {
        AppState::connect(config).await.expect("member state")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The account service started on this stack's database (after a start without one),
    /// and the member settings pointed at it.
    pub async fn account_comes_up(&self) -> (InProcess, Config) {
        let account = start_account(&self.db).await;
        let mut config = self.config.clone();
        config.account_url = account.url();
        (account, config)
    }

    /// POSTs `body` as JSON; the status, the headers and the JSON body (Null if none).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, HeaderMap, Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("answer");
        answer(r).await
    }

    /// POSTs `body` as JSON with `X-Forwarded-For: forwarded`, as a proxy in front of
    /// the service would (or a client making the header up).
    pub async fn post_forwarded(
        &self,
        path: &str,
        forwarded: &str,
        body: &Value,
    ) -> (u16, HeaderMap, Value) {
        let r = self
            .http
            .post(self.url(path))
            .header("x-forwarded-for", forwarded)
            .json(body)
            .send()
            .await
            .expect("answer");
        answer(r).await
    }

    /// A sign-up of `email` with the standard password, forwarded for `forwarded`.
    pub async fn sign_up_forwarded(&self, email: &str, forwarded: &str) -> (u16, HeaderMap, Value) {
        self.post_forwarded(
            "/v1/members",
            forwarded,
            &json!({"email": email, "password": PASSWORD}),
        )
        .await
    }

    /// A sign-in of `email` with `password`, forwarded for `forwarded`.
    pub async fn sign_in_forwarded(
        &self,
        email: &str,
        password: &str,
        forwarded: &str,
    ) -> (u16, HeaderMap, Value) {
        self.post_forwarded(
            "/v1/sessions",
            forwarded,
            &json!({"email": email, "password": password}),
        )
        .await
    }

    /// The failures counted in `scope` for `subject` (0 for no row).
    pub async fn failures(&self, scope: &str, subject: &[u8]) -> i64 {
        self.counted("SELECT COALESCE(MAX(failures), 0)::BIGINT FROM member_service.sign_in_failures WHERE scope = $1 AND subject = $2", scope, subject).await
    }

    /// The sign-ups counted in `scope` for `subject` (0 for no row).
    pub async fn sign_up_attempts(&self, scope: &str, subject: &[u8]) -> i64 {
        self.counted("SELECT COALESCE(MAX(attempts), 0)::BIGINT FROM member_service.sign_up_attempts WHERE scope = $1 AND subject = $2", scope, subject).await
    }

    /// What `sql` counts for `scope` (`$1`) and `subject` (`$2`).
    async fn counted(&self, sql: &str, scope: &str, subject: &[u8]) -> i64 {
        sqlx::query_scalar(sql)
            .bind(scope)
            .bind(subject)
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Whether a member with `email` is stored.
    pub async fn stored(&self, email: &str) -> bool {
        self.of_email(
            "SELECT EXISTS (SELECT 1 FROM member_service.members WHERE email = $1)",
            email,
        )
        .await
    }

    /// Signs up `email` with the standard password; panics unless 201.
    pub async fn sign_up(&self, email: &str) -> paysaga_contracts::member::api::Member {
        let a = self
            .client
            .sign_up(&creds(email, PASSWORD))
            .await
            .expect("sign-up");
        assert_eq!(a.status, 201);
        a.body
    }

    /// POSTs a sign-in of `email` with `password` as plain JSON.
    pub async fn post_sign_in(&self, email: &str, password: &str) -> (u16, HeaderMap, Value) {
        self.post(
            "/v1/sessions",
            &json!({"email": email, "password": password}),
        )
        .await
    }

    /// Signs in `email` with the standard password; panics unless it succeeds.
    pub async fn sign_in(&self, email: &str) -> Session {
        self.client
            .sign_in(&creds(email, PASSWORD))
            .await
            .expect("sign-in")
            .body
    }

    /// Signs up a member at a fresh address made from `name`; the address.
    pub async fn signed_up(&self, name: &str) -> String {
        let address = email(name);
        self.sign_up(&address).await;
        address
    }

    /// A member signed up at a fresh address made from `name`, and a session of it.
    pub async fn signed_in(&self, name: &str) -> (String, Member, Session) {
        let address = email(name);
        let member = self.sign_up(&address).await;
        let session = self.sign_in(&address).await;
        (address, member, session)
    }

    /// Signs up `email` with `password`, which must be refused; the refusal.
    pub async fn sign_up_refused(&self, email: &str, password: &str) -> CallError {
        self.client
            .sign_up(&creds(email, password))
            .await
            .expect_err("sign-up refused")
    }

    /// Signs up `email` while the account service is away: refused with 503, the member
    /// stored and its account pending.
    pub async fn sign_up_pending(&self, email: &str) -> CallError {
        let e = self.sign_up_refused(email, PASSWORD).await;
        assert_eq!(e.status(), Some(503), "{e}");
        e
    }

    /// The session `token` is rotated into; panics unless the refresh succeeds.
    pub async fn refreshed(&self, token: &str) -> Session {
        self.client.refresh(token).await.expect("refreshed").body
    }

    /// Refreshes with `token`, which must be refused; the refusal.
    pub async fn refresh_refused(&self, token: &str) -> CallError {
        self.client
            .refresh(token)
            .await
            .expect_err("refresh refused")
    }

    /// What `sql` counts (or sums), read from PostgreSQL as an administrator.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Two counts (or sums) of one row of `sql`.
    pub async fn counts(&self, sql: &str) -> (i64, i64) {
        sqlx::query_as(sql)
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Members stored.
    pub async fn members(&self) -> i64 {
        self.count("SELECT COUNT(*) FROM member_service.members")
            .await
    }

    /// The password hash (a PHC string) stored for `member`.
    pub async fn password_hash(&self, member: Uuid) -> String {
        self.of_member(
            "SELECT password_hash FROM member_service.members WHERE id = $1",
            member,
        )
        .await
    }

    /// Member accounts in the account service for `member`.
    pub async fn accounts_of(&self, member: Uuid) -> Vec<i64> {
        sqlx::query_scalar(
            "SELECT id FROM account_service.accounts WHERE kind = 'MEMBER' AND member_id = $1 ORDER BY id",
        )
        .bind(member.to_string())
        .fetch_all(&self.admin)
        .await
        .expect("accounts")
    }

    pub async fn stored_account_id(&self, member: Uuid) -> Option<i64> {
        self.of_member(
            "SELECT account_id FROM member_service.members WHERE id = $1",
            member,
        )
        .await
    }

    pub async fn member_id_of(&self, email: &str) -> Uuid {
        self.of_email(
            "SELECT id FROM member_service.members WHERE email = $1",
            email,
        )
        .await
    }

    /// The one value `sql` reads for the member stored as `member` (`$1`).
    async fn of_member<T>(&self, sql: &str, member: Uuid) -> T
    where
        T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        sqlx::query_scalar(sql)
            .bind(member)
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The one value `sql` reads for `email` (`$1`, normalised as the service stores it).
    async fn of_email<T>(&self, sql: &str, email: &str) -> T
    where
        T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        sqlx::query_scalar(sql)
            .bind(email.trim().to_lowercase())
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// A verifier that takes buyer-token keys from the key set the member service at `base`
/// publishes, as every other service does.
pub fn jwks_verifier(base: &str) -> Verifier {
    Verifier::from_source(
        &BuyerKeySource::Jwks {
            url: format!("{base}{JWKS_PATH}"),
            min_refresh: Duration::from_millis(50),
            refresh_every: Duration::from_secs(300),
            trust: Default::default(),
        },
        &ServiceKeys::development(),
        Audience::Member,
    )
}

/// Checks a raw answer is 429 `TOO_MANY_ATTEMPTS` with a `Retry-After`.
pub fn assert_throttled((status, headers, body): &(u16, HeaderMap, Value)) {
    assert_eq!(*status, 429, "{body}");
    assert_eq!(body["code"], codes::TOO_MANY_ATTEMPTS);
    assert!(headers.contains_key("retry-after"));
}

/// Checks a raw answer is 429 `TOO_MANY_SIGN_UPS`; its `Retry-After` in seconds.
pub fn assert_sign_up_refused((status, headers, body): &(u16, HeaderMap, Value)) -> u64 {
    assert_eq!(*status, 429, "{body}");
    assert_eq!(body["code"], codes::TOO_MANY_SIGN_UPS);
    headers["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds")
}

/// The subject a sign-in or sign-up count is stored under for `text` (an email, or an
/// IPv4 address as written).
pub fn subject(text: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).to_vec()
}

/// The subject of the (email, address) pair's count.
pub fn pair_subject(email: &str, address: &str) -> Vec<u8> {
    subject(&format!("{email}\0{address}"))
}

/// Trusts the test's own connection (127.0.0.1) as a proxy, and `more`.
pub fn trusting(config: &mut Config, more: &str) {
    config.trusted_proxies = format!("127.0.0.1,{more}").parse().expect("proxies");
}

pub async fn answer(r: reqwest::Response) -> (u16, HeaderMap, Value) {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let bytes = r.bytes().await.expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    (status, headers, body)
}
