//! Refund credits: back to the debited account, never more than the debit in total,
//! even when refunds race.

use crate::support::{amount, key, Svc};
use futures::future::join_all;
use paysaga_contracts::account::api::{AccountOp, CreditRequest, TransactionKind};

fn refund(k: &str, account_id: i64, minor: i64, of: &str) -> CreditRequest {
    CreditRequest {
        operation_key: key(k),
        account_id,
        amount: amount(minor),
        refund_of: key(of),
    }
}

#[tokio::test]
async fn a_refund_moves_money_back_and_replays_idempotently() {
    let (svc, a) = Svc::with_member(1_000).await;
    let total = svc.total_money().await;
    svc.pay("pay:1:debit", a.id, 400).await;

    let credit = || async {
        svc.client
            .credit(&refund("pay:1:refund", a.id, 400, "pay:1:debit"))
            .await
            .expect("credit answered")
    };
    let first = credit().await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body.kind, TransactionKind::Credit);
    assert_eq!(first.body.refund_of.as_deref(), Some("pay:1:debit"));
    let replay = credit().await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body, first.body);

    assert_eq!(svc.balance(a.id).await, 1_000);
    assert_eq!(svc.merchant_balance().await, 0);
    assert_eq!(svc.total_money().await, total);
    assert_eq!(svc.count_where("kind = 'CREDIT'").await, 1);
    let (refunded, shard_of_debit, shard_of_credit): (i64, i16, i16) = sqlx::query_as(
        "SELECT d.refunded, d.merchant_shard, c.merchant_shard
         FROM account_service.transactions d, account_service.transactions c
         WHERE d.operation_key = 'pay:1:debit' AND c.operation_key = 'pay:1:refund'",
    )
    .fetch_one(&svc.admin)
    .await
    .expect("rows");
    assert_eq!(refunded, 400);
    assert_eq!(
        shard_of_debit, shard_of_credit,
        "the refund draws on the shard the payment went to"
    );
}

#[tokio::test]
async fn refunds_never_exceed_the_debit_and_are_refused_precisely() {
    let (svc, a, b) = Svc::with_two_members(1_000, 1_000).await;
    svc.pay("d1", a.id, 300).await;
    svc.refused("d2", a.id, 5_000).await;

    svc.client
        .credit(&refund("r1", a.id, 200, "d1"))
        .await
        .expect("partial refund");
    let too_much = svc
        .client
        .credit(&refund("r2", a.id, 101, "d1"))
        .await
        .expect_err("over the debit");
    assert_eq!(
        (too_much.status(), too_much.code()),
        (Some(422), Some("REFUND_EXCEEDS_DEBIT"))
    );
    svc.client
        .credit(&refund("r3", a.id, 100, "d1"))
        .await
        .expect("rest of it");
    // Each refusal: (key, account, amount, refunded debit, status, code).
    for (k, account, minor, of, status, code) in [
        ("r4", a.id, 1, "d1", 422, "REFUND_EXCEEDS_DEBIT"), // nothing left
        ("r5", a.id, 1, "no-such-debit", 404, "DEBIT_NOT_FOUND"),
        ("r6", a.id, 1, "r1", 404, "DEBIT_NOT_FOUND"), // a credit is no debit
        ("r7", a.id, 1, "d2", 422, "DEBIT_DECLINED"),
        ("r8", b.id, 1, "d1", 422, "REFUND_ACCOUNT_MISMATCH"),
        ("r9", 999_999, 1, "d1", 404, "ACCOUNT_NOT_FOUND"),
    ] {
        let err = svc
            .client
            .credit(&refund(k, account, minor, of))
            .await
            .expect_err(k);
        assert_eq!(
            (err.status(), err.code()),
            (Some(status), Some(code)),
            "{k}"
        );
    }

    // Only the two accepted refunds left a trace; the refused ones moved nothing.
    assert_eq!(svc.count_where("kind = 'CREDIT'").await, 2);
    assert_eq!(svc.balance(a.id).await, 1_000);
    assert_eq!(svc.balance(b.id).await, 1_000);
    assert_eq!(svc.merchant_balance().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_refunds_of_one_debit_stop_at_its_amount() {
    let (svc, a) = Svc::with_member(1_000).await;
    svc.pay("d", a.id, 100).await;

    let reqs: Vec<_> = (0..30)
        .map(|i| refund(&format!("r{i}"), a.id, 10, "d"))
        .collect();
    let answers = join_all(reqs.iter().map(|r| svc.client.credit(r))).await;
    let ok = answers.iter().filter(|a| a.is_ok()).count();
    for e in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(e.code(), Some("REFUND_EXCEEDS_DEBIT"), "{e}");
    }
    assert_eq!(ok, 10);
    assert_eq!(
        svc.count_where("kind = 'CREDIT' AND status = 'APPLIED'")
            .await,
        10
    );
    assert_eq!(svc.balance(a.id).await, 1_000);
    assert_eq!(svc.merchant_balance().await, 0);
    assert_eq!(svc.negative_balances().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_refund_batches_stop_at_the_debits_amount() {
    let (svc, a, b) = Svc::with_two_members(1_000, 1_000).await;
    for (k, id) in [("d", a.id), ("e", b.id)] {
        svc.pay(k, id, 100).await;
    }
    // Eight batches of five refunds of each debit, the same key sent in several, and
    // single refunds meanwhile: far more keys than the 10 refunds each debit has room for.
    let batches = (0..8).map(|t| {
        let ops: Vec<AccountOp> = (0..5)
            .flat_map(|j| {
                let n = (t * 3 + j) % 40;
                [
                    AccountOp::Credit(refund(&format!("r{n}"), a.id, 10, "d")),
                    AccountOp::Credit(refund(&format!("s{n}"), b.id, 10, "e")),
                ]
            })
            .collect();
        let svc = &svc;
        async move { svc.batch(ops).await }
    });
    let singles = (40..50).map(|n| {
        let svc = &svc;
        async move {
            let r = refund(&format!("r{n}"), a.id, 10, "d");
            svc.client.credit(&r).await
        }
    });
    let (batched, singles) = tokio::join!(join_all(batches), join_all(singles));
    for reply in batched.iter().flatten() {
        match reply.status {
            200 | 201 => {}
            422 => assert_eq!(
                reply.body["code"], "REFUND_EXCEEDS_DEBIT",
                "{:?}",
                reply.body
            ),
            other => panic!("unexpected {other}: {:?}", reply.body),
        }
    }
    for e in singles.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(e.code(), Some("REFUND_EXCEEDS_DEBIT"), "{e}");
    }
    for (k, id) in [("d", a.id), ("e", b.id)] {
        let (refunded, credits): (i64, i64) = sqlx::query_as(
            "SELECT d.refunded, (SELECT COUNT(*) FROM account_service.transactions c
                                 WHERE c.kind = 'CREDIT' AND c.refund_of = d.operation_key)
             FROM account_service.transactions d WHERE d.operation_key = $1",
        )
        .bind(k)
        .fetch_one(&svc.admin)
        .await
        .expect("debit");
        assert_eq!((refunded, credits), (100, 10), "debit {k}");
        assert_eq!(svc.balance(id).await, 1_000, "account of {k}");
    }
    assert_eq!(svc.merchant_balance().await, 0);
    assert_eq!(svc.negative_balances().await, 0);
}
