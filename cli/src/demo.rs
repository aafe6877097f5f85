//! The demo drop: a product with a few units, a crowd of buyers (some of whom cannot
//! afford it) arriving at once, every buyer told SOLD_OUT waiting in the product's
//! waitlist for a unit that comes back, and a result table whose money, stock and
//! waitlist figures are read back from PostgreSQL.

use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use paysaga_drop::{
    invariants,
    sell_through::{self, SellThrough},
    stats::Latency,
    Admin, Attempt, Driver, Endpoints, InvariantReport, Outcome, WaitEnd, WaitlistPolicy,
};
use sqlx::PgPool;
use uuid::Uuid;

use crate::table;

/// How often a waiting demo buyer reads its entry near the head of the line: a unit
/// that comes back is taken within about this long.
pub const WAITLIST_POLL: Duration = Duration::from_millis(250);
/// How long a demo buyer stays in line at most. Buyers leave long before, as soon as no
/// unit is held any more; this only bounds a drop that goes wrong.
pub const WAITLIST_PATIENCE: Duration = Duration::from_secs(30);
/// `WAITLIST_OFFER_TTL_SECS` for the services `up` starts, unless the caller sets it: a
/// unit offered to a buyer who went away is passed on after this long, so a demo never
/// waits minutes for one.
pub const DEMO_OFFER_TTL_SECS: u64 = 10;

/// What the demo plays.
#[derive(Debug, Clone)]
pub struct DemoSettings {
    pub units: i64,
    pub buyers: usize,
    pub price: i64,
}

/// What came of it.
#[derive(Debug)]
pub struct DemoResult {
    pub product_id: i64,
    pub product_name: String,
    pub attempts: Vec<Attempt>,
    pub underfunded: usize,
    /// The demo product's units, waitlist and payments, from PostgreSQL.
    pub stock: SellThrough,
    /// Money moved by the demo's payments, net of refunds, from the ledger.
    pub money_moved: i64,
    /// Every invariant over the whole database, after the demo.
    pub report: InvariantReport,
    /// Sum of all balances before the drop, to show it did not change.
    pub balance_before: i64,
    pub elapsed: Duration,
}

