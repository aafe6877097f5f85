//! A PostgreSQL cluster of our own, run with `pg_ctl` from the installed binaries: the
//! run command's when no PostgreSQL is reachable, or a test's (one serving TLS only).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context};

use crate::infra::{missing_message, pg_answers, which};
use crate::TlsFiles;

/// `initdb`'s flags for a throwaway cluster (superuser `postgres`, trust auth, UTF-8);
/// the data directory follows.
pub const INITDB_ARGS: [&str; 6] = [
    "-U",
    "postgres",
    "--auth=trust",
    "--encoding=UTF8",
    "--no-instructions",
    "-D",
];

/// Directories of installed PostgreSQL versions, newest first.
pub fn postgres_bin_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, e.path().join("bin")))
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    dirs.into_iter().map(|(_, d)| d).collect()
}

/// A PostgreSQL cluster of our own in a directory, run with `pg_ctl`. PostgreSQL refuses
/// to run as root, so as root it runs as the `postgres` user.
pub struct PrivatePostgres {
    pub(crate) dir: PathBuf,
    pg_ctl: PathBuf,
    as_postgres: bool,
    port: u16,
    tls: Option<TlsFiles>,
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

impl PrivatePostgres {
    /// Starts (initialising it first if new) the cluster in `dir` on `port`, and waits
    /// until it answers.
    pub async fn start(dir: &Path, port: u16) -> anyhow::Result<Self> {
        Self::start_with(dir, port, None).await
    }

    /// [`Self::start`], serving TLS only: connections without TLS are refused, and the
    /// administrator's URL verifies the certificate against `tls.ca`.
    pub async fn start_tls(dir: &Path, port: u16, tls: TlsFiles) -> anyhow::Result<Self> {
        Self::start_with(dir, port, Some(tls)).await
    }

    async fn start_with(dir: &Path, port: u16, tls: Option<TlsFiles>) -> anyhow::Result<Self> {
        let bins = postgres_bin_dirs();
        let (Some(initdb), Some(pg_ctl)) = (which("initdb", &bins), which("pg_ctl", &bins)) else {
            bail!(missing_message("PostgreSQL"))
        };
        let as_postgres = is_root();
        if as_postgres
            && nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .is_none()
        {
            bail!(
                "running as root, and PostgreSQL refuses to run as root: create a `postgres` user \
                 (the Debian package does), run as an ordinary user, or set DATABASE_URL"
            );
        }
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let this = Self {
            dir: dir.clone(),
            pg_ctl,
            as_postgres,
            port,
            tls,
        };
        if !dir.join("PG_VERSION").is_file() {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            this.own(&dir)?;
            let status = this
                .command(&initdb)
                .args(INITDB_ARGS)
                .arg(&dir)
                .stdout(Stdio::null())
                .status()
                .context("cannot run initdb")?;
            if !status.success() {
                bail!("initdb failed for {} ({status})", dir.display());
            }
        }
        let tls_options = match &this.tls {
            Some(tls) => this.serve_tls_only(tls)?,
            None => String::new(),
        };
        if !this.running() {
            let log = dir.join("server.log");
            let status = this
                .command(&this.pg_ctl)
                .arg("-D")
                .arg(&dir)
                .arg("-l")
                .arg(&log)
                .arg("-o")
                .arg(format!(
                    "-p {port} -c listen_addresses=127.0.0.1 -k {}{tls_options}",
                    dir.display()
                ))
                .args(["-w", "-t", "60", "start"])
                .stdout(Stdio::null())
                .status()
                .context("cannot run pg_ctl start")?;
            if !status.success() {
                bail!(
                    "the private PostgreSQL did not start; see {}",
                    log.display()
                );
            }
        }
        let url = this.admin_url();
        pg_answers(&url).await.with_context(|| {
            format!(
                "the private PostgreSQL in {} does not answer on {port}",
                dir.display()
            )
        })?;
        Ok(this)
    }

    /// The superuser's URL (trust authentication, loopback only), verifying the server's
    /// certificate when it serves TLS.
    pub fn admin_url(&self) -> String {
        let base = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        match &self.tls {
            Some(tls) => format!(
                "{base}?sslmode=verify-full&sslrootcert={}",
                tls.ca.display()
            ),
            None => base,
        }
    }

    /// Puts the certificate and key in the data directory (PostgreSQL wants the key
    /// owned by its user and private), makes every TCP connection need TLS, and returns
    /// the server options that turn TLS on.
    fn serve_tls_only(&self, tls: &TlsFiles) -> anyhow::Result<String> {
        use std::os::unix::fs::PermissionsExt;
        for (from, to) in [(&tls.cert, "server.crt"), (&tls.key, "server.key")] {
            let to = self.dir.join(to);
            std::fs::copy(from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::write(
            self.dir.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostnossl all all 0.0.0.0/0 reject\n",
        )
        .context("writing pg_hba.conf")?;
        self.own(&self.dir)?;
        Ok(" -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key".to_owned())
    }

    fn own(&self, dir: &Path) -> anyhow::Result<()> {
        if self.as_postgres {
            let status = Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(dir)
                .status()?;
            if !status.success() {
                bail!("cannot give {} to the postgres user", dir.display());
            }
        }
        Ok(())
    }

    fn command(&self, program: &Path) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn running(&self) -> bool {
        self.command(&self.pg_ctl)
            .arg("-D")
            .arg(&self.dir)
            .arg("status")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stops the server (fast shutdown); its directory stays.
    pub fn stop(&self) {
        let _ = self
            .command(&self.pg_ctl)
            .arg("-D")
            .arg(&self.dir)
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .status();
    }
}
