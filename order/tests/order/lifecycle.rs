//! Products and the life of a reservation end to end over HTTP: create, add units,
//! counts, confirm (idempotent, one order), cancel by buyer and by operator, visibility.

use crate::support::{order_state, pass, refused, unit_states, Harness};
use paysaga_contracts::order::api::{CreateProduct, ReservationState};
use uuid::Uuid;

#[tokio::test]
async fn products_units_and_counts() {
    let h = Harness::start().await;
    let svc = h.operator();
    let created = svc
        .create_product(&CreateProduct {
            name: "  Sneaker  ".into(),
            price: 12_900,
            units: 3,
            reservation_ttl_secs: None,
            eligibility: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(created.status, 201);
    let p = created.body;
    assert_eq!(
        (
            p.name.as_str(),
            p.price,
            p.units_total,
            p.available,
            p.reserved,
            p.sold
        ),
        ("Sneaker", 12_900, 3, 3, 0, 0)
    );

    let grown = svc.add_units(p.id, 2).await.unwrap().body;
    assert_eq!((grown.units_total, grown.available), (5, 5));
    assert_eq!(unit_states(&h.admin, p.id).await, (5, 0, 0));

    let r = h.reserve_as("alice", p.id).await;
    assert_eq!(r.price, 12_900);
    h.service().confirm(r.id).await.unwrap();
    h.try_reserve_as("bob", p.id).await.unwrap();

    let seen = h.buyer("carol").product(p.id).await.unwrap().body;
    assert_eq!(
        (seen.available, seen.reserved, seen.sold, seen.units_total),
        (3, 1, 1, 5)
    );
    assert_eq!(h.gate().availability(p.id).await.unwrap().body.available, 3);
    let list = svc.list_products().await.unwrap().body;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0], seen);

    // Internal endpoints refuse buyers.
    let e = h.buyer("alice").availability(p.id).await.unwrap_err();
    refused(&e, 403, "FORBIDDEN");
    let e = h.buyer("alice").list_products().await.unwrap_err();
    assert_eq!(e.status(), Some(403));
    h.stop().await;
}

