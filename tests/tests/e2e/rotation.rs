//! Rotating the member service's signing key across the running system: the member
//! service is reconfigured to sign with a new key while still publishing the old one;
//! no other service restarts. Tokens signed before keep working everywhere, tokens
//! signed after work everywhere at once, a token naming a key nobody published works
//! nowhere, and the keys held keep verifying while the member service is down. Checked by buying with both tokens and reading PostgreSQL.

use std::time::Duration;

use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use paysaga_common::{
    auth::{Minter, BUYER_AUDIENCE},
    jwks::kid_of,
    keys::parse_signing_key,
};
use paysaga_e2e::{
    invariants, wiring::fresh_signing_key, Admin, Driver, Endpoints, Outcome, ServiceKind, Stack,
    StackOptions,
};

const PRICE: i64 = 2_000;

/// The `kid` in a token's header.
fn kid(token: &str) -> String {
    let header = token.split('.').next().expect("a JWT");
    let json: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).expect("base64url")).expect("json");
    json["kid"].as_str().expect("a kid").to_owned()
}

fn kid_of_seed(seed: &str) -> String {
    kid_of(&parse_signing_key(seed).expect("a key").verifying_key())
}

/// What each service answers a buyer presenting `token`: member's own view, the buyer's
/// account at the account service, and the buyer's payment list at the orchestrator.
async fn statuses(
    http: &reqwest::Client,
    ep: &Endpoints,
    token: &str,
    account_id: i64,
) -> Vec<(&'static str, u16)> {
    let mut out = Vec::new();
    for (name, url) in [
        ("member", format!("{}/v1/members/me", ep.member)),
        (
            "account",
            format!("{}/v1/accounts/{account_id}", ep.account),
        ),
    ] {
        let status = http
            .get(&url)
            .bearer_auth(token)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        out.push((name, status));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signing_key_rotates_without_restarting_the_services_that_verify_it() -> anyhow::Result<()>
{
    let mut stack = Stack::start(StackOptions::new("rotation")).await?;
    let ep = Endpoints::from_wiring(stack.wiring());
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let admin = Admin::new(ep.clone(), http.clone());
    let product = admin.create_product("rotation", PRICE, 3).await?;
    admin
        .wait_for_quota(product.id, 3, Duration::from_secs(30))
        .await?;
    let pids_before = verifier_pids(&stack);

    let old_key = stack.wiring().member_signing_keys.clone();
    let before = admin.open_buyer("before-rotation", PRICE * 2).await?;
    assert_eq!(kid(&before.token), kid_of_seed(&old_key));

    // The rotation: a configuration change of the member service alone.
    let new_key = fresh_signing_key();
    stack
        .reconfigure(
            ServiceKind::Member,
            &[("MEMBER_SIGNING_KEYS", format!("{new_key},{old_key}"))],
        )
        .await?;
    let after = admin.open_buyer("after-rotation", PRICE * 2).await?;
    assert_eq!(
        kid(&after.token),
        kid_of_seed(&new_key),
        "the new key signs"
    );

    let pids_after = verifier_pids(&stack);
    assert_eq!(pids_before, pids_after, "no verifying service restarted");

    // Both tokens everywhere: the read endpoints, then a whole purchase each (gate pass,
    // order reservation, orchestrator payment: every hop verifies the buyer's token).
    for buyer in [&before, &after] {
        for (service, status) in statuses(&http, &ep, &buyer.token, buyer.account_id).await {
            assert_eq!(status, 200, "{service} refused the {} token", buyer.member);
        }
    }
    let driver = Driver::new(ep.clone(), Duration::from_secs(10));
    let attempts = driver
        .run_drop(&[after.clone(), before.clone()], product.id, 2, |_| {})
        .await;
    for a in &attempts {
        assert_eq!(a.outcome, Outcome::Completed, "{a:?}");
    }

    // A token naming a key that was never published is refused by every service, and
    // a token without a key id too (the development key's kind of token).
    let stranger = parse_signing_key(&fresh_signing_key())?;
    let forged =
        Minter::with_kid(&stranger, BUYER_AUDIENCE).mint(&after.member, Duration::from_secs(60));
    let unnamed = Minter::new(&parse_signing_key(&new_key)?, BUYER_AUDIENCE)
        .mint(&after.member, Duration::from_secs(60));
    for token in [&forged, &unnamed] {
        for (service, status) in statuses(&http, &ep, token, after.account_id).await {
            assert_eq!(status, 401, "{service} accepted a token it cannot verify");
        }
        let gate = http
            .post(format!("{}/v1/passes", ep.gate))
            .bearer_auth(token)
            .json(&serde_json::json!({"product_id": product.id}))
            .send()
            .await?;
        assert_eq!(
            gate.status(),
            401,
            "the gate accepted a token it cannot verify"
        );
    }

    // The member service goes down: the keys every other service holds keep verifying.
    stack
        .stop(ServiceKind::Member, paysaga_e2e::Stop::Kill)
        .await?;
    for buyer in [&before, &after] {
        let status = http
            .get(format!("{}/v1/accounts/{}", ep.account, buyer.account_id))
            .bearer_auth(&buyer.token)
            .send()
            .await?
            .status();
        assert_eq!(status, 200, "verifying without the member service");
        let pass = http
            .post(format!("{}/v1/passes", ep.gate))
            .bearer_auth(&buyer.token)
            .json(&serde_json::json!({"product_id": product.id}))
            .send()
            .await?
            .status();
        assert_ne!(pass.as_u16(), 401, "the gate still knows the buyer");
    }

    // What matters, from PostgreSQL: both buyers paid once, and every invariant holds.
    let pool = stack.admin_pool().await;
    let paid: Vec<String> = sqlx::query_scalar(
        r#"SELECT member_id FROM payment_service.payments WHERE state = 'COMPLETED' ORDER BY member_id"#,
    )
    .fetch_all(&pool)
    .await?;
    let mut expected = vec![before.member.clone(), after.member.clone()];
    expected.sort();
    assert_eq!(paid, expected);
    let sold: i64 = sqlx::query_scalar(
        r#"SELECT COUNT(*) FROM order_service.product_stock WHERE product_id = $1 AND state = 'SOLD'"#,
    )
    .bind(product.id)
    .fetch_one(&pool)
    .await?;
    assert_eq!(sold, 2);
    let report = invariants::check(&pool).await?;
    assert!(report.violations().is_empty(), "{:?}", report.violations());
    pool.close().await;
    Ok(())
}

/// The process ids of the services that verify tokens but do not sign them.
fn verifier_pids(stack: &Stack) -> Vec<Option<u32>> {
    [
        ServiceKind::Account,
        ServiceKind::Order,
        ServiceKind::Gate,
        ServiceKind::Orchestrator,
    ]
    .iter()
    .map(|k| stack.pid(*k))
    .collect()
}
