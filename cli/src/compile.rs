//! Building the four service binaries in the profile the `paysaga` binary was built in,
//! so `cargo run --release -p paysaga -- up` never starts stale or missing services.

use std::process::Command;

use anyhow::{bail, Context};

/// The service packages, each with a binary of the same name.
const SERVICES: [&str; 4] = ["account", "order", "gate", "orchestrator"];

/// When run through cargo (which sets `CARGO`), builds the service binaries with the
/// same profile next to this binary. Outside cargo (an installed system), does nothing:
/// the binaries must already sit next to `paysaga` (or in `PAYSAGA_BIN_DIR`).
pub fn build_services() -> anyhow::Result<bool> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(false);
    };
    let dir = paysaga_e2e::binaries::bin_dir()?;
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    let mut cmd = Command::new(cargo);
    cmd.arg("build");
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    for p in SERVICES {
        cmd.args(["-p", p, "--bin", p]);
    }
    if let Some(manifest) = option_env!("CARGO_MANIFEST_DIR") {
        let root = std::path::Path::new(manifest).join("..").join("Cargo.toml");
        if root.is_file() {
            cmd.arg("--manifest-path").arg(root);
        }
    }
    eprintln!("building the services ({profile} profile)…");
    let status = cmd
        .status()
        .context("cannot run cargo to build the services")?;
    if !status.success() {
        bail!("building the service binaries failed ({status})");
    }
    Ok(true)
}
