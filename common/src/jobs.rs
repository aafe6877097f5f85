//! Scheduled jobs: one small runner, a tokio interval per job, that every service uses.
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
//!
//! Not tokio-cron-scheduler's repeated jobs: they compute each next tick from the one
//! before, so a tick that comes later than one period (a loaded machine, a stalled
//! runtime) leaves the next tick behind the last and the job never runs again
//! (upstream issue mvniekerk/tokio-cron-scheduler#113). Here a late tick only delays
//! the ones after it.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use anyhow::{ensure, Context};
use tokio::{
    sync::watch,
    task::AbortHandle,
    time::{interval_at, Instant, MissedTickBehavior},
};

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
#[derive(Debug, Default)]
pub struct Jobs {
    tickers: Mutex<Vec<AbortHandle>>,
}

impl Jobs {
    /// An empty set of jobs.
    pub async fn start() -> anyhow::Result<Self> {
        Ok(Self::default())
    }

    /// Runs `job` every `period` (not zero), first after one period. A tick that finds
    /// the previous run still going is skipped (logged at debug); a tick that comes
    /// late, because the machine was too busy to run it on time, delays the ones after
    /// it. The returned watch follows the job's [`JobCounts`].
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
        ensure!(!period.is_zero(), "job {name}: the period must not be zero");
        let guard = NoOverlap::default();
        let (counts, watch) = watch::channel(JobCounts::default());
        let counts = Arc::new(counts);
        let mut ticks = interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let ticker = tokio::spawn(async move {
            loop {
                ticks.tick().await;
                match guard.try_enter() {
                    Some(running) => {
                        let run = job();
                        let counts = counts.clone();
                        // Its own task, so that a slow run makes ticks skip rather
                        // than wait, and a panicking run ends that run, not the job.
                        tokio::spawn(async move {
                            run.await;
                            drop(running);
                            counts.send_modify(|c| c.runs += 1);
                        });
                    }
                    None => {
                        counts.send_modify(|c| c.skipped += 1);
                        tracing::debug!(job = name, "previous run still going; tick skipped");
                    }
                }
            }
        });
        self.tickers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(ticker.abort_handle());
        Ok(watch)
    }

    /// Stops every job: no further ticks. A run in progress is not waited for.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.stop_ticking();
        Ok(())
    }

    fn stop_ticking(&mut self) {
        // A poisoned list still holds every ticker pushed before the panic.
        let tickers = self
            .tickers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for ticker in tickers.drain(..) {
            ticker.abort();
        }
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

/// One run of a sweep: `batch` (which handles up to `size` due rows and says how many)
/// again until one comes back short (nothing more is due) or `max_batches` have run, so
/// a backlog is worked off over several runs instead of one unbounded one. The total.
pub async fn in_batches<E, F, Fut>(size: i64, max_batches: u32, mut batch: F) -> Result<u64, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, E>>,
{
    let full = u64::try_from(size).unwrap_or(u64::MAX);
    let mut total = 0;
    for _ in 0..max_batches {
        let n = batch().await?;
        total += n;
        if n < full {
            break;
        }
    }
    Ok(total)
}

/// [`in_batches`], the run's time recorded in the histogram `seconds`.
pub async fn timed_in_batches<E, F, Fut>(
    seconds: &'static str,
    size: i64,
    max_batches: u32,
    batch: F,
) -> Result<u64, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, E>>,
{
    let start = std::time::Instant::now();
    let total = in_batches(size, max_batches, batch).await?;
    metrics::histogram!(seconds).record(start.elapsed().as_secs_f64());
    Ok(total)
}

/// Dropped without [`Jobs::shutdown`] (a service that failed to start), the jobs stop too.
impl Drop for Jobs {
    fn drop(&mut self) {
        self.stop_ticking();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[tokio::test]
    async fn batches_run_until_one_comes_back_short_or_the_bound() {
        let mut due = 25u64;
        let ran = in_batches::<(), _, _>(10, 20, || {
            let n = due.min(10);
            due -= n;
            async move { Ok(n) }
        })
        .await;
        assert_eq!((ran, due), (Ok(25), 0));
        let mut calls = 0;
        let bounded = in_batches::<(), _, _>(10, 3, || {
            calls += 1;
            async { Ok(10) }
        })
        .await;
        assert_eq!((bounded, calls), (Ok(30), 3));
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

    /// A machine so loaded that the runtime stalls for longer than a period (here
    /// the only worker thread is blocked) must delay the job, never end it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_job_keeps_running_after_the_runtime_stalls() {
        let jobs = Jobs::start().await.expect("scheduler");
        let mut counts = jobs
            .every("steady", Duration::from_millis(200), || async {})
            .await
            .expect("scheduled");
        let bound = Duration::from_secs(30);
        tokio::time::timeout(bound, counts.wait_for(|c| c.runs >= 1))
            .await
            .expect("the job ran")
            .expect("job alive");
        std::thread::sleep(Duration::from_millis(6_500));
        let before = counts.borrow().runs;
        tokio::time::timeout(bound, counts.wait_for(|c| c.runs >= before + 3))
            .await
            .expect("the job ran again after the stall")
            .expect("job alive");
        jobs.shutdown().await.expect("shutdown");
    }
}
