//! The system's invariants (docs/ARCHITECTURE.md, "Invariants"), checked in PostgreSQL itself as
//! an administrator reading the order, account and payment schemas, and returned as
//! counts so a test, the fault suite, the benchmark and the run command can assert on
//! them and print them.

use anyhow::Context;
use sqlx::{PgPool, Row};

/// What the tables say. Every `*_violations`-style count must be 0 for the invariants
/// to hold; the other fields describe what happened, for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct InvariantReport {
    // --- stock (invariant 1)
    pub products: i64,
    pub units_total: i64,
    pub units_available: i64,
    pub units_reserved: i64,
    /// Units held for a waitlist member's live offer.
    pub units_offered: i64,
    pub units_sold: i64,
    /// Units sold or held by a live reservation beyond a product's stock, summed over products.
    pub oversold_units: i64,
    /// Units held by more than one live (RESERVED or CONFIRMED) reservation.
    pub units_in_two_live_reservations: i64,
    /// A unit's state disagreeing with its reservations (RESERVED without a live
    /// reservation, SOLD without a confirmed one, or a live reservation on a unit in
    /// another state).
    pub unit_state_mismatches: i64,
    /// Reservations and orders naming a product, unit or reservation that does not
    /// exist, and payment steps and idempotency keys naming a payment that does not:
    /// references their statements guarantee without a foreign key.
    pub rows_without_parent: i64,
    /// Reservations by state.
    pub reservations_live: i64,
    pub reservations_confirmed: i64,
    pub reservations_cancelled: i64,
    pub reservations_expired: i64,

    // --- waitlist (a returned unit is offered to the head of the line, never on sale
    // while someone waits)
    /// Members waiting (not yet offered a unit), over every product.
    pub waitlist_waiting: i64,
    /// Offers by state.
    pub offers_live: i64,
    pub offers_taken: i64,
    pub offers_expired: i64,
    /// OFFERED units without exactly one live offer, plus live offers whose unit is not
    /// OFFERED.
    pub offered_units_without_one_live_offer: i64,
    /// (product, member) pairs with more than one live offer.
    pub members_with_two_live_offers: i64,
    /// Products with an AVAILABLE unit not promised to a pass in flight (by the gate's
    /// last report) while someone is WAITING: a unit on sale that should have been
    /// offered.
    pub available_while_waiting: i64,

    // --- fairness (one answer for "sold out"; units go in arrival order)
    /// Units left AVAILABLE while a member who asked to wait went without: per product,
    /// the smaller of its AVAILABLE units and its members whose entry is still WAITING or
    /// LEFT with no live or confirmed reservation of it and was never offered a unit (a
    /// member who left holding an offer, refused it for funds, gave that unit up). While one of them still waits,
    /// units promised to passes in flight (the gate's last report) are not counted: an
    /// unused pass's unit comes to the line when the pass expires. 0 at the end of a drop.
    pub unsold_while_waiters_went_without: i64,
    /// Units that went to a buyer who arrived after a member who asked to wait and went
    /// without: a unit offered to a later entry of the line while that member was
    /// waiting (the waitlist's FIFO order), or a unit that came back from a reservation
    /// while that member was waiting and was then reserved with a gate pass instead. A
    /// member offered a unit was waiting until that offer. 0.
    pub units_to_later_arrivals: i64,
    /// Live offers whose unit is in a live reservation, and reservations made from an
    /// offer that hold another unit or belong to another member than the offer's.
    pub offer_units_reserved_by_others: i64,

    // --- money (invariants 2 and 3)
    /// Sum of every balance, merchant shards included.
    pub balance_total: i64,
    /// Money that entered from outside (openings and top-up deposits).
    pub deposits_total: i64,
    /// `balance_total - deposits_total`: money created or destroyed inside. Must be 0.
    pub balance_drift: i64,
    /// Member accounts whose balance differs from their ledger (openings + deposits −
    /// debits + credits − transfers out + transfers in: the `entries` view).
    pub ledger_mismatches: i64,
    /// Transfers between members (both sides included).
    pub transfers: i64,
    /// Transfers whose rows are not exactly one `TRANSFER_OUT` and one `TRANSFER_IN`
    /// summing to zero between the same two accounts, mirrored.
    pub transfers_unbalanced: i64,
    /// Operation keys with more than one transaction row.
    pub operation_keys_applied_twice: i64,
    /// Money moved from buyers to the merchant by applied debits, net of refunds.
    pub money_moved: i64,

    // --- payments (invariants 2 and 4)
    pub payments: i64,
    pub payments_completed: i64,
    pub payments_failed: i64,
    pub payments_refunded: i64,
    /// Payments not in COMPLETED, FAILED or REFUNDED.
    pub payments_not_terminal: i64,
    /// Non-terminal payments flagged for an operator, with a cause.
    pub payments_needing_attention: i64,
    /// Payments final for the buyer that still owe a clean-up step (a FAILED payment
    /// releasing its reservation). Not a violation: recovery finishes them; wait with
    /// [`settled`] before asserting on unit states.
    pub payments_settling: i64,
    /// Payments whose debited − refunded is neither 0 nor their amount.
    pub payments_bad_net: i64,
    /// COMPLETED payments without an applied debit of their amount or a confirmed order.
    pub completed_not_debited_or_confirmed: i64,
    /// FAILED or REFUNDED payments that kept money.
    pub closed_payments_keeping_money: i64,
    /// Reservations paid for (net of refunds) more than once, plus payment debits kept
    /// without a payment row: money taken with nothing to show for it.
    pub reservations_charged_twice: i64,
    /// Confirmed orders without a COMPLETED payment once every payment is terminal.
    pub orders_without_completed_payment: i64,

    // --- holds (invariant 6: a reservation holds its price on the buyer's account)
    /// Holds held and within their deadline.
    pub holds_live: i64,
    pub holds_captured: i64,
    /// Released, or lapsed and swept.
    pub holds_released: i64,
    /// Money the live holds hold.
    pub money_held: i64,
    /// Accounts whose available balance (balance − held) is below zero, or whose held is.
    pub accounts_below_available_zero: i64,
    /// Accounts whose `held` is not what their held holds hold.
    pub held_mismatches: i64,
    /// Live holds that no live reservation owns (its key names no `RESERVED`
    /// reservation, or one of another price or member). Transient while a reservation
    /// is being made, a cancel's release is owed, or an orphan awaits its grace: wait
    /// with [`settled`].
    pub live_holds_without_live_reservation: i64,
    /// Live reservations (within their deadline) whose price is not held or captured
    /// under their hold key: a unit taken by someone not holding its price.
    pub live_reservations_without_their_hold: i64,
    /// Units sold (confirmed reservations) made since holds whose hold was not captured
    /// at their price: a sale paid outside the hold placed for it, or made without one.
    /// Confirmed reservations older than holds (made before the order service's
    /// `hold_releases` migration was applied) had none and are not counted.
    pub sales_without_their_captured_hold: i64,
    /// Holds captured by other than exactly one applied debit of their account and
    /// amount, and applied debits naming a hold that is not captured by them.
    pub holds_captured_wrongly: i64,
    /// Releases cancels owe that the order service has not had answered yet. Not a
    /// violation: its drain sends them; wait with [`settled`].
    pub hold_releases_owed: i64,
}

