//! The operator's member commands against the member service: create, list, and sign in
//! for a buyer token; and top up, as the signed-in staff person through the
//! orchestrator's staff API.

use std::{process::ExitCode, time::Duration};

use anyhow::Context;
use paysaga_common::money::Amount;
use paysaga_contracts::member::{
    api::{Credentials, ListMembers, Member},
    client::MemberClient,
};
use paysaga_contracts::staff::api::{TopUp, TopUpAnswer};

use crate::{
    args::{Endpoints, MemberCommand},
    table,
};

fn client(endpoints: &Endpoints) -> anyhow::Result<MemberClient> {
    Ok(MemberClient::new(
        &endpoints.member_url,
        crate::ops::operator_credential()?,
        Duration::from_secs(30),
    ))
}

fn member_row(m: &Member) -> Vec<String> {
    vec![
        m.id.to_string(),
        m.email.clone(),
        m.account_id
            .map(|a| a.to_string())
            .unwrap_or_else(|| "pending".into()),
        m.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
    ]
}

const MEMBER_HEADER: [&str; 4] = ["member", "email", "account", "created (UTC)"];

pub async fn run(endpoints: &Endpoints, cmd: MemberCommand) -> anyhow::Result<ExitCode> {
    let members = client(endpoints)?;
    match cmd {
        MemberCommand::Create { email, password } => {
            let member = members
                .sign_up(&Credentials { email, password })
                .await
                .context("signing the member up")?
                .body;
            println!("{}", table::render(&MEMBER_HEADER, &[member_row(&member)]));
        }
        MemberCommand::List { limit, after } => {
            let page = members
                .list_members(&ListMembers {
                    limit: Some(limit),
                    after,
                })
                .await
                .context("listing members")?
                .body;
            table::print_page(
                &MEMBER_HEADER,
                &page.members,
                member_row,
                page.next_after.map(|next| format!("more: --after {next}")),
            );
        }
        MemberCommand::TopUp {
            member,
            amount,
            reason,
            key,
        } => {
            let key = key.unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let req = TopUp {
                member_id: member,
                amount: Amount::new(amount).map_err(|e| anyhow::anyhow!("{e}"))?,
                reason,
                key,
            };
            let answer = crate::staff::signed_in(endpoints)?
                .top_up(&req)
                .await
                .context("topping the member up")?;
            match answer.body {
                TopUpAnswer::Deposited(t) => {
                    let what = if answer.status == 201 {
                        "paid in"
                    } else {
                        "already paid in under this key"
                    };
                    println!(
                        "{}",
                        table::key_values(&[
                            ("top-up", what.to_owned()),
                            ("operation key", t.operation_key),
                            ("account", t.account_id.to_string()),
                            ("amount", table::money(t.amount)),
                        ])
                    );
                }
                TopUpAnswer::AwaitingApproval(a) => println!(
                    "{}",
                    crate::staff::awaiting_approval("top-up", "a second admin", &a)
                ),
            }
        }
        MemberCommand::SignIn { email, password } => {
            let session = members
                .sign_in(&Credentials { email, password })
                .await
                .context("signing in")?
                .body;
            eprintln!(
                "member {}: access token valid {} s",
                session.member_id, session.expires_in
            );
            println!("{}", session.access_token);
        }
    }
    Ok(ExitCode::SUCCESS)
}
