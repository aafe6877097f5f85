//! `cargo run --release -p gate --bin gate-bench [-- --connections N --requests N
//! --rounds N --drop-buyers N --only issue|sold-out|ceiling]`:
//! pass issuance and sold-out answers against the authentication ceiling, and a drop
//! of 100 units against 10,000 buyers. Prints markdown tables.

use gate::bench::{run, BenchConfig, Only};

fn arg(args: &[String], name: &str) -> Option<usize> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut cfg = BenchConfig::default();
    if let Some(c) = arg(&args, "--connections") {
        cfg.connections = c.clamp(1, 1024);
    }
    if let Some(n) = arg(&args, "--requests") {
        cfg.requests = n.max(1);
    }
    if let Some(n) = arg(&args, "--drop-buyers") {
        cfg.drop_buyers = n.max(1);
    }
    if let Some(r) = arg(&args, "--rounds") {
        cfg.rounds = r.clamp(1, 20);
    }
    if let Some(i) = args.iter().position(|a| a == "--only") {
        cfg.only = match args.get(i + 1).map(String::as_str) {
            Some("issue") => Only::Issue,
            Some("sold-out") => Only::SoldOut,
            Some("ceiling") => Only::Ceiling,
            Some("micro") => Only::Micro,
            _ => Only::All,
        };
    }
    eprintln!("gate-bench: {cfg:?}");
    let report = run(&cfg).await?;
    println!("{}", report.markdown());
    Ok(())
}
