//! The command line and the typed settings a run uses, checked before any traffic flows.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Parser)]
#[command(
    name = "paysaga-bench",
    about = "The flash-sale benchmark: paysaga against its alternatives and the machine's limits, in one run."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Internal: the HTTP ceiling server, started by the benchmark as a process of its own.
    #[command(hide = true)]
    CeilingServer,
}

/// The parts of a run that can be selected with `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// 5: the machine's limits (HTTP, Redis, PostgreSQL commits).
    Ceilings,
    /// 1: a drop through the gate, with memory sampled, three times back to back.
    DropGate,
    /// 2: the same drop with buyers going straight to the order service.
    DropDirect,
    /// 3: claim strategies on one database (the order service's claim bench).
    Claims,
    /// 4: checkout saga throughput with ample stock and funds.
    Saga,
    /// 6: whole checkouts (reserve + pay until terminal) timed as one operation, at each
    /// level of `--checkout-clients`: the figure the peers print.
    Checkout,
    /// 7: a drop to ten buyers per unit, every eighth underfunded, every buyer told
    /// SOLD_OUT waiting in the waitlist: units sold of units on sale, sales through the
    /// waitlist, and the time from a unit's return to the next waiter's COMPLETED.
    SellThrough,
    /// 8: a bot attack on a drop for accounts made before its announcement: bots
    /// (unfunded, or made after the announcement) from ten addresses retry passes and
    /// reservations while eligible buyers race; a sign-up flood from the same addresses
    /// while members sign in.
    Bots,
    /// 9: the seed documents' own experiments through HTTP, each a median of several runs
    /// beside the seed's figures: 1,000 orders for 100 units under each claim strategy
    /// (`CLAIM_STRATEGY`), and the gate against a Redis Streams intake queue.
    Seeds,
    /// 10: the database's own limit for the checkout's work: the same checkout as SQL in
    /// one function (bench/sql/limit_checkout.sql), 32 buyers per call from 4 clients and
    /// one per call from 64, on the same server; part 6's levels as a fraction of it.
    Limit,
}

impl Scenario {
    pub const ALL: [Scenario; 10] = [
        Scenario::Ceilings,
        Scenario::DropGate,
        Scenario::DropDirect,
        Scenario::Claims,
        Scenario::Saga,
        Scenario::Checkout,
        Scenario::SellThrough,
        Scenario::Bots,
        Scenario::Seeds,
        Scenario::Limit,
    ];

    /// The line that announces the part on the console as it starts.
    pub fn title(self) -> &'static str {
        match self {
            Scenario::Ceilings => "scenario 5: the machine's limits",
            Scenario::DropGate => "scenario 1: drops with the gate, three back to back",
            Scenario::DropDirect => "scenario 2: the drop without the gate",
            Scenario::Claims => "scenario 3: claim strategies (the order service's claim bench)",
            Scenario::Saga => "scenario 4: checkout saga throughput",
            Scenario::Checkout => "scenario 6: whole checkouts at each of --checkout-clients",
            Scenario::SellThrough => {
                "scenario 7: sell-through, every buyer told SOLD_OUT waiting in the waitlist"
            }
            Scenario::Bots => "scenario 8: a bot attack on a members' drop, and a sign-up flood",
            Scenario::Seeds => "scenario 9: the seeds' tables, through the real services",
            Scenario::Limit => "scenario 10: the database's own limit (the checkout as SQL alone)",
        }
    }
}

/// The peers are measured with 3,000 buyers; fewer would not compare (`--quick` excepted).
pub const CHECKOUT_MIN_BUYERS: u64 = 3_000;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A short run (fewer buyers, shorter phases) to check that everything works.
    #[arg(long)]
    pub quick: bool,
    /// Concurrent virtual clients (and HTTP connections) in every phase.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Units in a drop (scenarios 1 and 2).
    #[arg(long)]
    pub units: Option<u64>,
    /// Buyers in a drop (scenarios 1 and 2).
    #[arg(long)]
    pub buyers: Option<u64>,
    /// Seconds each throughput phase runs (ceilings, gate throughput, saga).
    #[arg(long)]
    pub phase_secs: Option<u64>,
    /// Back-to-back drops with the gate, for the memory-growth check (2 to 20).
    #[arg(long, default_value_t = 3)]
    pub drops: u32,
    /// PostgreSQL connections of the commit-ceiling loop.
    #[arg(long)]
    pub pg_connections: Option<u32>,
    /// Concurrency levels of the checkout part, a comma list (default 64,256).
    #[arg(long, value_delimiter = ',')]
    pub checkout_clients: Vec<usize>,
    /// Buyers per level of the checkout part, one checkout each (at least 3000 unless --quick).
    #[arg(long)]
    pub checkout_buyers: Option<u64>,
    /// Units of the sell-through part, 1 to 500 (ten buyers per unit; default 200, 50 with
    /// --quick).
    #[arg(long)]
    pub sell_through_units: Option<u64>,
    /// Run only these parts (repeatable); all of them by default.
    #[arg(long, value_enum)]
    pub only: Vec<Scenario>,
    /// Where the JSON and markdown results are written.
    #[arg(long, default_value = "bench-results")]
    pub out_dir: PathBuf,
    /// Administrator URL of PostgreSQL; the benchmark creates and drops its own database.
    #[arg(
        long,
        env = "TEST_ADMIN_DATABASE_URL",
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub admin_database_url: String,
    /// Redis; every key the benchmark writes carries a prefix of its own, deleted at the end.
    #[arg(
        long,
        env = "TEST_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub redis_url: String,
    /// No progress bars (they are hidden anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

