//! Where the service binaries live: next to the running executable, in the same cargo
//! profile directory, or in `PAYSAGA_BIN_DIR`.

use std::path::PathBuf;

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
             (the services are started from the same profile directory)",
            path.display()
        );
    }
    Ok(path)
}
