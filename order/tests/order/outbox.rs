//! The outbox: an expiry writes its `reservation.expired` event in its own transaction,
//! the orchestrator reads unrelayed events oldest first and acknowledges them.

use crate::support::{refused, Harness};
use paysaga_contracts::order::api::{events, AckEvents, ReservationExpired};

#[tokio::test]
async fn expiries_write_events_served_until_acknowledged() {
    let (h, pool, product, rs) = Harness::all_reserved(3, "outbox").await;
    // A cancel and a confirm write no event; the two expiries (sweep, touch) do.
    h.buyer("outbox-2").cancel(rs[2].id).await.unwrap();
    h.make_due(rs[0].id).await;
    h.make_due(rs[1].id).await;
    assert_eq!(order::sweep::sweep_batch(&pool, 1).await.unwrap(), 1);
    let late = h.service().confirm(rs[1].id).await.unwrap_err();
    assert_eq!(late.code(), Some("RESERVATION_EXPIRED"));

    let orch = h.service();
    let page = orch.outbox(100).await.unwrap().body;
    assert_eq!(page.events.len(), 2, "{page:?}");
    for (e, r) in page.events.iter().zip([&rs[0], &rs[1]]) {
        assert_eq!(e.kind, events::RESERVATION_EXPIRED);
        assert_eq!(e.subject, r.id.to_string());
        assert_eq!(e.id.get_version_num(), 7);
        let data: ReservationExpired = serde_json::from_value(e.data.clone()).unwrap();
        assert_eq!(data.reservation_id, r.id.to_string());
        assert_eq!(data.product_id, product.id.to_string());
        assert_eq!(data.member_id, r.member_id.as_str());
        assert_eq!(data.unit_id, r.unit_id.to_string());
    }
    // The payload's time is the reservation's own.
    let updated: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar(r#"SELECT updated_at FROM order_service.reservations WHERE id = $1"#)
            .bind(rs[0].id)
            .fetch_one(&h.admin)
            .await
            .unwrap();
    let data: ReservationExpired = serde_json::from_value(page.events[0].data.clone()).unwrap();
    assert_eq!(data.expired_at, updated);

    // A page of one, then the ack: acknowledged events are not served again, a repeat
    // and unknown ids are harmless.
    let first = orch.outbox(1).await.unwrap().body.events;
    assert_eq!(first, page.events[..1]);
    let ack = AckEvents {
        ids: vec![first[0].id, uuid::Uuid::now_v7()],
    };
    assert_eq!(orch.ack_outbox(&ack).await.unwrap().status, 204);
    assert_eq!(orch.ack_outbox(&ack).await.unwrap().status, 204);
    let rest = orch.outbox(100).await.unwrap().body.events;
    assert_eq!(rest, page.events[1..]);
    let relayed = h
        .count(r#"SELECT COUNT(*) FROM order_service.outbox_events WHERE relayed_at IS NOT NULL"#)
        .await;
    assert_eq!(relayed, 1);

    // The lag gauge's number is the age of the oldest event not yet relayed, 0 once
    // every one is.
    sqlx::query(
        r#"UPDATE order_service.outbox_events SET occurred_at = now() - INTERVAL '1 hour' WHERE id = $1"#,
    )
    .bind(rest[0].id)
    .execute(&h.admin)
    .await
    .unwrap();
    let lag = paysaga_common::outbox::lag_seconds(&pool).await.unwrap();
    assert!(lag >= 3600.0, "{lag}");
    let ack = AckEvents {
        ids: vec![rest[0].id],
    };
    assert_eq!(orch.ack_outbox(&ack).await.unwrap().status, 204);
    assert_eq!(
        paysaga_common::outbox::lag_seconds(&pool).await.unwrap(),
        0.0
    );

    // Bad limits and id lists are 4xx; only the orchestrator may call.
    for limit in [0, 1001] {
        let e = orch.outbox(limit).await.unwrap_err();
        refused(&e, 400, "INVALID_QUERY");
    }
    let e = orch
        .ack_outbox(&AckEvents { ids: vec![] })
        .await
        .unwrap_err();
    refused(&e, 422, "INVALID_EVENT_IDS");
    let too_many = AckEvents {
        ids: (0..1001).map(|_| uuid::Uuid::now_v7()).collect(),
    };
    let e = orch.ack_outbox(&too_many).await.unwrap_err();
    assert_eq!(e.code(), Some("INVALID_EVENT_IDS"));
    let e = h.operator().outbox(10).await.unwrap_err();
    refused(&e, 403, "FORBIDDEN_CALLER");
    let e = h.buyer("outbox-0").outbox(10).await.unwrap_err();
    assert_eq!(e.status(), Some(403));
    h.stop().await;
}
