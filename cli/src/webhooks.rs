//! The operator's webhook commands against the orchestrator: add an endpoint (its secret
//! is printed once), list, disable, enable, rotate its secret (the new one printed
//! once), list DEAD deliveries, replay them.

use std::process::ExitCode;

use anyhow::Context;
use paysaga_contracts::orchestrator::api::{
    CreateWebhookEndpoint, ListDeliveries, WebhookDelivery, WebhookEndpoint,
};

use crate::{
    args::{Endpoints, WebhooksCommand},
    ops::orchestrator_client,
    table,
};

const ENDPOINT_HEADER: [&str; 6] = [
    "endpoint",
    "enabled",
    "url",
    "events",
    "created (UTC)",
    "description",
];

fn endpoint_row(e: &WebhookEndpoint) -> Vec<String> {
    vec![
        e.id.to_string(),
        if e.enabled { "yes" } else { "NO" }.to_owned(),
        e.url.clone(),
        if e.event_types.is_empty() {
            "all".to_owned()
        } else {
            e.event_types.join(",")
        },
        e.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        e.description.clone(),
    ]
}

const DELIVERY_HEADER: [&str; 8] = [
    "delivery",
    "state",
    "event",
    "type",
    "endpoint",
    "attempts",
    "last status",
    "last error",
];

fn delivery_row(d: &WebhookDelivery) -> Vec<String> {
    vec![
        d.id.to_string(),
        d.state.clone(),
        d.event_id.to_string(),
        d.event_type.clone(),
        d.endpoint_id.to_string(),
        d.attempts.to_string(),
        d.last_status.map(|s| s.to_string()).unwrap_or_default(),
        d.last_error.map(|e| e.to_string()).unwrap_or_default(),
    ]
}

pub async fn run(endpoints: &Endpoints, cmd: WebhooksCommand) -> anyhow::Result<ExitCode> {
    let orchestrator = orchestrator_client(endpoints)?;
    match cmd {
        WebhooksCommand::Add {
            url,
            events,
            description,
        } => {
            let created = orchestrator
                .create_webhook_endpoint(&CreateWebhookEndpoint {
                    url,
                    event_types: events,
                    description,
                })
                .await
                .context("creating the webhook endpoint")?
                .body;
            println!(
                "{}",
                table::render(&ENDPOINT_HEADER, &[endpoint_row(&created.endpoint)])
            );
            println!(
                "\nsigning secret (shown this once; the receiver verifies Paysaga-Signature with it):\n{}",
                created.secret
            );
        }
        WebhooksCommand::List => {
            let list = orchestrator
                .webhook_endpoints()
                .await
                .context("listing webhook endpoints")?
                .body;
            let rows: Vec<Vec<String>> = list.endpoints.iter().map(endpoint_row).collect();
            println!("{}", table::render(&ENDPOINT_HEADER, &rows));
        }
        WebhooksCommand::Disable { id } | WebhooksCommand::Enable { id } => {
            let enabled = matches!(cmd, WebhooksCommand::Enable { .. });
            let e = orchestrator
                .set_webhook_endpoint_enabled(id, enabled)
                .await
                .context("switching the webhook endpoint")?
                .body;
            println!("{}", table::render(&ENDPOINT_HEADER, &[endpoint_row(&e)]));
        }
        WebhooksCommand::RotateSecret { id } => {
            let rotated = orchestrator
                .rotate_webhook_secret(id)
                .await
                .context("rotating the webhook secret")?
                .body;
            println!(
                "endpoint {}: new signing secret (shown this once):\n{}\n\n\
                 Until {} UTC every delivery is signed with the new secret and the previous \
                 one (two v1= entries in Paysaga-Signature); give the receiver the new secret \
                 before then.",
                rotated.endpoint_id,
                rotated.secret,
                rotated.previous_expires_at.format("%Y-%m-%d %H:%M:%S"),
            );
        }
        WebhooksCommand::Dead { endpoint, limit } => {
            let page = orchestrator
                .webhook_deliveries(&ListDeliveries {
                    state: Some("DEAD".into()),
                    endpoint_id: endpoint,
                    limit: Some(limit),
                })
                .await
                .context("listing DEAD deliveries")?
                .body;
            let rows: Vec<Vec<String>> = page.deliveries.iter().map(delivery_row).collect();
            println!("{}", table::render(&DELIVERY_HEADER, &rows));
        }
        WebhooksCommand::Replay { ids } => {
            let mut rows = Vec::new();
            let mut failed = false;
            for id in ids {
                match orchestrator.replay_webhook_delivery(id).await {
                    Ok(a) => rows.push(delivery_row(&a.body)),
                    Err(e) => {
                        eprintln!("{id}: {e}");
                        failed = true;
                    }
                }
            }
            if !rows.is_empty() {
                println!("{}", table::render(&DELIVERY_HEADER, &rows));
            }
            if failed {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
