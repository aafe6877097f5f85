//! Whether a started service is ready: its `/readyz` asked once, or until it answers 200
//! while the caller watches whether the service has already stopped.

use std::time::Duration;

/// How long a started service may take to answer `/readyz` with 200.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks `{base}/readyz` once (for at most `timeout`): `Ok` on 200, else what it
/// answered or why it could not be reached.
pub async fn probe_ready(
    http: &reqwest::Client,
    base: &str,
    timeout: Duration,
) -> Result<(), String> {
    match http
        .get(format!("{base}/readyz"))
        .timeout(timeout)
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!(
            "/readyz answered {} {}",
            r.status(),
            r.text().await.unwrap_or_default()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Polls `{base}/readyz` until it answers 200. Between polls `exited` is asked whether
/// the service has already stopped (it returns what it knows, e.g. an exit status and
/// the log's tail); then, or at the deadline, the error says so, so the caller fails on the
/// real cause instead of a later connection refusal.
pub async fn wait_ready(
    http: &reqwest::Client,
    name: &str,
    base: &str,
    deadline: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(why) = exited() {
            anyhow::bail!("{name} exited before it was ready: {why}");
        }
        let last = match probe_ready(http, base, Duration::from_secs(2)).await {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if tokio::time::Instant::now() >= until {
            anyhow::bail!("{name} at {base} was not ready within {deadline:?} ({last})");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
