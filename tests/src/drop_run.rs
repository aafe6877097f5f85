//! A drop set up and checked the same way by every test that disturbs one (a crash, lost instances, the waitlist): the product, the buyers and the money before; the moment a fault should land; afterwards the invariants and each buyer's answer against their money.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use paysaga_contracts::order::api::Product;
use sqlx::PgPool;
use tokio::task::JoinHandle;

use crate::{
    invariants, Admin, Attempt, Buyer, Driver, Endpoints, InvariantReport, Outcome, Stack,
};

/// Balances for `buyers` buyers: twice `price` each, but for every `every`-th one a cent
/// short of it, so that some of a drop's buyers cannot pay.
pub fn every_nth_short(buyers: usize, every: usize, price: i64) -> Vec<i64> {
    (0..buyers)
        .map(|i| {
            if i % every == every - 1 {
                price - 1
            } else {
                price * 2
            }
        })
        .collect()
}

/// One drop's fixtures and what it started from.
pub struct DropRun {
    pub admin: Admin,
    pub endpoints: Endpoints,
    pub product: Product,
    pub buyers: Vec<Buyer>,
    pub price: i64,
    pub pool: PgPool,
    /// The sum of all balances before the drop, from PostgreSQL.
    pub deposits: i64,
}

/// What the buyers were told, counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Answers {
    pub completed: i64,
    /// Of the completed, those whose unit came through a waitlist offer.
    pub via_waitlist: i64,
    pub failed: i64,
    /// Buyers refused a unit because their account could not hold its price.
    pub unfunded: i64,
    pub sold_out: i64,
}

impl DropRun {
    /// A product `<name>-drop` of `units` at `price` and one buyer per entry of
    /// `balances` (`<name>-buyer-<i>`, opened `parallel` at a time); returns once the gate
    /// holds the whole quota, with the money counted.
    pub async fn open(
        stack: &Stack,
        name: &str,
        price: i64,
        units: i64,
        balances: &[i64],
        parallel: usize,
    ) -> anyhow::Result<Self> {
        let (endpoints, admin) = stack.operator();
        let product = admin
            .create_product(&format!("{name}-drop"), price, units)
            .await?;
        let buyers = admin
            .open_buyers(&format!("{name}-buyer"), balances, parallel)
            .await?;
        admin
            .wait_for_quota(product.id, units, Duration::from_secs(30))
            .await?;
        let pool = stack.admin_pool().await;
        let deposits = invariants::check(&pool).await?.balance_total;
        Ok(DropRun {
            admin,
            endpoints,
            product,
            buyers,
            price,
            pool,
            deposits,
        })
    }

    /// `buyers` run the drop through `driver` on a task of their own, `concurrency` at a
    /// time (0: all at once).
    pub fn start(
        &self,
        driver: &Driver,
        buyers: Vec<Buyer>,
        concurrency: usize,
    ) -> JoinHandle<Vec<Attempt>> {
        let driver = driver.clone();
        let product = self.product.id;
        tokio::spawn(async move { driver.run_drop(&buyers, product, concurrency, |_| {}).await })
    }

    /// Waits until at least `n` checkouts are acknowledged and still running: payments
    /// recorded in PostgreSQL and not terminal. That is when a fault hits the drop mid-
    /// saga. Returns how many there were; fails after `within`.
    pub async fn payments_in_flight(&self, n: i64, within: Duration) -> anyhow::Result<i64> {
        let deadline = Instant::now() + within;
        loop {
            let running: i64 = sqlx::query_scalar(
                r#"SELECT COUNT(*) FROM payment_service.payments WHERE state NOT IN ('COMPLETED', 'FAILED', 'REFUNDED')"#,
            )
            .fetch_one(&self.pool)
            .await?;
            if running >= n {
                return Ok(running);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "fewer than {n} payments running at once within {within:?} ({running} now): the drop never got going"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Once the drop is over: every payment terminal within `bound`, the invariants hold,
    /// the sum of balances is what was deposited, one unit sold per completed payment and
    /// no more than the drop's stock (its product being the only one sold so far).
    /// `logs` goes into the failure message.
    pub async fn settled(&self, bound: Duration, logs: &str) -> anyhow::Result<InvariantReport> {
        let report = invariants::settled(&self.pool, bound).await?;
        assert_eq!(
            (report.payments_not_terminal, report.payments_settling),
            (0, 0),
            "payments not terminal within {bound:?}: {report:#?}\n{logs}"
        );
        report.assert_holds();
        assert_eq!(
            report.balance_total, self.deposits,
            "the sum of all balances did not change"
        );
        assert_eq!(report.units_sold, report.payments_completed);
        assert!(report.units_sold <= self.product.units_total);
        Ok(report)
    }

    /// Each buyer got a definite answer, and the right one for their money: a funded
    /// buyer never FAILED nor was refused for funds, an underfunded one never paid (it is
    /// refused a unit, `INSUFFICIENT_FUNDS`). Anything else (no answer, another refusal,
    /// a refund) fails the test, with `logs`.
    pub fn answers(&self, attempts: &[Attempt], logs: &str) -> Answers {
        let funded: HashMap<&str, bool> = self
            .buyers
            .iter()
            .map(|b| (b.member.as_str(), b.balance >= self.price))
            .collect();
        let mut answers = Answers::default();
        for a in attempts {
            match &a.outcome {
                Outcome::Completed => {
                    assert!(
                        funded[a.member.as_str()],
                        "{} paid without the money",
                        a.member
                    );
                    answers.completed += 1;
                    if a.via_waitlist() {
                        answers.via_waitlist += 1;
                    }
                }
                Outcome::Failed { .. } => {
                    assert!(!funded[a.member.as_str()], "{} funded but FAILED", a.member);
                    answers.failed += 1;
                }
                Outcome::Rejected { code, .. } if code == "INSUFFICIENT_FUNDS" => {
                    assert!(
                        !funded[a.member.as_str()],
                        "{} funded but refused for funds",
                        a.member
                    );
                    answers.unfunded += 1;
                }
                o if o.is_sold_out() => answers.sold_out += 1,
                other => panic!("{}: no definite answer: {other:?}\n{logs}", a.member),
            }
        }
        answers
    }

    /// Each buyer's balance in PostgreSQL is its opening balance, less the price once if
    /// (and only if) it paid: nobody charged twice, nobody charged without a sale.
    pub async fn balances_match(&self, attempts: &[Attempt]) -> anyhow::Result<()> {
        balances_match(&self.pool, &self.buyers, self.price, attempts).await
    }
}

/// Each of `buyers`' balance in PostgreSQL (they are every member account) is its opening
/// balance, less `price` once if (and only if) its attempt completed.
pub async fn balances_match(
    pool: &PgPool,
    buyers: &[Buyer],
    price: i64,
    attempts: &[Attempt],
) -> anyhow::Result<()> {
    let paid: HashMap<&str, bool> = attempts
        .iter()
        .map(|a| (a.member.as_str(), a.outcome == Outcome::Completed))
        .collect();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        r#"SELECT member_id, balance FROM account_service.accounts WHERE kind = 'MEMBER'"#,
    )
    .fetch_all(pool)
    .await?;
    assert_eq!(rows.len(), buyers.len());
    for (member, balance) in rows {
        let opening = buyers
            .iter()
            .find(|b| b.member == member)
            .map(|b| b.balance)
            .unwrap_or_default();
        let expected = if paid.get(member.as_str()).copied().unwrap_or(false) {
            opening - price
        } else {
            opening
        };
        assert_eq!(balance, expected, "{member}'s balance");
    }
    Ok(())
}
