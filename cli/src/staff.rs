//! Staff in the terminal: `paysaga staff sign-in` (email, password, then a TOTP or
//! recovery code) keeps the short-lived session token in a file readable by its owner
//! only, and the operator commands then act as that person; `staff sign-out` ends the
//! session at once; `staff create` (admins) makes an account; `audit` lists the trail;
//! `approvals` lists the refunds and top-ups awaiting a second person, and approves or
//! rejects one;
//! `products create|add-units` (admins) changes what is on sale.

use std::{io::Write, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use paysaga_common::client::Credential;
use paysaga_contracts::{
    order::api::CreateProduct,
    staff::{
        api::{
            Approval, CreateStaff, ListApprovals, ListAudit, SignIn, StaffAddUnits,
            StaffCreateProduct,
        },
        client::StaffClient,
    },
};

use crate::{
    args::{ApprovalsArgs, ApprovalsCommand, AuditArgs, Endpoints, ProductsCommand, StaffCommand},
    ops::operator_credential,
    table,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Where the session token is kept: `PAYSAGA_STAFF_SESSION_FILE`, else
/// `$XDG_STATE_HOME/paysaga/staff-session` (`~/.local/state/...` by default).
pub fn session_file() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PAYSAGA_STAFF_SESSION_FILE") {
        return Some(PathBuf::from(p));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("paysaga").join("staff-session"))
}