impl InvariantReport {
    /// Human-readable violations; empty when every invariant holds.
    pub fn violations(&self) -> Vec<String> {
        let checks = [
            (self.oversold_units, "oversold units"),
            (
                self.units_in_two_live_reservations,
                "units in two live reservations",
            ),
            (
                self.unit_state_mismatches,
                "unit states disagreeing with reservations",
            ),
            (
                self.rows_without_parent,
                "reservations, orders, steps or keys naming a row that does not exist",
            ),
            (
                self.balance_drift,
                "money created or destroyed (sum of balances − deposits)",
            ),
            (
                self.ledger_mismatches,
                "accounts whose balance differs from their ledger",
            ),
            (
                self.transfers_unbalanced,
                "transfers whose two rows do not sum to zero between two accounts",
            ),
            (
                self.operation_keys_applied_twice,
                "operation keys applied twice",
            ),
            (
                self.payments_bad_net,
                "payments with debited − refunded not in {0, amount}",
            ),
            (
                self.completed_not_debited_or_confirmed,
                "COMPLETED payments not debited or not confirmed",
            ),
            (
                self.closed_payments_keeping_money,
                "FAILED/REFUNDED payments keeping money",
            ),
            (
                self.reservations_charged_twice,
                "reservations charged twice or debits kept without a payment",
            ),
            (
                self.orders_without_completed_payment,
                "confirmed orders without a COMPLETED payment",
            ),
            (self.payments_not_terminal, "payments not terminal"),
            (
                self.offered_units_without_one_live_offer,
                "OFFERED units without exactly one live offer (or offers on other units)",
            ),
            (
                self.members_with_two_live_offers,
                "members holding two live offers of a product",
            ),
            (
                self.available_while_waiting,
                "products with units on sale while members wait",
            ),
            (
                self.offer_units_reserved_by_others,
                "offered units in someone else's reservation",
            ),
            (
                self.unsold_while_waiters_went_without,
                "units left unsold while members who asked to wait went without",
            ),
            (
                self.units_to_later_arrivals,
                "units that went to a buyer who arrived after a waiting member who went without",
            ),
            (
                self.accounts_below_available_zero,
                "accounts whose available balance is below zero",
            ),
            (
                self.held_mismatches,
                "accounts whose held differs from their holds",
            ),
            (
                self.live_holds_without_live_reservation,
                "live holds without a live reservation",
            ),
            (
                self.live_reservations_without_their_hold,
                "live reservations whose price is not held",
            ),
            (
                self.sales_without_their_captured_hold,
                "units sold whose hold was not captured",
            ),
            (
                self.holds_captured_wrongly,
                "holds captured other than once by their own debit",
            ),
        ];
        checks
            .iter()
            .filter(|(n, _)| *n != 0)
            .map(|(n, what)| format!("{what}: {n}"))
            .collect()
    }

    /// Whether every invariant holds, every payment included.
    pub fn holds(&self) -> bool {
        self.violations().is_empty()
    }

    /// Panics with the whole report if any invariant is violated.
    #[track_caller]
    pub fn assert_holds(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "invariants violated: {v:#?}\nreport: {self:#?}"
        );
    }
}

