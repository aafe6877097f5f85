//! The one-statement batch path and the debit-by-debit transaction give the same
//! answers and move the same money, declines, replays and repeated accounts included.

use crate::support;

use crate::support::{debit_op, Svc};
use paysaga_contracts::{account::api::AccountOp, batch::Reply};
use serde_json::Value;

/// A reply without what differs between two databases by construction (row ids,
/// timestamps): status, error code, and the transaction's key, account, amount, status.
fn comparable(reply: &Reply) -> Value {
    let b = &reply.body;
    serde_json::json!([
        reply.status,
        b["code"],
        b["operation_key"],
        b["account_id"],
        b["amount"],
        b["status"],
        b["kind"],
    ])
}

/// Balances, shards and ledger rows, keyed so that two databases fed the same
/// requests compare equal.
async fn money(svc: &Svc) -> Value {
    sqlx::query_scalar(
        r#"SELECT json_build_object(
             'accounts', (SELECT json_agg(json_build_array(id, kind, balance) ORDER BY id)
                          FROM account_service.accounts),
             'shards', (SELECT json_agg(json_build_array(shard, balance) ORDER BY shard)
                        FROM account_service.merchant_shards),
             'rows', (SELECT json_agg(json_build_array(operation_key, kind, status, account_id, amount, merchant_shard)
                                      ORDER BY operation_key)
                      FROM account_service.transactions WHERE operation_key IS NOT NULL))"#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("money")
}

/// Deterministic pseudo-random numbers (no dependency, same sequence every run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fast_path_answers_and_moves_money_as_the_slow_path_does() {
    let fast = Svc::start().await;
    let slow = Svc::start_with(|c| c.batch_fast_path = false).await;
    let merchant = fast.merchant_id().await;
    assert_eq!(merchant, slow.merchant_id().await);
    let mut accounts = Vec::new();
    for i in 0..6 {
        let opening = 3_000 + 500 * i;
        let a = fast.open(&format!("member-{i}"), opening).await.id;
        assert_eq!(a, slow.open(&format!("member-{i}"), opening).await.id);
        accounts.push(a);
    }

    // Hand-picked first: each shape the statement has to get right.
    let a = &accounts;
    let mut batches: Vec<Vec<AccountOp>> = vec![
        // distinct accounts, all covered
        vec![
            debit_op("h:1", a[0], 100),
            debit_op("h:2", a[1], 200),
            debit_op("h:3", a[2], 300),
        ],
        // one account twice, its sum covered
        vec![debit_op("h:4", a[3], 500), debit_op("h:5", a[3], 600)],
        // one account twice, the sum not covered: batch order decides
        vec![
            debit_op("h:6", a[4], 1_500),
            debit_op("h:7", a[4], 100),
            debit_op("h:8", a[4], 9_000),
            debit_op("h:9", a[5], 10),
        ],
        // an account taken to exactly zero, and a decline beside an applied debit
        vec![debit_op("h:10", a[0], 2_900), debit_op("h:11", a[1], 5_000)],
        // replays, a reuse, a repeated key, a missing and the merchant account
        vec![
            debit_op("h:1", a[0], 100),
            debit_op("h:2", a[1], 201),
            debit_op("h:12", 987_654, 5),
            debit_op("h:13", merchant, 5),
            debit_op("h:14", a[2], 50),
            debit_op("h:14", a[2], 50),
            debit_op("h:11", a[1], 5_000),
        ],
        // nothing left to claim at all
        vec![debit_op("h:1", a[0], 100), debit_op("h:12", 987_654, 5)],
    ];
    // Then many mixed ones: small batches over few accounts, some keys sent again, so
    // that accounts repeat, run dry and decline.
    let mut rng = Lcg(7);
    for b in 0..60u64 {
        let size = 1 + rng.below(7);
        let ops = (0..size)
            .map(|j| {
                let k = if rng.below(6) == 0 {
                    // an earlier key, with the same or another request
                    rng.below(b * 7 + j + 1)
                } else {
                    b * 7 + j
                };
                let account = a[rng.below(a.len() as u64) as usize];
                let amount = 1 + (k * 37) % 400;
                debit_op(&format!("r:{k}"), account, amount as i64)
            })
            .collect();
        batches.push(ops);
    }

    let mut declined = 0;
    for (n, ops) in batches.into_iter().enumerate() {
        let from_fast = fast.batch(ops.clone()).await;
        let from_slow = slow.batch(ops).await;
        let fast_view: Vec<Value> = from_fast.iter().map(comparable).collect();
        let slow_view: Vec<Value> = from_slow.iter().map(comparable).collect();
        assert_eq!(fast_view, slow_view, "batch {n}: the same answers");
        declined += from_fast
            .iter()
            .filter(|r| r.body["code"] == "INSUFFICIENT_FUNDS")
            .count();
        assert_eq!(
            money(&fast).await,
            money(&slow).await,
            "batch {n}: the same money"
        );
    }
    assert!(declined > 5, "declines were exercised: {declined}");
    assert!(
        fast.count_where("status = 'APPLIED' AND kind = 'DEBIT'")
            .await
            > 50
    );
    for svc in [&fast, &slow] {
        assert_eq!(svc.negative_balances().await, 0);
        let off: i64 = sqlx::query_scalar(
            r#"SELECT COUNT(*) FROM account_service.merchant_shards s
               WHERE s.balance <> (SELECT COALESCE(SUM(t.amount), 0) FROM account_service.transactions t
                                   WHERE t.merchant_shard = s.shard AND t.kind = 'DEBIT' AND t.status = 'APPLIED')"#,
        )
        .fetch_one(&svc.admin)
        .await
        .expect("shards");
        assert_eq!(off, 0, "every shard equals its applied debits");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_spread_over_the_merchant_shards() {
    let svc = Svc::start().await;
    let mut accounts = Vec::new();
    for i in 0..64 {
        accounts.push(svc.open(&format!("member-{i}"), 1_000).await.id);
    }
    let calls = (0..64).map(|b| {
        let ops = (0..4)
            .map(|j| debit_op(&format!("pay:{b}:{j}:debit"), accounts[(b + j) % 64], 10))
            .collect();
        let svc = &svc;
        async move { svc.batch(ops).await }
    });
    for replies in futures::future::join_all(calls).await {
        assert!(replies.iter().all(|r| r.status == 201));
    }
    let used: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM account_service.merchant_shards WHERE balance > 0",
    )
    .fetch_one(&svc.admin)
    .await
    .expect("shards");
    assert!(used > 8, "batches spread over the shards: {used}");
    assert_eq!(svc.merchant_balance().await, 64 * 4 * 10);
    assert_eq!(svc.negative_balances().await, 0);
}

