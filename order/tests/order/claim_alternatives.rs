//! Every `CLAIM_STRATEGY`, through the service's router: more buyers at once than units,
//! each asking again on `CLAIM_CONFLICT`, sells exactly the stock, one reservation per
//! unit, and the unit table agrees; a unit so claimed is confirmed as any other.

use std::collections::HashSet;

use crate::support::{all_by, inconsistencies, live_spread, pass, refused, unit_states, Harness};
use futures::future::join_all;
use order::claim_alternatives::ClaimStrategy;
use paysaga_contracts::order::api::Reservation;

const UNITS: i64 = 20;
const BUYERS: usize = 60;

/// One buyer: a fresh pass for every try (as a buyer asking the gate again would), until
/// a reservation or SOLD_OUT. `(reservation, conflicts met)`.
async fn buy(h: &Harness, product: i64, member: String) -> (Option<Reservation>, u32) {
    let client = h.buyer(&member);
    let mut conflicts = 0;
    loop {
        match client.reserve(product, &pass(product, &member)).await {
            Ok(a) => {
                assert_eq!(a.status, 201);
                return (Some(a.body), conflicts);
            }
            Err(e) if e.refusal() == Some((409, "CLAIM_CONFLICT")) => conflicts += 1,
            Err(e) => {
                refused(&e, 409, "SOLD_OUT");
                return (None, conflicts);
            }
        }
    }
}

async fn sells_exactly_the_stock(strategy: ClaimStrategy) {
    let h = Harness::start_with(|c| c.claim_strategy = strategy).await;
    let product = h.product(UNITS).await;
    let members: Vec<String> = (0..BUYERS).map(|i| format!("buyer-{i}")).collect();
    h.fund(&members).await;

    let results = join_all(members.iter().map(|m| buy(&h, product.id, m.clone()))).await;

    let created: Vec<Reservation> = results.iter().filter_map(|(r, _)| r.clone()).collect();
    let conflicts: u32 = results.iter().map(|(_, c)| c).sum();
    assert_eq!(created.len() as i64, UNITS, "{strategy}");
    let units: HashSet<i64> = created.iter().map(|r| r.unit_id).collect();
    assert_eq!(
        units.len() as i64,
        UNITS,
        "{strategy}: a unit handed out twice"
    );
    if !matches!(
        strategy,
        ClaimStrategy::Optimistic | ClaimStrategy::OptimisticRetry
    ) {
        assert_eq!(
            conflicts, 0,
            "{strategy}: only the optimistic ones conflict"
        );
    }

    // From the tables: sold == stock, none oversold.
    assert_eq!(
        unit_states(&h.admin, product.id).await,
        (0, UNITS, 0),
        "{strategy}"
    );
    let (live, distinct_units, distinct_members) = live_spread(&h.admin, product.id).await;
    assert_eq!(
        (live, distinct_units, distinct_members),
        (UNITS, UNITS, UNITS),
        "{strategy}"
    );
    let counter: Vec<i64> = all_by(
        &h.admin,
        r#"SELECT available FROM order_service.claim_counters WHERE product_id = $1"#,
        product.id,
    )
    .await;
    // A counter row, at 0, for every strategy but the one that counts no units.
    let expected = Vec::from_iter((strategy != ClaimStrategy::UnitsSkipLocked).then_some(0));
    assert_eq!(
        counter, expected,
        "{strategy}: the counter agrees with the units"
    );
    assert_eq!(inconsistencies(&h.admin).await, Vec::<String>::new());

    // The rest of the checkout is the default's: a claimed unit is confirmed and sold.
    let confirmed = h.service().confirm(created[0].id).await.unwrap().body;
    assert_eq!(confirmed.id, created[0].id);
    assert_eq!(unit_states(&h.admin, product.id).await, (0, UNITS - 1, 1));
    h.stop_consistent().await;
}

/// One test per strategy, so each runs in a process of its own.
macro_rules! each_sells_exactly_the_stock {
    ($($test:ident => $strategy:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            sells_exactly_the_stock(ClaimStrategy::$strategy).await;
        }
    )*};
}

each_sells_exactly_the_stock! {
    units_skip_locked_sells_exactly_the_stock => UnitsSkipLocked,
    counter_for_update_sells_exactly_the_stock => CounterForUpdate,
    atomic_update_sells_exactly_the_stock => AtomicUpdate,
    optimistic_sells_exactly_the_stock => Optimistic,
    optimistic_retry_sells_exactly_the_stock => OptimisticRetry,
}

#[test]
fn every_strategy_reads_back_from_its_setting() {
    for s in ClaimStrategy::ALL {
        assert_eq!(s.as_str().parse::<ClaimStrategy>().ok(), Some(s));
    }
    assert!("pessimistic".parse::<ClaimStrategy>().is_err());
}