/// Checks until every payment is terminal and settled (no clean-up step owed) and every
/// live hold has its live reservation (no release owed), or `timeout` passes, and
/// returns the last report. Recovery finishes what buyers stopped waiting for, the
/// order service sends the releases cancels owe and releases orphaned holds after its
/// grace; a report taken the instant a drop ends can still show that work.
pub async fn settled(
    pool: &PgPool,
    timeout: std::time::Duration,
) -> anyhow::Result<InvariantReport> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let r = check(pool).await?;
        if (r.payments_not_terminal == 0
            && r.payments_settling == 0
            && r.live_holds_without_live_reservation == 0
            && r.hold_releases_owed == 0)
            || std::time::Instant::now() >= deadline
        {
            return Ok(r);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn scalar(pool: &PgPool, sql: &str) -> anyhow::Result<i64> {
    let v: Option<i64> = sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .with_context(|| format!("invariant query failed: {sql}"))?;
    Ok(v.unwrap_or(0))
}

/// Runs a one-row query of BIGINT counts and returns them in column order, so each
/// caller destructures them into its fields in the order its SELECT names them.
pub(crate) async fn counts<const N: usize>(
    pool: &PgPool,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    what: &str,
) -> anyhow::Result<[i64; N]> {
    let row = query.fetch_one(pool).await.context(what.to_owned())?;
    anyhow::ensure!(
        row.len() == N,
        "{what}: {} columns, expected {N}",
        row.len()
    );
    let mut out = [0; N];
    for (i, v) in out.iter_mut().enumerate() {
        *v = row.try_get(i)?;
    }
    Ok(out)
}

/// Reads every invariant from the tables. `pool` must be an administrator's pool on the
/// system's database (it reads `order_service`, `account_service` and `payment_service`).
pub async fn check(pool: &PgPool) -> anyhow::Result<InvariantReport> {
    let mut r = InvariantReport::default();
    stock(pool, &mut r).await?;
    waitlist(pool, &mut r).await?;
    money(pool, &mut r).await?;
    payments(pool, &mut r).await?;
    holds(pool, &mut r).await?;
    Ok(r)
}

/// The units counted as going to a later arrival (`units_to_later_arrivals`), each
/// described with the waiter who went without: for a failed run's report.
pub async fn later_arrivals_explained(pool: &PgPool) -> anyhow::Result<Vec<String>> {
    sqlx::query_scalar(LATER_ARRIVALS_EXPLAINED)
        .fetch_all(pool)
        .await
        .context("explaining units to later arrivals")
}

/// Work the order service still owes holds: live holds without their live reservation
/// (a release owed by a cancel, an orphan awaiting its grace) and releases not yet
/// answered. 0 once holds have settled after a drop or a fault.
/// One product's units per state, from `product_stock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct UnitStates {
    pub available: i64,
    pub reserved: i64,
    pub offered: i64,
    pub sold: i64,
}

/// `product_id`'s units per state, read with `db` (a pool, or a connection whose
/// snapshot the caller chose).
pub async fn unit_states<'e>(
    db: impl sqlx::PgExecutor<'e>,
    product_id: i64,
) -> anyhow::Result<UnitStates> {
    sqlx::query_as(
        r#"
        SELECT COUNT(*) FILTER (WHERE state = 'AVAILABLE') AS available,
               COUNT(*) FILTER (WHERE state = 'RESERVED') AS reserved,
               COUNT(*) FILTER (WHERE state = 'OFFERED') AS offered,
               COUNT(*) FILTER (WHERE state = 'SOLD') AS sold
        FROM order_service.product_stock WHERE product_id = $1
        "#,
    )
    .bind(product_id)
    .fetch_one(db)
    .await
    .context("reading a product's units")
}

pub async fn holds_owed(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(scalar(pool, LIVE_HOLDS_WITHOUT_LIVE_RESERVATION).await?
        + scalar(pool, HOLD_RELEASES_OWED).await?)
}

async fn holds(pool: &PgPool, r: &mut InvariantReport) -> anyhow::Result<()> {
    [
        r.holds_live,
        r.holds_captured,
        r.holds_released,
        r.money_held,
    ] = counts(pool, sqlx::query(HOLD_COUNTS), "reading holds").await?;
    r.accounts_below_available_zero = scalar(pool, ACCOUNTS_BELOW_AVAILABLE_ZERO).await?;
    r.held_mismatches = scalar(pool, HELD_MISMATCHES).await?;
    r.live_holds_without_live_reservation =
        scalar(pool, LIVE_HOLDS_WITHOUT_LIVE_RESERVATION).await?;
    r.live_reservations_without_their_hold =
        scalar(pool, LIVE_RESERVATIONS_WITHOUT_THEIR_HOLD).await?;
    r.sales_without_their_captured_hold = scalar(pool, SALES_WITHOUT_THEIR_CAPTURED_HOLD).await?;
    r.holds_captured_wrongly = scalar(pool, HOLDS_CAPTURED_WRONGLY).await?;
    r.hold_releases_owed = scalar(pool, HOLD_RELEASES_OWED).await?;
    Ok(())
}

async fn stock(pool: &PgPool, r: &mut InvariantReport) -> anyhow::Result<()> {
    [
        r.products,
        r.units_total,
        r.units_available,
        r.units_reserved,
        r.units_offered,
        r.units_sold,
    ] = counts(pool, sqlx::query(STOCK_COUNTS), "reading product_stock").await?;

    [
        r.reservations_live,
        r.reservations_confirmed,
        r.reservations_cancelled,
        r.reservations_expired,
    ] = counts(
        pool,
        sqlx::query(RESERVATION_COUNTS),
        "reading reservations",
    )
    .await?;

    r.oversold_units =
        scalar(pool, OVERSOLD_BY_RESERVATIONS).await? + scalar(pool, OVERSOLD_BY_ORDERS).await?;
    r.units_in_two_live_reservations = scalar(pool, UNITS_IN_TWO_LIVE_RESERVATIONS).await?;
    r.unit_state_mismatches = scalar(pool, UNIT_STATE_MISMATCHES).await?;
    r.rows_without_parent = scalar(pool, ROWS_WITHOUT_PARENT).await?;
    Ok(())
}

