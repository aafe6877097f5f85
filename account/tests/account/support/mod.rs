//! Starts the real account service on a free port against a database of its own, and
//! reads the tables back as an administrator for assertions.
#![allow(dead_code)]

use paysaga_common::auth::Audience;
use std::time::Duration;

use account::Config;
use paysaga_common::{
    auth::MemberId,
    client::{Answer, CallError},
    money::Amount,
    testkit::{buyer_token, service_token, InProcess, TestDb},
};
use paysaga_contracts::{
    account::{
        api::{
            Account, AccountBatch, AccountOp, DebitRequest, Hold, HoldPage, HoldRequest, HoldTtl,
            ListHolds, OpenAccountRequest, OperationKey, Recipient, Transaction, Transfer,
            TransferRequest,
        },
        client::AccountClient,
    },
    batch::Reply,
};
use sqlx::PgPool;

pub struct Svc {
    pub base: String,
    pub http: reqwest::Client,
    /// As the orchestrator: debits, credits, batches, look-ups.
    pub client: AccountClient,
    /// As an operator: opening accounts.
    pub operator: AccountClient,
    /// As the member service: deposits (each with its authorization).
    pub member: AccountClient,
    /// As the order service: holds placed and released.
    pub order: AccountClient,
    pub admin: PgPool,
    service: InProcess,
    // Last: dropped after the service has stopped using it.
    pub db: TestDb,
}

