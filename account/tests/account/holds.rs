//! Holds: placed only when the available balance covers them, captured by one debit,
//! released once, lapsed at their deadline; every outcome read back from the tables.

use paysaga_common::client::CallError;
use paysaga_contracts::account::api::{
    AccountBatch, AccountOp, CreditRequest, HoldState, ListHolds, ReleaseRequest, TransactionStatus,
};

use crate::support::{amount, constraint, hold, key, Svc};

fn code(e: &CallError) -> &str {
    e.code().unwrap_or("")
}

#[tokio::test]
async fn a_hold_sets_money_aside_once_per_key() {
    let (svc, acct) = Svc::with_member(1_000).await;

    let placed = svc
        .try_place("res:a:hold", "member-1", 300)
        .await
        .expect("placed");
    assert_eq!(placed.status, 201);
    assert_eq!(placed.body.state, HoldState::Held);
    assert_eq!(placed.body.account_id, acct.id);
    assert_eq!(svc.funds(acct.id).await, (1_000, 300));

    let replay = svc
        .try_place("res:a:hold", "member-1", 300)
        .await
        .expect("replayed");
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body, placed.body);
    let reused = svc
        .try_place("res:a:hold", "member-1", 301)
        .await
        .expect_err("another amount under the key");
    assert_eq!(code(&reused), "OPERATION_KEY_REUSED");
    assert_eq!(svc.funds(acct.id).await, (1_000, 300), "nothing held twice");

    let account = svc.client.get_account(acct.id).await.expect("account").body;
    assert_eq!(
        (account.account.held, account.account.available),
        (300, 700)
    );

    // What is left is 700: a hold of 701 is refused and nothing is recorded.
    let short = svc
        .try_place("res:b:hold", "member-1", 701)
        .await
        .expect_err("not covered");
    assert_eq!(code(&short), "INSUFFICIENT_FUNDS");
    assert_eq!(svc.hold_row("res:b:hold").await, None);
    assert_eq!(svc.funds(acct.id).await, (1_000, 300));

    // Judged afresh once the money is there: a top-up, and the same key is placed.
    let topped = svc
        .member
        .deposit(&svc.deposit("topup:1", "member-1", acct.id, 1))
        .await
        .expect("deposit");
    assert_eq!(topped.status, 201);
    let now_placed = svc
        .try_place("res:b:hold", "member-1", 701)
        .await
        .expect("covered now");
    assert_eq!(now_placed.status, 201);
    assert_eq!(svc.funds(acct.id).await, (1_001, 1_001));

    let none = svc
        .try_place("res:c:hold", "nobody", 1)
        .await
        .expect_err("no account");
    assert_eq!(code(&none), "ACCOUNT_NOT_FOUND");
    assert_eq!(svc.held_mismatches().await, 0);
}

#[tokio::test]
async fn concurrent_holds_never_count_the_same_money() {
    let (svc, acct) = Svc::with_member(1_000).await;
    // Forty holds of 100 race for 1,000: exactly ten are placed, alone or in batches.
    let singles = (0..20).map(|i| {
        let svc = &svc;
        async move {
            svc.try_place(&format!("res:s{i}:hold"), "member-1", 100)
                .await
                .is_ok()
        }
    });
    let batches = (0..4).map(|b| {
        let svc = &svc;
        async move {
            let ops = (0..5)
                .map(|i| AccountOp::Hold(hold(&format!("res:b{b}-{i}:hold"), "member-1", 100, 600)))
                .collect();
            let replies = svc
                .order
                .batch(&AccountBatch::new(ops))
                .await
                .expect("batch")
                .body
                .results;
            replies.iter().filter(|r| r.status == 201).count()
        }
    });
    let (singles, batches) = tokio::join!(
        futures::future::join_all(singles),
        futures::future::join_all(batches)
    );
    let placed = singles.into_iter().filter(|ok| *ok).count() + batches.into_iter().sum::<usize>();
    assert_eq!(placed, 10);
    assert_eq!(svc.funds(acct.id).await, (1_000, 1_000));
    assert_eq!(
        svc.number("SELECT COUNT(*) FROM account_service.holds WHERE state = 'HELD'")
            .await,
        10
    );
    assert_eq!(svc.held_mismatches().await, 0);
}

