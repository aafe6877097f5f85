//! Where the service binaries and the harness's log files live: next to the running
//! executable, in the same cargo profile directory.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The cargo profile directory holding the binaries (`target/debug`, `target/release`).
///
/// A test executable sits in `target/<profile>/deps/`, a binary such as `paysaga` in
/// `target/<profile>/`; both resolve to `target/<profile>`. `PAYSAGA_BIN_DIR` overrides
/// it (an installed system, a container image).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("PAYSAGA_BIN_DIR") {
        if !dir.trim().is_empty() {
            return Ok(PathBuf::from(dir));
        }
    }
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    let mut dir = exe
        .parent()
        .context("the running executable has no parent directory")?
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    Ok(dir)
}

/// The path of service binary `name`, or an error saying how to build it.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let dir = bin_dir()?;
    let path = dir.join(name);
    if !path.is_file() {
        let release = if dir.ends_with("release") {
            " --release"
        } else {
            ""
        };
        bail!(
            "service binary {} is missing: run `cargo build{release} --workspace --bins` first \
             (the harness starts the real binaries from the same profile directory)",
            path.display()
        );
    }
    Ok(path)
}

/// A fresh directory for one run's log files: `target/e2e-logs/<label>-<time>-<random>`.
pub fn log_dir(label: &str) -> anyhow::Result<PathBuf> {
    let base = target_dir()?.join("e2e-logs");
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let dir = base.join(format!("{label}-{stamp}-{suffix}"));
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create log directory {}", dir.display()))?;
    Ok(dir)
}

/// The cargo target directory (the parent of the profile directory).
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let bins = bin_dir()?;
    Ok(bins.parent().map(Path::to_path_buf).unwrap_or(bins))
}
