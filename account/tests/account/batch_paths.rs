//! A lone operation and the same operation in a batch give the same answers and move
//! the same money: a batch of one is the lone call, and a batch answers as its calls
//! made one after another in the batch's order of work (debits, then credits) would,
//! declines, replays, repeated keys, repeated accounts and refunds included.

use crate::support;

use crate::support::{amount, debit_op, key, Svc};
use paysaga_contracts::{
    account::api::{AccountOp, CreditRequest},
    batch::Reply,
};
use reqwest::Method;
use serde_json::Value;

/// A reply without what differs between two databases by construction (row ids,
/// timestamps): status, error code and message, and the transaction's key, account,
/// amount, status, kind and refunded debit.
fn comparable(reply: &Reply) -> Value {
    let b = &reply.body;
    serde_json::json!([
        reply.status,
        b["code"],
        b["message"],
        b["operation_key"],
        b["account_id"],
        b["amount"],
        b["status"],
        b["kind"],
        b["refund_of"],
    ])
}

/// Balances, shards and ledger rows, keyed so that two databases fed the same
/// requests compare equal. `exact_shards`: the shard of every row and the balance of
/// every shard; otherwise (a batch pays into one shard where its calls, one by one,
/// pay into one each) whether each row moved the merchant, and the shards' sum.
async fn money(svc: &Svc, exact_shards: bool) -> Value {
    sqlx::query_scalar(
        r#"SELECT json_build_object(
             'accounts', (SELECT json_agg(json_build_array(id, kind, balance) ORDER BY id)
                          FROM account_service.accounts),
             'shards', CASE WHEN $1
                            THEN (SELECT json_agg(json_build_array(shard, balance) ORDER BY shard)
                                  FROM account_service.merchant_shards)
                            ELSE (SELECT to_json(SUM(balance)) FROM account_service.merchant_shards)
                       END,
             'rows', (SELECT json_agg(json_build_array(operation_key, kind, status, account_id, amount,
                                                       refund_of, refunded,
                                                       CASE WHEN $1 THEN to_json(merchant_shard)
                                                            ELSE to_json(merchant_shard IS NOT NULL) END)
                                      ORDER BY operation_key)
                      FROM account_service.transactions WHERE operation_key IS NOT NULL))"#,
    )
    .bind(exact_shards)
    .fetch_one(&svc.admin)
    .await
    .expect("money")
}

/// Every shard holds exactly what the rows recorded against it say: its applied
/// debits less the credits drawn from it; no balance is negative.
async fn assert_shards_explained(svc: &Svc) {
    assert_eq!(svc.negative_balances().await, 0);
    let off = svc
        .number(
            r#"SELECT COUNT(*) FROM account_service.merchant_shards s
               WHERE s.balance <> (SELECT COALESCE(SUM(CASE t.kind WHEN 'DEBIT' THEN t.amount ELSE -t.amount END), 0)
                                   FROM account_service.transactions t
                                   WHERE t.merchant_shard = s.shard AND t.status = 'APPLIED'
                                     AND t.kind IN ('DEBIT', 'CREDIT'))"#,
        )
        .await;
    assert_eq!(
        off, 0,
        "every shard equals its applied debits less its credits"
    );
}

