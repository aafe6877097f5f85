//! Sign-ins per second through the real member service (in this process, with the
//! account service beside it, on a database of their own) with OWASP's Argon2id
//! parameters: the members are seeded with the bulk endpoint (one hash), then signed in
//! at each concurrency level for a fixed time. One more phase signs in unknown emails,
//! which must cost the same (verified against the dummy hash).

use std::{future::Future, sync::Arc, time::Duration};

use anyhow::{bail, Context as _};
use clap::{builder::TypedValueParser as _, Args};
use member::config::{Argon2Params, Throttle};
use paysaga_common::{
    auth::ServiceRole, client::CallError, credentials::TokenSource, server::Shutdown,
};
use paysaga_contracts::member::{
    api::{BulkMember, BulkSignUpRequest, Credentials},
    client::MemberClient,
};
use tokio::{net::TcpListener, sync::oneshot};

use crate::{
    benchdb::BenchDb,
    load::{self, Load, Outcome},
    stats::{self, RunSummary},
};

const PASSWORD: &str = "bench-orbit-canyon-47";

/// `signin-bench`'s settings.
#[derive(Debug, Clone, Args)]
pub struct SigninArgs {
    /// Members seeded (signed in round-robin).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=5_000).map(|n| n as usize))]
    pub members: usize,
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 8])]
    pub concurrency: Vec<usize>,
    /// Seconds each run signs in for.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: u64,
    /// Argon2id memory in KiB (OWASP's 19456 by default).
    #[arg(long, default_value_t = Argon2Params::OWASP.memory_kib)]
    pub memory_kib: u32,
    /// Argon2id passes (OWASP's 2 by default).
    #[arg(long, default_value_t = Argon2Params::OWASP.iterations)]
    pub iterations: u32,
    /// Administrator URL of PostgreSQL; a database is created and dropped for the run.
    #[arg(
        long,
        env = "TEST_ADMIN_DATABASE_URL",
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub admin_database_url: String,
}

/// What the benchmark measured.
pub struct SigninReport {
    pub argon2: Argon2Params,
    /// Hashes the service computes at once (its `ARGON2_MAX_CONCURRENT`).
    pub hash_slots: usize,
    pub cpus: usize,
    /// One per concurrency level, then the unknown-email phase.
    pub runs: Vec<RunSummary>,
}

