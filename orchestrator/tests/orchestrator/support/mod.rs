//! Test harness: the real account and order services and one or more orchestrators on
//! one test database (each as its own role) on free ports, fixtures, and the money
//! invariant read straight from PostgreSQL.
#![allow(dead_code)]

use paysaga_common::auth::Audience;
use std::{future::Future, sync::Arc, time::Duration};

use orchestrator::{Config, Hooks};
use paysaga_common::{
    auth::MemberId,
    client::CallError,
    keys::DevKey,
    pass::{PassClaims, PassSigner},
    testkit::{buyer_token, service_token, InProcess, TestDb},
};
use paysaga_contracts::account::{api::OpenAccountRequest, client::AccountClient};
use paysaga_contracts::orchestrator::{
    api::{CreatePayment, Payment, PaymentTimeline},
    client::{OrchestratorClient, PaymentAnswer},
};
use paysaga_contracts::order::{api::CreateProduct, client::OrderClient};
use paysaga_e2e::FaultProxy;
use sqlx::PgPool;
use uuid::Uuid;

pub const PRICE: i64 = 12_900;

/// Account and order running for real on one test database.
pub struct Stack {
    pub db: TestDb,
    pub admin: PgPool,
    pub account_url: String,
    pub order_url: String,
    services: Vec<InProcess>,
    /// The total of all balances right after the fixtures were opened.
    pub opening_total: i64,
}

/// A running orchestrator instance.
pub struct Orchestrator {
    pub url: String,
    process: InProcess,
}

impl Orchestrator {
    pub fn buyer(&self, member: &str) -> OrchestratorClient {
        OrchestratorClient::new(&self.url, buyer_token(member), Duration::from_secs(30))
    }
    pub fn operator(&self) -> OrchestratorClient {
        OrchestratorClient::new(
            &self.url,
            service_token("operator", Audience::Orchestrator),
            Duration::from_secs(30),
        )
    }
    /// `member` pays reservation `res` from `acct` under idempotency key `key`.
    pub async fn pay(
        &self,
        member: &str,
        key: &str,
        res: Uuid,
        acct: i64,
    ) -> Result<PaymentAnswer, CallError> {
        self.buyer(member).pay(key, &pay_request(res, acct)).await
    }
    /// `member` paying `res` again under `key` is answered with the stored `payment`.
    pub async fn replays(&self, member: &str, key: &str, res: Uuid, acct: i64, payment: &Payment) {
        let again = self.pay(member, key, res, acct).await.expect("replay");
        assert!(again.replayed);
        assert_eq!(&again.payment, payment);
    }
    /// `member` pays `res` from `acct` under `key`, which must be answered; the payment's id.
    pub async fn paid(&self, member: &str, key: &str, res: Uuid, acct: i64) -> Uuid {
        let answer = self.pay(member, key, res, acct).await;
        answer.expect("pay").payment.id
    }
    /// The buyer's first payment of `res` from `acct` under key `k1`; its id.
    pub async fn pay_k1(&self, member: &str, res: Uuid, acct: i64) -> Uuid {
        self.paid(member, "k1", res, acct).await
    }
    /// Payment `id` as its buyer, `member`, reads it back.
    pub async fn payment_of(&self, member: &str, id: Uuid) -> Payment {
        let read = self.buyer(member).payment(id).await;
        read.expect("the buyer's payment").body
    }
    /// The operator's timeline of payment `id`.
    pub async fn timeline(&self, id: Uuid) -> PaymentTimeline {
        self.operator().timeline(id).await.expect("timeline").body
    }
    /// Kills the instance: its server, jobs and drivers stop writing at once.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

impl Stack {
    pub async fn start() -> Self {
        if std::env::var_os("RUST_LOG").is_some() {
            paysaga_common::telemetry::init_tracing(paysaga_common::config::LogFormat::Pretty);
        }
        let db = TestDb::new().await;
        let admin = db.admin_pool().await;

        let mut account_config = account::Config::local(db.role_url("account_app"));
        account_config.database.max_connections = 8;
        let account = InProcess::start("account", |listener, shutdown| {
            account::run(account_config, listener, shutdown)
        })
        .await;
        let mut order_config = order::Config::local(db.role_url("order_app"), account.url());
        order_config.database.max_connections = 8;
        let order = InProcess::start("order", |listener, shutdown| {
            order::run(order_config, listener, shutdown)
        })
        .await;
        Self {
            db,
            admin,
            account_url: account.url(),
            order_url: order.url(),
            services: vec![account, order],
            opening_total: 0,
        }
    }