/// The operation sent alone, on its own endpoint.
async fn alone(svc: &Svc, op: &AccountOp) -> Reply {
    let (path, body) = match op {
        AccountOp::Debit(req) => ("/v1/debits", serde_json::to_value(req)),
        AccountOp::Credit(req) => ("/v1/credits", serde_json::to_value(req)),
        other => panic!("only debits and credits here: {other:?}"),
    };
    svc.call(Method::POST, path, Some(&body.expect("json")))
        .await
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

fn refund_op(k: &str, account_id: i64, minor: i64, of: &str) -> AccountOp {
    AccountOp::Credit(CreditRequest {
        operation_key: key(k),
        account_id,
        amount: amount(minor),
        refund_of: key(of),
    })
}

/// Two services with the same accounts (the same ids in each).
async fn twins() -> (Svc, Svc, Vec<i64>, i64) {
    let lone = Svc::start().await;
    let batched = Svc::start().await;
    let merchant = lone.merchant_id().await;
    assert_eq!(merchant, batched.merchant_id().await);
    let mut accounts = Vec::new();
    for i in 0..6 {
        let opening = 3_000 + 500 * i;
        let a = lone.open(&format!("member-{i}"), opening).await.id;
        assert_eq!(a, batched.open(&format!("member-{i}"), opening).await.id);
        accounts.push(a);
    }
    (lone, batched, accounts, merchant)
}

/// Hand-picked batches: each shape the statements have to get right.
fn shapes(a: &[i64], merchant: i64) -> Vec<Vec<AccountOp>> {
    vec![
        // distinct accounts, all covered
        vec![
            debit_op("h:1", a[0], 100),
            debit_op("h:2", a[1], 200),
            debit_op("h:3", a[2], 300),
        ],
        // one account twice, its sum covered
        vec![debit_op("h:4", a[3], 500), debit_op("h:5", a[3], 600)],
        // one account thrice, the sum not covered: batch order decides
        vec![
            debit_op("h:6", a[4], 1_500),
            debit_op("h:7", a[4], 100),
            debit_op("h:8", a[4], 9_000),
            debit_op("h:9", a[5], 10),
            debit_op("h:15", a[4], 3_900),
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
        // nothing left to record at all
        vec![debit_op("h:1", a[0], 100), debit_op("h:12", 987_654, 5)],
        // a key first sent for a missing account, then for a real one
        vec![debit_op("h:16", 987_654, 5), debit_op("h:16", a[5], 5)],
        // refunds: whole, partial twice over one debit, beyond what is left, of a
        // declined debit, of no debit, to the wrong account, to no account, to the
        // merchant, a replay, a reuse, and a refund of this batch's own debit
        vec![
            refund_op("c:1", a[0], 100, "h:1"),
            refund_op("c:2", a[1], 150, "h:2"),
            refund_op("c:3", a[1], 50, "h:2"),
            refund_op("c:4", a[1], 1, "h:2"),
            refund_op("c:5", a[1], 1, "h:11"),
            refund_op("c:6", a[1], 1, "h:nothing"),
            refund_op("c:7", a[3], 1, "h:3"),
            refund_op("c:8", 987_654, 1, "h:3"),
            refund_op("c:9", merchant, 1, "h:3"),
            refund_op("c:1", a[0], 100, "h:1"),
            refund_op("c:2", a[1], 149, "h:2"),
            refund_op("h:3", a[2], 1, "h:3"),
            debit_op("h:17", a[5], 40),
            refund_op("c:10", a[5], 40, "h:17"),
        ],
        // a refund and a debit of one account: the debit is decided first
        vec![
            refund_op("c:11", a[2], 300, "h:3"),
            debit_op("h:18", a[2], 2_000),
        ],
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_operation_is_a_batch_of_one() {
    let (lone, batched, accounts, merchant) = twins().await;
    let ops: Vec<AccountOp> = shapes(&accounts, merchant).into_iter().flatten().collect();
    for (n, op) in ops.into_iter().enumerate() {
        let single = alone(&lone, &op).await;
        let in_batch = batched.batch(vec![op.clone()]).await;
        assert_eq!(
            comparable(&single),
            comparable(&in_batch[0]),
            "op {n}: the same answer: {op:?}"
        );
        // One key, one shard: the tables are the same to the shard.
        assert_eq!(
            money(&lone, true).await,
            money(&batched, true).await,
            "op {n}: the same money"
        );
    }
    for svc in [&lone, &batched] {
        assert_shards_explained(svc).await;
        assert!(svc.count_where("status = 'DECLINED'").await > 0);
        assert!(svc.count_where("kind = 'CREDIT'").await > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_answers_and_moves_money_as_its_calls_one_by_one() {
    let (lone, batched, accounts, merchant) = twins().await;
    let a = &accounts;
    let mut batches = shapes(a, merchant);
    // Then many mixed ones: small batches over few accounts, some keys sent again, so
    // that accounts repeat, run dry and decline, and refunds of earlier debits (some
    // several in one batch, some beyond what is left or to the wrong account).
    let mut rng = Lcg(7);
    for b in 0..60u64 {
        let size = 1 + rng.below(7);
        let ops = (0..size)
            .map(|j| {
                let n = b * 7 + j;
                if b > 0 && rng.below(4) == 0 {
                    let of = rng.below(b * 7);
                    let account = if rng.below(8) == 0 {
                        a[rng.below(a.len() as u64) as usize]
                    } else {
                        a[(of % a.len() as u64) as usize]
                    };
                    let k = if rng.below(6) == 0 { rng.below(n) } else { n };
                    return refund_op(
                        &format!("rc:{k}"),
                        account,
                        1 + (n * 13 % 150) as i64,
                        &format!("r:{of}"),
                    );
                }
                let k = if rng.below(6) == 0 {
                    // an earlier key, with the same or another request
                    rng.below(n + 1)
                } else {
                    n
                };
                // Debits of key k go to account k mod 6 most of the time, so that
                // refunds find them.
                let account = if rng.below(5) == 0 {
                    a[rng.below(a.len() as u64) as usize]
                } else {
                    a[(k % a.len() as u64) as usize]
                };
                let amount = 1 + (k * 37) % 400;
                debit_op(&format!("r:{k}"), account, amount as i64)
            })
            .collect();
        batches.push(ops);
    }

    let (mut declined, mut refunded, mut refused_refunds) = (0, 0, 0);
    for (n, ops) in batches.into_iter().enumerate() {
        let replies = batched.batch(ops.clone()).await;
        // The batch's order of work: its debits, then its credits, each in order.
        let mut order: Vec<usize> = (0..ops.len()).collect();
        order.sort_by_key(|&i| matches!(ops[i], AccountOp::Credit(_)));
        for i in order {
            let single = alone(&lone, &ops[i]).await;
            assert_eq!(
                comparable(&replies[i]),
                comparable(&single),
                "batch {n}, op {i}: the same answer: {:?}",
                ops[i]
            );
        }
        for r in &replies {
            match (r.status, r.body["code"].as_str(), r.body["kind"].as_str()) {
                (422, Some("INSUFFICIENT_FUNDS"), _) => declined += 1,
                (201, _, Some("CREDIT")) => refunded += 1,
                (
                    422 | 404,
                    Some(
                        "REFUND_EXCEEDS_DEBIT"
                        | "DEBIT_NOT_FOUND"
                        | "DEBIT_DECLINED"
                        | "REFUND_ACCOUNT_MISMATCH",
                    ),
                    _,
                ) => refused_refunds += 1,
                _ => {}
            }
        }
        assert_eq!(
            money(&batched, false).await,
            money(&lone, false).await,
            "batch {n}: the same money"
        );
    }
    assert!(declined > 5, "declines were exercised: {declined}");
    assert!(refunded > 5, "refunds were exercised: {refunded}");
    assert!(refused_refunds > 5, "refused refunds: {refused_refunds}");
    assert!(
        batched
            .count_where("status = 'APPLIED' AND kind = 'DEBIT'")
            .await
            > 50
    );
    for svc in [&batched, &lone] {
        assert_shards_explained(svc).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_spread_over_the_merchant_shards() {
    let svc = Svc::start().await;
    let accounts = svc.open_many_ids(64, 1_000).await;
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
    let used = svc.shards_used().await;
    assert!(used > 8, "batches spread over the shards: {used}");
    assert_eq!(svc.merchant_balance().await, 64 * 4 * 10);
    assert_eq!(svc.negative_balances().await, 0);
}

/// Under contention: overlapping batches (keys in both orders, shared accounts, funds
/// for everything) and single calls on the same keys, as several orchestrators would
/// send them. No deadlock, one row per key, every balance explained.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_and_single_calls_share_keys_and_accounts_safely() {
    let svc = Svc::start().await;
    let accounts = svc.open_many_ids(12, 1_000_000).await;
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

    let dupes = svc
        .number(
            r#"SELECT COUNT(*) FROM (SELECT operation_key FROM account_service.transactions
               WHERE operation_key IS NOT NULL GROUP BY operation_key HAVING COUNT(*) > 1) d"#,
        )
        .await;
    assert_eq!(dupes, 0, "one row per key");
    assert_eq!(
        svc.unexplained_balances(1_000_000).await,
        0,
        "every balance is its opening minus its debits"
    );
    assert_eq!(svc.total_money().await, total_before, "money conserved");
    assert_eq!(
        svc.count_where("status = 'DECLINED'").await,
        0,
        "nothing declined"
    );
}
