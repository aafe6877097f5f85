//! `POST /v1/batch`: debits applied together, each answered as the single endpoint
//! would answer it, none applied twice, and nothing applied when the batch is refused
//! or its statement fails.

use std::{
    collections::{HashMap, HashSet},
    time::Instant,
};

use crate::support::{amount, debit, debit_op, key, Svc};
use futures::future::join_all;
use paysaga_common::testkit::buyer_token;
use paysaga_contracts::{
    account::api::{AccountOp, CreditRequest, Transaction, TransactionStatus},
    batch::{Reply, MAX_OPS},
};
use reqwest::Method;
use serde_json::{json, Value};

fn transaction(reply: &Reply) -> Transaction {
    serde_json::from_value(reply.body.clone()).expect("a Transaction body")
}

fn code(reply: &Reply) -> &str {
    reply.body["code"].as_str().unwrap_or("")
}

/// Everything a batch could have changed: balances, shards, ledger rows.
async fn snapshot(svc: &Svc) -> Value {
    sqlx::query_scalar(
        r#"SELECT json_build_object(
             'accounts', (SELECT json_agg(json_build_array(id, balance) ORDER BY id) FROM account_service.accounts),
             'shards', (SELECT json_agg(json_build_array(shard, balance) ORDER BY shard) FROM account_service.merchant_shards),
             'rows', (SELECT json_agg(json_build_array(id, operation_key, status, amount, merchant_shard) ORDER BY id)
                      FROM account_service.transactions))"#,
    )
    .fetch_one(&svc.admin)
    .await
    .expect("snapshot")
}

