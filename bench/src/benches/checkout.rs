//! Payment throughput and latency through the real gate, order, account and orchestrator
//! processes (started by the end-to-end harness on a fresh database, with the member
//! service the buyers are signed up through before anything is timed): reservations made
//! first, then every one paid until terminal; PostgreSQL commits per payment and the
//! system's invariants read from the tables afterwards.

use std::{fmt::Write as _, time::Duration};

use anyhow::Context as _;
use clap::{builder::TypedValueParser as _, Args};
use paysaga_drop::InvariantReport;

use crate::{
    client,
    load::Load,
    scenario::{drop::PRICE, saga},
    stats::{self, RunSummary},
    system::{Seeded, System},
};

/// `checkout-bench`'s settings.
#[derive(Debug, Clone, Args)]
pub struct CheckoutArgs {
    /// Buyers, each reserving one unit and paying for it once.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub buyers: u64,
    /// Concurrent clients, reserving and paying.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from))]
    pub concurrency: usize,
}

/// What one checkout run measured.
pub struct CheckoutReport {
    pub reserve: RunSummary,
    /// Outcomes `completed`, `payment_failed`, `refunded` and errors.
    pub pay: RunSummary,
    /// Commits in all three databases' schemas during the paying phase, the services'
    /// background jobs included, per completed payment.
    pub commits_per_payment: f64,
    pub invariants: InvariantReport,
}

/// Starts the system, reserves a unit per buyer, pays each, and checks the invariants.
pub async fn run(args: &CheckoutArgs) -> anyhow::Result<CheckoutReport> {
    let http = client::http_client(args.concurrency)?;
    let sys = System::start("checkout-bench", http.clone()).await?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let Seeded { buyers, accounts } = sys
        .seed_buyers(&run_id, args.buyers as usize, PRICE * 10)
        .await?;
    let product = sys.create_product("checkout", PRICE, args.buyers).await?;
    let ep = sys.endpoints(http);
    let bound = Duration::from_secs(600);
    let load = Load::new("checkout: reserve", args.concurrency, args.buyers, bound);
    let (reserve, slots) = saga::reserve(&load, ep.clone(), buyers.clone(), product).await;
    eprintln!("{}", reserve.line());

    let pool = sys.admin_pool().await;
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let before = saga::xact_commit(&pool).await?;
    let load = Load::new("checkout: pay", args.concurrency, args.buyers, bound);
    let pay = saga::pay(&load, ep, buyers, accounts, slots).await;
    eprintln!("{}", pay.line());
    tokio::time::sleep(saga::STATS_SETTLE).await;
    let after = saga::xact_commit(&pool).await?;
    let invariants = paysaga_drop::invariants::check(&pool)
        .await
        .context("checking the invariants")?;
    pool.close().await;
    Ok(CheckoutReport {
        commits_per_payment: (after - before) as f64 / pay.count("completed").max(1) as f64,
        reserve,
        pay,
        invariants,
    })
}

impl CheckoutReport {
    /// The phases as the shared load table, then commits and the invariants.
    pub fn markdown(&self) -> String {
        let mut out = stats::markdown_table(&[self.reserve.clone(), self.pay.clone()]);
        let _ = writeln!(
            out,
            "\nPayments COMPLETED: {} of {}; PostgreSQL commits per payment (background jobs included): {:.1}.",
            self.pay.count("completed"),
            self.pay.ops,
            self.commits_per_payment
        );
        let violations = self.invariants.violations();
        if violations.is_empty() {
            let _ = writeln!(out, "Invariants: hold.");
        } else {
            let _ = writeln!(out, "Invariants BROKEN: {}", violations.join("; "));
        }
        out
    }

    /// Every payment completed and the invariants hold.
    pub fn ok(&self) -> bool {
        self.invariants.holds() && self.pay.count("completed") == self.pay.ops
    }
}

/// The `checkout-bench` binary: its flags, the run, the markdown on stdout.
pub async fn main() -> anyhow::Result<()> {
    let args: CheckoutArgs = super::start(
        "checkout-bench",
        "Checkout saga throughput with ample stock and funds.",
    );
    // Before any client is made.
    let _ = crate::system::run_tls();
    eprintln!(
        "checkout-bench: {} payments, concurrency {}",
        args.buyers, args.concurrency
    );
    let report = run(&args).await?;
    println!("{}", report.markdown());
    if !report.ok() {
        anyhow::bail!("a payment did not complete or an invariant did not hold");
    }
    Ok(())
}
