//! The client address behind trusted proxies: a made-up or broken `X-Forwarded-For` is
//! never a 500, and never names a client the proxies did not.

use crate::support::{answer, email, subject, trusting, Stack, PASSWORD};
use reqwest::header::HeaderValue;
use serde_json::json;

/// Header values a client or a broken proxy could send.
fn broken_hops() -> Vec<HeaderValue> {
    let mut values: Vec<HeaderValue> = [
        "",
        " ",
        ",",
        ",,,",
        "unknown",
        "not-an-address, 10.0.0.1",
        "198.51.100.7,",
        "198.51.100.7:notaport",
        "[2001:db8::1]:4711",
        "2001:db8::1",
        "::ffff:198.51.100.9",
        "999.1.1.1",
        "198.51.100.7/24",
        "\"198.51.100.7\"",
        "for=198.51.100.7;proto=https",
    ]
    .into_iter()
    .map(HeaderValue::from_static)
    .collect();
    values.push(HeaderValue::from_str(&"10.0.0.1,".repeat(2_000)).unwrap());
    values.push(HeaderValue::from_str(&"x".repeat(8_000)).unwrap());
    // Bytes that are no text (obs-text): the header cannot be read as a string.
    values.push(HeaderValue::from_bytes(b"198.51.100.7, \xff\xfe").unwrap());
    values
}

#[tokio::test]
async fn broken_forwarded_for_headers_are_never_a_500() {
    for trusted in [false, true] {
        let s = Stack::start_with(true, |c| {
            // Every wrong password below is answered 401, not held back.
            c.throttle.per_pair = 10_000;
            c.throttle.per_address = 10_000;
            c.throttle.per_email = 10_000;
            if trusted {
                trusting(c, "10.0.0.0/8");
            }
        })
        .await;
        let known = s.signed_up("known").await;
        for value in broken_hops() {
            for (path, body) in [
                (
                    "/v1/sessions",
                    json!({"email": known, "password": PASSWORD}),
                ),
                (
                    "/v1/sessions",
                    json!({"email": known, "password": "a-wrong-one-123"}),
                ),
                (
                    "/v1/members",
                    json!({"email": email("hop"), "password": PASSWORD}),
                ),
            ] {
                let r = s
                    .http
                    .post(s.url(path))
                    .header("x-forwarded-for", value.clone())
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let (status, _, body) = answer(r).await;
                assert!(
                    [200, 201, 401].contains(&status),
                    "{value:?} on {path} (trusted: {trusted}): {status} {body}"
                );
            }
        }
        // Two header lines are read as one list, in order.
        let r = s
            .http
            .post(s.url("/v1/sessions"))
            .header("x-forwarded-for", "6.6.6.6")
            .header("x-forwarded-for", "198.51.100.40, 10.0.0.1")
            .json(&json!({"email": known, "password": "a-wrong-one-123"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401);
        let counted_for = |ip: &'static str| {
            let s = &s;
            async move { s.failures("ADDRESS", &subject(ip)).await }
        };
        if trusted {
            assert_eq!(counted_for("198.51.100.40").await, 1);
            assert_eq!(counted_for("6.6.6.6").await, 0);
        } else {
            // Every attempt came from 127.0.0.1 and was counted there alone.
            assert_eq!(
                s.count(
                    "SELECT COUNT(*) FROM member_service.sign_in_failures WHERE scope = 'ADDRESS'"
                )
                .await,
                1
            );
            assert_eq!(
                counted_for("127.0.0.1").await,
                broken_hops().len() as i64 + 1
            );
        }
    }
}