    /// Orchestrator settings for tests: short waits and leases, fast recovery.
    pub fn config(&self) -> Config {
        let mut c = Config::local(
            self.db.role_url("payment_app"),
            &self.account_url,
            &self.order_url,
        );
        c.downstream_timeout = Duration::from_millis(500);
        c.response_wait = Duration::from_millis(3000);
        c.lease = Duration::from_millis(4000);
        c.recovery_interval = Duration::from_millis(1000);
        c.database.max_connections = 8;
        c.staff.argon2 = paysaga_common::password::Argon2Params::TEST_ONLY_CHEAP;
        c
    }

    /// A fault proxy in front of the account service, and test settings whose
    /// orchestrator reaches the account service through it.
    pub async fn via_account_proxy(&self) -> (FaultProxy, Config) {
        self.via_proxy(&self.account_url, |c, url| c.account_url = url)
            .await
    }

    /// [`Stack::via_account_proxy`], the proxy holding the first debit's answer back for
    /// `delay`.
    pub async fn via_slow_debit(&self, delay: Duration) -> (FaultProxy, Config) {
        let (proxy, config) = self.via_account_proxy().await;
        proxy.slow_first_answer(br#""op":"debit""#, delay);
        (proxy, config)
    }

    /// [`Stack::via_account_proxy`] for the order service.
    pub async fn via_order_proxy(&self) -> (FaultProxy, Config) {
        self.via_proxy(&self.order_url, |c, url| c.order_url = url)
            .await
    }

    async fn via_proxy(
        &self,
        service_url: &str,
        point_at: impl FnOnce(&mut Config, String),
    ) -> (FaultProxy, Config) {
        let proxy = FaultProxy::in_front_of(proxy_target(service_url))
            .await
            .unwrap_or_else(|e| panic!("proxy in front of {service_url}: {e}"));
        let mut config = self.config();
        point_at(&mut config, proxy.http_url());
        (proxy, config)
    }

    pub async fn orchestrator(&self, config: Config, hooks: Hooks) -> Orchestrator {
        let process = InProcess::start("orchestrator", |listener, shutdown| {
            orchestrator::run_with_hooks(config, listener, shutdown, hooks)
        })
        .await;
        Orchestrator {
            url: process.url(),
            process,
        }
    }

    /// Brings the payment schema up as the orchestrator would, without running one
    /// (for tests that plant rows a crashed instance would have left).
    pub async fn migrate_payments(&self) {
        paysaga_common::db::migrate(
            &self.db.role_url("payment_migrator"),
            orchestrator::SCHEMA,
            &orchestrator::MIGRATOR,
        )
        .await
        .expect("migrate");
    }

    pub fn account_service(&self) -> AccountClient {
        AccountClient::new(
            &self.account_url,
            service_token("operator", Audience::Account),
            Duration::from_secs(30),
        )
    }

    pub fn order_service(&self) -> OrderClient {
        OrderClient::new(
            &self.order_url,
            service_token("operator", Audience::Order),
            Duration::from_secs(30),
        )
    }

    /// Starts the member service (on this stack's account service) for top-ups: test
    /// settings whose orchestrator reaches it (`MEMBER_URL`), and its URL.
    pub async fn with_member_service(&mut self) -> (Config, String) {
        let mut member_config =
            member::Config::local(self.db.role_url("member_app"), self.account_url.clone());
        member_config.database.max_connections = 4;
        member_config.argon2 = paysaga_common::password::Argon2Params::TEST_ONLY_CHEAP;
        let member = InProcess::start("member", |listener, shutdown| {
            member::run(member_config, listener, shutdown)
        })
        .await;
        let url = member.url();
        self.services.push(member);
        let mut config = self.config();
        config.member_url = Some(url.clone());
        (config, url)
    }

    /// Opens a member account with `balance` and records it in the opening total.
    pub async fn open_account(&mut self, member: &str, balance: i64) -> i64 {
        let req = OpenAccountRequest {
            member_id: MemberId::parse(member).expect("member"),
            opening_balance: balance,
            open_key: None,
        };
        let a = self
            .account_service()
            .open_account(&req)
            .await
            .expect("open account");
        self.opening_total += balance;
        a.body.id
    }

    /// A stack with one buyer, `member`: an account of 100,000 holding a reservation on a
    /// new one-unit product. The stack, the account id and the reservation.
    pub async fn with_buyer(member: &str) -> (Self, i64, Uuid) {
        let mut s = Self::start().await;
        let (acct, res) = s.buyer_with_reservation(member, 100_000, 1).await;
        (s, acct, res)
    }

    /// `member` with an account of `balance` holding one reservation on a new product of
    /// `units`: the account id and the reservation.
    pub async fn buyer_with_reservation(
        &mut self,
        member: &str,
        balance: i64,
        units: i64,
    ) -> (i64, Uuid) {
        let acct = self.open_account(member, balance).await;
        let product = self.product(units).await;
        (acct, self.reserve(product, member).await)
    }

    /// Two members, each with an account of 100,000 and a reservation of one new product of
    /// `units`: each one's account id and reservation.
    pub async fn two_buyers_with_reservations(
        &mut self,
        members: [&str; 2],
        units: i64,
    ) -> [(i64, Uuid); 2] {
        let accounts = [
            self.open_account(members[0], 100_000).await,
            self.open_account(members[1], 100_000).await,
        ];
        let product = self.product(units).await;
        let mut out = [(0, Uuid::nil()); 2];
        for (i, member) in members.into_iter().enumerate() {
            out[i] = (accounts[i], self.reserve(product, member).await);
        }
        out
    }

    pub async fn product(&self, units: i64) -> i64 {
        let req = CreateProduct {
            name: "drop".into(),
            price: PRICE,
            units,
            reservation_ttl_secs: None,
            eligibility: Vec::new(),
        };
        self.order_service()
            .create_product(&req)
            .await
            .expect("create product")
            .body
            .id
    }

    /// A reservation for `member`, through a signed pass as the gate would issue it.
    pub async fn reserve(&self, product: i64, member: &str) -> Uuid {
        let claims = PassClaims {
            pid: Uuid::new_v4(),
            prd: product,
            mem: member.to_owned(),
            exp: chrono::Utc::now().timestamp() + 600,
        };
        let pass = PassSigner::new(DevKey::Passes.signing_key()).sign(&claims);
        let buyer = OrderClient::new(
            &self.order_url,
            buyer_token(member),
            Duration::from_secs(30),
        );
        buyer
            .reserve(product, &pass)
            .await
            .expect("reserve")
            .body
            .id
    }

    /// Releases reservation `res`'s hold as an operator may: its payment's debit is then
    /// declined `HOLD_RELEASED`.
    pub async fn release_hold(&self, res: Uuid) {
        self.account_service()
            .release_hold(&paysaga_contracts::order::api::hold_key(res))
            .await
            .expect("hold released");
    }

    /// Waits until the payment is terminal with nothing left to do (a liveness bound,
    /// not a timing assertion), and returns its state.
    pub async fn settled(&self, payment: Uuid) -> String {
        for _ in 0..2400 {
            let row: Option<(String, Option<String>, bool)> = sqlx::query_as(
                r#"SELECT state, pending_action, needs_attention FROM payment_service.payments WHERE id = $1"#,
            )
            .bind(payment)
            .fetch_optional(&self.admin)
            .await
            .expect("read payment");
            if let Some((state, None, _)) = row {
                return state;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("payment {payment} never settled");
    }

    /// One value read through the admin pool by `sql` with `bind` as `$1`.
    async fn read<T, B>(&self, what: &str, sql: &'static str, bind: B) -> T
    where
        T: Send + Unpin,
        (T,): for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
        B: 'static + Send + sqlx::Encode<'static, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        sqlx::query_scalar(sql)
            .bind(bind)
            .fetch_one(&self.admin)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    pub async fn payment_id_for(&self, reservation: Uuid) -> Uuid {
        let sql = r#"SELECT id FROM payment_service.payments WHERE reservation_id = $1"#;
        self.read("payment for reservation", sql, reservation).await
    }

    pub async fn unit_state(&self, reservation: Uuid) -> String {
        let sql = r#"SELECT s.state FROM order_service.product_stock s
               JOIN order_service.reservations r ON r.unit_id = s.id WHERE r.id = $1"#;
        self.read("unit", sql, reservation).await
    }

    pub async fn reservation_state(&self, reservation: Uuid) -> String {
        let sql = r#"SELECT state FROM order_service.reservations WHERE id = $1"#;
        self.read("reservation", sql, reservation).await
    }

    /// The `columns` (a select list) of payment `id`, as `T`.
    pub async fn payment_columns<T>(&self, columns: &str, id: Uuid) -> T
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        let sql = format!("SELECT {columns} FROM payment_service.payments WHERE id = $1");
        let row = sqlx::query_as(&sql).bind(id).fetch_one(&self.admin).await;
        row.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// How many `rows` there are: a table, with a `WHERE` clause (no parameters) if
    /// only some count.
    pub async fn count_of(&self, rows: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {rows}");
        let count = sqlx::query_scalar(&sql).fetch_one(&self.admin).await;
        count.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub async fn balance(&self, account: i64) -> i64 {
        let sql = r#"SELECT balance FROM account_service.balances WHERE account_id = $1"#;
        self.read("balance", sql, account).await
    }

    pub async fn merchant_balance(&self) -> i64 {
        let sql = r#"SELECT balance FROM account_service.balances WHERE kind = $1"#;
        self.read("merchant balance", sql, "MERCHANT").await
    }

    /// Applied debits under this payment's debit key (0 or 1: the key is unique downstream).
    pub async fn applied_debits(&self, payment: Uuid) -> i64 {
        let sql = r#"SELECT COUNT(*) FROM account_service.transactions
               WHERE operation_key = $1 AND kind = 'DEBIT' AND status = 'APPLIED'"#;
        self.read("debits", sql, format!("pay:{payment}:debit"))
            .await
    }

    /// The money invariant, from the tables: for every payment debited − refunded is 0
    /// or its amount and matches its state; the sum of all balances is unchanged.
    pub async fn check_money(&self) {
        let rows: Vec<(Uuid, String, i64, i64, i64, Option<String>)> = sqlx::query_as(
            r#"
            SELECT p.id, p.state, p.amount,
                   COALESCE((SELECT SUM(t.amount) FROM account_service.transactions t
                             WHERE t.operation_key = 'pay:' || p.id || ':debit'
                               AND t.kind = 'DEBIT' AND t.status = 'APPLIED'), 0)::BIGINT,
                   COALESCE((SELECT SUM(t.amount) FROM account_service.transactions t
                             WHERE t.refund_of = 'pay:' || p.id || ':debit'
                               AND t.kind = 'CREDIT' AND t.status = 'APPLIED'), 0)::BIGINT,
                   (SELECT r.state FROM order_service.reservations r WHERE r.id = p.reservation_id)
            FROM payment_service.payments p
            "#,
        )
        .fetch_all(&self.admin)
        .await
        .expect("payments with money");
        for (id, state, amount, debited, refunded, reservation) in rows {
            let net = debited - refunded;
            assert!(
                net == 0 || net == amount,
                "payment {id} ({state}): debited {debited} refunded {refunded} amount {amount}"
            );
            match state.as_str() {
                "COMPLETED" => {
                    assert_eq!(net, amount, "COMPLETED payment {id} without its money");
                    assert_eq!(
                        reservation.as_deref(),
                        Some("CONFIRMED"),
                        "COMPLETED payment {id} without a confirmed order"
                    );
                }
                "FAILED" | "REFUNDED" => {
                    assert_eq!(net, 0, "{state} payment {id} kept money");
                    assert_ne!(
                        reservation.as_deref(),
                        Some("CONFIRMED"),
                        "{state} payment {id} with a confirmed order"
                    );
                }
                _ => {}
            }
        }
        let total: i64 =
            sqlx::query_scalar(r#"SELECT SUM(balance)::BIGINT FROM account_service.balances"#)
                .fetch_one(&self.admin)
                .await
                .expect("sum of balances");
        assert_eq!(total, self.opening_total, "the sum of all balances changed");
    }
}

/// The payment schema brought up as the orchestrator would, and a pool of
/// `connections` as the orchestrator's own role: for tests that work on its tables
/// directly, without a running orchestrator.
pub async fn payments_pool(db: &TestDb, connections: u32) -> PgPool {
    paysaga_common::db::migrate(
        &db.role_url("payment_migrator"),
        orchestrator::SCHEMA,
        &orchestrator::MIGRATOR,
    )
    .await
    .expect("migrate");
    paysaga_common::db::connect(
        &db.role_url("payment_app"),
        orchestrator::SCHEMA,
        connections,
    )
    .await
    .expect("connect")
}

pub fn pay_request(reservation_id: Uuid, account_id: i64) -> CreatePayment {
    CreatePayment {
        reservation_id,
        account_id,
    }
}

/// Hooks that run `then`, with its own clone of `with`, after each debit call (and
/// after no other call).
pub fn after_debit<T, F, Fut>(with: T, then: F) -> Hooks
where
    T: Clone + Send + Sync + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let after_call: orchestrator::AfterCallHook = Arc::new(move |_id, action| {
        let run = (action == workflows::Action::Debit).then(|| then(with.clone()));
        Box::pin(async move {
            if let Some(run) = run {
                run.await;
            }
        })
    });
    Hooks {
        after_call: Some(after_call),
    }
}

/// The `host:port` of a service URL, for a proxy in front of it.
fn proxy_target(url: &str) -> &str {
    url.trim_start_matches("http://")
}
