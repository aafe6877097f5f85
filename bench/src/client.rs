//! The buyers' side of HTTP: one pooled client sized to the concurrency, the buyers and
//! their tokens, and the mapping of an answer to an outcome label.

use std::{sync::Arc, time::Duration};

use paysaga_common::auth::Minter;
use reqwest::{header::CONTENT_TYPE, Client, RequestBuilder};
use serde::Deserialize;

use crate::{error::Result, load::Outcome};

/// A keep-alive client holding up to `connections` connections to each service, so a
/// closed loop of that many virtual clients reuses its connections.
pub fn http_client(connections: usize) -> Result<Client> {
    Ok(Client::builder()
        .pool_max_idle_per_host(connections)
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()?)
}

/// Buyers of one run: member ids and their bearer tokens, ready before any timing starts.
/// Buyers of a started system are signed up through its member service
/// ([`crate::system::System::seed_buyers`]), which signs their tokens; the services
/// refuse any other buyer token.
#[derive(Clone)]
pub struct Buyers {
    pub members: Arc<Vec<String>>,
    pub tokens: Arc<Vec<String>>,
}

impl Buyers {
    /// DEVELOPMENT KEY ONLY: `count` buyers whose tokens are signed here with the
    /// development buyer key, for servers of the benchmark's own that verify with it (the
    /// HTTP ceiling server). A started [`crate::system::System`] refuses these tokens.
    pub fn development(run_id: &str, count: usize) -> Self {
        let minter = Minter::dev_buyer();
        let members: Vec<String> = (0..count).map(|i| format!("bench-{run_id}-{i}")).collect();
        let tokens = members
            .iter()
            .map(|m| minter.mint(m, Duration::from_secs(4 * 3600)))
            .collect();
        Self::new(members, tokens)
    }
    /// Buyer `i` is `members[i]`, holding `tokens[i]`.
    pub fn new(members: Vec<String>, tokens: Vec<String>) -> Self {
        assert_eq!(members.len(), tokens.len(), "one token per member");
        Self {
            members: Arc::new(members),
            tokens: Arc::new(tokens),
        }
    }
    pub fn len(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
    pub fn token(&self, i: usize) -> &str {
        &self.tokens[i % self.tokens.len()]
    }
    pub fn member(&self, i: usize) -> &str {
        &self.members[i % self.members.len()]
    }
}

/// An answer read to the end.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

#[derive(Deserialize)]
struct ErrorCode {
    code: String,
}

impl Reply {
    /// The `code` of an error body, if it has one.
    pub fn code(&self) -> Option<String> {
        serde_json::from_slice::<ErrorCode>(&self.body)
            .ok()
            .map(|e| e.code)
    }
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }
    /// `error:<status>:<code>`, for an answer the phase did not expect.
    pub fn unexpected(&self) -> Outcome {
        Outcome::error(format!(
            "{}:{}",
            self.status,
            self.code().unwrap_or_else(|| "-".into())
        ))
    }
}

/// Sends a request and reads the whole answer; transport failures become an outcome.
pub async fn send(req: RequestBuilder) -> Result<Reply, Outcome> {
    let resp = req.send().await.map_err(transport)?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await.map_err(transport)?.to_vec();
    Ok(Reply { status, body })
}

/// A JSON POST with a bearer token.
pub fn post_json(
    client: &Client,
    url: &str,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> RequestBuilder {
    client
        .post(url)
        .bearer_auth(token)
        .header(CONTENT_TYPE, "application/json")
        .body(body)
}

fn transport(e: reqwest::Error) -> Outcome {
    if e.is_timeout() {
        Outcome::of("error:timeout")
    } else if e.is_connect() {
        Outcome::of("error:connect")
    } else {
        Outcome::of("error:transport")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paysaga_common::auth::Verifier;

    #[test]
    fn development_tokens_verify_as_their_member() {
        let buyers = Buyers::development("t", 3);
        let v = Verifier::development(paysaga_common::auth::Audience::Gate);
        for i in 0..3 {
            assert_eq!(
                v.verify_buyer(buyers.token(i))
                    .map(|m| m.to_string())
                    .as_deref(),
                Some(buyers.member(i))
            );
        }
    }
}
