//! The operator's subcommands against a running system: payments (list, show with the
//! step timeline, resume, refund), products, stock, quota, development tokens, and the
//! invariant check read from PostgreSQL.

use std::{process::ExitCode, time::Duration};

use anyhow::Context;
use paysaga_common::{
    auth::{Minter, ServiceRole},
    client::{Answer, CallError, Credential},
    credentials::{operator_credential_from_env, MAX_SERVICE_TOKEN_LIFETIME_SECS},
    db::RolePasswords,
};
use paysaga_contracts::gate::client::GateClient;
use paysaga_contracts::orchestrator::{
    api::{PaymentAdmin, PaymentPage, PaymentTimeline},
    client::OrchestratorClient,
};
use paysaga_contracts::order::client::OrderClient;
use paysaga_contracts::staff::api::RefundAnswer;

use crate::{
    args::{BootstrapArgs, CheckArgs, Endpoints, PaymentsCommand, TokenCommand},
    table,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// The operator's credential: short-lived tokens minted and renewed with the operator's
/// own `SERVICE_SIGNING_KEY`, or a short-lived `SERVICE_TOKEN` minted elsewhere, or, in
/// development mode (`PAYSAGA_DEV_KEYS=1`), tokens minted with the operator's
/// development key.
pub(crate) fn operator_credential() -> anyhow::Result<Credential> {
    operator_credential_from_env().context(
        "the operator commands need a service credential: set SERVICE_SIGNING_KEY (the \
         operator's key, see `paysaga keygen operator`) or a short-lived SERVICE_TOKEN, or \
         PAYSAGA_DEV_KEYS=1 against a development system",
    )
}

fn payment_row(p: &PaymentAdmin) -> Vec<String> {
    vec![
        p.payment.id.to_string(),
        p.payment.state.clone(),
        table::money(p.payment.amount),
        p.payment.member_id.clone(),
        if p.needs_attention {
            "YES".into()
        } else {
            String::new()
        },
        p.pending_action.clone().unwrap_or_default(),
        p.payment.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        p.last_error
            .clone()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect(),
    ]
}

const PAYMENT_HEADER: [&str; 8] = [
    "payment",
    "state",
    "amount",
    "member",
    "attention",
    "pending",
    "created (UTC)",
    "last error",
];

/// The orchestrator's client, with the operator's orchestrator credential.
pub fn orchestrator_client(endpoints: &Endpoints) -> anyhow::Result<OrchestratorClient> {
    Ok(OrchestratorClient::new(
        &endpoints.orchestrator_url,
        crate::staff::orchestrator_credential()?,
        TIMEOUT,
    ))
}

/// Prints the payment an operator's action answered with, or says what failed `doing` it.
fn print_acted_on(
    answer: Result<Answer<PaymentAdmin>, CallError>,
    doing: &'static str,
) -> anyhow::Result<()> {
    let p = answer.context(doing)?.body;
    println!("{}", table::render(&PAYMENT_HEADER, &[payment_row(&p)]));
    Ok(())
}

pub async fn payments(endpoints: &Endpoints, cmd: PaymentsCommand) -> anyhow::Result<ExitCode> {
    let orchestrator = orchestrator_client(endpoints)?;
    match cmd {
        PaymentsCommand::List {
            state,
            attention,
            error,
            limit,
        } => {
            let query = paysaga_contracts::query_string([
                ("state", state.map(|s| s.to_ascii_uppercase())),
                ("needs_attention", attention.then(|| "true".to_owned())),
                ("error_contains", error),
                ("limit", Some(limit.to_string())),
            ])?;
            let page: PaymentPage = orchestrator
                .list(&query)
                .await
                .context("listing payments")?
                .body;
            table::print_page(
                &PAYMENT_HEADER,
                &page.payments,
                payment_row,
                page.next_cursor.map(|_| "(more: raise --limit)".to_owned()),
            );
        }
        PaymentsCommand::Show { id } => {
            let t: PaymentTimeline = orchestrator
                .timeline(id)
                .await
                .context("reading the payment")?
                .body;
            print_timeline(&t);
        }
        PaymentsCommand::Resume { id, reason } => print_acted_on(
            orchestrator.resume_because(id, reason.as_deref()).await,
            "resuming the payment",
        )?,
        PaymentsCommand::Refund { id, reason } => {
            match orchestrator
                .refund_because(id, reason.as_deref())
                .await
                .context("refunding the payment")?
                .body
            {
                RefundAnswer::Refunded(p) => {
                    println!("{}", table::render(&PAYMENT_HEADER, &[payment_row(&p)]))
                }
                RefundAnswer::AwaitingApproval(a) => println!(
                    "{}",
                    crate::staff::awaiting_approval("refund", "a second person", &a)
                ),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_timeline(t: &PaymentTimeline) {
    let p = &t.payment;
    let rows = vec![
        ("payment", p.payment.id.to_string()),
        (
            "state",
            format!(
                "{}{}",
                p.payment.state,
                if p.payment.terminal { " (final)" } else { "" }
            ),
        ),
        ("amount", table::money(p.payment.amount)),
        (
            "member / account",
            format!("{} / {}", p.payment.member_id, p.payment.account_id),
        ),
        ("reservation", p.payment.reservation_id.to_string()),
        (
            "failure code",
            p.payment.failure_code.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "pending action",
            p.pending_action.clone().unwrap_or_else(|| "-".into()),
        ),
        ("needs attention", p.needs_attention.to_string()),
        (
            "last error",
            p.last_error.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "created / updated",
            format!("{} / {}", p.payment.created_at, p.payment.updated_at),
        ),
    ];
    println!("{}\n", table::key_values(&rows));
    let steps: Vec<Vec<String>> = t
        .steps
        .iter()
        .map(|s| {
            vec![
                s.seq.to_string(),
                s.created_at.format("%H:%M:%S%.3f").to_string(),
                s.action.clone(),
                s.operation_key.clone(),
                s.outcome.clone(),
                format!("{} -> {}", s.from_state, s.to_state),
                s.downstream_status
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                format!("{} ms", s.latency_ms),
                s.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    println!(
        "{}",
        table::render(
            &[
                "#",
                "at (UTC)",
                "action",
                "operation key",
                "outcome",
                "state",
                "status",
                "latency",
                "error"
            ],
            &steps
        )
    );
}

pub(crate) fn product_rows(
    products: &[paysaga_contracts::order::api::Product],
) -> Vec<Vec<String>> {
    products
        .iter()
        .map(|p| {
            vec![
                p.id.to_string(),
                p.name.clone(),
                table::money(p.price),
                p.units_total.to_string(),
                p.available.to_string(),
                p.reserved.to_string(),
                p.sold.to_string(),
            ]
        })
        .collect()
}

pub(crate) const PRODUCT_HEADER: [&str; 7] = [
    "product",
    "name",
    "price",
    "units",
    "available",
    "reserved",
    "sold",
];

pub async fn products(endpoints: &Endpoints) -> anyhow::Result<ExitCode> {
    print_products(endpoints, None).await
}

pub async fn stock(endpoints: &Endpoints, product: i64) -> anyhow::Result<ExitCode> {
    print_products(endpoints, Some(product)).await
}

/// Prints every product, or only the one asked for.
async fn print_products(endpoints: &Endpoints, only: Option<i64>) -> anyhow::Result<ExitCode> {
    let order = OrderClient::new(&endpoints.order_url, operator_credential()?, TIMEOUT);
    let products = match only {
        None => {
            order
                .list_products()
                .await
                .context("listing products")?
                .body
        }
        Some(id) => vec![order.product(id).await.context("reading the product")?.body],
    };
    println!(
        "{}",
        table::render(&PRODUCT_HEADER, &product_rows(&products))
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn quota(endpoints: &Endpoints, product: i64) -> anyhow::Result<ExitCode> {
    let gate = GateClient::new(&endpoints.gate_url, operator_credential()?, TIMEOUT);
    let q = gate
        .quota(product)
        .await
        .context("reading the gate's quota")?
        .body;
    let rows = vec![vec![
        q.product_id.to_string(),
        q.quota.to_string(),
        q.in_flight.to_string(),
    ]];
    println!(
        "{}",
        table::render(
            &["product", "quota (passes left)", "passes in flight"],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub fn token(cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    // Minting with a public key is only for a system that trusts it, which is one run in
    // development mode; asking for it says so.
    if !paysaga_common::config::dev_mode()? {
        anyhow::bail!(
            "`paysaga token` mints DEVELOPMENT tokens, which only a system in development mode \
             accepts; set PAYSAGA_DEV_KEYS=1 to use it"
        );
    }
    let (minter, subject, ttl) = match cmd {
        TokenCommand::Buyer { member, ttl_secs } => {
            paysaga_common::auth::MemberId::parse(member.as_str())
                .map_err(|e| anyhow::anyhow!("{member}: {e}"))?;
            let max = paysaga_common::auth::MAX_BUYER_TOKEN_LIFETIME_SECS;
            if ttl_secs > max as u64 {
                anyhow::bail!("--ttl-secs {ttl_secs}: buyer tokens live at most {max} seconds");
            }
            (Minter::dev_buyer(), member, ttl_secs)
        }
        TokenCommand::Service { name, to, ttl_secs } => {
            // The services refuse any other subject and any longer lifetime, so say so now.
            let role = ServiceRole::parse(&name)
                .ok_or_else(|| anyhow::anyhow!("{name}: {}", paysaga_common::auth::UnknownRole))?;
            let max = MAX_SERVICE_TOKEN_LIFETIME_SECS;
            if ttl_secs > max as u64 {
                anyhow::bail!(
                    "--ttl-secs {ttl_secs}: service credentials live at most {max} seconds; \
                     mint another when it runs out"
                );
            }
            let to = paysaga_common::auth::Audience::parse(&to).ok_or_else(|| {
                anyhow::anyhow!(
                    "--for {to}: not a service (account, order, gate, orchestrator, member)"
                )
            })?;
            (Minter::dev_service(role, to), name, ttl_secs)
        }
    };
    eprintln!("DEVELOPMENT token: signed with a public development key; services configured with their own keys refuse it.");
    println!("{}", minter.mint(&subject, Duration::from_secs(ttl)));
    Ok(ExitCode::SUCCESS)
}

/// The administrator URL on the paysaga database.
fn database_url(args: &CheckArgs) -> anyhow::Result<reqwest::Url> {
    let mut url =
        reqwest::Url::parse(&args.admin_url).context("ADMIN_DATABASE_URL is not a URL")?;
    url.set_path(&format!("/{}", args.database));
    Ok(url)
}

pub async fn bootstrap(args: BootstrapArgs) -> anyhow::Result<ExitCode> {
    let url = database_url(&args.database)?;
    paysaga_common::db::create_database(url.as_str(), &args.database.database)
        .await
        .with_context(|| {
            format!(
                "creating database {} on {}",
                args.database.database,
                paysaga_supervisor::infra::redact(&args.database.admin_url)
            )
        })?;
    let passwords = if args.dev_passwords {
        RolePasswords::Development
    } else {
        RolePasswords::Unset
    };
    paysaga_common::db::bootstrap(url.as_str(), passwords)
        .await
        .context("creating the roles and schemas")?;
    println!(
        "database {} ready: the service roles ({}) and their schemas exist",
        args.database.database,
        paysaga_common::db::ROLES
            .iter()
            .chain(&paysaga_common::db::MIGRATORS)
            .map(|(role, _)| *role)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if passwords == RolePasswords::Unset {
        println!(
            "roles created now have no password: give each its own (ALTER ROLE <role> PASSWORD '...') before the services start"
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let url = database_url(&args)?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(url.as_str())
        .await
        .with_context(|| {
            format!(
                "connecting to {}",
                paysaga_supervisor::infra::redact(url.as_str())
            )
        })?;
    let report = paysaga_drop::invariants::check(&pool).await?;
    let value = serde_json::to_value(&report)?;
    let rows: Vec<(&str, String)> = value
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.as_str(), v.to_string())).collect())
        .unwrap_or_default();
    println!("{}", table::key_values(&rows));
    let violations = report.violations();
    if violations.is_empty() {
        println!("\nevery invariant holds");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\nVIOLATED:\n  {}", violations.join("\n  "));
        Ok(ExitCode::FAILURE)
    }
}
