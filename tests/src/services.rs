//! The four service processes as one unit: started together, waited on until ready,
//! stopped and restarted one at a time, and all stopped (or killed on drop) together.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::Context;

use crate::{
    process::{ServiceProcess, ServiceSpec, Stop, READY_TIMEOUT},
    service::ServiceKind,
};

/// Time a service gets to finish in-flight work after SIGTERM before it is killed.
pub const TERM_GRACE: Duration = Duration::from_secs(15);

pub struct Services {
    procs: BTreeMap<ServiceKind, ServiceProcess>,
    http: reqwest::Client,
    log_dir: PathBuf,
}

impl Services {
    /// Spawns every service in `specs` and waits until each answers `/readyz`. On
    /// failure every process already started is killed (by drop) and the error names the
    /// failing service's log.
    pub async fn launch(specs: Vec<ServiceSpec>, log_dir: PathBuf) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .context("cannot build an HTTP client")?;
        let mut procs = BTreeMap::new();
        for spec in specs {
            let kind = spec.kind;
            procs.insert(kind, ServiceProcess::spawn(spec)?);
        }
        let mut this = Self {
            procs,
            http,
            log_dir,
        };
        for proc in this.procs.values_mut() {
            proc.wait_ready(&this.http, READY_TIMEOUT).await?;
        }
        Ok(this)
    }

    pub fn url(&self, kind: ServiceKind) -> String {
        self.procs
            .get(&kind)
            .map(ServiceProcess::url)
            .unwrap_or_default()
    }

    pub fn process(&self, kind: ServiceKind) -> Option<&ServiceProcess> {
        self.procs.get(&kind)
    }

    pub fn process_mut(&mut self, kind: ServiceKind) -> Option<&mut ServiceProcess> {
        self.procs.get_mut(&kind)
    }

    /// Where the log files are.
    pub fn log_dir(&self) -> &std::path::Path {
        &self.log_dir
    }

    /// Each service's log file, for a failure message.
    pub fn log_paths(&self) -> String {
        self.procs
            .values()
            .map(|p| format!("  {}: {}", p.kind(), p.log_path().display()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn get_mut(&mut self, kind: ServiceKind) -> anyhow::Result<&mut ServiceProcess> {
        self.procs
            .get_mut(&kind)
            .with_context(|| format!("{kind} is not part of this system"))
    }

    /// Stops one service (SIGKILL for a crash, SIGTERM for a graceful stop).
    pub async fn stop(&mut self, kind: ServiceKind, how: Stop) -> anyhow::Result<()> {
        self.get_mut(kind)?.stop(how, TERM_GRACE).await?;
        Ok(())
    }

    /// Starts a stopped service again (same port, same environment) and waits until ready.
    pub async fn start(&mut self, kind: ServiceKind) -> anyhow::Result<()> {
        let http = self.http.clone();
        let proc = self.get_mut(kind)?;
        proc.start()?;
        proc.wait_ready(&http, READY_TIMEOUT).await
    }

    /// Stops and starts one service.
    pub async fn restart(&mut self, kind: ServiceKind, how: Stop) -> anyhow::Result<()> {
        self.stop(kind, how).await?;
        self.start(kind).await
    }

    /// An error if any service has exited that was not stopped on purpose.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for proc in self.procs.values_mut() {
            if let Some(status) = proc.exit_status() {
                return Err(proc.failure(&format!("exited unexpectedly with {status}")));
            }
        }
        Ok(())
    }

    /// Stops every service gracefully, callers first (orchestrator, gate, then order and
    /// account), so no request is cut by its downstream going away first.
    pub async fn shutdown(&mut self) -> anyhow::Result<()> {
        for kind in ServiceKind::ALL.iter().rev() {
            if let Some(proc) = self.procs.get_mut(kind) {
                proc.stop(Stop::Term, TERM_GRACE).await?;
            }
        }
        Ok(())
    }
}