async fn waitlist(pool: &PgPool, r: &mut InvariantReport) -> anyhow::Result<()> {
    [
        r.waitlist_waiting,
        r.offers_live,
        r.offers_taken,
        r.offers_expired,
    ] = counts(pool, sqlx::query(WAITLIST_COUNTS), "reading the waitlist").await?;

    r.offered_units_without_one_live_offer =
        scalar(pool, OFFERED_UNITS_WITHOUT_ONE_LIVE_OFFER).await?;

    r.members_with_two_live_offers = scalar(pool, MEMBERS_WITH_TWO_LIVE_OFFERS).await?;

    r.available_while_waiting = scalar(pool, AVAILABLE_WHILE_WAITING).await?;

    r.offer_units_reserved_by_others = scalar(pool, OFFER_UNITS_RESERVED_BY_OTHERS).await?;

    r.unsold_while_waiters_went_without = scalar(pool, UNSOLD_WHILE_WAITERS_WENT_WITHOUT).await?;
    r.units_to_later_arrivals = scalar(pool, UNITS_TO_LATER_ARRIVALS).await?;
    Ok(())
}

async fn money(pool: &PgPool, r: &mut InvariantReport) -> anyhow::Result<()> {
    r.balance_total = scalar(pool, BALANCE_TOTAL).await?;
    r.deposits_total = scalar(pool, DEPOSITS_TOTAL).await?;
    r.balance_drift = r.balance_total - r.deposits_total;

    r.ledger_mismatches = scalar(pool, LEDGER_MISMATCHES).await?;
    [r.transfers, r.transfers_unbalanced] =
        counts(pool, sqlx::query(TRANSFERS), "reading transfers").await?;

    r.operation_keys_applied_twice = scalar(pool, OPERATION_KEYS_APPLIED_TWICE).await?;

    r.money_moved = scalar(pool, MONEY_MOVED).await?;
    Ok(())
}

async fn payments(pool: &PgPool, r: &mut InvariantReport) -> anyhow::Result<()> {
    [
        r.payments,
        r.payments_completed,
        r.payments_failed,
        r.payments_refunded,
        r.payments_not_terminal,
        r.payments_needing_attention,
        r.payments_settling,
        r.payments_bad_net,
        r.completed_not_debited_or_confirmed,
        r.closed_payments_keeping_money,
    ] = counts(
        pool,
        sqlx::query(PAYMENT_COUNTS),
        "reading payments against the ledger",
    )
    .await?;

    // Money kept per reservation across every payment-shaped debit, including debits whose
    // payment row does not exist (which would be money taken with nothing to show for it).
    r.reservations_charged_twice = scalar(pool, RESERVATIONS_CHARGED_TWICE).await?;

    r.orders_without_completed_payment = scalar(pool, ORDERS_WITHOUT_COMPLETED_PAYMENT).await?;
    Ok(())
}

// One query per count; each must return a single BIGINT (NULL reads as 0).

/// Rows of the hot tables whose references have no foreign key (migrations
/// `hot_references_by_construction`) naming a row that does not exist.
const ROWS_WITHOUT_PARENT: &str = r#"
SELECT (SELECT COUNT(*) FROM order_service.reservations r
        WHERE NOT EXISTS (SELECT 1 FROM order_service.products p WHERE p.id = r.product_id)
           OR NOT EXISTS (SELECT 1 FROM order_service.product_stock s WHERE s.id = r.unit_id))
     + (SELECT COUNT(*) FROM order_service.orders o
        WHERE NOT EXISTS (SELECT 1 FROM order_service.reservations r WHERE r.id = o.reservation_id)
           OR NOT EXISTS (SELECT 1 FROM order_service.products p WHERE p.id = o.product_id)
           OR NOT EXISTS (SELECT 1 FROM order_service.product_stock s WHERE s.id = o.unit_id))
     + (SELECT COUNT(*) FROM payment_service.payment_steps t
        WHERE NOT EXISTS (SELECT 1 FROM payment_service.payments p WHERE p.id = t.payment_id))
     + (SELECT COUNT(*) FROM payment_service.idempotency_keys k
        WHERE k.payment_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM payment_service.payments p WHERE p.id = k.payment_id))
"#;

/// Holds by state, and the money live ones hold.
const HOLD_COUNTS: &str = r#"
        SELECT
            COUNT(*) FILTER (WHERE state = 'HELD' AND expires_at > now()) AS live,
            COUNT(*) FILTER (WHERE state = 'CAPTURED') AS captured,
            COUNT(*) FILTER (WHERE state = 'RELEASED') AS released,
            COALESCE(SUM(amount) FILTER (WHERE state = 'HELD' AND expires_at > now()), 0)::BIGINT AS held
        FROM account_service.holds
        "#;

/// Products, and units by state.
const STOCK_COUNTS: &str = r#"
        SELECT
            (SELECT COUNT(*) FROM order_service.products) AS products,
            COUNT(*) AS total,
            COUNT(*) FILTER (WHERE state = 'AVAILABLE') AS available,
            COUNT(*) FILTER (WHERE state = 'RESERVED') AS reserved,
            COUNT(*) FILTER (WHERE state = 'OFFERED') AS offered,
            COUNT(*) FILTER (WHERE state = 'SOLD') AS sold
        FROM order_service.product_stock
        "#;

