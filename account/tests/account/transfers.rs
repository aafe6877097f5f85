//! Transfers between members: both sides written together and summing to zero, held
//! money out of reach, one effect per key, opposite transfers at once, and bad input
//! refused with a code and nothing written; every claim read back from PostgreSQL.

use std::num::NonZeroU32;

use futures::{future::join_all, StreamExt};
use paysaga_common::testkit::service_token;
use paysaga_common::{auth::Audience, limits::MemberRate, testkit::buyer_token};
use paysaga_contracts::account::api::{Recipient, TransactionKind};

use crate::support::{refusals, to_member, Refusal, Svc};

/// A service whose members may send as fast as a test asks.
async fn unthrottled() -> Svc {
    Svc::start_with(|c| {
        let fast = NonZeroU32::new(100_000).expect("non-zero");
        c.member_rate = MemberRate {
            per_sec: fast,
            burst: fast,
        };
    })
    .await
}

/// The ledger's rows of one transfer: (kind, account, other account, amount, signed).
async fn rows_of(svc: &Svc, transfer: uuid::Uuid) -> Vec<(String, i64, i64, i64, i64)> {
    sqlx::query_as(
        r#"SELECT t.kind, t.account_id, t.counter_account_id, t.amount, e.amount
           FROM account_service.transactions t
           JOIN account_service.entries e ON e.id = t.id
           WHERE t.transfer_id = $1
           ORDER BY t.kind DESC"#,
    )
    .bind(transfer)
    .fetch_all(&svc.admin)
    .await
    .expect("transfer rows")
}

#[tokio::test]
async fn a_transfer_moves_money_in_two_rows_summing_to_zero() {
    let (svc, a, b) = Svc::with_two_members(1_000, 100).await;
    let total = svc.total_money().await;

    let t = svc
        .transferred("member-1", "t-1", to_member("member-2"), 300)
        .await;
    assert_eq!(
        (t.from_account_id, t.to_account_id, t.amount),
        (a.id, b.id, 300)
    );
    assert_eq!(
        rows_of(&svc, t.id).await,
        vec![
            ("TRANSFER_OUT".into(), a.id, b.id, 300, -300),
            ("TRANSFER_IN".into(), b.id, a.id, 300, 300),
        ],
        "one row each side, summing to zero"
    );
    assert_eq!(
        (svc.balance(a.id).await, svc.balance(b.id).await),
        (700, 400)
    );

    // By account id, the other way; keys are the sender's own: member-2's t-1 is new.
    svc.transferred("member-2", "t-1", Recipient::AccountId(a.id), 50)
        .await;
    assert_eq!(
        (svc.balance(a.id).await, svc.balance(b.id).await),
        (750, 350)
    );

    assert_eq!(svc.transfer_rows().await, (2, 0));
    assert_eq!(
        svc.unexplained_by_entries().await,
        0,
        "balances are their rows' sums"
    );
    assert_eq!(svc.total_money().await, total, "money only moved");
    // The sender's account lists it; the keyed row reads as a wire transaction.
    let view = svc.client.get_account(a.id).await.expect("view").body;
    assert_eq!(view.account.available, 750);
    assert_eq!(
        view.recent_transactions
            .iter()
            .filter(|t| t.kind == TransactionKind::TransferOut)
            .count(),
        1
    );
}

