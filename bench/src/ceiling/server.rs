//! The HTTP ceiling server, run as a process of its own like a service: a constant answer
//! with and without the services' buyer authentication, and once more behind the
//! services' common middleware.

use std::sync::Arc;

use axum::{extract::FromRef, routing::post, Json, Router};
use paysaga_common::auth::{Buyer, Verifier};
use serde_json::{json, Value};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpListener,
};

use crate::error::{Error, Result};

#[derive(Clone)]
struct State {
    verifier: Arc<Verifier>,
}

impl FromRef<State> for Arc<Verifier> {
    fn from_ref(s: &State) -> Self {
        s.verifier.clone()
    }
}

async fn bare() -> Json<Value> {
    Json(json!({"ok": true}))
}

async fn authenticated(Buyer(_member): Buyer) -> Json<Value> {
    Json(json!({"ok": true}))
}

/// `/v1/bare` and `/v1/auth` on a plain router; `/v1/auth` again on a router finished by
/// `paysaga_common::server::finish`, exactly as each service's routes are.
pub fn routers() -> Result<(Router, Router)> {
    // The ceiling measures what verifying a buyer token costs, with tokens the bench mints
    // itself (`Buyers::development`): always the development keys, whatever the shell.
    let verifier = Verifier::development(paysaga_common::auth::Audience::Gate);
    let state = State {
        verifier: Arc::new(verifier),
    };
    let plain = Router::new()
        .route("/v1/bare", post(bare))
        .route("/v1/auth", post(authenticated))
        .with_state(state.clone());
    let stack = paysaga_common::server::finish(
        Router::new()
            .route("/v1/auth", post(authenticated))
            .with_state(state),
        utoipa::openapi::OpenApiBuilder::new().build(),
    );
    Ok((plain, stack))
}

/// Serves until stdin closes (the benchmark that started this process is gone or done).
/// Announces `LISTENING <plain addr> <stack addr>` on stdout.
pub async fn serve() -> Result<()> {
    let (plain, stack) = routers()?;
    let plain_listener = TcpListener::bind("127.0.0.1:0").await?;
    let stack_listener = TcpListener::bind("127.0.0.1:0").await?;
    let line = format!(
        "LISTENING {} {}\n",
        plain_listener.local_addr()?,
        stack_listener.local_addr()?
    );
    let mut stdout = tokio::io::stdout();
    stdout.write_all(line.as_bytes()).await?;
    stdout.flush().await?;
    let parent_gone = || async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(_)) = lines.next_line().await {}
    };
    let a = paysaga_common::server::serve(plain_listener, plain, parent_gone());
    let b = paysaga_common::server::serve(stack_listener, stack, parent_gone());
    let (ra, rb) = tokio::join!(a, b);
    ra?;
    rb?;
    Ok(())
}

/// A running ceiling server process, killed when dropped.
pub struct CeilingProcess {
    pub plain: String,
    pub stack: String,
    pub pid: u32,
    _child: tokio::process::Child,
}

impl CeilingProcess {
    pub async fn start() -> Result<Self> {
        let exe = std::env::current_exe()?;
        let mut child = tokio::process::Command::new(exe)
            .arg("ceiling-server")
            // It verifies the benchmark's development-key buyer tokens, on purpose.
            .env(paysaga_common::config::DEV_KEYS_VAR, "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| Error::Setup("ceiling server exited at once".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Setup("ceiling server has no stdout".into()))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).await?;
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (Some("LISTENING"), Some(plain), Some(stack)) => Ok(Self {
                plain: format!("http://{plain}"),
                stack: format!("http://{stack}"),
                pid,
                _child: child,
            }),
            _ => Err(Error::Setup(format!(
                "ceiling server did not announce its address: {line:?}"
            ))),
        }
    }
}