/// Reservations by state.
const RESERVATION_COUNTS: &str = r#"
        SELECT
            COUNT(*) FILTER (WHERE state = 'RESERVED') AS live,
            COUNT(*) FILTER (WHERE state = 'CONFIRMED') AS confirmed,
            COUNT(*) FILTER (WHERE state = 'CANCELLED') AS cancelled,
            COUNT(*) FILTER (WHERE state = 'EXPIRED') AS expired
        FROM order_service.reservations
        "#;

/// Members waiting, and offers by state.
const WAITLIST_COUNTS: &str = r#"
        SELECT
            (SELECT COUNT(*) FROM order_service.waitlist_entries WHERE state = 'WAITING') AS waiting,
            COUNT(*) FILTER (WHERE state = 'OFFERED') AS live,
            COUNT(*) FILTER (WHERE state = 'TAKEN') AS taken,
            COUNT(*) FILTER (WHERE state = 'EXPIRED') AS expired
        FROM order_service.waitlist_offers
        "#;

/// Payments by state, each against the money the ledger moved for it (its debit, fixed
/// key, and the credits refunding it).
const PAYMENT_COUNTS: &str = r#"
        WITH money AS (
            SELECT p.id, p.state, p.amount, p.reservation_id, p.needs_attention, p.pending_action,
                   COALESCE(d.amount, 0) AS debited,
                   COALESCE(c.refunded, 0) AS refunded
            FROM payment_service.payments AS p
            LEFT JOIN account_service.transactions AS d
                ON d.operation_key = 'pay:' || p.id::TEXT || ':debit'
               AND d.kind = 'DEBIT' AND d.status = 'APPLIED'
            LEFT JOIN (
                SELECT refund_of, SUM(amount) AS refunded
                FROM account_service.transactions
                WHERE kind = 'CREDIT' AND status = 'APPLIED'
                GROUP BY refund_of
            ) AS c ON c.refund_of = 'pay:' || p.id::TEXT || ':debit'
        )
        SELECT
            COUNT(*) AS payments,
            COUNT(*) FILTER (WHERE state = 'COMPLETED') AS completed,
            COUNT(*) FILTER (WHERE state = 'FAILED') AS failed,
            COUNT(*) FILTER (WHERE state = 'REFUNDED') AS refunded,
            COUNT(*) FILTER (WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED')) AS not_terminal,
            COUNT(*) FILTER (WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED') AND needs_attention) AS attention,
            COUNT(*) FILTER (WHERE state IN ('COMPLETED', 'FAILED', 'REFUNDED') AND pending_action IS NOT NULL) AS settling,
            COUNT(*) FILTER (WHERE debited - refunded NOT IN (0, amount)) AS bad_net,
            COUNT(*) FILTER (
                WHERE state = 'COMPLETED'
                  AND (debited - refunded <> amount
                       OR NOT EXISTS (
                           SELECT 1 FROM order_service.reservations AS res
                           WHERE res.id = money.reservation_id AND res.state = 'CONFIRMED'))
            ) AS completed_bad,
            COUNT(*) FILTER (WHERE state IN ('FAILED', 'REFUNDED') AND debited - refunded <> 0) AS closed_keeping
        FROM money
        "#;

/// Units held by live reservations beyond a product's stock.
const OVERSOLD_BY_RESERVATIONS: &str = r#"
        SELECT SUM(GREATEST(held.n - units.n, 0))::BIGINT
        FROM (SELECT product_id, COUNT(*) AS n FROM order_service.product_stock GROUP BY product_id) AS units
        JOIN (
            SELECT product_id, COUNT(*) AS n
            FROM order_service.reservations
            WHERE state IN ('RESERVED', 'CONFIRMED')
            GROUP BY product_id
        ) AS held USING (product_id)
        "#;

/// Units sold by confirmed orders beyond a product's stock.
const OVERSOLD_BY_ORDERS: &str = r#"
            SELECT SUM(GREATEST(sold.n - units.n, 0))::BIGINT
            FROM (SELECT product_id, COUNT(*) AS n FROM order_service.product_stock GROUP BY product_id) AS units
            JOIN (
                SELECT product_id, COUNT(*) AS n FROM order_service.orders WHERE state = 'CONFIRMED' GROUP BY product_id
            ) AS sold USING (product_id)
            "#;

const UNITS_IN_TWO_LIVE_RESERVATIONS: &str = r#"
        SELECT COUNT(*) FROM (
            SELECT unit_id
            FROM order_service.reservations
            WHERE state IN ('RESERVED', 'CONFIRMED')
            GROUP BY unit_id
            HAVING COUNT(*) > 1
        ) AS doubled
        "#;

const UNIT_STATE_MISMATCHES: &str = r#"
        SELECT COUNT(*)
        FROM order_service.product_stock AS u
        LEFT JOIN order_service.reservations AS live
            ON live.unit_id = u.id AND live.state IN ('RESERVED', 'CONFIRMED')
        WHERE (u.state IN ('AVAILABLE', 'OFFERED') AND live.id IS NOT NULL)
           OR (u.state = 'RESERVED' AND (live.id IS NULL OR live.state <> 'RESERVED'))
           OR (u.state = 'SOLD' AND (live.id IS NULL OR live.state <> 'CONFIRMED'))
        "#;

const OFFERED_UNITS_WITHOUT_ONE_LIVE_OFFER: &str = r#"
        SELECT
            (SELECT COUNT(*) FROM (
                SELECT u.id
                FROM order_service.product_stock AS u
                LEFT JOIN order_service.waitlist_offers AS o ON o.unit_id = u.id AND o.state = 'OFFERED'
                WHERE u.state = 'OFFERED'
                GROUP BY u.id
                HAVING COUNT(o.id) <> 1
            ) AS bad)
          + (SELECT COUNT(*)
             FROM order_service.waitlist_offers AS o
             JOIN order_service.product_stock AS u ON u.id = o.unit_id
             WHERE o.state = 'OFFERED' AND u.state <> 'OFFERED')
        "#;

const MEMBERS_WITH_TWO_LIVE_OFFERS: &str = r#"
        SELECT COUNT(*) FROM (
            SELECT product_id, member_id
            FROM order_service.waitlist_offers
            WHERE state = 'OFFERED'
            GROUP BY product_id, member_id
            HAVING COUNT(*) > 1
        ) AS doubled
        "#;

const AVAILABLE_WHILE_WAITING: &str = r#"
        SELECT COUNT(*) FROM order_service.products AS p
        WHERE (SELECT COUNT(*) FROM order_service.product_stock AS u
               WHERE u.product_id = p.id AND u.state = 'AVAILABLE')
              > COALESCE((SELECT g.in_flight FROM order_service.gate_promises AS g
                          WHERE g.product_id = p.id), 0)
          AND EXISTS (SELECT 1 FROM order_service.waitlist_entries AS w
                      WHERE w.product_id = p.id AND w.state = 'WAITING')
        "#;

/// Members who asked to wait for a product and went without: an entry still WAITING, or
/// LEFT, and no live or confirmed reservation of the product (an entry that was offered
/// a unit ended EXPIRED or TAKEN instead; one at the purchase cap, SKIPPED).
macro_rules! went_without {
    () => {
        r#"
        WITH went_without AS (
            -- A member offered a unit waited until that offer (one per entry); one who
            -- then left holding it (refused it for funds) gave the unit up, so units
            -- after that were not taken from them and no unit unsold is owed to them.
            SELECT w.product_id, w.member_id, w.seq, w.state, w.created_at,
                   COALESCE(o.created_at,
                            CASE WHEN w.state = 'WAITING' THEN 'infinity'::TIMESTAMPTZ
                                 ELSE w.updated_at END) AS waited_until,
                   o.id IS NOT NULL AS offered
            FROM order_service.waitlist_entries AS w
            LEFT JOIN order_service.waitlist_offers AS o ON o.entry_id = w.id
            WHERE w.state IN ('WAITING', 'LEFT')
              AND NOT EXISTS (SELECT 1 FROM order_service.reservations AS r
                              WHERE r.product_id = w.product_id AND r.member_id = w.member_id
                                AND r.state IN ('RESERVED', 'CONFIRMED'))
        )"#
    };
}

const UNSOLD_WHILE_WAITERS_WENT_WITHOUT: &str = concat!(
    went_without!(),
    r#"
        SELECT COALESCE(SUM(LEAST(GREATEST(0, a.available - CASE WHEN g.still_waiting
                                                                 THEN COALESCE(p.in_flight, 0)
                                                                 ELSE 0 END),
                                  g.members)), 0)::BIGINT
        FROM (SELECT product_id, COUNT(DISTINCT member_id) AS members,
                     bool_or(waited_until = 'infinity') AS still_waiting
              FROM went_without WHERE NOT offered GROUP BY product_id) AS g
        JOIN (SELECT product_id, COUNT(*) AS available
              FROM order_service.product_stock
              WHERE state = 'AVAILABLE' GROUP BY product_id) AS a
          ON a.product_id = g.product_id
        LEFT JOIN order_service.gate_promises AS p ON p.product_id = g.product_id
        "#
);

/// The units that went to a later arrival, one row per (unit, member who went without):
/// `id` names the offer or reservation that took the unit, `line` says what happened.
/// Needs [`went_without!`] before it.
macro_rules! later_arrivals {
    () => {
        r#"
        later_arrivals AS (
            -- An offer made to an entry behind a member who was waiting then.
            SELECT o.id,
                   format('offer %s (unit %s) made %s to entry seq %s, while member %s (seq %s, joined %s, %s, waited until %s) went without',
                          o.id, o.unit_id, o.created_at, e.seq, x.member_id, x.seq,
                          x.created_at, x.state, x.waited_until) AS line
            FROM order_service.waitlist_offers AS o
            JOIN order_service.waitlist_entries AS e ON e.id = o.entry_id
            JOIN went_without AS x
              ON x.product_id = o.product_id AND x.seq < e.seq
             AND x.created_at < o.created_at AND x.waited_until > o.created_at
            UNION ALL
            -- A unit back from a reservation after a member joined, then reserved with a
            -- pass while that member still waited. (Still waiting when it came back is
            -- not enough: the return's time is its transaction's start, and a member
            -- whose leave began after that may have left before the handoff reached
            -- them.)
            SELECT r.id,
                   format('reservation %s (pass %s, %s, made %s) took unit %s back from reservation %s (%s at %s), while member %s (seq %s, joined %s, %s, waited until %s) went without',
                          r.id, r.pass_id, r.state, r.created_at, r.unit_id, b.id, b.state,
                          b.updated_at, x.member_id, x.seq, x.created_at, x.state,
                          x.waited_until)
            FROM order_service.reservations AS r
            JOIN order_service.reservations AS b
              ON b.unit_id = r.unit_id AND b.state IN ('CANCELLED', 'EXPIRED')
             AND b.updated_at < r.created_at
            JOIN went_without AS x
              ON x.product_id = b.product_id
             AND x.created_at < b.updated_at AND x.waited_until > r.created_at
            WHERE r.pass_id IS NOT NULL AND r.state IN ('RESERVED', 'CONFIRMED')
        )"#
    };
}

const UNITS_TO_LATER_ARRIVALS: &str = concat!(
    went_without!(),
    ",",
    later_arrivals!(),
    r#"
        SELECT COUNT(DISTINCT id) FROM later_arrivals
        "#
);

/// Each unit [`UNITS_TO_LATER_ARRIVALS`] counts, with each member who went without
/// meanwhile, one line apiece: for a failed run's report.
const LATER_ARRIVALS_EXPLAINED: &str = concat!(
    went_without!(),
    ",",
    later_arrivals!(),
    r#"
        SELECT line FROM later_arrivals ORDER BY line
        "#
);

const OFFER_UNITS_RESERVED_BY_OTHERS: &str = r#"
        SELECT
            (SELECT COUNT(*)
             FROM order_service.waitlist_offers AS o
             JOIN order_service.reservations AS res
               ON res.unit_id = o.unit_id AND res.state IN ('RESERVED', 'CONFIRMED')
             WHERE o.state = 'OFFERED')
          + (SELECT COUNT(*)
             FROM order_service.reservations AS res
             JOIN order_service.waitlist_offers AS o ON o.id = res.offer_id
             WHERE o.unit_id <> res.unit_id OR o.member_id <> res.member_id)
        "#;

const BALANCE_TOTAL: &str = r#"
        SELECT ((SELECT COALESCE(SUM(balance), 0) FROM account_service.accounts)
              + (SELECT COALESCE(SUM(balance), 0) FROM account_service.merchant_shards))::BIGINT
        "#;

const DEPOSITS_TOTAL: &str = r#"
        SELECT COALESCE(SUM(amount), 0)::BIGINT
        FROM account_service.transactions
        WHERE kind IN ('OPENING', 'DEPOSIT') AND status = 'APPLIED'
        "#;

/// Each member balance against the sum of its signed ledger rows (the `entries` view
/// holds the sign rule: debits and transfers out take, everything else adds).
const LEDGER_MISMATCHES: &str = r#"
        SELECT COUNT(*)
        FROM account_service.accounts AS a
        LEFT JOIN (
            SELECT account_id, SUM(amount) AS net
            FROM account_service.entries
            GROUP BY account_id
        ) AS l ON l.account_id = a.id
        WHERE a.kind = 'MEMBER' AND a.balance <> COALESCE(l.net, 0)
        "#;

/// Transfers, and those whose rows are not one out and one in, summing to zero, each
/// naming the other's account, over all their rows (a declined leg counts against it).
const TRANSFERS: &str = r#"
        WITH legs AS (
            SELECT t.transfer_id,
                   COUNT(*) AS rows,
                   COUNT(*) FILTER (WHERE t.kind = 'TRANSFER_OUT' AND t.status = 'APPLIED') AS outs,
                   COUNT(*) FILTER (WHERE t.kind = 'TRANSFER_IN' AND t.status = 'APPLIED') AS ins,
                   COALESCE(SUM(e.amount), 0) AS net,
                   COUNT(DISTINCT t.account_id) AS accounts,
                   BOOL_AND(t.counter_account_id <> t.account_id) AS apart,
                   MIN(t.account_id) = MIN(t.counter_account_id)
                       AND MAX(t.account_id) = MAX(t.counter_account_id) AS mirrored
            FROM account_service.transactions AS t
            LEFT JOIN account_service.entries AS e ON e.id = t.id
            WHERE t.transfer_id IS NOT NULL
            GROUP BY t.transfer_id
        )
        SELECT COUNT(*),
               COUNT(*) FILTER (WHERE NOT (rows = 2 AND outs = 1 AND ins = 1 AND net = 0
                                           AND accounts = 2 AND apart AND mirrored))
        FROM legs
        "#;

const OPERATION_KEYS_APPLIED_TWICE: &str = r#"
        SELECT COUNT(*) FROM (
            SELECT operation_key
            FROM account_service.transactions
            WHERE operation_key IS NOT NULL
            GROUP BY operation_key
            HAVING COUNT(*) > 1
        ) AS twice
        "#;

const MONEY_MOVED: &str = r#"
        SELECT COALESCE(SUM(CASE kind WHEN 'DEBIT' THEN amount ELSE -amount END), 0)::BIGINT
        FROM account_service.transactions
        WHERE status = 'APPLIED' AND kind IN ('DEBIT', 'CREDIT')
        "#;

// The refunds are summed once and joined, not looked up per debit: `refund_of` has no
// index, and a lookup per debit read the whole ledger once per payment.
const RESERVATIONS_CHARGED_TWICE: &str = r#"
        WITH refunded AS (
            SELECT c.refund_of, SUM(c.amount) AS total
            FROM account_service.transactions AS c
            WHERE c.kind = 'CREDIT' AND c.status = 'APPLIED' AND c.refund_of IS NOT NULL
            GROUP BY c.refund_of
        ), kept AS (
            SELECT d.operation_key, d.amount - COALESCE(r.total, 0) AS net
            FROM account_service.transactions AS d
            LEFT JOIN refunded AS r ON r.refund_of = d.operation_key
            WHERE d.kind = 'DEBIT' AND d.status = 'APPLIED' AND d.operation_key LIKE 'pay:%:debit'
        )
        SELECT COUNT(*) FROM (
            SELECT COALESCE(p.reservation_id::TEXT, kept.operation_key) AS reservation
            FROM kept
            LEFT JOIN payment_service.payments AS p ON kept.operation_key = 'pay:' || p.id::TEXT || ':debit'
            WHERE kept.net > 0
            GROUP BY 1
            HAVING COUNT(*) > 1 OR BOOL_OR(p.id IS NULL)
        ) AS charged
        "#;

const ORDERS_WITHOUT_COMPLETED_PAYMENT: &str = r#"
        SELECT COUNT(*)
        FROM order_service.reservations AS res
        WHERE res.state = 'CONFIRMED'
          AND NOT EXISTS (
              SELECT 1 FROM payment_service.payments AS p
              WHERE p.reservation_id = res.id
                AND p.state IN ('COMPLETED', 'PROCESSING', 'ACCOUNT_DEBITED', 'ORDER_CONFIRMED', 'REFUND_PROCESSING'))
        "#;

/// The reservation a hold's key names (`res:{id}:hold`, the order service's keys), as
/// a UUID; NULL for any other key.
macro_rules! hold_reservation {
    ($h:literal) => {
        concat!(
            "CASE WHEN ",
            $h,
            ".operation_key ~ '^res:[0-9a-f-]{36}:hold$' THEN substring(",
            $h,
            ".operation_key FROM 5 FOR 36)::UUID END"
        )
    };
}

const ACCOUNTS_BELOW_AVAILABLE_ZERO: &str = r#"
        SELECT COUNT(*) FROM account_service.accounts WHERE held < 0 OR balance - held < 0
        "#;

const HELD_MISMATCHES: &str = r#"
        SELECT COUNT(*)
        FROM account_service.accounts AS a
        LEFT JOIN (
            SELECT account_id, SUM(amount) AS held
            FROM account_service.holds
            WHERE state = 'HELD'
            GROUP BY account_id
        ) AS h ON h.account_id = a.id
        WHERE a.held <> COALESCE(h.held, 0)
        "#;

/// The key of a reservation's hold (`res:{id}:hold`), the reverse of
/// [`hold_reservation`].
macro_rules! reservation_hold_key {
    ($res:literal) => {
        concat!("'res:' || ", $res, ".id::TEXT || ':hold'")
    };
}

const LIVE_HOLDS_WITHOUT_LIVE_RESERVATION: &str = concat!(
    r#"
        SELECT COUNT(*)
        FROM account_service.holds AS h
        JOIN account_service.accounts AS a ON a.id = h.account_id
        LEFT JOIN order_service.reservations AS res ON res.id = "#,
    hold_reservation!("h"),
    r#"
        WHERE h.state = 'HELD' AND h.expires_at > now()
          AND (res.id IS NULL OR res.state <> 'RESERVED' OR res.price <> h.amount
               OR res.member_id <> a.member_id)
        "#
);

const LIVE_RESERVATIONS_WITHOUT_THEIR_HOLD: &str = concat!(
    r#"
        SELECT COUNT(*)
        FROM order_service.reservations AS res
        LEFT JOIN account_service.holds AS h ON h.operation_key = "#,
    reservation_hold_key!("res"),
    r#"
        WHERE res.state = 'RESERVED' AND res.expires_at > now()
          AND (h.id IS NULL OR h.state = 'RELEASED' OR h.amount <> res.price
               OR h.expires_at <> res.expires_at)
        "#
);

/// Reservations count from the moment the order service's holds migration was applied
/// (`-infinity` if its record is missing, so nothing escapes the check).
const SALES_WITHOUT_THEIR_CAPTURED_HOLD: &str = concat!(
    r#"
        SELECT COUNT(*)
        FROM order_service.reservations AS res
        LEFT JOIN account_service.holds AS h ON h.operation_key = "#,
    reservation_hold_key!("res"),
    r#"
        WHERE res.state = 'CONFIRMED'
          AND res.created_at >= COALESCE(
                (SELECT m.installed_on FROM order_service._sqlx_migrations AS m
                 WHERE m.version = 20261216090100),
                '-infinity')
          AND (h.id IS NULL OR h.state <> 'CAPTURED' OR h.amount <> res.price)
        "#
);

const HOLDS_CAPTURED_WRONGLY: &str = r#"
        SELECT
            (SELECT COUNT(*)
             FROM account_service.holds AS h
             WHERE h.state = 'CAPTURED'
               AND (SELECT COUNT(*) FROM account_service.transactions AS d
                    WHERE d.hold_key = h.operation_key AND d.status = 'APPLIED'
                      AND d.operation_key = h.captured_by
                      AND d.account_id = h.account_id AND d.amount = h.amount) <> 1)
          + (SELECT COUNT(*)
             FROM account_service.transactions AS d
             LEFT JOIN account_service.holds AS h ON h.operation_key = d.hold_key
             WHERE d.hold_key IS NOT NULL AND d.status = 'APPLIED'
               AND (h.id IS NULL OR h.state <> 'CAPTURED' OR h.captured_by <> d.operation_key))
        "#;

const HOLD_RELEASES_OWED: &str = r#"
        SELECT COUNT(*) FROM order_service.hold_releases WHERE released_at IS NULL
        "#;