/// Each shard holds exactly the applied debits recorded against it (no credits here).
async fn assert_shards_match_rows(svc: &Svc) {
    let off = svc
        .number(
            r#"SELECT COUNT(*) FROM account_service.merchant_shards s
               WHERE s.balance <> (SELECT COALESCE(SUM(t.amount), 0) FROM account_service.transactions t
                                   WHERE t.merchant_shard = s.shard AND t.kind = 'DEBIT' AND t.status = 'APPLIED')"#,
        )
        .await;
    assert_eq!(off, 0, "every shard equals its applied debits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_debits_over_distinct_accounts_apply_once_each() {
    let svc = Svc::start().await;
    let accounts = svc.open_many(200, 10_000).await;
    let total_before = svc.total_money().await;

    let ops: Vec<AccountOp> = accounts
        .iter()
        .enumerate()
        .map(|(i, a)| debit_op(&format!("pay:{i}:debit"), a.id, 100 + i as i64))
        .collect();
    let replies = svc.batch(ops).await;

    assert_eq!(replies.len(), 200);
    let mut sum = 0;
    for (i, (reply, a)) in replies.iter().zip(&accounts).enumerate() {
        assert_eq!(reply.status, 201, "op {i}: {:?}", reply.body);
        let t = transaction(reply);
        assert_eq!(t.operation_key, format!("pay:{i}:debit"));
        assert_eq!((t.account_id, t.amount), (a.id, 100 + i as i64));
        assert_eq!(t.status, TransactionStatus::Applied);
        let stored: uuid::Uuid = sqlx::query_scalar(
            "SELECT id FROM account_service.transactions WHERE operation_key = $1",
        )
        .bind(&t.operation_key)
        .fetch_one(&svc.admin)
        .await
        .expect("row");
        assert_eq!(stored, t.id, "the reply is the stored row");
        assert_eq!(svc.balance(a.id).await, 10_000 - t.amount);
        sum += t.amount;
    }
    assert_eq!(
        svc.count_where("kind = 'DEBIT' AND status = 'APPLIED'")
            .await,
        200
    );
    assert_eq!(svc.merchant_balance().await, sum);
    assert_shards_match_rows(&svc).await;
    // One batch, one merchant shard: every row records it, and refunds draw from it.
    let shards_used = svc
        .number("SELECT COUNT(DISTINCT merchant_shard) FROM account_service.transactions WHERE operation_key IS NOT NULL")
        .await;
    assert_eq!(shards_used, 1, "the batch credits one shard");
    assert_eq!(svc.total_money().await, total_before, "money conserved");
    assert_eq!(svc.negative_balances().await, 0);
}

#[tokio::test]
async fn each_reply_is_what_the_single_endpoint_answers() {
    let (svc, rich, poor) = Svc::with_two_members(1_000, 50).await;
    let merchant = svc.merchant_id().await;
    let ghost = 987_654;
    let before = svc.pay("pay:old:debit", rich.id, 100).await;
    assert_eq!(before.status, 201);
    let total_before = svc.total_money().await;

    let credit = CreditRequest {
        operation_key: key("pay:old:refund"),
        account_id: rich.id,
        amount: amount(40),
        refund_of: key("pay:old:debit"),
    };
    let ops = vec![
        debit_op("pay:good:debit", rich.id, 200),  // 0: applied
        debit_op("pay:poor:debit", poor.id, 500),  // 1: insufficient funds
        debit_op("pay:good:debit", rich.id, 200),  // 2: repeated in the batch: replay
        debit_op("pay:old:debit", rich.id, 999),   // 3: key used before, other amount
        debit_op("pay:ghost:debit", ghost, 10),    // 4: no such account
        debit_op("pay:merch:debit", merchant, 10), // 5: the merchant account
        debit_op("pay:old:debit", rich.id, 100),   // 6: replay of the earlier call
        debit_op("pay:poor:debit", poor.id, 500),  // 7: repeated decline
        debit_op("pay:good:debit", rich.id, 201),  // 8: repeated key, other amount
        AccountOp::Account {
            account_id: rich.id,
        }, // 9
        AccountOp::Account { account_id: ghost },  // 10
        AccountOp::Transaction {
            operation_key: "pay:good:debit".into(),
        }, // 11: sees the batch's own debit
        AccountOp::Transaction {
            operation_key: "pay:never".into(),
        }, // 12
        AccountOp::Transaction {
            operation_key: "bad key".into(),
        }, // 13: malformed
        AccountOp::Credit(credit.clone()),         // 14
    ];
    let replies = svc.batch(ops.clone()).await;
    assert_eq!(replies.len(), ops.len());

    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [201, 422, 200, 409, 404, 422, 200, 422, 409, 200, 404, 200, 404, 400, 201]
    );
    assert_eq!(code(&replies[1]), "INSUFFICIENT_FUNDS");
    assert_eq!(code(&replies[3]), "OPERATION_KEY_REUSED");
    assert_eq!(code(&replies[4]), "ACCOUNT_NOT_FOUND");
    assert_eq!(code(&replies[5]), "ACCOUNT_NOT_MEMBER");
    assert_eq!(code(&replies[13]), "INVALID_OPERATION_KEY");
    assert_eq!(
        replies[0].body, replies[2].body,
        "the repeat replays the first"
    );
    assert_eq!(replies[11].body, replies[0].body);

    // The same requests one by one, now: a created one answers as its replay (200, same
    // body); everything else exactly as in the batch.
    for (i, (op, reply)) in ops.iter().zip(&replies).enumerate() {
        let single = match op {
            AccountOp::Debit(req) => {
                let body = serde_json::to_value(req).expect("json");
                svc.call(Method::POST, "/v1/debits", Some(&body)).await
            }
            AccountOp::Credit(req) => {
                let body = serde_json::to_value(req).expect("json");
                svc.call(Method::POST, "/v1/credits", Some(&body)).await
            }
            AccountOp::Account { account_id } => {
                let mut r = svc
                    .call(Method::GET, &format!("/v1/accounts/{account_id}"), None)
                    .await;
                if r.status == 200 {
                    r.body = r.body["account"].clone();
                }
                r
            }
            AccountOp::Transaction { operation_key } => {
                let path = format!("/v1/transactions/{}", operation_key.replace(' ', "%20"));
                svc.call(Method::GET, &path, None).await
            }
            AccountOp::Hold(_) | AccountOp::Release(_) => unreachable!("no holds in this batch"),
        };
        let expected = if reply.status == 201 {
            200
        } else {
            reply.status
        };
        assert_eq!(single.status, expected, "op {i}: {:?}", single.body);
        assert_eq!(single.body, reply.body, "op {i}");
    }

    // Only the good debit and the refund moved money.
    assert_eq!(svc.balance(rich.id).await, 1_000 - 100 - 200 + 40);
    assert_eq!(svc.balance(poor.id).await, 50);
    assert_eq!(svc.merchant_balance().await, 100 + 200 - 40);
    assert_eq!(svc.total_money().await, total_before);
    assert_eq!(svc.count_where("operation_key = 'pay:good:debit'").await, 1);
    assert_eq!(
        svc.count_where(
            "operation_key = 'pay:poor:debit' AND status = 'DECLINED' AND merchant_shard IS NULL"
        )
        .await,
        1
    );
    assert_eq!(
        svc.count_where("operation_key IN ('pay:ghost:debit', 'pay:merch:debit')")
            .await,
        0
    );
}