impl Svc {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Self {
        let db = TestDb::new().await;
        let mut config = Config::local(db.role_url("account_app"));
        config.database.max_connections = 24;
        tune(&mut config);
        let service = InProcess::start("account", |listener, shutdown| {
            account::run(config, listener, shutdown)
        })
        .await;
        let base = service.url();
        let http = paysaga_common::client::http_client(Duration::from_secs(30));
        let as_role = |role: &str| {
            AccountClient::new(
                &base,
                service_token(role, Audience::Account),
                Duration::from_secs(30),
            )
        };
        let (client, operator, order, member) = (
            as_role("orchestrator"),
            as_role("operator"),
            as_role("order"),
            as_role("member"),
        );
        let admin = db.admin_pool().await;
        Self {
            base,
            http,
            client,
            operator,
            member,
            order,
            admin,
            service,
            db,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A deposit of `minor` into `member`'s account `account_id` under `key`, with the
    /// orchestrator's authorization, as the member service forwards it.
    pub fn deposit(
        &self,
        key: &str,
        member: &str,
        account_id: i64,
        minor: i64,
    ) -> paysaga_contracts::account::api::DepositRequest {
        paysaga_contracts::account::api::DepositRequest::approved_for_tests(
            key, member, account_id, minor,
        )
    }

    /// A fresh service with `member-1` opened with `opening`.
    pub async fn with_member(opening: i64) -> (Self, Account) {
        let svc = Self::start().await;
        let a = svc.open("member-1", opening).await;
        (svc, a)
    }

    /// A fresh service with `member-1` and `member-2` opened with these balances.
    pub async fn with_two_members(first: i64, second: i64) -> (Self, Account, Account) {
        let (svc, a) = Self::with_member(first).await;
        let b = svc.open("member-2", second).await;
        (svc, a, b)
    }

    /// Opens `member-0` .. `member-{n-1}`, each with `opening`, one after another.
    pub async fn open_many(&self, n: usize, opening: i64) -> Vec<Account> {
        let mut accounts = Vec::with_capacity(n);
        for i in 0..n {
            accounts.push(self.open(&format!("member-{i}"), opening).await);
        }
        accounts
    }

    /// [`Svc::open_many`], answering the account ids.
    pub async fn open_many_ids(&self, n: usize, opening: i64) -> Vec<i64> {
        let accounts = self.open_many(n, opening).await;
        accounts.into_iter().map(|a| a.id).collect()
    }

    pub async fn open(&self, member: &str, opening: i64) -> Account {
        let req = OpenAccountRequest {
            member_id: MemberId::parse(member).expect("member id"),
            opening_balance: opening,
            open_key: None,
        };
        let answer = self
            .operator
            .open_account(&req)
            .await
            .expect("open account");
        assert_eq!(answer.status, 201);
        answer.body
    }

    /// The balance column of a member account, read from the table.
    pub async fn balance(&self, account_id: i64) -> i64 {
        sqlx::query_scalar("SELECT balance FROM account_service.accounts WHERE id = $1")
            .bind(account_id)
            .fetch_one(&self.admin)
            .await
            .expect("balance")
    }

    /// One number read as the administrator.
    pub async fn number(&self, sql: &str) -> i64 {
        number(&self.admin, sql).await
    }

    /// The merchant's money: the sum of its shard rows.
    pub async fn merchant_balance(&self) -> i64 {
        self.number("SELECT SUM(balance)::BIGINT FROM account_service.merchant_shards")
            .await
    }

    /// Every balance, merchant shards included.
    pub async fn total_money(&self) -> i64 {
        self.number(
            "SELECT (SELECT SUM(balance) FROM account_service.accounts)::BIGINT
                  + (SELECT SUM(balance) FROM account_service.merchant_shards)::BIGINT",
        )
        .await
    }

    pub async fn count_where(&self, predicate: &str) -> i64 {
        self.number(&format!(
            "SELECT COUNT(*) FROM account_service.transactions WHERE {predicate}"
        ))
        .await
    }

    /// Member accounts whose balance is not `opening` minus their applied debits.
    pub async fn unexplained_balances(&self, opening: i64) -> i64 {
        self.number(&format!(
            r#"SELECT COUNT(*) FROM account_service.accounts a
               WHERE a.kind = 'MEMBER' AND a.balance <> {opening} - (
                   SELECT COALESCE(SUM(t.amount), 0) FROM account_service.transactions t
                   WHERE t.account_id = a.id AND t.kind = 'DEBIT' AND t.status = 'APPLIED')"#
        ))
        .await
    }

    /// Merchant shards holding money.
    pub async fn shards_used(&self) -> i64 {
        self.number("SELECT COUNT(*) FROM account_service.merchant_shards WHERE balance > 0")
            .await
    }

    /// A debit that must be applied.
    pub async fn pay(&self, k: &str, account_id: i64, minor: i64) -> Answer<Transaction> {
        self.client
            .debit(&debit(k, account_id, minor))
            .await
            .expect("debit applied")
    }

    /// A debit capturing `hold` that must be answered (applied, or replayed).
    pub async fn capture(
        &self,
        k: &str,
        account_id: i64,
        minor: i64,
        hold: &str,
    ) -> Answer<Transaction> {
        self.client
            .debit(&capture(k, account_id, minor, hold))
            .await
            .expect("captured")
    }

    /// The first page of the live holds at least `ms` old, as the order service lists them.
    pub async fn live_holds(&self, ms: u64) -> HoldPage {
        self.order
            .holds(&ListHolds::older_than(ms))
            .await
            .expect("list")
            .body
    }

    /// A release that must be refused: the code it was refused with.
    pub async fn release_refused(&self, k: &str) -> String {
        let e = self
            .order
            .release_hold(k)
            .await
            .expect_err("release refused");
        e.code().unwrap_or_default().to_owned()
    }

    /// A debit that must be refused: why.
    pub async fn refused(&self, k: &str, account_id: i64, minor: i64) -> CallError {
        self.client
            .debit(&debit(k, account_id, minor))
            .await
            .expect_err("debit refused")
    }

    /// `POST /v1/batch` as the orchestrator: the replies, in order (panics unless 200).
    pub async fn batch(&self, ops: Vec<AccountOp>) -> Vec<Reply> {
        let answer = self
            .client
            .batch(&AccountBatch::new(ops))
            .await
            .expect("batch answered 200");
        assert_eq!(answer.status, 200);
        answer.body.results
    }

    /// Any call with a service credential, answered as a batch reply would be: status
    /// and JSON body, whatever they are.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Reply {
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(token_for(path));
        if let Some(body) = body {
            req = req.json(body);
        }
        let r = req.send().await.expect("answer");
        let status = r.status().as_u16();
        let body = r.json().await.expect("json body");
        Reply { status, body }
    }

