//! Starts the real account service on a free port against a database of its own, and
//! reads the tables back as an administrator for assertions.
#![allow(dead_code)]

use std::time::Duration;

use account::{
    api::{Account, DebitRequest, OpenAccountRequest, OperationKey},
    AccountClient, Config,
};
use paysaga_common::{
    auth::MemberId,
    money::Amount,
    testkit::{service_token, TestDb},
};
use sqlx::PgPool;
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

pub struct Svc {
    pub base: String,
    pub http: reqwest::Client,
    pub client: AccountClient,
    pub admin: PgPool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    // Last: dropped after the service has stopped using it.
    pub db: TestDb,
}

impl Svc {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tune: impl FnOnce(&mut Config)) -> Self {
        let db = TestDb::new().await;
        let mut config = Config::with_database(db.role_url("account_app"));
        config.db_max_connections = 24;
        tune(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(account::run(config, listener, async move {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        // The listener is bound before migrations run, so this waits until serving.
        let ready = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("service answers");
        assert_eq!(ready.status(), 200, "service ready");
        let client = AccountClient::new(
            &base,
            service_token("orchestrator"),
            Duration::from_secs(30),
        );
        let admin = db.admin_pool().await;
        Self {
            base,
            http,
            client,
            admin,
            stop: Some(stop),
            task: Some(task),
            db,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn open(&self, member: &str, opening: i64) -> Account {
        let req = OpenAccountRequest {
            member_id: MemberId::parse(member).expect("member id"),
            opening_balance: opening,
        };
        let answer = self.client.open_account(&req).await.expect("open account");
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

    /// The merchant's money: the sum of its shard rows.
    pub async fn merchant_balance(&self) -> i64 {
        sqlx::query_scalar("SELECT SUM(balance)::BIGINT FROM account_service.merchant_shards")
            .fetch_one(&self.admin)
            .await
            .expect("merchant balance")
    }

    /// Every balance, merchant shards included.
    pub async fn total_money(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT (SELECT SUM(balance) FROM account_service.accounts)::BIGINT
                  + (SELECT SUM(balance) FROM account_service.merchant_shards)::BIGINT",
        )
        .fetch_one(&self.admin)
        .await
        .expect("total money")
    }

    pub async fn count_where(&self, predicate: &str) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM account_service.transactions WHERE {predicate}"
        ))
        .fetch_one(&self.admin)
        .await
        .expect("count")
    }

    pub async fn negative_balances(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM account_service.accounts WHERE balance < 0)
                  + (SELECT COUNT(*) FROM account_service.merchant_shards WHERE balance < 0)",
        )
        .fetch_one(&self.admin)
        .await
        .expect("negatives")
    }
}

impl Drop for Svc {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
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
    }
}
