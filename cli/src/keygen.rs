//! `paysaga keygen <role>`: a service-credential key pair for one caller role, kept in a
//! directory and never replaced, printed as the variables that take it.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::Context;
use paysaga_common::{
    auth::{ServiceRole, UnknownRole},
    credentials::{SERVICE_KEYS_VAR, SERVICE_SIGNING_KEY_VAR},
    keys::{self, encode_signing_key, encode_verifying_key},
};

use crate::args::KeygenArgs;

pub fn run(args: &KeygenArgs) -> anyhow::Result<ExitCode> {
    let role = ServiceRole::parse(&args.role)
        .ok_or_else(|| anyhow::anyhow!("{}: {UnknownRole}", args.role))?;
    let (private, created) = ensure_pair(&args.dir, role)?;
    let public = private.with_extension("pub");
    let key = keys::parse_signing_key(&std::fs::read_to_string(&private)?)
        .with_context(|| format!("{} does not hold a key", private.display()))?;
    let verifying = encode_verifying_key(&key.verifying_key());
    println!(
        "{} {role} key pair: {} (private), {} (public)",
        if created {
            "created the"
        } else {
            "kept the existing"
        },
        private.display(),
        public.display()
    );
    println!("  the {role}'s own setting (keep it secret):");
    println!("    {SERVICE_SIGNING_KEY_VAR}=$(cat {})", private.display());
    println!("  its entry in every verifier's {SERVICE_KEYS_VAR} (comma separated):");
    println!("    {role}:{verifying}");
    Ok(ExitCode::SUCCESS)
}

/// `<dir>/<role>.key` and `.pub`, created (the private key readable by its owner only)
/// unless the private key exists; whether they were created now.
fn ensure_pair(dir: &Path, role: ServiceRole) -> anyhow::Result<(PathBuf, bool)> {
    let private = dir.join(format!("{role}.key"));
    if private.exists() {
        return Ok((private, false));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let key = keys::generate_signing_key();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    writeln!(file, "{}", encode_signing_key(&key))?;
    std::fs::write(
        private.with_extension("pub"),
        format!("{}\n", encode_verifying_key(&key.verifying_key())),
    )?;
    Ok((private, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_created_once_and_then_kept() {
        let dir = std::env::temp_dir().join(format!("paysaga-keygen-{}", uuid::Uuid::new_v4()));
        let (path, created) = ensure_pair(&dir, ServiceRole::Gate).unwrap();
        assert!(created);
        let first = std::fs::read_to_string(&path).unwrap();
        let key = keys::parse_signing_key(&first).unwrap();
        let public = std::fs::read_to_string(path.with_extension("pub")).unwrap();
        assert_eq!(
            keys::parse_verifying_key(&public).unwrap(),
            key.verifying_key()
        );
        assert!(!keys::is_development_key(&key.verifying_key()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "the private key is the owner's only");
        }
        let (again, created) = ensure_pair(&dir, ServiceRole::Gate).unwrap();
        assert!(!created);
        assert_eq!(std::fs::read_to_string(&again).unwrap(), first);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
