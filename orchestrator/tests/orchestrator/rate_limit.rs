//! Per-member rate limit on the buyer's payment endpoints: past the burst a member gets
//! 429 with `Retry-After` on both POST and GET, a refused POST writes nothing (no payment,
//! no idempotency record), another member pays as usual, and operators are not limited.

use std::num::NonZeroU32;

use crate::support::{pay_request, Stack};
use orchestrator::Hooks;
use paysaga_common::{limits::MemberRate, testkit::buyer_token};
use uuid::Uuid;

const BURST: u32 = 3;

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("whole seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_past_the_limit_gets_429_and_writes_nothing() {
    let mut s = Stack::start().await;
    let [(alice_acct, alice_res), (bob_acct, bob_res)] =
        s.two_buyers_with_reservations(["alice", "bob"], 2).await;
    let mut config = s.config();
    // One request a minute after the burst: the refill cannot reopen it during the test.
    config.member_rate = MemberRate {
        per_sec: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(BURST).unwrap(),
    };
    let o = s.orchestrator(config, Hooks::default()).await;
    let http = reqwest::Client::new();

    // alice spends her burst polling a payment she does not have.
    let poll = || {
        http.get(format!("{}/v1/payments/{}", o.url, Uuid::nil()))
            .bearer_auth(buyer_token("alice"))
            .send()
    };
    for _ in 0..BURST {
        assert_eq!(poll().await.expect("answer").status(), 404);
    }
    let refused = poll().await.expect("answer");
    assert_eq!(refused.status(), 429);
    assert!(retry_after(&refused) >= 1);

    let refused = http
        .post(format!("{}/v1/payments", o.url))
        .bearer_auth(buyer_token("alice"))
        .header("idempotency-key", "alice-1")
        .json(&pay_request(alice_res, alice_acct))
        .send()
        .await
        .expect("answer");
    assert_eq!(refused.status(), 429);
    assert!(retry_after(&refused) >= 1);
    let err: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(err["code"], "RATE_LIMITED");

    // Nothing of the refused payment in PostgreSQL.
    let payments: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM payment_service.payments WHERE reservation_id = $1",
    )
    .bind(alice_res)
    .fetch_one(&s.admin)
    .await
    .expect("count payments");
    assert_eq!(payments, 0, "a refused request created a payment");
    let keys = s.count_of(r#"payment_service.idempotency_keys"#).await;
    assert_eq!(keys, 0, "a refused request claimed its idempotency key");

    // bob is unaffected.
    let paid = o
        .pay("bob", "bob-1", bob_res, bob_acct)
        .await
        .expect("bob pays");
    assert!(matches!(paid.status, 201 | 202), "status {}", paid.status);
    assert_eq!(s.settled(paid.payment.id).await, "COMPLETED");

    // Operators read alice's side of things freely.
    for _ in 0..=BURST {
        o.operator()
            .payment(paid.payment.id)
            .await
            .expect("operators are not members");
    }
    s.check_money().await;
}
