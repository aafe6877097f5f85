//! A service never runs on keys anyone can sign with unless told to: started bare (no
//! key variables, no `PAYSAGA_DEV_KEYS`) each of the five binaries exits at once, naming
//! every variable it misses; a development key configured explicitly is refused by
//! name; and development mode (`PAYSAGA_DEV_KEYS=1`) starts with one loud warning.

use std::{
    path::Path,
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use paysaga_common::{
    auth::ServiceRole,
    keys::{encode_signing_key, encode_verifying_key, DevKey},
    testkit::{self, TestDb},
};
use paysaga_e2e::binaries;

/// How long a refusing service may take to exit: it reads its environment and stops,
/// touching neither PostgreSQL nor Redis.
const EXIT_WITHIN: Duration = Duration::from_secs(10);

const BUYER_KEYS: &str = "MEMBER_JWKS_URL or JWT_PUBLIC_KEY";

/// What each binary must name when started with nothing configured: every service
/// verifies callers (`SERVICE_KEYS`); the callers also sign their own credentials
/// (`SERVICE_SIGNING_KEY`), and the orchestrator, which serves the console, the
/// console's own (`CONSOLE_SIGNING_KEY`), and seals webhook and staff TOTP secrets
/// (`WEBHOOK_SECRET_KEY`, `STAFF_SECRET_KEY`).
const REQUIRED: [(&str, &[&str]); 5] = [
    ("account", &["DATABASE_URL", BUYER_KEYS, "SERVICE_KEYS"]),
    (
        "order",
        &[
            "DATABASE_URL",
            "PASS_PUBLIC_KEY",
            BUYER_KEYS,
            "SERVICE_KEYS",
        ],
    ),
    (
        "gate",
        &[
            "PASS_SIGNING_KEY",
            BUYER_KEYS,
            "SERVICE_KEYS",
            "SERVICE_SIGNING_KEY",
        ],
    ),
    (
        "orchestrator",
        &[
            "DATABASE_URL",
            BUYER_KEYS,
            "SERVICE_KEYS",
            "SERVICE_SIGNING_KEY",
            "CONSOLE_SIGNING_KEY",
            "WEBHOOK_SECRET_KEY",
            "STAFF_SECRET_KEY",
        ],
    ),
    (
        "member",
        &[
            "DATABASE_URL",
            "MEMBER_SIGNING_KEYS or MEMBER_SIGNING_KEYS_FILE",
            "MEMBER_VERIFICATION_KEY",
            "SERVICE_KEYS",
            "SERVICE_SIGNING_KEY",
        ],
    ),
];

/// What a finished (or killed) run left behind.
struct Run {
    status: Option<ExitStatus>,
    output: String,
}

/// Starts `name` with only PATH, `LISTEN_ADDR` and `env`, and waits for it to exit; a
/// process still running after `EXIT_WITHIN` is killed (`status` None).
fn run_bare(name: &str, env: &[(&str, String)]) -> anyhow::Result<Run> {
    let dir = binaries::log_dir(&format!("startup-{name}"))?;
    let (out, err) = (dir.join("stdout.log"), dir.join("stderr.log"));
    let mut cmd = Command::new(binaries::binary(name)?);
    cmd.env_clear()
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?);
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > EXIT_WITHIN {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Run {
        status,
        output: read(&out) + &read(&err),
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `name` started as [`run_bare`] with `env` is [`refused`], and the output names every
/// one of `words` (the setting, and why), so that an operator reading it knows what to
/// change.
fn refuses_naming(
    name: &str,
    env: &[(&str, String)],
    words: &[&str],
    what: &str,
) -> anyhow::Result<()> {
    let run = run_bare(name, env)?;
    refused(name, &run);
    assert!(
        words.iter().all(|w| run.output.contains(w)),
        "{name} did not refuse {what}:\n{}",
        run.output
    );
    Ok(())
}

fn refused(name: &str, run: &Run) {
    match run.status {
        None => panic!(
            "{name} was still running after {EXIT_WITHIN:?}; output:\n{}",
            run.output
        ),
        Some(s) => assert!(
            !s.success(),
            "{name} exited successfully; output:\n{}",
            run.output
        ),
    }
}

fn fresh_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&rand::random())
}

/// `SERVICE_KEYS` with a fresh key per role, `role` given `key` instead.
fn service_keys_with(role: ServiceRole, key: &ed25519_dalek::VerifyingKey) -> String {
    ServiceRole::ALL
        .map(|r| {
            let k = if r == role {
                *key
            } else {
                fresh_key().verifying_key()
            };
            format!("{r}:{}", encode_verifying_key(&k))
        })
        .join(",")
}

/// `SERVICE_KEYS` with keys of their own for every role.
fn own_service_keys() -> String {
    service_keys_with(ServiceRole::Gate, &fresh_key().verifying_key())
}

/// `env`, and the keys a service verifies with besides (`JWT_PUBLIC_KEY`,
/// `SERVICE_KEYS`), all fresh ones of its own: only what `env` sets can be refused.
fn with_own_verifying_keys(env: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let buyer_key = encode_verifying_key(&fresh_key().verifying_key());
    let mut all = env.to_vec();
    all.extend([
        ("JWT_PUBLIC_KEY", buyer_key),
        ("SERVICE_KEYS", own_service_keys()),
    ]);
    all
}

/// A `DATABASE_URL` naming `user` and `password` (on a port nothing listens on: a
/// refusing service never connects).
fn database_url(user: &str, password: &str) -> String {
    format!("postgres://{user}:{password}@127.0.0.1:1/paysaga")
}

#[test]
fn every_service_refuses_to_start_without_its_keys_and_names_them_all() -> anyhow::Result<()> {
    for (name, vars) in REQUIRED {
        let run = run_bare(name, &[])?;
        refused(name, &run);
        let line = run
            .output
            .lines()
            .find(|l| l.contains("missing configuration:"))
            .unwrap_or_else(|| panic!("{name} did not say what is missing:\n{}", run.output));
        for var in vars {
            assert!(line.contains(var), "{name} did not name {var}: {line}");
        }
        assert!(
            line.contains("PAYSAGA_DEV_KEYS=1"),
            "{name} does not mention development mode: {line}"
        );
    }
    Ok(())
}

#[test]
fn a_development_key_configured_explicitly_is_refused_by_name() -> anyhow::Result<()> {
    // Everything order needs, all of its own, but the gate's development key.
    refuses_naming(
        "order",
        &with_own_verifying_keys(&[
            ("DATABASE_URL", database_url("order_app", "not-the-dev-one")),
            (
                "PASS_PUBLIC_KEY",
                encode_verifying_key(&DevKey::Passes.verifying_key()),
            ),
        ]),
        &["PASS_PUBLIC_KEY", "DEVELOPMENT"],
        "the development pass key by name",
    )?;

    // Development mode does not make an explicit development key acceptable either.
    refuses_naming(
        "gate",
        &[
            ("PAYSAGA_DEV_KEYS", "1".into()),
            (
                "PASS_SIGNING_KEY",
                encode_signing_key(&DevKey::Passes.signing_key()),
            ),
        ],
        &["PASS_SIGNING_KEY", "DEVELOPMENT"],
        "the development pass key by name",
    )?;

    // A caller's own signing key that is its role's development key.
    refuses_naming(
        "gate",
        &with_own_verifying_keys(&[
            ("PASS_SIGNING_KEY", encode_signing_key(&fresh_key())),
            (
                "SERVICE_SIGNING_KEY",
                encode_signing_key(&DevKey::Service(ServiceRole::Gate).signing_key()),
            ),
        ]),
        &["SERVICE_SIGNING_KEY", "DEVELOPMENT"],
        "its development signing key by name",
    )?;

    // A verifier's key set holding one role's development key, in development mode too.
    let orchestrator_dev = DevKey::Service(ServiceRole::Orchestrator).verifying_key();
    refuses_naming(
        "account",
        &[
            ("PAYSAGA_DEV_KEYS", "1".into()),
            (
                "SERVICE_KEYS",
                service_keys_with(ServiceRole::Orchestrator, &orchestrator_dev),
            ),
        ],
        &["SERVICE_KEYS", "orchestrator", "DEVELOPMENT"],
        "the development orchestrator key by name",
    )?;

    // One key registered for two roles: its holder could sign as either.
    let shared = encode_verifying_key(&fresh_key().verifying_key());
    refuses_naming(
        "order",
        &[
            ("PAYSAGA_DEV_KEYS", "1".into()),
            (
                "SERVICE_KEYS",
                format!("gate:{shared},orchestrator:{shared}"),
            ),
        ],
        &["SERVICE_KEYS", "both gate and orchestrator"],
        "a key shared by two roles",
    )?;

    // The development database password outside development mode.
    refuses_naming(
        "account",
        &with_own_verifying_keys(&[("DATABASE_URL", database_url("account_app", "paysaga-dev"))]),
        &["DATABASE_URL", "development password"],
        "the development password by name",
    )?;

    // A member signing-key list holding the development buyer key.
    refuses_naming(
        "member",
        &[
            ("PAYSAGA_DEV_KEYS", "1".into()),
            (
                "MEMBER_SIGNING_KEYS",
                format!(
                    "{},{}",
                    encode_signing_key(&fresh_key()),
                    encode_signing_key(&DevKey::BuyerTokens.signing_key())
                ),
            ),
        ],
        &["MEMBER_SIGNING_KEYS", "DEVELOPMENT"],
        "the development buyer key by name",
    )?;
    Ok(())
}

#[test]
fn an_unclear_development_mode_is_refused() -> anyhow::Result<()> {
    let run = run_bare("account", &[("PAYSAGA_DEV_KEYS", "yes".into())])?;
    refused("account", &run);
    assert!(
        run.output.contains("PAYSAGA_DEV_KEYS"),
        "account did not name PAYSAGA_DEV_KEYS:\n{}",
        run.output
    );
    Ok(())
}

#[tokio::test]
async fn development_mode_starts_with_one_loud_warning() -> anyhow::Result<()> {
    let db = TestDb::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = binaries::log_dir("startup-dev-mode")?;
    let log = dir.join("account.log");
    let mut cmd = tokio::process::Command::new(binaries::binary("account")?);
    cmd.env_clear()
        .env("PAYSAGA_DEV_KEYS", "1")
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("DATABASE_URL", db.role_url("account_app"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(dir.join("account.err"))?)
        .kill_on_drop(true);
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    let mut child = cmd.spawn()?;
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let ready = testkit::wait_ready(&http, "account", &base, testkit::READY_TIMEOUT, || {
        child.try_wait().ok().flatten().map(|s| s.to_string())
    })
    .await;
    child.kill().await?;
    let output = read(&log) + &read(&dir.join("account.err"));
    ready.map_err(|e| anyhow::anyhow!("{e}\n{output}"))?;

    let warnings: Vec<&str> = output
        .lines()
        .filter(|l| l.contains("PAYSAGA_DEV_KEYS=1"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning, not {warnings:?}");
    for what in [
        "SERVICE_KEYS",
        BUYER_KEYS,
        "DATABASE_URL (development password)",
    ] {
        assert!(warnings[0].contains(what), "{what} not in {}", warnings[0]);
    }
    Ok(())
}
