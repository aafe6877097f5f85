//! Where the service binaries (found by the supervisor) and the harness's log files
//! live: the log files under the cargo target directory the binaries are built in.

use std::path::{Path, PathBuf};

use anyhow::Context;
pub use paysaga_supervisor::binaries::{bin_dir, binary};

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