#[tokio::test]
async fn held_money_cannot_be_transferred_and_a_refusal_writes_nothing() {
    let (svc, a, b) = Svc::with_two_members(1_000, 0).await;
    svc.place("res:1:hold", "member-1", 800).await;

    let refused = svc
        .transfer("member-1", "t-1", to_member("member-2"), 300)
        .await
        .expect_err("only 200 is available");
    assert_eq!(refused.code(), Some("INSUFFICIENT_FUNDS"), "{refused:?}");
    assert_eq!(svc.transfer_rows().await, (0, 0), "nothing written");
    assert_eq!(svc.funds(a.id).await, (1_000, 800));
    assert_eq!(svc.balance(b.id).await, 0);

    // Exactly the available balance goes; then nothing is left to send.
    svc.transferred("member-1", "t-2", to_member("member-2"), 200)
        .await;
    assert_eq!(svc.funds(a.id).await, (800, 800));
    let none = svc
        .transfer("member-1", "t-3", to_member("member-2"), 1)
        .await
        .expect_err("nothing available");
    assert_eq!(none.code(), Some("INSUFFICIENT_FUNDS"));

    // A refusal was not recorded: once the hold is released, the same key is judged afresh.
    svc.release("res:1:hold").await;
    svc.transferred("member-1", "t-1", to_member("member-2"), 300)
        .await;
    assert_eq!(svc.funds(a.id).await, (500, 0));
    assert_eq!(svc.balance(b.id).await, 500);
    assert_eq!(svc.transfer_rows().await, (2, 0));
    assert_eq!(svc.held_mismatches().await, 0);
    assert_eq!(svc.unexplained_by_entries().await, 0);
}

#[tokio::test]
async fn one_key_moves_money_once_however_often_and_however_concurrently_it_is_sent() {
    let svc = unthrottled().await;
    let a = svc.open("member-1", 1_000).await;
    let b = svc.open("member-2", 0).await;

    let first = svc
        .transfer("member-1", "once", to_member("member-2"), 100)
        .await
        .expect("applied");
    let again = svc
        .transfer("member-1", "once", to_member("member-2"), 100)
        .await
        .expect("replayed");
    assert_eq!((first.status, again.status), (201, 200));
    assert_eq!(first.body, again.body, "the stored answer");
    // The same recipient named by account id is the same request.
    let by_id = svc
        .transfer("member-1", "once", Recipient::AccountId(b.id), 100)
        .await
        .expect("replayed");
    assert_eq!((by_id.status, by_id.body), (200, first.body.clone()));
    for (to, minor) in [(to_member("member-2"), 101), (to_member("member-3"), 100)] {
        let reused = svc
            .transfer("member-1", "once", to, minor)
            .await
            .expect_err("another request under the key");
        assert_eq!(
            (reused.status(), reused.code()),
            (Some(409), Some("OPERATION_KEY_REUSED"))
        );
    }

    // Eight sends of one new key at once: one effect, every answer the same transfer.
    let answers =
        join_all((0..8).map(|_| svc.transfer("member-1", "burst", to_member("member-2"), 10)))
            .await;
    let answers: Vec<_> = answers.into_iter().map(|a| a.expect("answered")).collect();
    assert_eq!(answers.iter().filter(|a| a.status == 201).count(), 1);
    assert!(answers.iter().all(|a| a.body == answers[0].body));

    assert_eq!(svc.transfer_rows().await, (2, 0));
    assert_eq!(
        (svc.balance(a.id).await, svc.balance(b.id).await),
        (890, 110)
    );
    assert_eq!(svc.unexplained_by_entries().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_transfers_at_once_do_not_deadlock_and_conserve_money() {
    const EACH_WAY: usize = 100;
    // In flight at once, half each way: enough to meet on the two rows every time, few
    // enough that no request waits past the pool's acquire timeout for a connection.
    const AT_ONCE: usize = 16;
    let svc = unthrottled().await;
    let a = svc.open("member-1", 100_000).await;
    let b = svc.open("member-2", 100_000).await;
    let total = svc.total_money().await;
    let deadlocks = |svc: &Svc| {
        let admin = svc.admin.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
            )
            .fetch_one(&admin)
            .await
            .expect("deadlocks")
        }
    };
    let deadlocks_before = deadlocks(&svc).await;

    // Each way the same amounts, so both balances end where they began.
    let amount = |i: usize| 1 + (i % 7) as i64;
    let keys: Vec<(String, String)> = (0..EACH_WAY)
        .map(|i| (format!("ab-{i}"), format!("ba-{i}")))
        .collect();
    let sends = keys.iter().enumerate().flat_map(|(i, (ab, ba))| {
        [
            svc.transfer("member-1", ab, to_member("member-2"), amount(i)),
            svc.transfer("member-2", ba, Recipient::AccountId(a.id), amount(i)),
        ]
    });
    let answers: Vec<_> = futures::stream::iter(sends)
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    for (i, answer) in answers.iter().enumerate() {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("send {i}: {e:?}"));
        assert_eq!(answer.status, 201, "send {i}");
    }

    assert_eq!(svc.balance(a.id).await, 100_000);
    assert_eq!(svc.balance(b.id).await, 100_000);
    assert_eq!(svc.total_money().await, total);
    assert_eq!(svc.transfer_rows().await, (2 * EACH_WAY as i64, 0));
    assert_eq!(svc.unexplained_by_entries().await, 0);
    // Statistics reach the view once the backends have been idle a moment.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        deadlocks(&svc).await,
        deadlocks_before,
        "both sides are locked in account order: no deadlock to break"
    );
}