#[tokio::test]
async fn a_repeated_key_whose_first_use_failed_is_tried_on_its_own() {
    let (svc, a) = Svc::with_member(1_000).await;
    let replies = svc
        .batch(vec![
            debit_op("pay:x:debit", 987_654, 100),
            debit_op("pay:x:debit", a.id, 100),
        ])
        .await;
    // As two calls one after the other: the first claimed nothing, so the second is new.
    assert_eq!(replies[0].status, 404);
    assert_eq!(replies[1].status, 201, "{:?}", replies[1].body);
    assert_eq!(svc.balance(a.id).await, 900);
    assert_eq!(svc.count_where("operation_key = 'pay:x:debit'").await, 1);
}

#[tokio::test]
async fn debits_on_one_account_are_decided_in_batch_order() {
    let (svc, a) = Svc::with_member(300).await;
    let replies = svc
        .batch(vec![
            debit_op("pay:1:debit", a.id, 200),
            debit_op("pay:2:debit", a.id, 200),
            debit_op("pay:3:debit", a.id, 100),
        ])
        .await;
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [201, 422, 201],
        "the second does not fit, the third does"
    );
    assert_eq!(code(&replies[1]), "INSUFFICIENT_FUNDS");
    assert_eq!(svc.balance(a.id).await, 0);
    assert_eq!(
        svc.count_where("status = 'APPLIED' AND kind = 'DEBIT'")
            .await,
        2
    );
    assert_eq!(
        svc.count_where("operation_key = 'pay:2:debit' AND status = 'DECLINED'")
            .await,
        1
    );
    assert_eq!(svc.merchant_balance().await, 300);
    assert_shards_match_rows(&svc).await;
}

