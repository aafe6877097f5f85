//! `paysaga up`: PostgreSQL and Redis, the schema bootstrap, the five services as
//! separate processes (this binary, `paysaga service <name>`; with `--instances N`, N of
//! each behind one HAProxy), the demo drop, then every service supervised (restarted
//! with backoff when it exits) until Ctrl-C.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{anyhow, Context};
use paysaga_drop::Endpoints;
use paysaga_supervisor::{
    haproxy,
    infra::{self, Infra, InfraChoice},
    process::{free_port, label, reserve_port},
    services::Backoff,
    wiring::Launcher,
    Haproxy, ServiceKind, Services, Wiring,
};

use crate::{
    args::UpArgs,
    demo::{self, DemoSettings},
    table,
};

/// Variables the run command sets itself for each service; the caller's values for
/// them are not passed through (`DATABASE_URL` names the server, not a role's login).
const MANAGED: [&str; 11] = [
    // The system `up` starts is a development one: its roles have the development
    // password and unset keys are the development keys, so its children always run in
    // development mode (the wiring sets it), whatever the caller's shell says.
    "PAYSAGA_DEV_KEYS",
    "DATABASE_URL",
    "ADMIN_DATABASE_URL",
    "REDIS_URL",
    "REDIS_PREFIX",
    "LISTEN_ADDR",
    "ACCOUNT_URL",
    "ORDER_URL",
    "GATE_URL",
    "ORCHESTRATOR_URL",
    "PAYSAGA_DATA_DIR",
];