/// Settings of one run after defaults, `--quick` and validation.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub quick: bool,
    pub concurrency: usize,
    pub units: u64,
    pub buyers: u64,
    pub phase: Duration,
    pub drops: u32,
    pub pg_connections: u32,
    /// Concurrency levels of the checkout part, in the order given.
    pub checkout_clients: Vec<usize>,
    pub checkout_buyers: u64,
    /// Units of the sell-through part (ten buyers per unit).
    pub sell_through_units: u64,
    pub scenarios: Vec<Scenario>,
    pub out_dir: PathBuf,
    #[serde(skip)]
    pub admin_database_url: String,
    #[serde(skip)]
    pub redis_url: String,
    pub progress: bool,
}

impl Settings {
    pub fn from_args(a: &RunArgs) -> Result<Self> {
        let (concurrency, units, buyers, phase_secs) = if a.quick {
            (64, 20, 1_000, 2)
        } else {
            (256, 100, 10_000, 5)
        };
        let concurrency = a.concurrency.unwrap_or(concurrency);
        let units = a.units.unwrap_or(units);
        let buyers = a.buyers.unwrap_or(buyers);
        let phase_secs = a.phase_secs.unwrap_or(phase_secs);
        if concurrency == 0 || concurrency > 4_096 {
            return Err(Error::Config(format!(
                "--concurrency must be 1..=4096, got {concurrency}"
            )));
        }
        if units == 0 || buyers == 0 {
            return Err(Error::Config(
                "--units and --buyers must be positive".into(),
            ));
        }
        if phase_secs == 0 || phase_secs > 600 {
            return Err(Error::Config(format!(
                "--phase-secs must be 1..=600, got {phase_secs}"
            )));
        }
        if !(2..=20).contains(&a.drops) {
            return Err(Error::Config(format!(
                "--drops must be 2..=20, got {}",
                a.drops
            )));
        }
        let checkout_clients = if a.checkout_clients.is_empty() {
            vec![64, 256]
        } else {
            a.checkout_clients.clone()
        };
        if let Some(bad) = checkout_clients.iter().find(|&&c| c == 0 || c > 4_096) {
            return Err(Error::Config(format!(
                "--checkout-clients levels must be 1..=4096, got {bad}"
            )));
        }
        let checkout_buyers =
            a.checkout_buyers
                .unwrap_or(if a.quick { 300 } else { CHECKOUT_MIN_BUYERS });
        if checkout_buyers == 0 || (!a.quick && checkout_buyers < CHECKOUT_MIN_BUYERS) {
            return Err(Error::Config(format!(
                "--checkout-buyers must be at least {CHECKOUT_MIN_BUYERS} (any positive number with --quick), got {checkout_buyers}"
            )));
        }
        let sell_through_units = a
            .sell_through_units
            .unwrap_or(if a.quick { 50 } else { 200 });
        if !(1..=500).contains(&sell_through_units) {
            return Err(Error::Config(format!(
                "--sell-through-units must be 1..=500, got {sell_through_units}"
            )));
        }
        // PostgreSQL allows 100 connections here and the services need theirs.
        let pg_connections = a.pg_connections.unwrap_or(32).clamp(1, 64);
        require_loopback(&a.admin_database_url)?;
        require_loopback(&a.redis_url)?;
        let scenarios = if a.only.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            Scenario::ALL
                .into_iter()
                .filter(|s| a.only.contains(s))
                .collect()
        };
        Ok(Self {
            quick: a.quick,
            concurrency,
            units,
            buyers,
            phase: Duration::from_secs(phase_secs),
            drops: a.drops,
            pg_connections,
            checkout_clients,
            checkout_buyers,
            sell_through_units,
            scenarios,
            out_dir: a.out_dir.clone(),
            admin_database_url: a.admin_database_url.clone(),
            redis_url: a.redis_url.clone(),
            progress: !a.no_progress,
        })
    }

    pub fn runs(&self, s: Scenario) -> bool {
        self.scenarios.contains(&s)
    }
}