    /// Places a hold of `minor` on `member`'s account (600 s) as the order service does,
    /// and checks it was placed or replayed.
    pub async fn place(&self, k: &str, member: &str, minor: i64) {
        let answer = self.try_place(k, member, minor).await.expect("placed");
        assert!(matches!(answer.status, 200 | 201), "{answer:?}");
    }

    /// The order service places a hold of `minor` for `member` for ten minutes.
    pub async fn try_place(
        &self,
        k: &str,
        member: &str,
        minor: i64,
    ) -> Result<Answer<Hold>, CallError> {
        self.order.place_hold(&hold(k, member, minor, 600)).await
    }

    /// The order service releases hold `k`, which must be released (or was already):
    /// the answer.
    pub async fn release(&self, k: &str) -> Answer<Hold> {
        self.order.release_hold(k).await.expect("released")
    }

    /// A debit capturing `hold` that must be declined, with `code`.
    pub async fn declines(&self, k: &str, account_id: i64, minor: i64, hold: &str, code: &str) {
        let e = self
            .client
            .debit(&capture(k, account_id, minor, hold))
            .await
            .expect_err("declined");
        assert_eq!(e.code(), Some(code), "debit {k} capturing {hold}");
    }

    /// `(balance, held)` of an account, read from the table.
    pub async fn funds(&self, account_id: i64) -> (i64, i64) {
        sqlx::query_as("SELECT balance, held FROM account_service.accounts WHERE id = $1")
            .bind(account_id)
            .fetch_one(&self.admin)
            .await
            .expect("funds")
    }

    /// A hold's state and the debit that captured it, read from the table (`None`: no
    /// hold under the key).
    pub async fn hold_row(&self, key: &str) -> Option<(String, Option<String>)> {
        sqlx::query_as(
            "SELECT state, captured_by FROM account_service.holds WHERE operation_key = $1",
        )
        .bind(key)
        .fetch_optional(&self.admin)
        .await
        .expect("hold row")
    }

    /// Accounts whose `held` is not what their held holds hold, or above their balance.
    pub async fn held_mismatches(&self) -> i64 {
        self.number(
            r#"SELECT COUNT(*) FROM account_service.accounts a
               WHERE a.held <> (SELECT COALESCE(SUM(h.amount), 0) FROM account_service.holds h
                                WHERE h.account_id = a.id AND h.state = 'HELD')
                  OR a.held > a.balance OR a.held < 0"#,
        )
        .await
    }

    /// The merchant account's id.
    pub async fn merchant_id(&self) -> i64 {
        self.number("SELECT id FROM account_service.accounts WHERE kind = 'MERCHANT'")
            .await
    }

    /// `member` (a buyer token) sends `minor` to `to` under the `Idempotency-Key` `k`.
    pub async fn transfer(
        &self,
        member: &str,
        k: &str,
        to: Recipient,
        minor: i64,
    ) -> Result<Answer<Transfer>, CallError> {
        let client = AccountClient::new(&self.base, buyer_token(member), Duration::from_secs(30));
        let req = TransferRequest {
            to,
            amount: amount(minor),
        };
        client.transfer(k, &req).await
    }

    /// [`Svc::transfer`] that must apply now (201): the transfer.
    pub async fn transferred(&self, member: &str, k: &str, to: Recipient, minor: i64) -> Transfer {
        let sent = self
            .transfer(member, k, to, minor)
            .await
            .unwrap_or_else(|e| panic!("{member}'s transfer {k}: {e}"));
        assert_eq!(sent.status, 201, "{member}'s transfer {k} applied now");
        sent.body
    }

    /// Transfers with a row in the ledger, and those whose rows are not one
    /// `TRANSFER_OUT` and one `TRANSFER_IN` summing to zero between two accounts.
    pub async fn transfer_rows(&self) -> (i64, i64) {
        sqlx::query_as(
            r#"SELECT COUNT(*),
                      COUNT(*) FILTER (WHERE NOT (n = 2 AND outs = 1 AND ins = 1 AND net = 0
                                                  AND accounts = 2))
               FROM (SELECT t.transfer_id, COUNT(*) AS n,
                            COUNT(*) FILTER (WHERE t.kind = 'TRANSFER_OUT') AS outs,
                            COUNT(*) FILTER (WHERE t.kind = 'TRANSFER_IN') AS ins,
                            COALESCE(SUM(e.amount), 0) AS net,
                            COUNT(DISTINCT t.account_id) AS accounts
                     FROM account_service.transactions t
                     LEFT JOIN account_service.entries e ON e.id = t.id
                     WHERE t.transfer_id IS NOT NULL
                     GROUP BY t.transfer_id) AS x"#,
        )
        .fetch_one(&self.admin)
        .await
        .expect("transfer rows")
    }

