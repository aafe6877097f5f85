//! Pass checks: single use, bound to its member and product, signed by the gate's key,
//! unexpired; each refusal with its own code and nothing written.

use crate::support::{claims, pass, refused, signer, unit_states, Harness};
use ed25519_dalek::SigningKey;
use paysaga_common::pass::PassSigner;

async fn reservations_count(h: &Harness) -> i64 {
    h.count(r#"SELECT COUNT(*) FROM order_service.reservations"#)
        .await
}

/// The tables hold `reservations` rows and the product's units are `units`
/// (available, reserved, sold); then the service stops.
async fn ends_with(h: Harness, product_id: i64, reservations: i64, units: (i64, i64, i64)) {
    assert_eq!(reservations_count(&h).await, reservations);
    assert_eq!(unit_states(&h.admin, product_id).await, units);
    h.stop().await;
}

#[tokio::test]
async fn replay_by_its_member_returns_the_same_reservation_and_others_are_refused() {
    let (h, product) = Harness::with_product(5).await;
    let token = pass(product.id, "alice");
    let alice = h.funded("alice").await;

    let first = alice.reserve(product.id, &token).await.unwrap();
    assert_eq!(first.status, 201);
    let again = alice.reserve(product.id, &token).await.unwrap();
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);

    let stolen = h
        .reserve_with("mallory", product.id, &token)
        .await
        .unwrap_err();
    refused(&stolen, 409, "PASS_ALREADY_USED");

    ends_with(h, product.id, 1, (4, 1, 0)).await;
}

#[tokio::test]
async fn replay_after_sold_out_or_after_pass_expiry_still_returns_the_reservation() {
    let (h, product) = Harness::with_product(1).await;
    let mut c = claims(product.id, "alice");
    c.exp = chrono::Utc::now().timestamp() + 2;
    let token = signer().sign(&c);
    let alice = h.funded("alice").await;
    let first = alice.reserve(product.id, &token).await.unwrap();
    // Sold out now, and the replay is not SOLD_OUT: it is the buyer's own reservation.
    let again = alice.reserve(product.id, &token).await.unwrap();
    assert_eq!((again.status, again.body.id), (200, first.body.id));

    // Once the pass has expired, a retry of the request that used it is still a
    // replay: the buyer gets the reservation back, not PASS_EXPIRED.
    while chrono::Utc::now().timestamp() < c.exp {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let late = alice.reserve(product.id, &token).await.unwrap();
    assert_eq!((late.status, late.body.id), (200, first.body.id));
    // ...while an expired pass that never reserved is refused.
    let mut unused = claims(product.id, "bob");
    unused.exp = chrono::Utc::now().timestamp() - 10;
    let refused = h
        .reserve_with("bob", product.id, &signer().sign(&unused))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("PASS_EXPIRED"));
    ends_with(h, product.id, 1, (0, 1, 0)).await;
}

#[tokio::test]
async fn bad_passes_are_refused_with_distinct_codes_and_write_nothing() {
    let (h, product) = Harness::with_product(5).await;
    let other = h.product(5).await;
    let alice = h.funded("alice").await;

    let expect = |r: Result<_, paysaga_common::client::CallError>, status: u16, code: &str| {
        let e = r
            .err()
            .unwrap_or_else(|| panic!("expected {code}, got success"));
        refused(&e, status, code);
    };

    // Tampered: claims swapped under the original signature.
    let good = pass(product.id, "alice");
    let (_, sig) = good.rsplit_once('.').unwrap();
    let forged_claims = pass(product.id, "alice");
    let (forged_body, _) = forged_claims.rsplit_once('.').unwrap();
    expect(
        alice
            .reserve(product.id, &format!("{forged_body}.{sig}"))
            .await,
        403,
        "PASS_INVALID_SIGNATURE",
    );

    // Signed by a key that is not the gate's.
    let wrong_key = PassSigner::new(SigningKey::from_bytes(&[7u8; 32]));
    expect(
        alice
            .reserve(product.id, &wrong_key.sign(&claims(product.id, "alice")))
            .await,
        403,
        "PASS_INVALID_SIGNATURE",
    );

    // Not a pass at all.
    expect(
        alice.reserve(product.id, "v1.not-a-pass").await,
        403,
        "PASS_MALFORMED",
    );
    expect(alice.reserve(product.id, "").await, 403, "PASS_MALFORMED");
    expect(
        alice.reserve(product.id, &"x".repeat(5000)).await,
        403,
        "PASS_MALFORMED",
    );

    // Expired.
    let mut c = claims(product.id, "alice");
    c.exp = chrono::Utc::now().timestamp() - 1;
    expect(
        alice.reserve(product.id, &signer().sign(&c)).await,
        403,
        "PASS_EXPIRED",
    );

    // For another product.
    expect(
        alice.reserve(product.id, &pass(other.id, "alice")).await,
        403,
        "PASS_WRONG_PRODUCT",
    );

    // For another member (unused).
    expect(
        alice.reserve(product.id, &pass(product.id, "bob")).await,
        403,
        "PASS_WRONG_MEMBER",
    );

    // A valid pass for a product that does not exist.
    expect(
        alice.reserve(999_999, &pass(999_999, "alice")).await,
        404,
        "PRODUCT_NOT_FOUND",
    );

    // A service credential cannot reserve as a member.
    expect(
        h.service()
            .reserve(product.id, &pass(product.id, "alice"))
            .await,
        403,
        "FORBIDDEN",
    );

    ends_with(h, product.id, 0, (5, 0, 0)).await;
}

#[tokio::test]
async fn the_gate_can_ask_which_passes_made_a_reservation() {
    let (h, product) = Harness::with_product(1).await;
    let used = claims(product.id, "alice");
    let unused = claims(product.id, "bob");
    h.funded("alice")
        .await
        .reserve(product.id, &signer().sign(&used))
        .await
        .unwrap();
    // Bob's pass meets a sold-out product: not used, whatever he tried.
    let e = h
        .reserve_with("bob", product.id, &signer().sign(&unused))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("SOLD_OUT"));

    let answer = h
        .gate()
        .used_passes(&[used.pid, unused.pid, uuid::Uuid::new_v4()])
        .await
        .unwrap()
        .body;
    assert_eq!(answer.used, vec![used.pid]);
    assert!(h
        .gate()
        .used_passes(&[])
        .await
        .unwrap()
        .body
        .used
        .is_empty());

    let too_many: Vec<uuid::Uuid> = (0..1_001).map(|_| uuid::Uuid::new_v4()).collect();
    let e = h.gate().used_passes(&too_many).await.unwrap_err();
    refused(&e, 422, "TOO_MANY_PASS_IDS");
    let e = h.buyer("alice").used_passes(&[used.pid]).await.unwrap_err();
    assert_eq!(e.status(), Some(403));
    h.stop().await;
}