/// Refuses any URL whose host is not this machine: the benchmark must never load
/// anything but loopback.
pub fn require_loopback(url: &str) -> Result<()> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| Error::Config(format!("invalid URL: {e}")))?;
    match parsed.host_str() {
        Some("127.0.0.1" | "localhost" | "[::1]" | "::1") => Ok(()),
        Some(other) => Err(Error::NotLoopback(other.to_owned())),
        None => Err(Error::NotLoopback("(no host)".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["paysaga-bench"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).run
    }

    #[test]
    fn loopback_only() {
        assert!(require_loopback("postgres://postgres@127.0.0.1:5432/postgres").is_ok());
        assert!(require_loopback("redis://localhost:6379/").is_ok());
        assert!(require_loopback("http://[::1]:8080/").is_ok());
        assert!(matches!(
            require_loopback("postgres://u@db.example.com/x"),
            Err(Error::NotLoopback(_))
        ));
        assert!(matches!(
            require_loopback("http://10.0.0.7:8085"),
            Err(Error::NotLoopback(_))
        ));
    }

    #[test]
    fn quick_changes_the_defaults_and_flags_override_them() {
        let s = Settings::from_args(&args(&["--quick", "--concurrency", "32"])).unwrap();
        assert_eq!((s.concurrency, s.buyers, s.units), (32, 1_000, 20));
        let full = Settings::from_args(&args(&[])).unwrap();
        assert_eq!(
            (full.concurrency, full.buyers, full.units),
            (256, 10_000, 100)
        );
        assert_eq!(full.scenarios.len(), Scenario::ALL.len());
    }

    #[test]
    fn only_keeps_the_canonical_order() {
        let s = Settings::from_args(&args(&["--only", "saga", "--only", "ceilings"])).unwrap();
        assert_eq!(s.scenarios, vec![Scenario::Ceilings, Scenario::Saga]);
    }

    #[test]
    fn checkout_levels_and_buyers() {
        let s = Settings::from_args(&args(&["--only", "checkout"])).unwrap();
        assert_eq!(s.scenarios, vec![Scenario::Checkout]);
        let cases: [(&[&str], Vec<usize>, u64); 5] = [
            (&["--only", "checkout"], vec![64, 256], 3_000),
            (
                &[
                    "--checkout-clients",
                    "256,8,32",
                    "--checkout-buyers",
                    "5000",
                ],
                vec![256, 8, 32],
                5_000,
            ),
            (
                &["--checkout-clients", "8", "--checkout-clients", "32"],
                vec![8, 32],
                3_000,
            ),
            (&["--quick", "--checkout-clients", "8,32"], vec![8, 32], 300),
            (&["--quick", "--checkout-buyers", "50"], vec![64, 256], 50),
        ];
        for (given, clients, buyers) in cases {
            let s = Settings::from_args(&args(given)).unwrap();
            assert_eq!(
                (s.checkout_clients, s.checkout_buyers),
                (clients, buyers),
                "{given:?}"
            );
        }

        for bad in [
            &["--checkout-buyers", "2999"][..],
            &["--checkout-buyers", "0", "--quick"],
            &["--checkout-clients", "0,64"],
            &["--checkout-clients", "64,5000"],
        ] {
            assert!(
                matches!(Settings::from_args(&args(bad)), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
        assert!(Cli::try_parse_from(["paysaga-bench", "--checkout-clients", "64,x"]).is_err());
    }

    #[test]
    fn sell_through_is_its_own_part() {
        let s = Settings::from_args(&args(&["--only", "sell-through"])).unwrap();
        assert_eq!(s.scenarios, vec![Scenario::SellThrough]);
        assert_eq!(s.sell_through_units, 200);
        let quick = Settings::from_args(&args(&["--quick", "--sell-through-units", "12"])).unwrap();
        assert_eq!(quick.sell_through_units, 12);
        for bad in ["0", "501"] {
            assert!(matches!(
                Settings::from_args(&args(&["--sell-through-units", bad])),
                Err(Error::Config(_))
            ));
        }
    }

    #[test]
    fn bots_is_its_own_part() {
        let s = Settings::from_args(&args(&["--only", "bots"])).unwrap();
        assert_eq!(s.scenarios, vec![Scenario::Bots]);
    }

    #[test]
    fn remote_database_is_refused() {
        let e = Settings::from_args(&args(&[
            "--admin-database-url",
            "postgres://p@10.1.2.3/postgres",
        ]));
        assert!(matches!(e, Err(Error::NotLoopback(_))));
    }
}