#[tokio::test]
async fn a_retried_batch_changes_nothing_and_replays() {
    let svc = Svc::start().await;
    let accounts = svc.open_many(10, 1_000).await;
    // Three debits per account; the third on account 0 does not fit.
    let ops: Vec<AccountOp> = (0..30)
        .map(|i| {
            let amount = if i == 20 { 900 } else { 300 };
            debit_op(&format!("pay:{i}:debit"), accounts[i % 10].id, amount)
        })
        .collect();
    let first = svc.batch(ops.clone()).await;
    let after_first = snapshot(&svc).await;
    assert_eq!(first.iter().filter(|r| r.status == 201).count(), 29);
    assert_eq!(first[20].status, 422);

    let second = svc.batch(ops).await;
    assert_eq!(
        snapshot(&svc).await,
        after_first,
        "the retry changed nothing"
    );
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        let expected = if a.status == 201 { 200 } else { a.status };
        assert_eq!(b.status, expected, "op {i}");
        assert_eq!(a.body, b.body, "op {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_overlapping_batches_never_double_apply_or_deadlock() {
    let svc = Svc::start().await;
    let accounts = svc.open_many(20, 2_000).await;
    let total_before = svc.total_money().await;
    // 200 keys, each always the same request; ten per account, more than it can pay.
    let request = |k: usize| {
        (
            format!("pay:{k}:debit"),
            accounts[k % 20].id,
            100 + (k % 7) as i64 * 50,
        )
    };

    let mut batches = Vec::new();
    for t in 0..8usize {
        let mut keys: Vec<usize> = (0..50).map(|j| (t * 25 + j) % 200).collect();
        if t % 2 == 1 {
            keys.reverse();
        }
        let ops = keys
            .into_iter()
            .map(|k| {
                let (key, account, amount) = request(k);
                debit_op(&key, account, amount)
            })
            .collect::<Vec<_>>();
        batches.push(ops);
    }
    let batch_calls = batches.iter().map(|ops| {
        let ops = ops.clone();
        let svc = &svc;
        async move {
            let replies = svc.batch(ops.clone()).await;
            ops.into_iter().zip(replies).collect::<Vec<_>>()
        }
    });
    // Single calls on the same keys meanwhile: the two paths share the lock order.
    let single_calls = (0..60usize).map(|k| {
        let (key, account, amount) = request((k * 7) % 200);
        let svc = &svc;
        async move {
            let req = debit(&key, account, amount);
            let body = serde_json::to_value(&req).expect("json");
            let reply = svc.call(Method::POST, "/v1/debits", Some(&body)).await;
            (AccountOp::Debit(req), reply)
        }
    });
    let (batched, singles) = tokio::join!(join_all(batch_calls), join_all(single_calls));

    let mut created: HashMap<String, usize> = HashMap::new();
    let mut answers: HashMap<String, HashSet<String>> = HashMap::new();
    for (op, reply) in batched.into_iter().flatten().chain(singles) {
        let AccountOp::Debit(req) = op else {
            unreachable!("debits only")
        };
        let k = req.operation_key.to_string();
        let outcome = match (reply.status, code(&reply)) {
            (201, _) => {
                *created.entry(k.clone()).or_default() += 1;
                "APPLIED"
            }
            (200, _) => "APPLIED",
            (422, "INSUFFICIENT_FUNDS") => "DECLINED",
            other => panic!("{k}: unexpected answer {other:?}: {:?}", reply.body),
        };
        answers.entry(k).or_default().insert(outcome.to_owned());
    }

    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT operation_key, status, COUNT(*) OVER (PARTITION BY operation_key)
         FROM account_service.transactions WHERE operation_key IS NOT NULL",
    )
    .fetch_all(&svc.admin)
    .await
    .expect("rows");
    assert_eq!(rows.len(), answers.len(), "one row per key sent");
    for (k, status, n) in &rows {
        assert_eq!(*n, 1, "{k} has one row");
        let told = &answers[k];
        assert_eq!(told.len(), 1, "{k}: every answer agrees: {told:?}");
        assert!(told.contains(status), "{k}: told {told:?}, stored {status}");
        if status == "APPLIED" {
            assert_eq!(created.get(k), Some(&1), "{k}: created exactly once");
        } else {
            assert_eq!(
                created.get(k),
                None,
                "{k}: a declined key was never created"
            );
        }
    }
    let declined = rows.iter().filter(|r| r.1 == "DECLINED").count();
    assert!(declined > 0, "the accounts ran out, as intended");
    assert_eq!(
        svc.unexplained_balances(2000).await,
        0,
        "every balance is its opening minus its applied debits"
    );
    assert_shards_match_rows(&svc).await;
    assert_eq!(svc.negative_balances().await, 0);
    assert_eq!(svc.total_money().await, total_before, "money conserved");
}

#[tokio::test]
async fn empty_and_oversized_batches_are_refused_whole() {
    let (svc, a) = Svc::with_member(1_000_000).await;
    let before = snapshot(&svc).await;
    for n in [0, MAX_OPS + 1] {
        let ops: Vec<Value> = (0..n)
            .map(|i| json!({"op": "debit", "operation_key": format!("k{i}"), "account_id": a.id, "amount": 1}))
            .collect();
        let r = svc
            .call(Method::POST, "/v1/batch", Some(&json!({ "ops": ops })))
            .await;
        assert_eq!(r.status, 400, "{n} ops: {:?}", r.body);
        assert_eq!(code(&r), "BATCH_TOO_LARGE");
    }
    // One malformed operation refuses the whole batch too.
    let bad = json!({"ops": [
        {"op": "debit", "operation_key": "pay:ok:debit", "account_id": a.id, "amount": 1},
        {"op": "debit", "operation_key": "pay:zero:debit", "account_id": a.id, "amount": 0},
    ]});
    let r = svc.call(Method::POST, "/v1/batch", Some(&bad)).await;
    assert_eq!((r.status, code(&r)), (422, "INVALID_BODY"));
    let r = svc
        .call(
            Method::POST,
            "/v1/batch",
            Some(&json!({"ops": [{"op": "teleport"}]})),
        )
        .await;
    assert_eq!((r.status, code(&r)), (422, "INVALID_BODY"));
    assert_eq!(snapshot(&svc).await, before, "nothing applied");

    // A full batch with the longest keys fits the body limit.
    let ops: Vec<AccountOp> = (0..MAX_OPS)
        .map(|i| debit_op(&format!("{i:0>128}"), a.id, 1))
        .collect();
    let replies = svc.batch(ops).await;
    assert!(replies.iter().all(|r| r.status == 201));
    assert_eq!(svc.balance(a.id).await, 1_000_000 - MAX_OPS as i64);
}