/// The project's `.data/` (private servers, logs), or `--data-dir`.
fn data_dir(args: &UpArgs) -> PathBuf {
    if let Some(d) = &args.data_dir {
        return d.clone();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let base = if root.join("Cargo.toml").is_file() {
        root
    } else {
        PathBuf::from(".")
    };
    let base = std::fs::canonicalize(&base).unwrap_or(base);
    base.join(".data")
}

/// Binds every service's port now and keeps the sockets until each service is started
/// with its own, so no other process can take a port in between. With `balanced`, the
/// ports are HAProxy's, which binds them itself: they are only checked to be free.
fn ports(free: bool, balanced: bool) -> anyhow::Result<BTreeMap<ServiceKind, u16>> {
    let mut ports = BTreeMap::new();
    for kind in ServiceKind::ALL {
        let port = match (free, balanced) {
            (true, false) => reserve_port(0)?,
            (true, true) => free_port()?,
            (false, _) => {
                let p = kind.default_port();
                let in_use = || {
                    anyhow!(
                        "port {p} ({kind}) is in use: is another paysaga running? Stop it, or run `paysaga up --free-ports`"
                    )
                };
                if balanced {
                    std::net::TcpListener::bind(("127.0.0.1", p)).map_err(|_| in_use())?;
                    p
                } else {
                    reserve_port(p).map_err(|_| in_use())?
                }
            }
        };
        ports.insert(kind, port);
    }
    Ok(ports)
}

/// Each instance's own ports (free ones, reserved until the instance starts).
fn instance_ports(n: u16) -> anyhow::Result<Vec<BTreeMap<ServiceKind, u16>>> {
    (0..n)
        .map(|_| {
            ServiceKind::ALL
                .iter()
                .map(|&k| Ok((k, reserve_port(0)?)))
                .collect()
        })
        .collect()
}

pub async fn run(args: UpArgs) -> anyhow::Result<ExitCode> {
    if args.no_build {
        println!("paysaga: --no-build has no effect: the services run from this binary");
    }
    let data = data_dir(&args);
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;

    println!("paysaga: finding PostgreSQL and Redis…");
    let mut infra = Infra::acquire(
        &data,
        InfraChoice {
            force_private: args.private,
        },
    )
    .await?;
    println!(
        "  PostgreSQL  {}  ({})",
        infra.admin_url_redacted(),
        infra.pg_origin
    );
    println!(
        "  Redis       {}  ({})",
        infra::redact(&infra.redis_url),
        infra.redis_origin
    );

    let result = run_with(&args, &data, &infra).await;
    infra.stop();
    result
}

async fn run_with(args: &UpArgs, data: &Path, infra: &Infra) -> anyhow::Result<ExitCode> {
    let balanced = args.instances > 1;
    // Before anything is created: a missing HAProxy is the user's to install.
    let haproxy_program = if balanced {
        Some(haproxy::find().ok_or_else(|| anyhow!("{}", haproxy::INSTALL_HINT))?)
    } else {
        None
    };
    let database = reqwest::Url::parse(&infra.admin_url)?
        .path()
        .trim_start_matches('/')
        .to_owned();
    paysaga_common::db::create_database(&infra.admin_url, &database)
        .await
        .context("creating the database")?;
    paysaga_common::db::bootstrap(
        &infra.admin_url,
        paysaga_common::db::RolePasswords::Development,
    )
    .await
    .context("bootstrapping roles and schemas")?;

    let mut database_urls = BTreeMap::new();
    for kind in ServiceKind::ALL {
        if let Some(role) = kind.db_role() {
            database_urls.insert(kind, paysaga_common::db::role_url(&infra.admin_url, role)?);
        }
    }
    // The instances' ports are held first: a free port HAProxy is to bind, chosen and
    // let go before them, could otherwise be handed to an instance.
    let instances = if balanced {
        instance_ports(args.instances)?
    } else {
        Vec::new()
    };
    let mut wiring = Wiring::direct(
        database_urls,
        infra.redis_url.clone(),
        args.redis_prefix.clone(),
        ports(args.free_ports, balanced)?,
    );
    wiring.instances = instances;
    // Each service runs from this very binary, so `cargo run -p paysaga -- up` builds
    // everything once, in one feature resolution, and never starts a stale service.
    wiring.launcher = Launcher::MultiCall {
        program: std::env::current_exe().context("cannot locate the running executable")?,
        args: vec!["service".into()],
    };
    // Pass the caller's service settings (RESERVATION_TTL_SECS, keys, RUST_LOG, ...) through.
    wiring.common_env = std::env::vars()
        .filter(|(k, _)| !MANAGED.contains(&k.as_str()))
        .collect();
    if std::env::var("RECOMPUTE_INTERVAL_MS").is_err() {
        // The gate learns the demo product at its next recompute; one second keeps the wait short.
        wiring.service_env.push((
            ServiceKind::Gate,
            "RECOMPUTE_INTERVAL_MS".into(),
            "1000".into(),
        ));
    }
    if std::env::var("WEBHOOK_ALLOW_PRIVATE_TARGETS").is_err() {
        // A development system's webhook receivers run on this machine (127.0.0.1);
        // outside it, deliveries reach public addresses only.
        wiring.service_env.push((
            ServiceKind::Orchestrator,
            "WEBHOOK_ALLOW_PRIVATE_TARGETS".into(),
            "1".into(),
        ));
    }
    if args.no_demo {
        // The wiring raises the sign-up limits out of the demo's way (its buyers all sign
        // up from this machine); a system without the demo keeps the member service's
        // own limits, unless the caller's environment sets them.
        let limits = member::config::SignUpLimits::default();
        for (name, value) in [
            ("SIGNUP_MAX_PER_ADDRESS", limits.per_address),
            ("SIGNUP_MAX_TOTAL", limits.total),
        ] {
            if std::env::var(name).is_err() {
                wiring
                    .service_env
                    .push((ServiceKind::Member, name.into(), value.to_string()));
            }
        }
    }
    if !args.no_demo && std::env::var("WAITLIST_OFFER_TTL_SECS").is_err() {
        // A unit offered to a demo buyer who went away passes on within seconds, not
        // the default two minutes, so the demo always ends quickly.
        wiring.service_env.push((
            ServiceKind::Order,
            "WAITLIST_OFFER_TTL_SECS".into(),
            demo::DEMO_OFFER_TTL_SECS.to_string(),
        ));
    }
    let log_dir = data
        .join("logs")
        .join(chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string());
    std::fs::create_dir_all(&log_dir)?;

    // HAProxy first: the services reach each other through it from their first request.
    let mut lb = match &haproxy_program {
        Some(program) => {
            println!(
                "paysaga: starting HAProxy in front of {} instances of every service…",
                args.instances
            );
            let lb = Haproxy::start(program, &wiring, &log_dir).await?;
            println!(
                "  haproxy       pid {:<7}  config {}",
                lb.pid().unwrap_or_default(),
                lb.config_path().display()
            );
            Some(lb)
        }
        None => None,
    };

    println!("paysaga: starting account, member, order, gate and orchestrator…");
    let mut services = Services::launch(wiring.specs(&log_dir)?, log_dir.clone()).await?;
    if let Some(lb) = &lb {
        lb.wait_routing(&wiring, ServiceKind::ALL, Duration::from_secs(30))
            .await?;
    }
    if balanced {
        for p in services.all() {
            println!(
                "  {:<15} {}  pid {:<7}  ready  (behind {})",
                p.spec().label(),
                p.url(),
                p.pid().unwrap_or_default(),
                wiring.url(p.kind())
            );
        }
    } else {
        for kind in ServiceKind::ALL {
            let pid = services
                .process(kind)
                .and_then(|p| p.pid())
                .unwrap_or_default();
            println!(
                "  {:<13} {}  pid {pid:<7}  ready",
                label(kind, None),
                wiring.url(kind)
            );
        }
    }
    println!("  logs          {}", log_dir.display());

    let endpoints = Endpoints::from_wiring(&wiring);
    let mut ok = true;
    let mut sample = None;
    if !args.no_demo {
        let settings = DemoSettings {
            units: args.units,
            buyers: args.buyers as usize,
            price: args.price,
        };
        println!(
            "\npaysaga: playing the demo drop ({} buyers, {} units)…",
            settings.buyers, settings.units
        );
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&infra.admin_url)
            .await?;
        let result = demo::play(&endpoints, &pool, &settings).await?;
        println!("\n{}\n", result.render(&settings));
        ok = result.ok();
        sample = result
            .sample_payment()
            .map(|(id, m)| (id, m.to_owned(), result.product_id));
        pool.close().await;
    }

    print_next_steps(&wiring, sample.as_ref(), &log_dir, args.free_ports);

    if args.exit_after_demo {
        println!("paysaga: stopping the services (--exit-after-demo)…");
        services.shutdown().await?;
        if let Some(lb) = lb.as_mut() {
            lb.stop();
        }
        println!(
            "paysaga: demo {}",
            if ok {
                "passed: every invariant holds"
            } else {
                "FAILED"
            }
        );
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    println!(
        "paysaga: running; a service that exits is restarted. Press Ctrl-C to stop every service."
    );
    tokio::select! {
        _ = paysaga_common::server::shutdown_signal() => {}
        never = services.supervise(Backoff::default(), |event| println!("paysaga: {event}")) => {
            match never {}
        }
    }
    println!("\npaysaga: stopping the services…");
    services.shutdown().await?;
    if let Some(lb) = lb.as_mut() {
        lb.stop();
    }
    println!("paysaga: stopped.");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_next_steps(
    wiring: &Wiring,
    sample: Option<&(uuid::Uuid, String, i64)>,
    log_dir: &Path,
    free_ports: bool,
) {
    let operator = paysaga_common::auth::ServiceRole::Operator;
    let token = paysaga_common::auth::Minter::dev_service(
        operator,
        paysaga_common::auth::Audience::Orchestrator,
    )
    .mint(
        operator.name(),
        Duration::from_secs(paysaga_common::credentials::MAX_SERVICE_TOKEN_LIFETIME_SECS as u64),
    );
    let orch = wiring.url(ServiceKind::Orchestrator);
    let flags = if free_ports {
        format!(
            " --member-url {} --gate-url {} --order-url {} --account-url {} --orchestrator-url {}",
            wiring.url(ServiceKind::Member),
            wiring.url(ServiceKind::Gate),
            wiring.url(ServiceKind::Order),
            wiring.url(ServiceKind::Account),
            orch
        )
    } else {
        String::new()
    };
    println!("where to look next:");
    let rows: Vec<Vec<String>> = ServiceKind::ALL
        .iter()
        .map(|k| {
            let u = wiring.url(*k);
            vec![
                k.name().to_owned(),
                format!("{u}/docs"),
                format!("{u}/openapi.json"),
                format!("{}/metrics", wiring.metrics_url(*k)),
            ]
        })
        .collect();
    println!(
        "{}\n",
        table::render(&["service", "API docs", "OpenAPI", "metrics"], &rows)
    );
    println!("  service logs (JSON lines): {}", log_dir.display());
    // The operator commands run outside the system, so they need development mode too to
    // mint their credential with the development key.
    let run = "PAYSAGA_DEV_KEYS=1 cargo run --release -p paysaga --";
    println!("  operator commands:  {run}{flags} payments list");
    if let Some((id, _, product)) = sample {
        println!("                      {run}{flags} payments show {id}");
        println!("                      {run}{flags} stock {product}");
        println!("                      {run}{flags} quota {product}");
        println!("  the demo's members: {run}{flags} member list");
        println!(
            "  a buyer token:      MEMBER_PASSWORD={} {run}{flags} member sign-in <email from the list>",
            paysaga_drop::setup::BUYER_PASSWORD
        );
    }
    {
        use paysaga_staff::dev;
        println!("  DEVELOPMENT ONLY, the staff admin this development system made (public password and second-factor secret; never on a real system):");
        println!("    console:    {orch}/console  (email {}, password {}, then the code of the TOTP secret below)", dev::ADMIN_EMAIL, dev::ADMIN_PASSWORD);
        println!(
            "    TOTP:       secret {}  ({})",
            dev::ADMIN_TOTP_SECRET,
            dev::admin_otpauth_url()
        );
        println!("    code now:   {} (changes every 30 s; any authenticator app given the secret shows it)", dev::admin_code_now());
        println!(
            "    terminal:   PAYSAGA_STAFF_PASSWORD={} {run}{flags} staff sign-in --email {}",
            dev::ADMIN_PASSWORD,
            dev::ADMIN_EMAIL
        );
    }
    println!("  a DEVELOPMENT operator credential for curl at the orchestrator's API (valid 15 minutes, the most a service credential may live; it opens no other service: `{run} token service operator --for <service>` mints one for another; anyone can mint these, never use the development keys in production):");
    println!("    export TOKEN={token}");
    if let Some((id, _, _)) = sample {
        println!("    curl -s -H \"Authorization: Bearer $TOKEN\" {orch}/v1/payments/{id}/steps");
    }
    println!("    curl -s -H \"Authorization: Bearer $TOKEN\" '{orch}/v1/payments?state=COMPLETED&limit=5'");
    println!();
}
