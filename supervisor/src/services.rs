//! The service processes as one unit (one of each service, or several instances of
//! each): started together, waited on until ready, stopped and restarted one at a time,
//! supervised (restarted with backoff when one exits), and all stopped (or killed on
//! drop) together.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    fmt,
    path::PathBuf,
    process::ExitStatus,
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::{
    process::{label, Readiness, ServiceProcess, ServiceSpec, Stop, READY_TIMEOUT},
    service::ServiceKind,
};

/// Time a service gets to finish in-flight work after SIGTERM before it is killed.
pub const TERM_GRACE: Duration = Duration::from_secs(15);

/// A process's key: its service and its instance number (0 when it runs as one).
type Key = (ServiceKind, usize);

pub struct Services {
    procs: BTreeMap<Key, ServiceProcess>,
    http: reqwest::Client,
    log_dir: PathBuf,
}

impl Services {
    /// Spawns every service in `specs` and waits until each answers `/readyz`. On
    /// failure every process already started is killed (by drop) and the error names the
    /// failing service's log.
    pub async fn launch(specs: Vec<ServiceSpec>, log_dir: PathBuf) -> anyhow::Result<Self> {
        // Readiness is asked the way the services call each other: trusting the CA they
        // trust (`TLS_CA_FILE`) when they serve TLS.
        let trust = match specs
            .iter()
            .find_map(|s| s.env_var(paysaga_common::tls::CA_FILE_VAR))
        {
            Some(ca) => {
                let pem = std::fs::read(ca).with_context(|| format!("reading {ca}"))?;
                paysaga_common::tls::Trust::from_pem(&pem)?
            }
            None => paysaga_common::tls::Trust::default(),
        };
        let http = paysaga_common::client::http_client_trusting(Duration::from_secs(5), &trust);
        let mut procs = BTreeMap::new();
        for spec in specs {
            let key = (spec.kind, spec.instance.unwrap_or(0));
            procs.insert(key, ServiceProcess::spawn(spec)?);
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

    /// The URL of `kind` (its first instance when there are several).
    pub fn url(&self, kind: ServiceKind) -> String {
        self.procs
            .get(&(kind, 0))
            .map(ServiceProcess::url)
            .unwrap_or_default()
    }

    /// The process of `kind` (its first instance when there are several).
    pub fn process(&self, kind: ServiceKind) -> Option<&ServiceProcess> {
        self.instance(kind, 0)
    }

    pub fn process_mut(&mut self, kind: ServiceKind) -> Option<&mut ServiceProcess> {
        self.procs.get_mut(&(kind, 0))
    }

    /// Instance `index` of `kind`.
    pub fn instance(&self, kind: ServiceKind, index: usize) -> Option<&ServiceProcess> {
        self.procs.get(&(kind, index))
    }

    /// Every process, in start order of their services.
    pub fn all(&self) -> impl Iterator<Item = &ServiceProcess> {
        self.procs.values()
    }

    /// Where the log files are.
    pub fn log_dir(&self) -> &std::path::Path {
        &self.log_dir
    }

    /// Each service's log file, for a failure message.
    pub fn log_paths(&self) -> String {
        self.procs
            .values()
            .map(|p| format!("  {}: {}", p.spec().label(), p.log_path().display()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn get_mut(&mut self, kind: ServiceKind, index: usize) -> anyhow::Result<&mut ServiceProcess> {
        self.procs
            .get_mut(&(kind, index))
            .with_context(|| format!("{kind} instance {index} is not part of this system"))
    }

    /// Stops one service (SIGKILL for a crash, SIGTERM for a graceful stop).
    pub async fn stop(&mut self, kind: ServiceKind, how: Stop) -> anyhow::Result<()> {
        self.stop_instance(kind, 0, how).await
    }

    /// Stops instance `index` of `kind`.
    pub async fn stop_instance(
        &mut self,
        kind: ServiceKind,
        index: usize,
        how: Stop,
    ) -> anyhow::Result<()> {
        self.get_mut(kind, index)?.stop(how, TERM_GRACE).await?;
        Ok(())
    }

    /// Starts a stopped service again (same port, same environment) and waits until ready.
    pub async fn start(&mut self, kind: ServiceKind) -> anyhow::Result<()> {
        self.start_instance(kind, 0).await
    }

    /// Starts instance `index` of `kind` again and waits until it is ready.
    pub async fn start_instance(&mut self, kind: ServiceKind, index: usize) -> anyhow::Result<()> {
        let http = self.http.clone();
        let proc = self.get_mut(kind, index)?;
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
            for ((k, _), proc) in self.procs.iter_mut() {
                if k == kind {
                    proc.stop(Stop::Term, TERM_GRACE).await?;
                }
            }
        }
        Ok(())
    }
}

/// When a supervised service is restarted: the first restart after `first`, each
/// further one twice as late, never later than `max`; a service that stayed ready for
/// `reset_after` starts again from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub reset_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(500),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The wait before restart number `attempt` (1 for the first in a row).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }

    /// The number of the next restart, after `previous` restarts in a row: the count
    /// goes on, unless the service was ready for at least `reset_after` before it exited
    /// (`ready_for` is `None` when it never became ready).
    pub fn next_attempt(&self, previous: u32, ready_for: Option<Duration>) -> u32 {
        match ready_for {
            Some(ready) if ready >= self.reset_after => 1,
            _ => previous.saturating_add(1),
        }
    }
}

/// What the supervisor did, for the operator.
#[derive(Debug)]
pub enum Event {
    /// A service exited on its own or was killed; it is started again after `delay`.
    Exited {
        kind: ServiceKind,
        /// Which instance, when the service runs as several.
        instance: Option<usize>,
        pid: Option<u32>,
        status: ExitStatus,
        attempt: u32,
        delay: Duration,
    },
    /// A restarted process was spawned; it is not ready yet.
    Restarted {
        kind: ServiceKind,
        /// Which instance, when the service runs as several.
        instance: Option<usize>,
        pid: u32,
        attempt: u32,
    },
    /// A restarted process answers `/readyz`.
    Ready {
        kind: ServiceKind,
        /// Which instance, when the service runs as several.
        instance: Option<usize>,
        pid: u32,
        attempt: u32,
    },
    /// A restart did not come up (could not be spawned, exited before it was ready, or
    /// was not ready in time); the next try is after `delay`.
    RestartFailed {
        kind: ServiceKind,
        /// Which instance, when the service runs as several.
        instance: Option<usize>,
        attempt: u32,
        error: String,
        delay: Duration,
    },
}

impl Event {
    /// The service (and instance) the event is about, as the operator reads it.
    fn name(&self) -> String {
        match self {
            Event::Exited { kind, instance, .. }
            | Event::Restarted { kind, instance, .. }
            | Event::Ready { kind, instance, .. }
            | Event::RestartFailed { kind, instance, .. } => label(*kind, *instance),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Event::Exited {
                pid,
                status,
                attempt,
                delay,
                ..
            } => {
                let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                write!(
                    f,
                    "{name}{pid} exited: {status}; restart #{attempt} in {delay:?}"
                )
            }
            Event::Restarted { pid, attempt, .. } => write!(
                f,
                "{name} restarted as pid {pid} (restart #{attempt}); waiting until ready"
            ),
            Event::Ready { pid, attempt, .. } => {
                write!(f, "{name} pid {pid} ready again (restart #{attempt})")
            }
            Event::RestartFailed {
                attempt,
                error,
                delay,
                ..
            } => write!(
                f,
                "{name} restart #{attempt} failed; next try in {delay:?}: {error}"
            ),
        }
    }
}

/// One supervised service: where it is in its cycle and how many restarts in a row.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Ready { since: Instant },
    Waiting { until: Instant },
    Starting { deadline: Instant },
}

/// How often the supervisor looks at its processes. Between looks it sleeps, so a
/// crash loop costs one spawn per backoff delay, not a busy CPU.
const SUPERVISE_TICK: Duration = Duration::from_millis(200);

impl Services {
    /// Keeps every service running until the future is dropped: a service that exits
    /// (or is killed) is started again on the same port after the `backoff` delay, and
    /// `report` hears each exit, restart, failed restart and return to readiness. The
    /// other services keep running meanwhile. Expects every service ready on entry
    /// (after [`Services::launch`]).
    pub async fn supervise(
        &mut self,
        backoff: Backoff,
        mut report: impl FnMut(Event),
    ) -> Infallible {
        let now = Instant::now();
        let mut phases: BTreeMap<Key, (Phase, u32)> = self
            .procs
            .keys()
            .map(|&k| (k, (Phase::Ready { since: now }, 0)))
            .collect();
        loop {
            tokio::time::sleep(SUPERVISE_TICK).await;
            for (key, (phase, attempt)) in phases.iter_mut() {
                let Some(proc) = self.procs.get_mut(key) else {
                    continue;
                };
                let (kind, instance) = (&key.0, proc.spec().instance);
                let now = Instant::now();
                match *phase {
                    Phase::Ready { since } => {
                        if let Some(status) = proc.exit_status() {
                            *attempt = backoff.next_attempt(*attempt, Some(now - since));
                            let delay = backoff.delay(*attempt);
                            report(Event::Exited {
                                kind: *kind,
                                instance,
                                pid: proc.pid(),
                                status,
                                attempt: *attempt,
                                delay,
                            });
                            *phase = Phase::Waiting { until: now + delay };
                        }
                    }
                    Phase::Waiting { until } if now >= until => match proc.start() {
                        Ok(()) => {
                            report(Event::Restarted {
                                kind: *kind,
                                instance,
                                pid: proc.pid().unwrap_or_default(),
                                attempt: *attempt,
                            });
                            *phase = Phase::Starting {
                                deadline: now + READY_TIMEOUT,
                            };
                        }
                        Err(e) => {
                            *phase = retry(
                                &backoff,
                                (*kind, instance),
                                attempt,
                                format!("{e:#}"),
                                &mut report,
                            );
                        }
                    },
                    Phase::Waiting { .. } => {}
                    Phase::Starting { deadline } => {
                        match proc.probe_ready(&self.http, Duration::from_secs(1)).await {
                            Readiness::Ready => {
                                report(Event::Ready {
                                    kind: *kind,
                                    instance,
                                    pid: proc.pid().unwrap_or_default(),
                                    attempt: *attempt,
                                });
                                *phase = Phase::Ready {
                                    since: Instant::now(),
                                };
                            }
                            Readiness::Exited(status) => {
                                let error = proc
                                    .failure(&format!("exited with {status} before it was ready"));
                                *phase = retry(
                                    &backoff,
                                    (*kind, instance),
                                    attempt,
                                    format!("{error:#}"),
                                    &mut report,
                                );
                            }
                            Readiness::NotYet(last) if Instant::now() >= deadline => {
                                let _ = proc.stop(Stop::Kill, Duration::from_secs(5)).await;
                                let error = proc.failure(&format!(
                                    "not ready after {READY_TIMEOUT:?}; last /readyz: {last}"
                                ));
                                *phase = retry(
                                    &backoff,
                                    (*kind, instance),
                                    attempt,
                                    format!("{error:#}"),
                                    &mut report,
                                );
                            }
                            Readiness::NotYet(_) => {}
                        }
                    }
                }
            }
        }
    }
}

/// After a failed restart: counts it and schedules the next one.
fn retry(
    backoff: &Backoff,
    (kind, instance): (ServiceKind, Option<usize>),
    attempt: &mut u32,
    error: String,
    report: &mut impl FnMut(Event),
) -> Phase {
    let failed = *attempt;
    *attempt = backoff.next_attempt(failed, None);
    let delay = backoff.delay(*attempt);
    report(Event::RestartFailed {
        kind,
        instance,
        attempt: failed,
        error,
        delay,
    });
    Phase::Waiting {
        until: Instant::now() + delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_half_a_second_doubling_to_thirty() {
        let b = Backoff::default();
        let delays: Vec<u64> = (1..=9).map(|a| b.delay(a).as_millis() as u64).collect();
        assert_eq!(
            delays,
            [500, 1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
        );
    }

    #[test]
    fn the_delay_never_overflows_and_stays_at_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), b.first);
        assert_eq!(b.delay(40), b.max);
        assert_eq!(b.delay(u32::MAX), b.max);
        let huge_first = Backoff {
            first: Duration::from_secs(u64::MAX / 2),
            ..b
        };
        assert_eq!(huge_first.delay(3), b.max);
    }

    #[test]
    fn a_service_ready_long_enough_starts_the_count_again() {
        let b = Backoff::default();
        assert_eq!(b.next_attempt(0, Some(Duration::from_secs(1))), 1);
        assert_eq!(b.next_attempt(3, Some(Duration::from_secs(59))), 4);
        assert_eq!(b.next_attempt(3, Some(Duration::from_secs(60))), 1);
        assert_eq!(b.next_attempt(7, Some(Duration::from_secs(3_600))), 1);
        // Never ready: a crash at start-up keeps counting up.
        assert_eq!(b.next_attempt(5, None), 6);
        assert_eq!(b.next_attempt(u32::MAX, None), u32::MAX);
    }
}
