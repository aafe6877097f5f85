//! Waitlist set-ups the end-to-end tests share: members joining the line, and
//! reservations made due so that their units come back to it.

use paysaga_contracts::order::{
    api::{hold_key, WaitlistState},
    client::OrderClient,
};
use paysaga_drop::{Buyer, Driver, Endpoints};
use sqlx::PgPool;
use uuid::Uuid;

/// Set-up only: `buyer`'s pass, asked again for up to 10 s while the gate answers
/// `SOLD_OUT` (on a loaded machine a moment after the quota is first set, before the
/// instance that answers has seen it, is not what the tests that use it are about).
pub async fn setup_pass(
    driver: &Driver,
    buyer: &Buyer,
    product_id: i64,
    retries: &mut u32,
) -> anyhow::Result<paysaga_contracts::gate::api::PassIssued> {
    let asked = std::time::Instant::now();
    loop {
        match driver.pass(buyer, product_id, retries).await {
            Ok(pass) => return Ok(pass),
            Err(e)
                if e.code() == Some("SOLD_OUT")
                    && asked.elapsed() < std::time::Duration::from_secs(10) =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Puts each of `waiters` in `product_id`'s line, one after another, checking each is
/// told `WAITING` at the next position; the line's member ids, head first.
pub async fn join_in_order(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    waiters: &[Buyer],
    product_id: i64,
) -> anyhow::Result<Vec<String>> {
    let mut line = Vec::with_capacity(waiters.len());
    for w in waiters {
        let entry = OrderClient::with_http(http.clone(), &endpoints.order, &w.token)
            .join_waitlist(product_id)
            .await?
            .body;
        anyhow::ensure!(
            entry.state == WaitlistState::Waiting && entry.position == Some(line.len() as i64 + 1),
            "{} joined as {:?} at {:?}, not WAITING at {}",
            w.member,
            entry.state,
            entry.position,
            line.len() + 1
        );
        line.push(w.member.clone());
    }
    Ok(line)
}

/// Where `buyer` stands in `product_id`'s line: its latest entry's state and position.
pub async fn place_of(
    http: &reqwest::Client,
    endpoints: &Endpoints,
    buyer: &Buyer,
    product_id: i64,
) -> anyhow::Result<(WaitlistState, Option<i64>)> {
    let entry = OrderClient::with_http(http.clone(), &endpoints.order, &buyer.token)
        .waitlist_entry(product_id)
        .await?
        .body;
    Ok((entry.state, entry.position))
}

/// Moves the deadline of `reservation` (`None`: of every live reservation) and of its
/// hold, which carries the same deadline, into the past: the passage of time, without
/// waiting.
pub async fn make_due(pool: &PgPool, reservation: Option<Uuid>) -> anyhow::Result<()> {
    sqlx::query(
        r#"UPDATE order_service.reservations SET expires_at = now() - INTERVAL '1 second'
           WHERE id = $1 OR ($1 IS NULL AND state = 'RESERVED')"#,
    )
    .bind(reservation)
    .execute(pool)
    .await?;
    sqlx::query(
        r#"UPDATE account_service.holds
           SET created_at = LEAST(created_at, now() - INTERVAL '2 seconds'),
               expires_at = now() - INTERVAL '1 second'
           WHERE state = 'HELD' AND ($1::TEXT IS NULL OR operation_key = $1)"#,
    )
    .bind(reservation.map(hold_key))
    .execute(pool)
    .await?;
    Ok(())
}