#[tokio::test]
async fn a_buyer_token_is_forbidden() {
    let (svc, a) = Svc::with_member(1_000).await;
    let body = json!({"ops": [{"op": "debit", "operation_key": "pay:evil:debit", "account_id": a.id, "amount": 500}]});
    let r = svc
        .http
        .post(svc.url("/v1/batch"))
        .bearer_auth(buyer_token("member-1"))
        .json(&body)
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 403);
    let e: Value = r.json().await.expect("json");
    assert_eq!(e["code"], "FORBIDDEN");
    let r = svc
        .http
        .post(svc.url("/v1/batch"))
        .json(&body)
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 401);
    assert_eq!(svc.balance(a.id).await, 1_000);
    assert_eq!(svc.count_where("operation_key IS NOT NULL").await, 0);
}

#[tokio::test]
async fn a_batch_that_fails_in_the_database_applies_none_of_its_debits() {
    let (svc, a, b) = Svc::with_two_members(1_000, 1_000).await;
    // The last write of the transaction fails: everything before it must roll back.
    sqlx::query(
        r#"CREATE FUNCTION account_service.refuse() RETURNS trigger LANGUAGE plpgsql
           AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"#,
    )
    .execute(&svc.admin)
    .await
    .expect("function");
    sqlx::query(
        r#"CREATE TRIGGER refuse BEFORE UPDATE ON account_service.merchant_shards
           FOR EACH ROW EXECUTE FUNCTION account_service.refuse()"#,
    )
    .execute(&svc.admin)
    .await
    .expect("trigger");
    let before = snapshot(&svc).await;

    let ops = json!({"ops": [
        {"op": "debit", "operation_key": "pay:1:debit", "account_id": a.id, "amount": 100},
        {"op": "debit", "operation_key": "pay:2:debit", "account_id": b.id, "amount": 5000},
        {"op": "debit", "operation_key": "pay:3:debit", "account_id": b.id, "amount": 100},
    ]});
    let r = svc.call(Method::POST, "/v1/batch", Some(&ops)).await;
    assert_eq!(r.status, 500, "{:?}", r.body);
    assert_eq!(code(&r), "INTERNAL");
    assert_eq!(snapshot(&svc).await, before, "no partial write");
}

/// The last line of defence: an account or shard update that silently does nothing
/// (a trigger returning NULL stands in for any such bug) makes the statement's counts
/// disagree, and it fails whole: a 500, and nothing recorded or moved.
#[tokio::test]
async fn a_statement_whose_counts_disagree_applies_nothing() {
    let (svc, a) = Svc::with_member(1_000).await;
    let paid = svc.pay("pay:0:debit", a.id, 100).await;
    assert_eq!(paid.status, 201);
    sqlx::query(
        r#"CREATE FUNCTION account_service.skip() RETURNS trigger LANGUAGE plpgsql
           AS $$ BEGIN RETURN NULL; END $$"#,
    )
    .execute(&svc.admin)
    .await
    .expect("function");
    for table in ["accounts", "merchant_shards"] {
        sqlx::query(&format!(
            "CREATE TRIGGER skip BEFORE UPDATE ON account_service.{table}
             FOR EACH ROW EXECUTE FUNCTION account_service.skip()"
        ))
        .execute(&svc.admin)
        .await
        .expect("trigger");
        let before = snapshot(&svc).await;
        let refund = json!({"operation_key": "pay:0:refund", "account_id": a.id, "amount": 40,
                            "refund_of": "pay:0:debit"});
        let deposit = json!({"operation_key": "topup:1", "account_id": a.id, "amount": 40,
                             "authorization": paysaga_common::testkit::deposit_authorization(
                                 "member-1", 40, "topup:1", "admin@example.com", None)});
        let debit = json!({"operation_key": "pay:1:debit", "account_id": a.id, "amount": 100});
        let batch = json!({"ops": [
            {"op": "debit", "operation_key": "pay:2:debit", "account_id": a.id, "amount": 100},
        ]});
        let mut calls = vec![
            ("/v1/debits", debit),
            ("/v1/credits", refund),
            ("/v1/batch", batch),
        ];
        if table == "accounts" {
            calls.push(("/v1/deposits", deposit));
        }
        for (path, body) in calls {
            let r = svc.call(Method::POST, path, Some(&body)).await;
            assert_eq!(
                (r.status, code(&r)),
                (500, "INTERNAL"),
                "{table} {path}: {:?}",
                r.body
            );
            assert_eq!(
                snapshot(&svc).await,
                before,
                "{table} {path}: no partial write"
            );
        }
        sqlx::query(&format!("DROP TRIGGER skip ON account_service.{table}"))
            .execute(&svc.admin)
            .await
            .expect("drop");
    }
    // Without the faults, the same requests go through.
    let again = svc.pay("pay:1:debit", a.id, 100).await;
    assert_eq!(again.status, 201);
    assert_eq!(svc.balance(a.id).await, 800);
}