#[tokio::test]
async fn a_debit_captures_its_hold_once() {
    let (svc, acct, other) = Svc::with_two_members(500, 500).await;
    svc.place("res:1:hold", "member-1", 200).await;
    let merchant_before = svc.merchant_balance().await;

    let paid = svc.capture("pay:1:debit", acct.id, 200, "res:1:hold").await;
    assert_eq!(paid.status, 201);
    assert_eq!(paid.body.status, TransactionStatus::Applied);
    assert_eq!(paid.body.hold_key.as_deref(), Some("res:1:hold"));
    assert_eq!(svc.funds(acct.id).await, (300, 0));
    assert_eq!(svc.merchant_balance().await, merchant_before + 200);
    assert_eq!(
        svc.hold_row("res:1:hold").await,
        Some(("CAPTURED".into(), Some("pay:1:debit".into())))
    );
    let replay = svc.capture("pay:1:debit", acct.id, 200, "res:1:hold").await;
    assert_eq!((replay.status, replay.body.id), (200, paid.body.id));

    // Another debit cannot capture it again; its key stays declined.
    svc.declines("pay:2:debit", acct.id, 200, "res:1:hold", "HOLD_MISMATCH")
        .await;
    // A hold of another account or amount is no hold of this debit.
    svc.place("res:3:hold", "member-2", 100).await;
    svc.declines("pay:3:debit", acct.id, 100, "res:3:hold", "HOLD_MISMATCH")
        .await;
    svc.declines("pay:4:debit", other.id, 99, "res:3:hold", "HOLD_MISMATCH")
        .await;
    svc.declines(
        "pay:5:debit",
        acct.id,
        10,
        "res:none:hold",
        "HOLD_NOT_FOUND",
    )
    .await;
    for (k, why) in [
        ("pay:2:debit", "HOLD_MISMATCH"),
        ("pay:3:debit", "HOLD_MISMATCH"),
        ("pay:5:debit", "HOLD_NOT_FOUND"),
    ] {
        let t = svc
            .client
            .transaction_by_key(k)
            .await
            .expect("on record")
            .body;
        assert_eq!(t.status, TransactionStatus::Declined, "{k}");
        assert_eq!(t.declined_for.map(|c| c.as_str()), Some(why), "{k}");
    }
    assert_eq!(svc.funds(acct.id).await, (300, 0));
    assert_eq!(svc.funds(other.id).await, (500, 100));
    assert_eq!(
        svc.number(
            "SELECT COUNT(*) FROM account_service.transactions
             WHERE hold_key = 'res:1:hold' AND status = 'APPLIED'"
        )
        .await,
        1
    );
    assert_eq!(svc.held_mismatches().await, 0);

    // Only the capture's insert spends its hold: refunding part of it (an update of the
    // capture's row) gives the money back and leaves what another hold holds alone.
    svc.place("res:6:hold", "member-1", 100).await;
    let refund = CreditRequest {
        operation_key: key("pay:1:refund"),
        account_id: acct.id,
        amount: amount(50),
        refund_of: key("pay:1:debit"),
    };
    assert_eq!(
        svc.client.credit(&refund).await.expect("refund").status,
        201
    );
    assert_eq!(svc.funds(acct.id).await, (350, 100));
    assert_eq!(svc.merchant_balance().await, merchant_before + 150);
    assert_eq!(svc.held_mismatches().await, 0);
}

#[tokio::test]
async fn a_plain_debit_takes_only_the_available_balance() {
    let (svc, acct) = Svc::with_member(100).await;
    svc.place("res:1:hold", "member-1", 80).await;
    let short = svc.refused("pay:x:debit", acct.id, 30).await;
    assert_eq!(code(&short), "INSUFFICIENT_FUNDS");
    svc.pay("pay:y:debit", acct.id, 20).await;
    assert_eq!(svc.funds(acct.id).await, (80, 80));
}