/// The one-statement path under contention: overlapping batches (keys in both orders,
/// shared accounts, funds for everything) and single calls on the same keys, as several
/// orchestrators would send them. No deadlock, one row per key, every balance explained.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_fast_batches_share_keys_and_accounts_safely() {
    let svc = Svc::start().await;
    let mut accounts = Vec::new();
    for i in 0..12 {
        accounts.push(svc.open(&format!("member-{i}"), 1_000_000).await.id);
    }
    let total_before = svc.total_money().await;
    let request = |k: usize| (format!("pay:{k}:debit"), accounts[k % 12], 10 + k as i64);
    let batches = (0..16usize).map(|t| {
        let mut keys: Vec<usize> = (0..6).map(|j| (t * 3 + j) % 40).collect();
        if t % 2 == 1 {
            keys.reverse();
        }
        let ops: Vec<AccountOp> = keys
            .into_iter()
            .map(|k| {
                let (key, account, amount) = request(k);
                debit_op(&key, account, amount)
            })
            .collect();
        let svc = &svc;
        async move { svc.batch(ops).await }
    });
    let singles = (0..20usize).map(|k| {
        let (key, account, amount) = request((k * 3) % 40);
        let svc = &svc;
        async move {
            svc.client
                .debit(&support::debit(&key, account, amount))
                .await
                .expect("debit")
                .status
        }
    });
    let (batched, single) = tokio::join!(
        futures::future::join_all(batches),
        futures::future::join_all(singles)
    );
    for replies in batched {
        assert!(
            replies.iter().all(|r| r.status == 201 || r.status == 200),
            "{replies:?}"
        );
    }
    assert!(single.iter().all(|s| *s == 201 || *s == 200));

    let dupes: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM (SELECT operation_key FROM account_service.transactions
           WHERE operation_key IS NOT NULL GROUP BY operation_key HAVING COUNT(*) > 1) d"#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("dupes");
    assert_eq!(dupes, 0, "one row per key");
    let unexplained: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM account_service.accounts a
           WHERE a.kind = 'MEMBER' AND a.balance <> 1000000 - (
               SELECT COALESCE(SUM(t.amount), 0) FROM account_service.transactions t
               WHERE t.account_id = a.id AND t.kind = 'DEBIT' AND t.status = 'APPLIED')"#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("balances");
    assert_eq!(
        unexplained, 0,
        "every balance is its opening minus its debits"
    );
    assert_eq!(svc.total_money().await, total_before, "money conserved");
    assert_eq!(
        svc.count_where("status = 'DECLINED'").await,
        0,
        "nothing declined"
    );
}
