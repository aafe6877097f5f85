//! Scheduled jobs: one small runner over tokio-cron-scheduler that every service uses.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::time::Duration;
//! let jobs = paysaga_common::jobs::Jobs::start().await?;
//! jobs.every("sweep", Duration::from_millis(500), || async {
//!     // one run; a run still going when the next tick comes makes that tick skip
//! })
//! .await?;
//! jobs.shutdown().await?;
//! # Ok(())
//! # }
//! ```

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context;
use tokio::sync::watch;
use tokio_cron_scheduler::{Job, JobScheduler};

/// The period tokio-cron-scheduler is given for a requested one: it repeats in whole
/// seconds, and a sub-second period silently never fires. Rounds up, at least 1 s.
fn whole_seconds(requested: Duration) -> Duration {
    let secs = requested.as_millis().div_ceil(1000).max(1);
    Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX))
}

/// At most one run of a job at a time: a tick that finds a run still going is skipped
/// rather than doubled (a second sweep or recovery run would only contend with the
/// first for the same rows).
#[derive(Debug, Default, Clone)]
struct NoOverlap(Arc<AtomicBool>);

/// Held for the length of one run; dropping it (at the end, on a panic, or when the
/// run is cancelled) lets the next tick run.
struct Running(Arc<AtomicBool>);

impl NoOverlap {
    fn try_enter(&self) -> Option<Running> {
        (!self.0.swap(true, Ordering::AcqRel)).then(|| Running(self.0.clone()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What one job has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Runs that finished (or were cancelled).
    pub runs: u64,
    /// Ticks skipped because the previous run was still going.
    pub skipped: u64,
}

/// A scheduled job's counts as they change: `wait_for` one instead of sleeping.
pub type JobWatch = watch::Receiver<JobCounts>;

/// The scheduled jobs of one service. Started before the jobs are added; stopped with
/// [`Jobs::shutdown`].
pub struct Jobs {
    scheduler: JobScheduler,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}

impl Jobs {
    /// Starts an empty scheduler.
    pub async fn start() -> anyhow::Result<Self> {
        let scheduler = JobScheduler::new().await?;
        scheduler.start().await?;
        Ok(Self { scheduler })
    }

    /// Runs `job` every `period`, first after one period. The period is rounded up to
    /// whole seconds, at least 1 s (logged here when that changes it); a tick that
    /// finds the previous run still going is skipped (logged at debug). The returned
    /// watch follows the job's [`JobCounts`].
    pub async fn every<F, Fut>(
        &self,
        name: &'static str,
        period: Duration,
        job: F,
    ) -> anyhow::Result<JobWatch>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let rounded = whole_seconds(period);
        if rounded != period {
            tracing::info!(
                job = name,
                requested_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                period_secs = rounded.as_secs(),
                "job period rounded up to whole seconds"
            );
        }
        let guard = NoOverlap::default();
        let (counts, watch) = watch::channel(JobCounts::default());
        let counts = Arc::new(counts);
        let scheduled = Job::new_repeated_async(rounded, move |_id, _scheduler| {
            let run = guard.try_enter().map(|running| (running, job()));
            let counts = counts.clone();
            Box::pin(async move {
                match run {
                    Some((running, run)) => {
                        run.await;
                        drop(running);
                        counts.send_modify(|c| c.runs += 1);
                    }
                    None => {
                        counts.send_modify(|c| c.skipped += 1);
                        tracing::debug!(job = name, "previous run still going; tick skipped");
                    }
                }
            })
        })?;
        self.scheduler.add(scheduled).await?;
        Ok(watch)
    }

    /// Stops the scheduler: no further ticks. A run in progress is not waited for.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.scheduler.shutdown().await?;
        Ok(())
    }

    /// Waits for `serving` (a service's [`crate::server::serve`]) to end, then stops the
    /// jobs; how serving ended. A failure to stop them is logged, not returned: the
    /// service has stopped serving either way.
    pub async fn stop_after(
        self,
        serving: impl Future<Output = std::io::Result<()>>,
    ) -> anyhow::Result<()> {
        let served = serving.await;
        if let Err(e) = self.shutdown().await {
            tracing::warn!(error = %e, "scheduled jobs did not stop cleanly");
        }
        served.context("serving HTTP")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn periods_round_up_to_whole_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(whole_seconds(ms(200)), Duration::from_secs(1));
        assert_eq!(whole_seconds(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(whole_seconds(ms(1000)), Duration::from_secs(1));
        assert_eq!(whole_seconds(ms(1001)), Duration::from_secs(2));
        assert_eq!(whole_seconds(ms(1500)), Duration::from_secs(2));
        assert_eq!(
            whole_seconds(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn the_guard_admits_one_run_at_a_time() {
        let guard = NoOverlap::default();
        let first = guard.try_enter().expect("free");
        assert!(
            guard.try_enter().is_none(),
            "a second run while the first goes"
        );
        assert!(guard.clone().try_enter().is_none(), "shared by every tick");
        drop(first);
        assert!(guard.try_enter().is_some(), "free again once the run ends");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_job_never_overlaps_itself() {
        let going = Arc::new(AtomicUsize::new(0));
        let most_at_once = Arc::new(AtomicUsize::new(0));
        // The first run holds until the test has seen two ticks skipped because of it.
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let jobs = Jobs::start().await.expect("scheduler");
        let (g, m, r) = (going.clone(), most_at_once.clone(), release.clone());
        // Sub-second, so it is rounded up to 1 s.
        let mut counts = jobs
            .every("slow", Duration::from_millis(300), move || {
                let (g, m, r) = (g.clone(), m.clone(), r.clone());
                async move {
                    let now = g.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    let _held = r.acquire().await.expect("semaphore open");
                    g.fetch_sub(1, Ordering::SeqCst);
                }
            })
            .await
            .expect("scheduled");
        // Bounds against a hung scheduler, not timing assertions: only counts are checked.
        let bound = Duration::from_secs(60);
        let held = *tokio::time::timeout(bound, counts.wait_for(|c| c.skipped >= 2))
            .await
            .expect("ticks came while the first run held")
            .expect("job alive");
        assert_eq!(held.runs, 0, "the first run is still going");
        release.add_permits(1_000);
        tokio::time::timeout(bound, counts.wait_for(|c| c.runs >= 2))
            .await
            .expect("the job ran again once free")
            .expect("job alive");
        jobs.shutdown().await.expect("shutdown");
        assert_eq!(most_at_once.load(Ordering::SeqCst), 1, "runs overlapped");
    }
}