#[tokio::test]
async fn a_release_happens_once_and_a_released_hold_is_never_captured() {
    let (svc, acct) = Svc::with_member(500).await;
    svc.place("res:1:hold", "member-1", 200).await;
    let released = svc.release("res:1:hold").await;
    assert_eq!(released.status, 200);
    assert_eq!(released.body.state, HoldState::Released);
    assert_eq!(svc.funds(acct.id).await, (500, 0));
    let again = svc.release("res:1:hold").await;
    assert_eq!((again.status, again.body), (200, released.body));
    assert_eq!(svc.funds(acct.id).await, (500, 0), "released once");

    svc.declines("pay:1:debit", acct.id, 200, "res:1:hold", "HOLD_RELEASED")
        .await;
    // The key stays declined on record: the same answer again.
    svc.declines("pay:1:debit", acct.id, 200, "res:1:hold", "HOLD_RELEASED")
        .await;
    // Placing under a released key replays the released hold: a key is placed once.
    let replaced = svc
        .try_place("res:1:hold", "member-1", 200)
        .await
        .expect("replay");
    assert_eq!(
        (replaced.status, replaced.body.state),
        (200, HoldState::Released)
    );
    assert_eq!(svc.funds(acct.id).await, (500, 0));

    svc.place("res:2:hold", "member-1", 100).await;
    svc.capture("pay:2:debit", acct.id, 100, "res:2:hold").await;
    assert_eq!(svc.release_refused("res:2:hold").await, "HOLD_CAPTURED");
    assert_eq!(svc.release_refused("res:none:hold").await, "HOLD_NOT_FOUND");
    assert_eq!(svc.funds(acct.id).await, (400, 0));
    assert_eq!(svc.held_mismatches().await, 0);
}

#[tokio::test]
async fn a_hold_past_its_deadline_cannot_be_captured_and_is_swept() {
    let (svc, acct) = Svc::with_member(500).await;
    for k in ["res:1:hold", "res:2:hold"] {
        svc.place(k, "member-1", 100).await;
    }
    // The passage of time, without waiting.
    sqlx::query(
        "UPDATE account_service.holds
         SET created_at = now() - INTERVAL '2 minutes', expires_at = now() - INTERVAL '1 second'",
    )
    .execute(&svc.admin)
    .await
    .expect("backdate");
    svc.declines("pay:1:debit", acct.id, 100, "res:1:hold", "HOLD_EXPIRED")
        .await;
    assert_eq!(svc.funds(acct.id).await, (500, 200), "held until swept");
    let listed = svc.live_holds(0).await;
    assert!(listed.holds.is_empty(), "a lapsed hold is not live");

    let pool = paysaga_common::db::connect(&svc.db.role_url("account_app"), account::SCHEMA, 2)
        .await
        .expect("connect as account_app");
    assert_eq!(
        account::release::sweep_batch(&pool, 100)
            .await
            .expect("sweep"),
        2
    );
    assert_eq!(
        account::release::sweep_batch(&pool, 100)
            .await
            .expect("sweep"),
        0
    );
    assert_eq!(svc.funds(acct.id).await, (500, 0));
    assert_eq!(
        svc.hold_row("res:2:hold").await,
        Some(("RELEASED".into(), None))
    );
    assert_eq!(svc.held_mismatches().await, 0);
}

