//! The HTTP ceiling phases: the same request shape as a gate pass request, answered by a
//! constant handler, with and without authentication.

use std::sync::Arc;

use crate::{
    client::{post_json, send, Buyers},
    load::{self, Load, Outcome},
    stats::RunSummary,
};

/// The body of a gate pass request, so every phase carries the same bytes.
pub const PASS_BODY: &str = r#"{"product_id":1}"#;

/// Closed-loop POSTs to `url`, each buyer's token in turn; 200 is the only good answer.
pub async fn run(load: &Load, client: reqwest::Client, url: String, buyers: Buyers) -> RunSummary {
    let url = Arc::new(url);
    load::run(load, move |ctx| {
        let (client, url, buyers) = (client.clone(), url.clone(), buyers.clone());
        async move {
            match send(post_json(
                &client,
                &url,
                buyers.token(ctx.seq as usize),
                PASS_BODY,
            ))
            .await
            {
                Ok(r) if r.status == 200 => Outcome::ok(),
                Ok(r) => r.unexpected(),
                Err(o) => o,
            }
        }
    })
    .await
}
