//! Per-member rate limit on pass requests: a burst from one member is refused with 429
//! and `Retry-After` past the burst size, another member is unaffected, and a refused
//! request takes nothing from the quota.

use std::num::NonZeroU32;

use crate::support::{start_gate, Sale};
use paysaga_common::{limits::MemberRate, testkit::buyer_token};

const BURST: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_limit_gets_429_and_other_members_are_unaffected() {
    let sale = Sale::start(10).await;
    let mut config = sale.config();
    // One request a minute after the burst: the refill cannot reopen it during the test.
    config.member_rate = MemberRate {
        per_sec: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(BURST).unwrap(),
    };
    let gate = start_gate(config).await;
    let http = &gate.http;
    let url = format!("{}/v1/passes", gate.url());
    let body = format!(r#"{{"product_id":{}}}"#, sale.product);
    let ask = |member: &str| {
        http.post(&url)
            .bearer_auth(buyer_token(member))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };

    for i in 0..BURST {
        let r = ask("alice").await.expect("answer");
        assert_eq!(r.status(), 201, "request {i} is within the burst");
    }
    let refused = ask("alice").await.expect("answer");
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1);
    let err: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(err["code"], "RATE_LIMITED");
    assert!(err["message"].is_string());

    let r = ask("bob").await.expect("answer");
    assert_eq!(r.status(), 201, "bob has a rate of his own");

    // alice's live pass and bob's: the refusal took no unit.
    let view = gate.quota(sale.product).await;
    assert_eq!((view.quota, view.in_flight), (8, 2));
}
