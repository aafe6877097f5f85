//! Test harness: the order service on its own database and a free port, clients,
//! pass minting, and the consistency checks read straight from PostgreSQL.
#![allow(dead_code)]

pub mod ops;

use paysaga_common::auth::Audience;
use std::time::Duration;

use order::Config;
use paysaga_common::{
    auth::MemberId,
    client::{Answer, CallError},
    keys::DevKey,
    pass::{PassClaims, PassSigner},
    testkit::{buyer_token, rows_as_text, service_token, InProcess, TestDb},
};
use paysaga_contracts::account::{
    api::{OpenAccountRequest, OperationKey},
    client::AccountClient,
};
use paysaga_contracts::order::{
    api::{Product, Reservation},
    client::OrderClient,
};
use sqlx::PgPool;
use uuid::Uuid;

pub struct Harness {
    pub base: String,
    pub admin: PgPool,
    http: reqwest::Client,
    service: InProcess,
    /// The account service the order service holds prices on.
    pub account_url: String,
    account: InProcess,
    // Last: dropped after the services have stopped using it.
    pub db: TestDb,
}

/// What a member the harness funds starts with: enough for any test's reservations.
pub const FUNDS: i64 = 10_000_000;

impl Harness {
    /// The service with its sweep effectively off (tests drive the sweep themselves).
    pub async fn start() -> Self {
        Self::start_with(|c| c.sweep_interval = Duration::from_secs(3600)).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Self {
        let db = TestDb::new().await;
        let mut account_config = account::Config::local(db.role_url("account_app"));
        account_config.database.max_connections = 6;
        let account = InProcess::start("account", |listener, shutdown| {
            account::run(account_config, listener, shutdown)
        })
        .await;
        let mut config = Config::local(db.role_url("order_app"), account.url());
        config.database.max_connections = 12;
        tweak(&mut config);
        let service = InProcess::start("order", |listener, shutdown| {
            order::run(config, listener, shutdown)
        })
        .await;
        let http = paysaga_common::client::http_client(Duration::from_secs(30));
        let admin = db.admin_pool().await;
        Self {
            base: service.url(),
            admin,
            http,
            service,
            account_url: account.url(),
            account,
            db,
        }
    }

    /// The account service as an operator opens and tops up accounts.
    pub fn accounts(&self) -> AccountClient {
        self.account_as("operator")
    }

    /// The account service as the service `role`, on the harness's connection pool.
    fn account_as(&self, role: &str) -> AccountClient {
        AccountClient::with_http(
            self.http.clone(),
            &self.account_url,
            service_token(role, Audience::Account),
        )
    }

    /// Deposits `minor` into `member`'s account `account_id` under `key`, as the member
    /// service forwards a staff top-up (with the orchestrator's authorization).
    pub async fn deposit(&self, key: &str, member: &str, account_id: i64, minor: i64) {
        let req = paysaga_contracts::account::api::DepositRequest::approved_for_tests(
            key, member, account_id, minor,
        );
        self.account_as("member")
            .deposit(&req)
            .await
            .expect("deposit");
    }

    /// Opens `member`'s account with `balance` (once: a member's account is opened
    /// under its key, as the member service does); its id.
    pub async fn open_account(&self, member: &str, balance: i64) -> i64 {
        let req = OpenAccountRequest {
            member_id: MemberId::parse(member).expect("member id"),
            opening_balance: balance,
            open_key: Some(OperationKey::parse(format!("member:{member}:account")).expect("key")),
        };
        self.accounts()
            .open_account(&req)
            .await
            .expect("account opened")
            .body
            .id
    }

    /// Gives each of `members` an account holding [`FUNDS`].
    pub async fn fund<S: AsRef<str>>(&self, members: &[S]) {
        use futures::StreamExt;
        futures::stream::iter(members)
            .for_each_concurrent(8, |m| async move {
                self.open_account(m.as_ref(), FUNDS).await;
            })
            .await;
    }

    /// A buyer with an account holding [`FUNDS`].
    pub async fn funded(&self, member: &str) -> OrderClient {
        self.fund(&[member]).await;
        self.buyer(member)
    }

    /// `(balance, held)` of `member`'s account, read from the table.
    pub async fn funds_of(&self, member: &str) -> (i64, i64) {
        sqlx::query_as(
            r#"SELECT balance, held FROM account_service.accounts
               WHERE member_id = $1 AND kind = 'MEMBER' ORDER BY id LIMIT 1"#,
        )
        .bind(member)
        .fetch_one(&self.admin)
        .await
        .expect("funds of a member")
    }

    /// The state of the hold of reservation `id` (`None`: no hold), read from the table.
    pub async fn hold_state(&self, id: Uuid) -> Option<String> {
        sqlx::query_scalar(r#"SELECT state FROM account_service.holds WHERE operation_key = $1"#)
            .bind(paysaga_contracts::order::api::hold_key(id))
            .fetch_optional(&self.admin)
            .await
            .expect("hold state")
    }

    /// As the orchestrator, the service that confirms and cancels.
    pub fn service(&self) -> OrderClient {
        self.orchestrator()
    }

    /// As an operator: products, reservation look-ups and cancels.
    pub fn operator(&self) -> OrderClient {
        self.as_service("operator")
    }

    /// As the orchestrator: products made and units added for an admin.
    pub fn orchestrator(&self) -> OrderClient {
        self.as_service("orchestrator")
    }

    /// As the gate's recompute job: product list, availability, used passes.
    pub fn gate(&self) -> OrderClient {
        self.as_service("gate")
    }

    /// As the service `role`.
    fn as_service(&self, role: &str) -> OrderClient {
        self.with_token(&service_token(role, Audience::Order))
    }

    pub fn buyer(&self, member: &str) -> OrderClient {
        self.with_token(&buyer_token(member))
    }

    /// A client sending `token`, on the harness's connection pool.
    pub fn with_token(&self, token: &str) -> OrderClient {
        OrderClient::with_http(self.http.clone(), &self.base, token.to_owned())
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub async fn product(&self, units: i64) -> Product {
        self.operator()
            .create_product(&paysaga_contracts::order::api::CreateProduct {
                name: "drop".into(),
                price: 12_900,
                units,
                reservation_ttl_secs: None,
                eligibility: Vec::new(),
            })
            .await
            .expect("create product")
            .body
    }

    /// A fresh harness and a product of `units` units, each reserved by its own member,
    /// `{prefix}-{i}`.
    pub async fn with_reserved(units: usize, prefix: &str) -> (Self, Product, Vec<Reservation>) {
        let (h, product) = Self::with_product(units as i64).await;
        let rs = h.reserve_many(product.id, units, prefix).await;
        (h, product, rs)
    }

    /// [`Harness::with_reserved`], with a pool of the service's role to drive the
    /// statements (and the sweep) directly.
    pub async fn all_reserved(
        units: usize,
        prefix: &str,
    ) -> (Self, PgPool, Product, Vec<Reservation>) {
        let (h, product, rs) = Self::with_reserved(units, prefix).await;
        let pool = h.service_pool().await;
        (h, pool, product, rs)
    }

    pub async fn service_pool(&self) -> PgPool {
        paysaga_common::db::connect(&self.db.role_url("order_app"), order::SCHEMA, 8)
            .await
            .expect("connect as order_app")
    }

    /// Moves a reservation's deadline into the past: the passage of time, without waiting.
    /// Its hold, which carries the same deadline, is due at the same instant.
    pub async fn make_due(&self, reservation: Uuid) {
        sqlx::query(
            r#"UPDATE order_service.reservations SET expires_at = now() - INTERVAL '1 second' WHERE id = $1"#,
        )
        .bind(reservation)
        .execute(&self.admin)
        .await
        .expect("backdate");
        sqlx::query(
            r#"UPDATE account_service.holds
               SET created_at = LEAST(created_at, now() - INTERVAL '2 seconds'),
                   expires_at = now() - INTERVAL '1 second'
               WHERE operation_key = $1"#,
        )
        .bind(paysaga_contracts::order::api::hold_key(reservation))
        .execute(&self.admin)
        .await
        .expect("backdate the hold");
    }

    /// Sets unit `unit_id`'s state by hand, behind its reservation's back: the unit and
    /// the reservation holding it no longer agree (a broken invariant).
    pub async fn break_unit(&self, unit_id: i64, state: &str) {
        let set = sqlx::query(r#"UPDATE order_service.product_stock SET state = $2 WHERE id = $1"#)
            .bind(unit_id)
            .bind(state)
            .execute(&self.admin)
            .await
            .expect("unit state set by hand");
        assert_eq!(set.rows_affected(), 1, "no unit {unit_id}");
    }

    /// Scatters the deadlines of a product's reservations around now in one statement:
    /// about a third already due, the rest a little ahead, so that expiry (by the sweep
    /// or on touch) genuinely competes with whatever runs next.
    pub async fn scatter_deadlines(&self, product_id: i64) {
        sqlx::query(
            r#"
            UPDATE order_service.reservations
            SET expires_at = now() + (random() * 0.3 - 0.1) * INTERVAL '1 second'
            WHERE product_id = $1
            "#,
        )
        .bind(product_id)
        .execute(&self.admin)
        .await
        .expect("scatter deadlines");
    }

    pub async fn stop(mut self) {
        self.service.stop().await.expect("order stops cleanly");
        self.account.stop().await.expect("account stops cleanly");
    }

    /// Asserts that no row contradicts another ([`inconsistencies`]), then stops.
    pub async fn stop_consistent(self) {
        assert_eq!(inconsistencies(&self.admin).await, Vec::<String>::new());
        self.stop().await;
    }
}

/// A credential of the role that calls `path` in production: the gate reads
/// availability and used passes, an operator manages products, the saga the rest.
pub fn token_for(path: &str) -> String {
    let role = if path.ends_with("/availability")
        || path.ends_with("/promises")
        || path == "/v1/passes/used"
    {
        "gate"
    } else if path.starts_with("/v1/products") {
        "operator"
    } else {
        "orchestrator"
    };
    service_token(role, Audience::Order)
}

pub fn signer() -> PassSigner {
    PassSigner::new(DevKey::Passes.signing_key())
}

pub fn claims(product_id: i64, member: &str) -> PassClaims {
    PassClaims {
        pid: Uuid::new_v4(),
        prd: product_id,
        mem: member.to_owned(),
        exp: chrono::Utc::now().timestamp() + 300,
    }
}

/// A valid pass, as the gate would issue it.
pub fn pass(product_id: i64, member: &str) -> String {
    signer().sign(&claims(product_id, member))
}

/// Every way the reservation and unit tables could disagree, as human-readable lines;
/// empty when consistent.
pub async fn inconsistencies(admin: &PgPool) -> Vec<String> {
    let mut problems: Vec<String> = sqlx::query_scalar(
        r#"
        SELECT format('reservation %s is %s but its unit %s is %s', r.id, r.state, s.id, s.state)
        FROM order_service.reservations r
        JOIN order_service.product_stock s ON s.id = r.unit_id
        WHERE (r.state = 'RESERVED' AND s.state <> 'RESERVED')
           OR (r.state = 'CONFIRMED' AND s.state <> 'SOLD')
        "#,
    )
    .fetch_all(admin)
    .await
    .expect("reservation vs unit");
    let units: Vec<String> = sqlx::query_scalar(
        r#"
        SELECT format('unit %s is %s with %s live reservations', s.id, s.state, COUNT(r.id))
        FROM order_service.product_stock s
        LEFT JOIN order_service.reservations r
               ON r.unit_id = s.id AND r.state IN ('RESERVED', 'CONFIRMED')
        GROUP BY s.id, s.state
        HAVING (s.state IN ('AVAILABLE', 'OFFERED') AND COUNT(r.id) <> 0)
            OR (s.state IN ('RESERVED', 'SOLD') AND COUNT(r.id) <> 1)
        "#,
    )
    .fetch_all(admin)
    .await
    .expect("unit vs reservations");
    problems.extend(units);
    let orders: Vec<String> = sqlx::query_scalar(
        r#"
        SELECT format('reservation %s is %s with %s confirmed orders', r.id, r.state, COUNT(o.id))
        FROM order_service.reservations r
        LEFT JOIN order_service.orders o ON o.reservation_id = r.id AND o.state = 'CONFIRMED'
        GROUP BY r.id, r.state
        HAVING (r.state = 'CONFIRMED') <> (COUNT(o.id) = 1) OR COUNT(o.id) > 1
        "#,
    )
    .fetch_all(admin)
    .await
    .expect("reservation vs orders");
    problems.extend(orders);
    problems.extend(waitlist_problems(admin).await);
    problems
}

/// Every way the waitlist tables could disagree with the units and reservations, as
/// human-readable lines; empty when consistent.
pub async fn waitlist_problems(admin: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        r#"
        SELECT format('unit %s is OFFERED with %s live offers', s.id, COUNT(o.id))
        FROM order_service.product_stock s
        LEFT JOIN order_service.waitlist_offers o ON o.unit_id = s.id AND o.state = 'OFFERED'
        WHERE s.state = 'OFFERED'
        GROUP BY s.id
        HAVING COUNT(o.id) <> 1
        UNION ALL
        SELECT format('live offer %s holds unit %s, which is %s', o.id, s.id, s.state)
        FROM order_service.waitlist_offers o
        JOIN order_service.product_stock s ON s.id = o.unit_id
        WHERE o.state = 'OFFERED' AND s.state <> 'OFFERED'
        UNION ALL
        SELECT format('member %s holds %s live offers of product %s', member_id, COUNT(*), product_id)
        FROM order_service.waitlist_offers
        WHERE state = 'OFFERED'
        GROUP BY product_id, member_id
        HAVING COUNT(*) > 1
        UNION ALL
        SELECT format('entry %s is %s but its offer is %s', e.id, e.state, COALESCE(o.state, 'missing'))
        FROM order_service.waitlist_entries e
        LEFT JOIN order_service.waitlist_offers o ON o.entry_id = e.id
        WHERE (e.state = 'OFFERED') <> (o.state IS NOT DISTINCT FROM 'OFFERED')
           OR (e.state IN ('WAITING', 'SKIPPED') AND o.id IS NOT NULL)
           OR (e.state IN ('TAKEN', 'EXPIRED') AND o.state IS DISTINCT FROM e.state)
        UNION ALL
        SELECT format('product %s has %s units AVAILABLE while %s members wait', s.product_id,
                      COUNT(DISTINCT s.id), COUNT(DISTINCT w.id))
        FROM order_service.product_stock s
        JOIN order_service.waitlist_entries w ON w.product_id = s.product_id AND w.state = 'WAITING'
        WHERE s.state = 'AVAILABLE'
        GROUP BY s.product_id
        UNION ALL
        SELECT format('reservation %s of offer %s disagrees with it', r.id, r.offer_id)
        FROM order_service.reservations r
        LEFT JOIN order_service.waitlist_offers o ON o.id = r.offer_id
        WHERE r.offer_id IS NOT NULL
          AND (o.id IS NULL OR o.state <> 'TAKEN' OR o.unit_id <> r.unit_id OR o.member_id <> r.member_id)
        UNION ALL
        SELECT format('offer %s is TAKEN without a reservation', o.id)
        FROM order_service.waitlist_offers o
        WHERE o.state = 'TAKEN'
          AND NOT EXISTS (SELECT 1 FROM order_service.reservations r WHERE r.offer_id = o.id)
        "#,
    )
    .fetch_all(admin)
    .await
    .expect("waitlist consistency")
}

/// Units of a product that are OFFERED, from the table.
pub async fn offered_units(admin: &PgPool, product_id: i64) -> i64 {
    count_by(
        admin,
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'OFFERED'"#,
        product_id,
    )
    .await
}

/// Members holding a live offer of a product, sorted.
pub async fn offered_members(admin: &PgPool, product_id: i64) -> Vec<String> {
    let mut members: Vec<String> = all_by(
        admin,
        r#"SELECT member_id FROM order_service.waitlist_offers WHERE product_id = $1 AND state = 'OFFERED'"#,
        product_id,
    )
    .await;
    members.sort();
    members
}

/// Expected rows of (reservation state, its orders' states), owned as the tables read them.
pub fn state_rows(rows: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    rows.iter()
        .map(|(s, o)| (s.to_string(), o.iter().map(|x| x.to_string()).collect()))
        .collect()
}

/// A product's live reservations: how many, over how many units and members.
pub async fn live_spread(admin: &PgPool, product_id: i64) -> (i64, i64, i64) {
    sqlx::query_as(
        r#"
        SELECT COUNT(*), COUNT(DISTINCT unit_id), COUNT(DISTINCT member_id)
        FROM order_service.reservations
        WHERE product_id = $1 AND state = 'RESERVED'
        "#,
    )
    .bind(product_id)
    .fetch_one(admin)
    .await
    .expect("live reservations")
}

/// `e` is a refusal with `status` and `code`.
pub fn refused(e: &CallError, status: u16, code: &str) {
    assert_eq!(e.refusal(), Some((status, code)), "{e}");
}

/// One number read through `admin`.
pub async fn count(admin: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(admin)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A value a query binds as its argument.
pub trait Arg:
    for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send
{
}

impl<T> Arg for T where
    T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send
{
}

/// A value a query reads: one column of a row.
pub trait Column:
    Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>
{
}

impl<O> Column for O where
    O: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>
{
}

/// One number read through `admin`, the query taking one argument.
pub async fn count_by(admin: &PgPool, sql: &str, arg: impl Arg) -> i64 {
    one_by(admin, sql, arg).await
}

/// The one value `sql` reads through `admin`, the query taking one argument.
pub async fn one_by<O: Column>(admin: &PgPool, sql: &str, arg: impl Arg) -> O {
    sqlx::query_scalar(sql)
        .bind(arg)
        .fetch_one(admin)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every value `sql` reads through `admin`, in the order it reads them, the query
/// taking one argument.
pub async fn all_by<O: Column>(admin: &PgPool, sql: &str, arg: impl Arg) -> Vec<O> {
    sqlx::query_scalar(sql)
        .bind(arg)
        .fetch_all(admin)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every row `sql` reads through `admin`, in the order it reads them, the query taking
/// one argument.
pub async fn rows_by<O>(admin: &PgPool, sql: &str, arg: impl Arg) -> Vec<O>
where
    O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .bind(arg)
        .fetch_all(admin)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The state of one order, from the table.
pub async fn order_state(admin: &PgPool, id: Uuid) -> String {
    one_by(
        admin,
        r#"SELECT state FROM order_service.orders WHERE id = $1"#,
        id,
    )
    .await
}

/// The states of the orders made from one reservation.
pub async fn orders_of(admin: &PgPool, reservation: Uuid) -> Vec<String> {
    all_by(
        admin,
        r#"SELECT state FROM order_service.orders WHERE reservation_id = $1"#,
        reservation,
    )
    .await
}

/// Units of a product per state, from the table.
pub async fn unit_states(admin: &PgPool, product_id: i64) -> (i64, i64, i64) {
    sqlx::query_as(
        r#"
        SELECT COUNT(*) FILTER (WHERE state = 'AVAILABLE'),
               COUNT(*) FILTER (WHERE state = 'RESERVED'),
               COUNT(*) FILTER (WHERE state = 'SOLD')
        FROM order_service.product_stock
        WHERE product_id = $1
        "#,
    )
    .bind(product_id)
    .fetch_one(admin)
    .await
    .expect("unit states")
}

pub async fn reservation_state(admin: &PgPool, id: Uuid) -> String {
    one_by(
        admin,
        r#"SELECT state FROM order_service.reservations WHERE id = $1"#,
        id,
    )
    .await
}

impl Harness {
    /// One reservation by `member` (funded first), with a valid pass for the product.
    pub async fn reserve_as(&self, member: &str, product_id: i64) -> Reservation {
        self.try_reserve_as(member, product_id)
            .await
            .expect("reserve")
            .body
    }

    /// A reservation asked for by `member` (funded first) with a valid pass: the answer.
    pub async fn try_reserve_as(
        &self,
        member: &str,
        product_id: i64,
    ) -> Result<Answer<Reservation>, CallError> {
        self.reserve_with(member, product_id, &pass(product_id, member))
            .await
    }

    /// A reservation asked for by `member` (funded first) with pass `token`: the answer.
    pub async fn reserve_with(
        &self,
        member: &str,
        product_id: i64,
        token: &str,
    ) -> Result<Answer<Reservation>, CallError> {
        self.funded(member).await.reserve(product_id, token).await
    }

    /// Each of `members` (funded already) asks for a reservation with a valid pass, all
    /// at once: the answers, in the same order.
    pub async fn reserve_all(
        &self,
        product_id: i64,
        members: &[String],
    ) -> Vec<Result<Answer<Reservation>, CallError>> {
        let attempts = members.iter().map(|member| {
            let client = self.buyer(member);
            let token = pass(product_id, member);
            async move { client.reserve(product_id, &token).await }
        });
        futures::future::join_all(attempts).await
    }

    /// One number read as the administrator.
    pub async fn count(&self, sql: &str) -> i64 {
        count(&self.admin, sql).await
    }

    /// One number read as the administrator, the query taking one argument.
    pub async fn count_by(&self, sql: &str, arg: impl Arg) -> i64 {
        count_by(&self.admin, sql, arg).await
    }

    /// A fresh harness (see [`Harness::start`]) with a product of `units` units.
    pub async fn with_product(units: i64) -> (Harness, Product) {
        let h = Harness::start().await;
        let product = h.product(units).await;
        (h, product)
    }

    /// A harness with a product of `units` units, one of them reserved by `alice`.
    pub async fn with_reservation(units: i64) -> (Harness, Product, Reservation) {
        let (h, product) = Harness::with_product(units).await;
        let r = h.reserve_as("alice", product.id).await;
        (h, product, r)
    }

    /// `n` reservations of a product, one per member `{prefix}-{i}`.
    pub async fn reserve_many(&self, product_id: i64, n: usize, prefix: &str) -> Vec<Reservation> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let member = format!("{prefix}-{i}");
            out.push(self.reserve_as(&member, product_id).await);
        }
        out
    }

    /// A product of `n` units, all reserved by `n` buyers: the product and the ids.
    pub async fn product_reserved(&self, n: usize, prefix: &str) -> (Product, Vec<Uuid>) {
        let product = self.product(n as i64).await;
        let ids = self
            .reserve_many(product.id, n, prefix)
            .await
            .into_iter()
            .map(|r| r.id)
            .collect();
        (product, ids)
    }
}

/// Every row of the reservation, unit and order tables as text, in a fixed order: two
/// equal snapshots mean nothing was written in between.
pub async fn snapshot(admin: &PgPool) -> Vec<String> {
    rows_as_text(admin, ORDER_TABLES).await
}

/// The reservation, unit and order tables, in the order [`snapshot`] reads them.
const ORDER_TABLES: &[&str] = &[
    "order_service.reservations",
    "order_service.product_stock",
    "order_service.orders",
];

impl Harness {
    /// The service's `/metrics` page, from the metrics listener (the API's serves none).
    /// The recorder is process-wide, so tests that read it must not run alongside others
    /// of the same binary that move the same series.
    pub async fn metrics(&self) -> String {
        paysaga_common::testkit::scrape_metrics().await
    }
}

/// One series' value in a Prometheus page, `series` written as rendered (`name` or
/// `name{label="value"}`); 0 when absent (never recorded yet).
pub fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().expect("a numeric sample"))
        })
        .unwrap_or(0.0)
}