/// The signed-in person's session token, if `staff sign-in` left one.
pub fn session_token() -> Option<String> {
    let token = std::fs::read_to_string(session_file()?).ok()?;
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// What the operator commands send to the orchestrator: the signed-in person's session
/// (`staff sign-in`), else the operator tools' service credential.
pub fn orchestrator_credential() -> anyhow::Result<Credential> {
    match session_token() {
        Some(token) => Ok(token.into()),
        None => operator_credential(),
    }
}

/// `name` from the environment, else asked for on the terminal.
fn value(env: &str, prompt: &str) -> anyhow::Result<String> {
    if let Ok(v) = std::env::var(env) {
        if !v.is_empty() {
            return Ok(v);
        }
    }
    print!("{prompt}: ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

pub async fn run(endpoints: &Endpoints, cmd: StaffCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        StaffCommand::SignIn { email, code } => {
            let password = value("PAYSAGA_STAFF_PASSWORD", "password")?;
            let code = match code {
                Some(c) => c,
                None => value(
                    "PAYSAGA_STAFF_CODE",
                    "code (authenticator app, or a recovery code)",
                )?,
            };
            let session = StaffClient::new(&endpoints.orchestrator_url, "none", TIMEOUT)
                .sign_in(&SignIn {
                    email,
                    password,
                    code,
                })
                .await
                .context("signing in")?
                .body;
            let file = session_file().context("no HOME: set PAYSAGA_STAFF_SESSION_FILE")?;
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            write_private(&file, &session.token)?;
            println!(
                "signed in as {} ({}) until {} UTC; session in {}",
                session.staff.email,
                session.staff.role,
                session.expires_at.format("%Y-%m-%d %H:%M:%S"),
                file.display()
            );
        }
        StaffCommand::SignOut => {
            let Some(token) = session_token() else {
                println!("not signed in");
                return Ok(ExitCode::SUCCESS);
            };
            let ended = StaffClient::new(&endpoints.orchestrator_url, token, TIMEOUT)
                .sign_out()
                .await;
            if let Some(file) = session_file() {
                let _ = std::fs::remove_file(file);
            }
            match ended {
                Ok(_) => println!("signed out"),
                Err(e) if e.status() == Some(401) => println!("the session had ended already"),
                Err(e) => return Err(e).context("signing out"),
            }
        }
        StaffCommand::Create {
            email,
            role,
            reason,
        } => {
            let password = value("PAYSAGA_NEW_STAFF_PASSWORD", "their password")?;
            let created = StaffClient::new(
                &endpoints.orchestrator_url,
                orchestrator_credential()?,
                TIMEOUT,
            )
            .create(&CreateStaff {
                email,
                password,
                role,
                reason,
            })
            .await
            .context("creating the staff account")?
            .body;
            println!(
                "created {} ({}), id {}",
                created.staff.email, created.staff.role, created.staff.id
            );
            println!("give its owner, once, through a safe channel:");
            println!("  TOTP secret     {}", created.totp_secret);
            println!("  otpauth URL     {}", created.otpauth_url);
            println!("  recovery codes  {}", created.recovery_codes.join("  "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `contents` to a file only its owner may read.
fn write_private(path: &std::path::Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

/// The staff client acting as the signed-in person (these routes admit people only).
pub(crate) fn signed_in(endpoints: &Endpoints) -> anyhow::Result<StaffClient> {
    let token = session_token().context("sign in first: paysaga staff sign-in --email <you>")?;
    Ok(StaffClient::new(
        &endpoints.orchestrator_url,
        token,
        TIMEOUT,
    ))
}

/// Makes a product or adds units, as the signed-in person (admins), and prints it.
pub async fn products(endpoints: &Endpoints, change: ProductsCommand) -> anyhow::Result<ExitCode> {
    let staff = signed_in(endpoints)?;
    let product = match change {
        ProductsCommand::Create {
            name,
            price,
            units,
            reservation_ttl_secs,
            reason,
        } => {
            staff
                .create_product(&StaffCreateProduct {
                    product: CreateProduct {
                        name,
                        price,
                        units,
                        reservation_ttl_secs,
                        eligibility: Vec::new(),
                    },
                    reason,
                })
                .await
                .context("making the product")?
                .body
        }
        ProductsCommand::AddUnits {
            product,
            count,
            reason,
        } => {
            staff
                .add_units(product, &StaffAddUnits { count, reason })
                .await
                .context("adding units")?
                .body
        }
    };
    println!(
        "{}",
        table::render(
            &crate::ops::PRODUCT_HEADER,
            &crate::ops::product_rows(&[product])
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn audit(endpoints: &Endpoints, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let page = signed_in(endpoints)?
        .audit(&ListAudit {
            actor: args.actor,
            action: args.action,
            target: args.target,
            before: args.page.before,
            limit: Some(args.page.limit),
        })
        .await
        .context("reading the audit trail")?
        .body;
    table::print_page(
        &[
            "id", "at (UTC)", "who", "from", "action", "target", "outcome", "reason", "detail",
        ],
        &page.entries,
        |e| {
            vec![
                e.id.to_string(),
                e.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                e.actor.clone(),
                e.client_addr.clone().unwrap_or_default(),
                e.action.to_string(),
                e.target.clone().unwrap_or_default(),
                e.outcome.to_string(),
                e.reason.clone().unwrap_or_default(),
                e.detail.clone().unwrap_or_default(),
            ]
        },
        page.next_before.map(|b| format!("(more: --before {b})")),
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) const APPROVAL_HEADER: [&str; 10] = [
    "id",
    "kind",
    "payment or member",
    "amount",
    "state",
    "asked by",
    "asked at (UTC)",
    "reason",
    "decided by",
    "decision reason",
];

pub(crate) fn approval_row(a: &Approval) -> Vec<String> {
    vec![
        a.id.to_string(),
        a.kind.to_string(),
        a.target(),
        table::money(a.amount),
        a.state.to_string(),
        a.requested_by_name.clone(),
        a.requested_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        a.reason.clone().unwrap_or_default(),
        a.decided_by_name.clone().unwrap_or_default(),
        a.decision_reason.clone().unwrap_or_default(),
    ]
}

/// The line saying that `what` (`refund`, `top-up`) waits for `approver`, with the
/// command that gives the approval.
pub(crate) fn awaiting_approval(what: &str, approver: &str, a: &Approval) -> String {
    format!(
        "{what} of {} ({}) awaits {approver}: approval {} (paysaga approvals approve {})",
        a.target(),
        table::money(a.amount),
        a.id,
        a.id
    )
}

pub async fn approvals(endpoints: &Endpoints, args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let client = signed_in(endpoints)?;
    let decided = match args.decide {
        None => {
            let page = client
                .approvals(&ListApprovals {
                    state: args.state,
                    kind: args.kind,
                    before: args.page.before,
                    limit: Some(args.page.limit),
                })
                .await
                .context("listing approvals")?
                .body;
            table::print_page(
                &APPROVAL_HEADER,
                &page.approvals,
                approval_row,
                page.next_before.map(|b| format!("(more: --before {b})")),
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some(ApprovalsCommand::Approve { id, reason }) => client
            .approve(id, reason.as_deref())
            .await
            .context("approving")?,
        Some(ApprovalsCommand::Reject { id, reason }) => client
            .reject(id, reason.as_deref())
            .await
            .context("rejecting")?,
    }
    .body;
    println!(
        "{}",
        table::render(&APPROVAL_HEADER, &[approval_row(&decided.approval)])
    );
    if let Some(p) = &decided.payment {
        println!("payment {} is now {}", p.payment.id, p.payment.state);
    }
    if let Some(t) = &decided.deposit {
        println!(
            "deposited {} into account {} ({})",
            table::money(t.amount),
            t.account_id,
            t.operation_key
        );
    }
    Ok(ExitCode::SUCCESS)
}