#[tokio::test]
async fn live_holds_are_listed_oldest_first_in_pages() {
    let (svc, _) = Svc::with_member(10_000).await;
    for i in 0..5 {
        svc.try_place(&format!("res:{i}:hold"), "member-1", 10)
            .await
            .expect("placed");
    }
    svc.release("res:2:hold").await;
    let mut seen = Vec::new();
    let mut q = ListHolds {
        limit: Some(2),
        ..ListHolds::older_than(0)
    };
    loop {
        let page = svc.order.holds(&q).await.expect("page").body;
        seen.extend(page.holds.iter().map(|h| h.operation_key.clone()));
        let Some(next) = page.next else { break };
        q.after_created_at = Some(next.created_at);
        q.after_id = Some(next.id);
    }
    assert_eq!(
        seen,
        ["res:0:hold", "res:1:hold", "res:3:hold", "res:4:hold"]
    );
    let young = svc.live_holds(3_600_000).await;
    assert!(young.holds.is_empty(), "none is an hour old");
    let beyond = svc
        .order
        .holds(&ListHolds::older_than(u64::MAX))
        .await
        .expect_err("an age beyond a century is refused, not a server error");
    assert_eq!(code(&beyond), "INVALID_QUERY");
}

#[tokio::test]
async fn each_role_sends_only_its_own_operations() {
    let (svc, acct) = Svc::with_member(500).await;
    let order_debit = svc
        .order
        .batch(&AccountBatch::new(vec![
            AccountOp::Hold(hold("res:1:hold", "member-1", 100, 600)),
            crate::support::debit_op("pay:1:debit", acct.id, 100),
        ]))
        .await
        .expect_err("the order service moves no money");
    assert_eq!(code(&order_debit), "FORBIDDEN_CALLER");
    let saga_hold = svc
        .client
        .batch(&AccountBatch::new(vec![AccountOp::Release(
            ReleaseRequest {
                operation_key: key("res:1:hold"),
            },
        )]))
        .await
        .expect_err("the saga holds nothing");
    assert_eq!(code(&saga_hold), "FORBIDDEN_CALLER");
    let direct = svc
        .client
        .place_hold(&hold("res:1:hold", "member-1", 100, 600))
        .await
        .expect_err("not the saga's route");
    assert_eq!(code(&direct), "FORBIDDEN_CALLER");
    assert_eq!(svc.funds(acct.id).await, (500, 0), "nothing applied");
    assert_eq!(svc.hold_row("res:1:hold").await, None);

    // A release and a hold in one batch: the release frees the money first.
    svc.place("res:a:hold", "member-1", 500).await;
    let replies = svc
        .order
        .batch(&AccountBatch::new(vec![
            AccountOp::Hold(hold("res:b:hold", "member-1", 500, 600)),
            AccountOp::Release(ReleaseRequest {
                operation_key: key("res:a:hold"),
            }),
        ]))
        .await
        .expect("batch")
        .body
        .results;
    assert_eq!(
        replies.iter().map(|r| r.status).collect::<Vec<_>>(),
        [201, 200]
    );
    assert_eq!(svc.funds(acct.id).await, (500, 500));
}

#[tokio::test]
async fn the_database_refuses_holding_more_than_the_balance() {
    let (svc, acct) = Svc::with_member(100).await;
    let err = sqlx::query("UPDATE account_service.accounts SET held = 101 WHERE id = $1")
        .bind(acct.id)
        .execute(&svc.admin)
        .await
        .expect_err("over the balance");
    assert_eq!(constraint(&err), Some("accounts_available_nonnegative"));
    svc.place("res:1:hold", "member-1", 50).await;
    let twice = sqlx::query(
        "UPDATE account_service.holds SET state = 'HELD', settled_at = NULL
         WHERE operation_key = 'res:1:hold'",
    )
    .execute(&svc.admin)
    .await;
    assert!(twice.is_ok(), "HELD to HELD changes nothing");
    sqlx::query(
        "UPDATE account_service.holds SET state = 'RELEASED', settled_at = now()
         WHERE operation_key = 'res:1:hold'",
    )
    .execute(&svc.admin)
    .await
    .expect("a hold may leave HELD");
    let back = sqlx::query(
        "UPDATE account_service.holds SET state = 'HELD', settled_at = NULL
         WHERE operation_key = 'res:1:hold'",
    )
    .execute(&svc.admin)
    .await
    .expect_err("a released hold stays released");
    assert!(back.to_string().contains("is final"), "{back}");
}
