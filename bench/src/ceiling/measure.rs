//! Runs the five ceiling phases and records them.

use crate::{
    ceiling::{self, server::CeilingProcess, Ceilings},
    client,
    error::Result,
    warmup, Bench,
};

pub async fn measure(bench: &mut Bench) -> Result<Ceilings> {
    let server = CeilingProcess::start().await?;
    let client = client::http_client(bench.settings.concurrency)?;
    let mut c = Ceilings::default();
    let phases = [
        ("5 ceiling: HTTP bare", format!("{}/v1/bare", server.plain)),
        (
            "5 ceiling: HTTP + buyer auth",
            format!("{}/v1/auth", server.plain),
        ),
        (
            "5 ceiling: HTTP + auth + middleware",
            format!("{}/v1/auth", server.stack),
        ),
    ];
    for (i, (name, url)) in phases.into_iter().enumerate() {
        let load = bench.phase(name);
        warm_up(bench, &load, &client, &url).await;
        let server_pid = [("ceiling server".to_owned(), server.pid)];
        let cpu_before = crate::cpu::snapshot(&server_pid);
        let s = bench.keep(
            ceiling::http::run(&load, client.clone(), url, bench.ceiling_buyers.clone()).await,
        );
        let cpu = crate::cpu::between(&cpu_before, &crate::cpu::snapshot(&server_pid));
        if i == 1 {
            cpu.record(
                &mut bench.report,
                "5 limits",
                s.count("ok"),
                "authenticated request",
            );
        }
        let ok = s.outcome("ok").map_or(0.0, |o| o.per_s);
        match i {
            0 => c.http_bare = ok,
            1 => c.http_auth = ok,
            _ => c.http_auth_stack = ok,
        }
    }
    drop(server);

    let load = bench.phase("5 ceiling: Redis EVALSHA");
    ceiling::redis_eval::run(
        &warmup(&load),
        &bench.settings.redis_url,
        &bench.redis_prefix,
    )
    .await?;
    let s = bench.keep(
        ceiling::redis_eval::run(&load, &bench.settings.redis_url, &bench.redis_prefix).await?,
    );
    c.redis_evalsha = s.outcome("ok").map_or(0.0, |o| o.per_s);

    let load = bench.phase("5 ceiling: PostgreSQL commit");
    let url = bench.db.url();
    ceiling::pg_commit::run(&warmup(&load), &url, bench.settings.pg_connections).await?;
    let cpu_before = crate::cpu::snapshot(&[]);
    let s = bench.keep(ceiling::pg_commit::run(&load, &url, bench.settings.pg_connections).await?);
    let cpu = crate::cpu::between(&cpu_before, &crate::cpu::snapshot(&[]));
    cpu.record(
        &mut bench.report,
        "5 limits",
        s.count("ok"),
        "ceiling commit",
    );
    c.pg_commits = s.outcome("ok").map_or(0.0, |o| o.per_s);

    let r = &mut bench.report;
    r.figure("5 limits", "HTTP bare handler", c.http_bare, "req/s");
    r.figure(
        "5 limits",
        "HTTP + buyer authentication (the HTTP ceiling)",
        c.http_auth,
        "req/s",
    );
    r.figure(
        "5 limits",
        "HTTP + authentication + common middleware",
        c.http_auth_stack,
        "req/s",
    );
    r.figure(
        "5 limits",
        "Redis EVALSHA of `return 1` (the Redis ceiling)",
        c.redis_evalsha,
        "calls/s",
    );
    r.figure(
        "5 limits",
        "PostgreSQL single-row UPDATE commits (the commit ceiling)",
        c.pg_commits,
        "commits/s",
    );
    r.ratio(
        "HTTP + buyer authentication",
        c.http_auth,
        "HTTP bare",
        c.http_bare,
    );
    r.ratio(
        "HTTP + authentication + common middleware",
        c.http_auth_stack,
        "HTTP + buyer auth",
        c.http_auth,
    );
    Ok(c)
}

/// The HTTP ceiling measured again beside a paysaga phase. The machine is shared, so a
/// ceiling measured minutes earlier may not describe the moment of the phase; bracketing
/// the phase with it keeps the ratio honest.
pub async fn adjacent_http_auth(bench: &mut Bench, label: &str) -> Result<f64> {
    let server = CeilingProcess::start().await?;
    let client = client::http_client(bench.settings.concurrency)?;
    let url = format!("{}/v1/auth", server.plain);
    let load = bench.phase(&format!("{label}: HTTP + buyer auth ceiling, beside it"));
    warm_up(bench, &load, &client, &url).await;
    let s = bench.keep(ceiling::http::run(&load, client, url, bench.ceiling_buyers.clone()).await);
    Ok(s.outcome("ok").map_or(0.0, |o| o.per_s))
}

/// Runs `load`'s warm-up against `url` and throws its numbers away.
async fn warm_up(bench: &Bench, load: &crate::load::Load, client: &reqwest::Client, url: &str) {
    ceiling::http::run(
        &warmup(load),
        client.clone(),
        url.to_owned(),
        bench.ceiling_buyers.clone(),
    )
    .await;
}