    /// Member accounts whose balance is not the sum of their signed ledger rows.
    pub async fn unexplained_by_entries(&self) -> i64 {
        self.number(
            r#"SELECT COUNT(*) FROM account_service.accounts a
               WHERE a.kind = 'MEMBER' AND a.balance <> (
                   SELECT COALESCE(SUM(e.amount), 0) FROM account_service.entries e
                   WHERE e.account_id = a.id)"#,
        )
        .await
    }

    pub async fn negative_balances(&self) -> i64 {
        self.number(
            "SELECT (SELECT COUNT(*) FROM account_service.accounts WHERE balance < 0)
                  + (SELECT COUNT(*) FROM account_service.merchant_shards WHERE balance < 0)",
        )
        .await
    }
}

/// The constraint a database error names, if any.
pub fn constraint(e: &sqlx::Error) -> Option<&str> {
    e.as_database_error().and_then(|d| d.constraint())
}

pub use paysaga_common::testkit::sqlstate;

/// One number (a count, a sum, an id) read through `pool`.
pub async fn number(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A credential of the role that calls `path` in production: accounts are opened and
/// topped up by the member service or an operator, holds placed and released by the
/// order service, everything else is the saga's.
pub fn token_for(path: &str) -> String {
    if path == "/v1/accounts" {
        service_token("operator", Audience::Account)
    } else if path == "/v1/deposits" {
        service_token("member", Audience::Account)
    } else if path.starts_with("/v1/holds") {
        service_token("order", Audience::Account)
    } else {
        service_token("orchestrator", Audience::Account)
    }
}

/// A transfer to `member`'s account.
pub fn to_member(member: &str) -> Recipient {
    Recipient::MemberId(MemberId::parse(member).expect("member id"))
}

pub fn key(s: &str) -> OperationKey {
    OperationKey::parse(s).expect("valid key")
}

pub fn amount(minor: i64) -> Amount {
    Amount::new(minor).expect("valid amount")
}

pub fn debit(k: &str, account_id: i64, minor: i64) -> DebitRequest {
    DebitRequest {
        operation_key: key(k),
        account_id,
        amount: amount(minor),
        hold_key: None,
    }
}

pub fn debit_op(k: &str, account_id: i64, minor: i64) -> AccountOp {
    AccountOp::Debit(debit(k, account_id, minor))
}

/// A debit that captures the hold under `hold`.
pub fn capture(k: &str, account_id: i64, minor: i64, hold: &str) -> DebitRequest {
    DebitRequest {
        hold_key: Some(key(hold)),
        ..debit(k, account_id, minor)
    }
}

/// A hold of `minor` on `member`'s account for `ttl_secs`.
pub fn hold(k: &str, member: &str, minor: i64, ttl_secs: u32) -> HoldRequest {
    HoldRequest {
        operation_key: key(k),
        member_id: MemberId::parse(member).expect("member id"),
        amount: amount(minor),
        ttl_secs: HoldTtl::new(ttl_secs).expect("hold time"),
    }
}

/// A request and the refusal it must get: status and `code`.
pub type Refusal<'a> = (reqwest::RequestBuilder, u16, &'a str);

/// Sends each request and checks its answer is its refusal, with a message for people
/// beside the code; a case that differs is named by its index.
pub async fn refusals(cases: Vec<Refusal<'_>>) {
    for (i, (req, status, code)) in cases.into_iter().enumerate() {
        let r = req.send().await.expect("answer");
        let got = r.status().as_u16();
        let body: serde_json::Value = r.json().await.expect("JSON error body");
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "case {i}: {body}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "case {i} has a message"
        );
    }
}