impl DemoResult {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.attempts.iter().filter(|a| f(&a.outcome)).count()
    }

    pub fn completed(&self) -> usize {
        self.count(|o| *o == Outcome::Completed)
    }

    /// Buyers without a definite answer (must be 0).
    pub fn unanswered(&self) -> usize {
        self.count(|o| !o.is_definite())
    }

    /// Whether the demo shows what paysaga promises: every buyer answered, nothing
    /// oversold, every invariant holding in PostgreSQL, the sum of balances unchanged.
    pub fn ok(&self) -> bool {
        self.unanswered() == 0
            && self.stock.units_sold == self.completed() as i64
            && self.stock.units_sold >= 1
            && self.report.holds()
            && self.report.balance_total == self.balance_before
    }

    /// A COMPLETED payment to inspect, if any.
    pub fn sample_payment(&self) -> Option<(Uuid, &str)> {
        self.attempts
            .iter()
            .find(|a| a.outcome == Outcome::Completed)
            .and_then(|a| a.payment_id.map(|id| (id, a.member.as_str())))
    }

    /// The result table.
    pub fn render(&self, settings: &DemoSettings) -> String {
        let n = |f: &dyn Fn(&Attempt) -> bool| self.attempts.iter().filter(|a| f(a)).count();
        let times = |f: &dyn Fn(&Attempt) -> bool| -> Vec<Duration> {
            self.attempts
                .iter()
                .filter(|a| f(a))
                .map(|a| a.time_to_answer)
                .collect()
        };
        let pq = |v: &[Duration]| match Latency::of_durations(v) {
            l if l.count == 0 => "-".to_owned(),
            l => format!("{} / {}", table::millis(l.p50()), table::millis(l.p95())),
        };
        let unfunded = |a: &Attempt| {
            matches!(&a.outcome, Outcome::Rejected { code, .. }
                if code == paysaga_contracts::order::api::codes::INSUFFICIENT_FUNDS)
        };
        let refused = |code: &str| {
            n(&|a| {
                a.waitlist
                    .as_ref()
                    .is_some_and(|w| matches!(&w.end, WaitEnd::Refused { code: c } if c == code))
            })
        };
        let holds = if self.report.holds() {
            "hold".to_owned()
        } else {
            format!("VIOLATED: {}", self.report.violations().join("; "))
        };
        let st = &self.stock;
        let back = &st.return_to_completed;
        let rows = vec![
            (
                "passes issued by the gate",
                n(&|a| a.pass_id.is_some()).to_string(),
            ),
            (
                "told sold out, joined the waitlist",
                n(&|a| a.waitlist.as_ref().is_some_and(|w| w.entry_id.is_some())).to_string(),
            ),
            (
                "  join refused: units on sale",
                refused(paysaga_contracts::order::api::codes::NOT_SOLD_OUT).to_string(),
            ),
            (
                "  left the line once every unit was paid for",
                n(&|a| {
                    a.waitlist
                        .as_ref()
                        .is_some_and(|w| w.end == WaitEnd::NothingHeld)
                })
                .to_string(),
            ),
            (
                "offers made / taken / expired / given up (PostgreSQL)",
                format!(
                    "{} / {} / {} / {}",
                    st.offers_made, st.offers_taken, st.offers_expired, st.offers_released
                ),
            ),
            ("paid (COMPLETED)", self.completed().to_string()),
            (
                "  of them through the waitlist",
                n(&Attempt::via_waitlist).to_string(),
            ),
            (
                "refused a unit: cannot pay (nothing held)",
                n(&unfunded).to_string(),
            ),
            (
                "failed (FAILED)",
                n(&|a| matches!(a.outcome, Outcome::Failed { .. })).to_string(),
            ),
            (
                "  of them on a waitlist offer",
                n(&|a| matches!(a.outcome, Outcome::Failed { .. }) && a.took_offer()).to_string(),
            ),
            (
                "refunded (REFUNDED)",
                n(&|a| a.outcome == Outcome::Refunded).to_string(),
            ),
            (
                "other definite rejections",
                n(&|a| matches!(a.outcome, Outcome::Rejected { .. }) && !unfunded(a)).to_string(),
            ),
            (
                "sold out in the end: at the gate / at order",
                format!(
                    "{} / {}",
                    n(&|a| a.outcome == Outcome::SoldOutAtGate),
                    n(&|a| a.outcome == Outcome::SoldOutAtOrder)
                ),
            ),
            ("no definite answer", self.unanswered().to_string()),
            (
                "units sold (PostgreSQL)",
                format!("{} of {}", st.units_sold, st.units_total),
            ),
            (
                "units left unsold: on sale / on offer",
                format!("{} / {}", st.units_available, st.units_offered),
            ),
            (
                "units left unsold while waiters went without (PostgreSQL)",
                self.report.unsold_while_waiters_went_without.to_string(),
            ),
            (
                "units to a buyer behind a waiter who went without (PostgreSQL)",
                self.report.units_to_later_arrivals.to_string(),
            ),
            (
                "oversold units (PostgreSQL)",
                self.report.oversold_units.to_string(),
            ),
            (
                "holds captured / released / still held (PostgreSQL)",
                format!(
                    "{} / {} / {}",
                    self.report.holds_captured, self.report.holds_released, self.report.holds_live
                ),
            ),
            ("money moved (ledger)", table::money(self.money_moved)),
            (
                "sum of all balances before / after",
                format!(
                    "{} / {}",
                    table::money(self.balance_before),
                    table::money(self.report.balance_total)
                ),
            ),
            (
                "units back from failed payments: to the line / on sale",
                format!(
                    "{} / {}",
                    st.returns_next_via_offer, st.returns_next_on_sale
                ),
            ),
            (
                "unit back to next buyer's COMPLETED, p50 / max",
                if back.count == 0 {
                    "-".to_owned()
                } else {
                    format!(
                        "{} / {}",
                        table::millis(back.p50()),
                        table::millis(back.max())
                    )
                },
            ),
            (
                "time to answer p50 / p95, all buyers",
                pq(&times(&|_| true)),
            ),
            (
                "  buyers sold out in the end",
                pq(&times(&|a| a.outcome.is_sold_out())),
            ),
            (
                "  buyers who paid",
                pq(&times(&|a| a.outcome == Outcome::Completed)),
            ),
            ("whole drop", table::millis(self.elapsed)),
            ("invariants (PostgreSQL, all products)", holds),
        ];
        format!(
            "demo drop: {} units of \"{}\" (product {}) at {}, {} buyers ({} of them cannot afford it)\n\n{}",
            settings.units,
            self.product_name,
            self.product_id,
            table::money(settings.price),
            settings.buyers,
            self.underfunded,
            table::key_values(&rows)
        )
    }
}

