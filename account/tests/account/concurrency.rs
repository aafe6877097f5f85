//! Many distinct debits racing for one balance: exactly as many succeed as it covers.

use crate::support::{debit, Svc};
use futures::future::join_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_debits_against_a_balance_covering_one_hundred() {
    let svc = Svc::start().await;
    let price = 1_299;
    let buyer = svc.open("member-1", 100 * price).await;
    let bystander = svc.open("member-2", 5_000).await;
    let total_before = svc.total_money().await;

    let reqs: Vec<_> = (0..200)
        .map(|i| debit(&format!("pay:{i}:debit"), buyer.id, price))
        .collect();
    let answers = join_all(reqs.iter().map(|r| svc.client.debit(r))).await;

    let (mut applied, mut declined) = (0, 0);
    for a in answers {
        match a {
            Ok(a) => {
                assert_eq!(a.status, 201);
                applied += 1;
            }
            Err(e) => {
                assert_eq!(e.status(), Some(422), "{e}");
                assert_eq!(e.code(), Some("INSUFFICIENT_FUNDS"));
                declined += 1;
            }
        }
    }
    assert_eq!((applied, declined), (100, 100));

    assert_eq!(
        svc.count_where("kind = 'DEBIT' AND status = 'APPLIED'")
            .await,
        100
    );
    assert_eq!(
        svc.count_where("kind = 'DEBIT' AND status = 'DECLINED'")
            .await,
        100
    );
    assert_eq!(svc.balance(buyer.id).await, 0);
    assert_eq!(svc.balance(bystander.id).await, 5_000);
    assert_eq!(
        svc.merchant_balance().await,
        100 * price,
        "merchant rose by exactly the 100 debits"
    );
    assert_eq!(svc.negative_balances().await, 0);
    assert_eq!(svc.total_money().await, total_before);
    // The payments spread over the merchant shards instead of queueing on one row.
    let shards_used = svc.shards_used().await;
    assert!(shards_used > 1, "debits landed in {shards_used} shard(s)");
    // The view callers and checkers read agrees with the tables.
    let view_total = svc
        .number("SELECT SUM(balance)::BIGINT FROM account_service.balances")
        .await;
    assert_eq!(view_total, total_before);
}
