//! Property: whatever mix of debits, refunds and replays runs, concurrently, the sum of
//! all balances never changes, no balance goes negative, and every balance is explained
//! by its ledger rows.

use crate::support::{amount, debit, key, Svc};
use futures::future::join_all;
use paysaga_common::client::CallError;
use paysaga_contracts::account::api::CreditRequest;
use proptest::{prelude::*, test_runner::TestRunner};

#[derive(Debug, Clone)]
enum Op {
    Debit {
        account: usize,
        key: u8,
        amount: i64,
    },
    Refund {
        account: usize,
        key: u8,
        of: u8,
        amount: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, 0..24u8, 1..400i64).prop_map(|(account, key, amount)| Op::Debit { account, key, amount }),
        2 => (0..4usize, 0..24u8, 0..24u8, 1..200i64)
            .prop_map(|(account, key, of, amount)| Op::Refund { account, key, of, amount }),
    ]
}

/// Only definite answers are acceptable: any 5xx or transport failure fails the case.
fn definite<T>(r: Result<T, CallError>) {
    if let Err(CallError::Unknown { status, reason }) = r {
        panic!("unknown outcome ({status:?}): {reason}");
    }
}

#[test]
fn sum_of_all_balances_never_changes() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let svc = rt.block_on(Svc::start());
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 12,
        ..ProptestConfig::default()
    });
    // Shrinking reruns cases, so each run gets fresh members and keys.
    let cases = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&prop::collection::vec(op(), 1..60), |ops| {
        let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        rt.block_on(async {
            let mut ids = Vec::new();
            for i in 0..4 {
                ids.push(svc.open(&format!("c{case}-m{i}"), 500 + 250 * i as i64).await.id);
            }
            let before = svc.total_money().await;
            // All at once, then all again, as a saga retrying after unknown outcomes
            // would: the second wave replays, and its refunds meet the debits the first
            // wave committed.
            for _wave in 0..2 {
                let calls = ops.iter().map(|op| {
                    let svc = &svc;
                    let ids = &ids;
                    async move {
                        match op {
                            Op::Debit { account, key: k, amount: a } => {
                                definite(svc.client.debit(&debit(&format!("c{case}:d{k}"), ids[*account], *a)).await)
                            }
                            Op::Refund { account, key: k, of, amount: a } => {
                                let req = CreditRequest {
                                    operation_key: key(&format!("c{case}:r{k}")),
                                    account_id: ids[*account],
                                    amount: amount(*a),
                                    refund_of: key(&format!("c{case}:d{of}")),
                                };
                                definite(svc.client.credit(&req).await)
                            }
                        }
                    }
                });
                join_all(calls).await;
            }

            assert_eq!(svc.total_money().await, before, "money created or destroyed");
            assert_eq!(svc.negative_balances().await, 0);
            // Each account's balance is its opening plus its applied ledger rows.
            let unexplained = svc
                .number(
                    r#"SELECT COUNT(*) FROM account_service.accounts a
                       WHERE a.kind = 'MEMBER' AND a.balance <> (
                           SELECT COALESCE(SUM(CASE t.kind WHEN 'DEBIT' THEN -t.amount ELSE t.amount END), 0)
                           FROM account_service.transactions t
                           WHERE t.account_id = a.id AND t.status = 'APPLIED')"#,
                )
                .await;
            assert_eq!(unexplained, 0, "a balance disagrees with its ledger");
            let merchant_explained: bool = sqlx::query_scalar(
                r#"SELECT (SELECT SUM(balance) FROM account_service.merchant_shards)
                        = (SELECT COALESCE(SUM(CASE kind WHEN 'DEBIT' THEN amount ELSE -amount END), 0)
                           FROM account_service.transactions
                           WHERE status = 'APPLIED' AND kind IN ('DEBIT', 'CREDIT'))"#,
            )
            .fetch_one(&svc.admin)
            .await
            .expect("merchant check");
            assert!(merchant_explained, "merchant shards disagree with the ledger");
            let over_refunded = svc
                .number(
                    r#"SELECT COUNT(*) FROM account_service.transactions d
                       WHERE d.kind = 'DEBIT' AND d.refunded <> (
                           SELECT COALESCE(SUM(c.amount), 0) FROM account_service.transactions c
                           WHERE c.kind = 'CREDIT' AND c.refund_of = d.operation_key)"#,
                )
                .await;
            assert_eq!(over_refunded, 0, "a debit's refunded total disagrees with its credits");
        });
        Ok(())
    });
    result.expect("property holds");
    // The cases really moved money both ways, so the checks above had something to check.
    let (debits, credits) = rt.block_on(async {
        (
            svc.count_where("kind = 'DEBIT' AND status = 'APPLIED'")
                .await,
            svc.count_where("kind = 'CREDIT'").await,
        )
    });
    assert!(
        debits > 0 && credits > 0,
        "applied debits {debits}, credits {credits}"
    );
    drop(svc);
    drop(rt);
}