/// Every eighth buyer holds less than the price: refused a unit, nothing held.
fn opening_balance(i: usize, price: i64) -> i64 {
    if i % 8 == 7 {
        price / 2
    } else {
        price * 2
    }
}

fn bar(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Sets up and plays the demo drop against running services.
pub async fn play(
    endpoints: &Endpoints,
    pool: &PgPool,
    settings: &DemoSettings,
) -> anyhow::Result<DemoResult> {
    let http = paysaga_common::client::http_client(Duration::from_secs(10));
    let admin = Admin::new(endpoints.clone(), http);
    let run = chrono::Utc::now().format("%H%M%S").to_string();
    let name = format!("paysaga demo drop {run}");
    let product = admin
        .create_product(&name, settings.price, settings.units)
        .await
        .context("creating the demo product")?;

    let balances: Vec<i64> = (0..settings.buyers)
        .map(|i| opening_balance(i, settings.price))
        .collect();
    let underfunded = balances.iter().filter(|b| **b < settings.price).count();
    let pb = bar(
        settings.buyers as u64,
        "  opening buyer accounts [{bar:40}] {pos}/{len}",
    );
    let mut buyers = Vec::with_capacity(settings.buyers);
    for chunk in balances.chunks(32).enumerate() {
        let (c, chunk) = chunk;
        let prefix = format!("demo-{run}");
        let opened = futures::future::try_join_all(chunk.iter().enumerate().map(|(j, &b)| {
            let admin = admin.clone();
            let member = format!("{prefix}-{}", c * 32 + j);
            async move { admin.open_buyer(&member, b).await }
        }))
        .await?;
        pb.inc(opened.len() as u64);
        buyers.extend(opened);
    }
    pb.finish_and_clear();
    admin
        .wait_for_quota(product.id, settings.units, Duration::from_secs(60))
        .await
        .context("waiting for the gate to learn the demo product")?;
    let balance_before = invariants::check(pool).await?.balance_total;

    // Buyers told SOLD_OUT wait in line: a unit that comes back (a payment that fails,
    // a reservation that expires) goes to the first of them instead of going back on
    // sale after everyone was turned away.
    let driver =
        Driver::new(endpoints.clone(), Duration::from_secs(10)).with_waitlist(WaitlistPolicy {
            poll: WAITLIST_POLL,
            wait_for: WAITLIST_PATIENCE,
        });
    let pb = bar(
        settings.buyers as u64,
        "  {spinner} buyers answered [{bar:40}] {pos}/{len} {msg}",
    );
    let paid = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    let attempts = driver
        .run_drop(&buyers, product.id, 0, |a| {
            if a.outcome == Outcome::Completed {
                paid.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            pb.set_message(format!(
                "paid {}",
                paid.load(std::sync::atomic::Ordering::Relaxed)
            ));
            pb.inc(1);
        })
        .await;
    let elapsed = start.elapsed();
    pb.finish_and_clear();

    // Payments whose buyer gave up are still finished by the orchestrator's recovery;
    // the figures below are read once every payment of the demo is terminal.
    let report = invariants::settled(pool, Duration::from_secs(60)).await?;
    let stock = sell_through::read(pool, product.id).await?;
    let debit_keys: Vec<String> = attempts
        .iter()
        .filter_map(|a| a.payment_id)
        .map(|id| format!("pay:{id}:debit"))
        .collect();
    let money_moved: i64 = sqlx::query_scalar(
        r#"
        SELECT COALESCE(SUM(CASE kind WHEN 'DEBIT' THEN amount ELSE -amount END), 0)::BIGINT
        FROM account_service.transactions
        WHERE status = 'APPLIED'
          AND ((kind = 'DEBIT' AND operation_key = ANY($1)) OR (kind = 'CREDIT' AND refund_of = ANY($1)))
        "#,
    )
    .bind(&debit_keys)
    .fetch_one(pool)
    .await?;
    Ok(DemoResult {
        product_id: product.id,
        product_name: name,
        attempts,
        underfunded,
        stock,
        money_moved,
        report,
        balance_before,
        elapsed,
    })
}