#[tokio::test]
async fn bad_transfers_are_refused_with_codes_and_write_nothing() {
    let (svc, a, _b) = Svc::with_two_members(1_000, 100).await;
    let merchant = svc.merchant_id().await;
    let rows_before = svc.count_where("TRUE").await;
    let buyer = buyer_token("member-1");

    let send = |token: Option<&str>, key: Option<&str>, body: String| {
        let mut req = svc
            .http
            .post(svc.url("/v1/transfers"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        req
    };
    let member = |body: &str| send(Some(&buyer), Some("k"), body.to_owned());
    let long_key = "k".repeat(49);
    let ghost = buyer_token("ghost");
    let service = service_token("orchestrator", Audience::Account);
    let own = a.id;
    let to_m2 = r#"{"to": {"member_id": "member-2"}, "amount": 5}"#.to_owned();
    #[rustfmt::skip]
    let cases: Vec<Refusal> = vec![
        (send(Some(&buyer), None, to_m2.clone()), 400, "INVALID_OPERATION_KEY"),
        (send(Some(&buyer), Some("a b"), to_m2.clone()), 400, "INVALID_OPERATION_KEY"),
        (send(Some(&buyer), Some(&long_key), to_m2.clone()), 400, "INVALID_OPERATION_KEY"),
        (send(Some(&buyer), Some("k"), "{not json".into()), 400, "MALFORMED_JSON"),
        (member(r#"{"to": {"member_id": "member-2"}, "amount": 0}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member_id": "member-2"}, "amount": -5}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member_id": "member-2"}, "amount": 1.5}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member_id": "member-2", "account_id": 1}, "amount": 5}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member": "member-2"}, "amount": 5}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member_id": "member-2"}, "amount": 5, "from": 1}"#), 422, "INVALID_BODY"),
        (member(r#"{"amount": 5}"#), 422, "INVALID_BODY"),
        (member(r#"{"to": {"member_id": "nobody"}, "amount": 5}"#), 404, "ACCOUNT_NOT_FOUND"),
        (member(r#"{"to": {"account_id": 424242}, "amount": 5}"#), 404, "ACCOUNT_NOT_FOUND"),
        (member(&format!(r#"{{"to": {{"account_id": {merchant}}}, "amount": 5}}"#)), 404, "ACCOUNT_NOT_FOUND"),
        (member(r#"{"to": {"member_id": "member-1"}, "amount": 5}"#), 422, "TRANSFER_TO_SELF"),
        (member(&format!(r#"{{"to": {{"account_id": {own}}}, "amount": 5}}"#)), 422, "TRANSFER_TO_SELF"),
        (member(r#"{"to": {"member_id": "member-2"}, "amount": 1001}"#), 422, "INSUFFICIENT_FUNDS"),
        (send(Some(&ghost), Some("k"), to_m2.clone()), 404, "ACCOUNT_NOT_FOUND"),
        (send(Some(&service), Some("k"), to_m2.clone()), 403, "FORBIDDEN"),
        (send(None, Some("k"), to_m2.clone()), 401, "UNAUTHENTICATED"),
    ];
    refusals(cases).await;
    assert_eq!(
        svc.count_where("TRUE").await,
        rows_before,
        "nothing written"
    );
    assert_eq!(svc.transfer_rows().await, (0, 0));
    assert_eq!(svc.balance(a.id).await, 1_000);
    // The key of every refusal above is still free.
    svc.transferred("member-1", "k", to_member("member-2"), 5)
        .await;
}