/// A service running in a task of this process until dropped.
struct Running {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

async fn start<F, Fut>(name: &str, run: F) -> anyhow::Result<Running>
where
    F: FnOnce(TcpListener, Shutdown) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel();
    let running = Running {
        url: url.clone(),
        stop: Some(stop),
        task: tokio::spawn(run(
            listener,
            Box::pin(async move {
                let _ = stopped.await;
            }),
        )),
    };
    let http = paysaga_common::client::http_client(Duration::from_secs(2));
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if running.task.is_finished() {
            bail!("{name} stopped before it was ready");
        }
        if let Ok(r) = http.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                return Ok(running);
            }
        }
        if tokio::time::Instant::now() >= until {
            bail!("{name} was not ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn outcome(r: Result<impl Sized, CallError>) -> Outcome {
    match r {
        Ok(_) => Outcome::ok(),
        Err(e) => match e.status() {
            Some(401) => Outcome::of("invalid_credentials"),
            Some(status) => Outcome::error(format!("http_{status}")),
            None => Outcome::error("transport"),
        },
    }
}

/// Seeds the members, then signs in at each concurrency level and with unknown emails.
pub async fn run(args: &SigninArgs) -> anyhow::Result<SigninReport> {
    let db = BenchDb::create(&args.admin_database_url)
        .await
        .context("creating the benchmark database")?;
    let result = measure(&db, args).await;
    if let Err(e) = db.drop_now().await {
        tracing::warn!(error = %e, "dropping the benchmark database failed");
    }
    result
}

async fn measure(db: &BenchDb, args: &SigninArgs) -> anyhow::Result<SigninReport> {
    let mut account_config = account::Config::local(db.role_url("account_app")?);
    account_config.database.max_connections = 8;
    let account = start("account", |listener, shutdown| {
        account::run(account_config, listener, shutdown)
    })
    .await?;

    let argon2 = Argon2Params {
        memory_kib: args.memory_kib,
        iterations: args.iterations,
        parallelism: Argon2Params::OWASP.parallelism,
    };
    let mut config = member::Config::local(db.role_url("member_app")?, &account.url);
    config.argon2 = argon2;
    config.bulk_signup = true;
    // Every attempt here is the benchmark's own; none should be refused for volume.
    config.throttle = Throttle {
        per_pair: u32::MAX,
        per_address: u32::MAX,
        per_email: u32::MAX,
        window: Duration::from_secs(60),
    };
    let hash_slots = config.argon2_max_concurrent;
    let service = start("member", |listener, shutdown| {
        member::run(config, listener, shutdown)
    })
    .await?;
    let client = MemberClient::new(
        &service.url,
        TokenSource::development(ServiceRole::Operator),
        Duration::from_secs(60),
    );

    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let emails: Vec<String> = (0..args.members)
        .map(|i| format!("bench-{run_id}-{i}@example.com"))
        .collect();
    client
        .bulk_sign_up(&BulkSignUpRequest {
            password: PASSWORD.into(),
            members: emails
                .iter()
                .map(|e| BulkMember { email: e.clone() })
                .collect(),
            opening_balance: None,
        })
        .await
        .context("seeding members")?;
    let emails = Arc::new(emails);

    let mut runs = Vec::new();
    for &concurrency in &args.concurrency {
        let load = Load::new(
            format!("sign-in: {concurrency} clients"),
            concurrency,
            u64::MAX,
            Duration::from_secs(args.seconds),
        );
        let (client, emails) = (client.clone(), emails.clone());
        let summary = load::run(&load, move |ctx| {
            let (client, emails) = (client.clone(), emails.clone());
            async move {
                let creds = Credentials {
                    email: emails[ctx.seq as usize % emails.len()].clone(),
                    password: PASSWORD.into(),
                };
                outcome(client.sign_in(&creds).await)
            }
        })
        .await;
        eprintln!("{}", summary.line());
        runs.push(summary);
    }
    let concurrency = args.concurrency.iter().copied().max().unwrap_or(1);
    let load = Load::new(
        format!("unknown email: {concurrency} clients"),
        concurrency,
        u64::MAX,
        Duration::from_secs(args.seconds),
    );
    let unknown_client = client.clone();
    let summary = load::run(&load, move |ctx| {
        let client = unknown_client.clone();
        let run_id = run_id.clone();
        async move {
            let creds = Credentials {
                email: format!("nobody-{run_id}-{}@example.com", ctx.seq),
                password: PASSWORD.into(),
            };
            outcome(client.sign_in(&creds).await)
        }
    })
    .await;
    eprintln!("{}", summary.line());
    runs.push(summary);
    drop(service);
    drop(account);
    Ok(SigninReport {
        argon2,
        hash_slots,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        runs,
    })
}

impl SigninReport {
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "Argon2id m={} KiB, t={}, p={}; {} hash slots; {} CPUs\n\n",
            self.argon2.memory_kib,
            self.argon2.iterations,
            self.argon2.parallelism,
            self.hash_slots,
            self.cpus
        );
        out.push_str(&stats::markdown_table(&self.runs));
        out
    }

    /// An error when any sign-in failed for another reason than the expected one.
    pub fn verdict(&self) -> anyhow::Result<()> {
        if self.runs.iter().any(|r| r.errors() > 0) {
            bail!("some sign-ins failed");
        }
        Ok(())
    }
}

/// The `signin-bench` binary: its flags, the run, the markdown on stdout.
pub async fn main() -> anyhow::Result<()> {
    let args: SigninArgs = super::start(
        "signin-bench",
        "What a password check costs the member service.",
    );
    eprintln!(
        "signin-bench: {} members, {} s per run at {:?} clients, Argon2id m={} KiB t={}",
        args.members, args.seconds, args.concurrency, args.memory_kib, args.iterations
    );
    let report = run(&args).await?;
    println!("{}", report.markdown());
    report.verdict()
}