#[tokio::test]
async fn confirm_is_idempotent_and_operator_cancel_undoes_the_sale() {
    let (h, p, r) = Harness::with_reservation(1).await;
    let svc = h.service();
    assert_eq!(r.state, ReservationState::Reserved);

    let first = svc.confirm(r.id).await.unwrap().body;
    let again = svc.confirm(r.id).await.unwrap().body;
    assert_eq!(first.state, ReservationState::Confirmed);
    assert_eq!(first, again);
    let order_id = first.order_id.expect("order id on a confirmed reservation");
    let (state, order_unit): (String, i64) =
        sqlx::query_as(r#"SELECT state, unit_id FROM order_service.orders WHERE id = $1"#)
            .bind(order_id)
            .fetch_one(&h.admin)
            .await
            .unwrap();
    assert_eq!((state.as_str(), order_unit), ("CONFIRMED", r.unit_id));
    assert_eq!(unit_states(&h.admin, p.id).await, (0, 0, 1));

    // The buyer cannot undo a paid reservation; an operator can (the saga refunds).
    let e = h.buyer("alice").cancel(r.id).await.unwrap_err();
    refused(&e, 409, "RESERVATION_CONFIRMED");
    let cancelled = svc.cancel(r.id).await.unwrap().body;
    assert_eq!(cancelled.state, ReservationState::Cancelled);
    assert_eq!(cancelled.order_id, Some(order_id));
    assert_eq!(
        svc.cancel(r.id).await.unwrap().body,
        cancelled,
        "cancel is idempotent"
    );
    assert_eq!(order_state(&h.admin, order_id).await, "CANCELLED");
    assert_eq!(unit_states(&h.admin, p.id).await, (1, 0, 0));
    let e = svc.confirm(r.id).await.unwrap_err();
    refused(&e, 409, "RESERVATION_CANCELLED");
    h.stop_consistent().await;
}

#[tokio::test]
async fn buyers_see_and_cancel_only_their_own() {
    let (h, p) = Harness::with_product(2).await;
    let alice = h.funded("alice").await;
    let r = alice
        .reserve(p.id, &pass(p.id, "alice"))
        .await
        .unwrap()
        .body;

    assert_eq!(alice.reservation(r.id).await.unwrap().body, r);
    assert_eq!(h.service().reservation(r.id).await.unwrap().body, r);
    // Someone else's reservation does not exist, as far as they can tell.
    let e = h.buyer("mallory").reservation(r.id).await.unwrap_err();
    refused(&e, 404, "RESERVATION_NOT_FOUND");
    let e = h.buyer("mallory").cancel(r.id).await.unwrap_err();
    assert_eq!(e.code(), Some("RESERVATION_NOT_FOUND"));
    assert_eq!(unit_states(&h.admin, p.id).await, (1, 1, 0));

    let cancelled = alice.cancel(r.id).await.unwrap().body;
    assert_eq!(cancelled.state, ReservationState::Cancelled);
    assert_eq!(alice.cancel(r.id).await.unwrap().body, cancelled);
    assert_eq!(unit_states(&h.admin, p.id).await, (2, 0, 0));
    let e = h.service().confirm(r.id).await.unwrap_err();
    assert_eq!(e.code(), Some("RESERVATION_CANCELLED"));

    let unknown = Uuid::new_v4();
    for e in [
        h.service().confirm(unknown).await.unwrap_err(),
        h.service().cancel(unknown).await.unwrap_err(),
        h.service().reservation(unknown).await.unwrap_err(),
    ] {
        refused(&e, 404, "RESERVATION_NOT_FOUND");
    }
    h.stop_consistent().await;
}

/// Outside development mode what is on sale changes only through the orchestrator (which
/// audits each change): the operator tools' credential is refused and nothing is made.
#[tokio::test]
async fn outside_development_only_the_orchestrator_changes_stock() {
    let h = Harness::start_with(|c| c.tools_change_stock = false).await;
    let product = |name: &str| CreateProduct {
        name: name.into(),
        price: 1_000,
        units: 2,
        reservation_ttl_secs: None,
        eligibility: Vec::new(),
    };
    let by_tool = h.operator().create_product(&product("by tool")).await;
    refused(&by_tool.expect_err("refused"), 403, "FORBIDDEN_CALLER");
    let made = h
        .orchestrator()
        .create_product(&product("by orchestrator"))
        .await
        .expect("the orchestrator makes it")
        .body;
    let more = h.operator().add_units(made.id, 3).await;
    refused(&more.expect_err("refused"), 403, "FORBIDDEN_CALLER");
    let grown = h.orchestrator().add_units(made.id, 3).await.unwrap().body;
    assert_eq!(grown.units_total, 5);
    let rows: Vec<(String, i64)> = sqlx::query_as(
        r#"SELECT p.name, (SELECT COUNT(*) FROM order_service.product_stock s WHERE s.product_id = p.id)
           FROM order_service.products p ORDER BY p.id"#,
    )
    .fetch_all(&h.admin)
    .await
    .unwrap();
    assert_eq!(rows, vec![("by orchestrator".to_owned(), 5)]);
    // Reading stays open to the tools.
    assert_eq!(h.operator().list_products().await.unwrap().body.len(), 1);
}

/// Reservations and orders name their product, unit and reservation without foreign
/// keys (their statements take them from rows they hold), so what they name must stay:
/// logged in as `order_app`, nothing can delete or truncate a product, a unit or a
/// reservation, and the order still finds all three afterwards.
#[tokio::test]
async fn the_service_role_cannot_delete_what_reservations_and_orders_name() {
    let (h, pool, p, rs) = Harness::all_reserved(2, "named").await;
    h.service().confirm(rs[0].id).await.unwrap();
    let named = r#"
        SELECT COUNT(*) FROM order_service.orders o
        JOIN order_service.reservations r ON r.id = o.reservation_id
        JOIN order_service.products p ON p.id = o.product_id
        JOIN order_service.product_stock s ON s.id = o.unit_id"#;
    assert_eq!(h.count(named).await, 1);
    let refused = [
        "DELETE FROM order_service.products".to_owned(),
        format!(
            "DELETE FROM order_service.product_stock WHERE product_id = {}",
            p.id
        ),
        format!(
            "DELETE FROM order_service.reservations WHERE id = '{}'",
            rs[1].id
        ),
        "TRUNCATE order_service.products CASCADE".to_owned(),
        "TRUNCATE order_service.product_stock CASCADE".to_owned(),
        "TRUNCATE order_service.reservations CASCADE".to_owned(),
    ];
    paysaga_common::testkit::refused_all(&pool, &refused, "42501").await;
    assert_eq!(h.count(named).await, 1);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM order_service.reservations")
            .await,
        2
    );
    h.stop().await;
}