/// CPU seconds the service's PostgreSQL backends (role `account_app`, this test's
/// database) have used so far, read from /proc: the cost the batch path is meant to cut,
/// free of whatever else the machine runs.
async fn backend_cpu_seconds(svc: &Svc) -> f64 {
    let pids: Vec<i32> = sqlx::query_scalar(
        r#"SELECT pid FROM pg_stat_activity
           WHERE datname = current_database() AND usename = 'account_app'"#,
    )
    .fetch_all(&svc.admin)
    .await
    .expect("backends");
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the parenthesised command name; utime and stime are 14 and 15.
            let rest = &stat[stat.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split(' ').collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    // USER_HZ is 100 on Linux.
    ticks as f64 / 100.0
}

/// Debits per second and PostgreSQL CPU per debit over as many accounts: 64 concurrent
/// single calls; batches of 64, four in flight; and batches of 5, eight in flight (what
/// 64 concurrent checkouts give the orchestrators). Prints (no timed assertion:
/// machines are noisy), and checks the money each way moved. `BATCH_SPEED_DEBITS` sets
/// the debits per way (default 200; 2,000 for steadier figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn speed_single_calls_against_batches() {
    let n: usize = std::env::var("BATCH_SPEED_DEBITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for (mode, size, in_flight) in [("single", 1, 64), ("batch", 64, 4), ("batch", 5, 8)] {
        let svc = Svc::start_with(|c| c.database.max_connections = 16).await;
        let accounts = svc.open_many_ids(n, 10_000).await;
        let reqs: Vec<_> = accounts
            .iter()
            .enumerate()
            .map(|(i, id)| debit(&format!("pay:{i}:debit"), *id, 100))
            .collect();
        let cpu_before = backend_cpu_seconds(&svc).await;
        let started = Instant::now();
        if mode == "single" {
            let queue = std::sync::Mutex::new(reqs.iter());
            join_all((0..in_flight).map(|_| async {
                loop {
                    let next = queue.lock().expect("queue").next();
                    let Some(req) = next else { break };
                    let a = svc.client.debit(req).await.expect("debit");
                    assert_eq!(a.status, 201);
                }
            }))
            .await;
        } else {
            let chunks = std::sync::Mutex::new(reqs.chunks(size));
            join_all((0..in_flight).map(|_| async {
                loop {
                    let next = chunks.lock().expect("chunks").next();
                    let Some(chunk) = next else { break };
                    let ops = chunk.iter().cloned().map(AccountOp::Debit).collect();
                    let replies = svc.batch(ops).await;
                    assert!(replies.iter().all(|r| r.status == 201));
                }
            }))
            .await;
        }
        let secs = started.elapsed().as_secs_f64();
        let cpu = backend_cpu_seconds(&svc).await - cpu_before;
        let calls = n.div_ceil(size);
        assert_eq!(svc.merchant_balance().await, 100 * n as i64);
        eprintln!(
            "{mode:>6} of {size:>2}, {in_flight:>2} in flight: {n} debits in {secs:.2} s = {:.0} debits/s, \
             {:.2} ms per call; PostgreSQL CPU {:.3} ms per call, {:.3} ms per debit",
            n as f64 / secs,
            secs * 1e3 / calls as f64 * in_flight as f64,
            cpu * 1e3 / calls as f64,
            cpu * 1e3 / n as f64,
        );
    }
}
