//! The closed-loop load generator: N virtual clients, each sending its next request as
//! soon as its previous one is answered, until a count or a time bound is reached.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    future::Future,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};

use crate::stats::{self, Latency, OutcomeSummary, RunSummary};

/// The answer one operation got, as a short stable label. Labels starting with `error`
/// are counted as errors in the report.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Outcome(pub Cow<'static, str>);

impl Outcome {
    pub const fn of(label: &'static str) -> Self {
        Self(Cow::Borrowed(label))
    }
    pub fn ok() -> Self {
        Self::of("ok")
    }
    /// An unexpected answer; `what` should have few distinct values (it becomes a row).
    pub fn error(what: impl std::fmt::Display) -> Self {
        Self(Cow::Owned(format!("error:{what}")))
    }
    pub fn is_error(&self) -> bool {
        self.0.starts_with("error")
    }
}

/// What one operation reports: its outcome and, when the operation times only part of its
/// work itself (a claim, not the release that follows it), that part's latency; otherwise
/// the driver's measurement around the whole call is used.
#[derive(Debug, Clone)]
pub struct Answer {
    pub outcome: Outcome,
    pub latency: Option<Duration>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            latency: None,
        }
    }
}

impl Outcome {
    /// This outcome with a latency the operation measured itself.
    pub fn timed(self, latency: Duration) -> Answer {
        Answer {
            outcome: self,
            latency: Some(latency),
        }
    }
}

/// Which virtual client runs an operation, and the operation's sequence number in the run.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub worker: usize,
    pub seq: u64,
}

/// The shape of a load phase.
#[derive(Debug, Clone)]
pub struct Load {
    pub name: String,
    pub concurrency: usize,
    pub max_ops: u64,
    pub max_time: Duration,
    pub show_progress: bool,
}

impl Load {
    pub fn new(
        name: impl Into<String>,
        concurrency: usize,
        max_ops: u64,
        max_time: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            concurrency: concurrency.max(1),
            max_ops,
            max_time,
            show_progress: true,
        }
    }
}

struct PerOutcome {
    hist: Histogram<u64>,
    last_end: Duration,
}

/// One virtual client's measurements; merged after the run, so the hot path takes no lock.
struct Recorder {
    all: Histogram<u64>,
    by_outcome: HashMap<Outcome, PerOutcome>,
}

impl Recorder {
    fn new() -> Self {
        Self {
            all: stats::new_histogram(),
            by_outcome: HashMap::new(),
        }
    }

    fn record(&mut self, outcome: Outcome, latency: Duration, ended_at: Duration) {
        stats::record(&mut self.all, latency);
        let entry = self
            .by_outcome
            .entry(outcome)
            .or_insert_with(|| PerOutcome {
                hist: stats::new_histogram(),
                last_end: Duration::ZERO,
            });
        stats::record(&mut entry.hist, latency);
        entry.last_end = entry.last_end.max(ended_at);
    }

    fn merge(&mut self, other: Recorder) {
        // Same bounds everywhere, so adding cannot fail.
        let _ = self.all.add(&other.all);
        for (outcome, theirs) in other.by_outcome {
            let mine = self
                .by_outcome
                .entry(outcome)
                .or_insert_with(|| PerOutcome {
                    hist: stats::new_histogram(),
                    last_end: Duration::ZERO,
                });
            let _ = mine.hist.add(&theirs.hist);
            mine.last_end = mine.last_end.max(theirs.last_end);
        }
    }
}

fn progress(load: &Load) -> ProgressBar {
    if !load.show_progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(load.max_ops);
    let style = ProgressStyle::with_template(
        "{prefix:>28} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(load.name.clone());
    bar
}

/// Runs `op` from `load.concurrency` virtual clients until `load.max_ops` operations were
/// started or `load.max_time` has passed; operations in flight at the time bound finish
/// and are counted. Latency is measured around each call to `op` unless the operation
/// reports its own (see [`Answer`]).
pub async fn run<F, Fut, A>(load: &Load, op: F) -> RunSummary
where
    F: Fn(Ctx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = A> + Send + 'static,
    A: Into<Answer>,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let bar = progress(load);
    let start = Instant::now();
    let deadline = start + load.max_time;
    let mut workers = Vec::with_capacity(load.concurrency);
    for worker in 0..load.concurrency {
        let (op, next, bar, max_ops) = (op.clone(), next.clone(), bar.clone(), load.max_ops);
        workers.push(tokio::spawn(async move {
            let mut rec = Recorder::new();
            while Instant::now() < deadline {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= max_ops {
                    break;
                }
                let began = Instant::now();
                let answer: Answer = op(Ctx { worker, seq }).await.into();
                let ended = Instant::now();
                let latency = answer.latency.unwrap_or(ended - began);
                rec.record(answer.outcome, latency, ended - start);
                bar.inc(1);
            }
            rec
        }));
    }
    let mut total = Recorder::new();
    for w in workers {
        match w.await {
            Ok(rec) => total.merge(rec),
            // A panicking operation is a bug in the benchmark itself; make it visible.
            Err(e) => total.record(
                Outcome::error(format!("worker panicked: {e}")),
                Duration::ZERO,
                start.elapsed(),
            ),
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    summarise(load, total, elapsed)
}

fn summarise(load: &Load, total: Recorder, elapsed: Duration) -> RunSummary {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let ops = total.all.len();
    let outcomes: BTreeMap<String, OutcomeSummary> = total
        .by_outcome
        .into_iter()
        .map(|(o, p)| {
            let count = p.hist.len();
            (
                o.0.into_owned(),
                OutcomeSummary {
                    count,
                    per_s: count as f64 / secs,
                    latency: Latency::of(&p.hist),
                    last_answer_s: p.last_end.as_secs_f64(),
                },
            )
        })
        .collect();
    RunSummary {
        name: load.name.clone(),
        concurrency: load.concurrency,
        ops,
        elapsed_s: secs,
        per_s: ops as f64 / secs,
        latency: Latency::of(&total.all),
        outcomes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet(name: &str, concurrency: usize, max_ops: u64, max_time: Duration) -> Load {
        Load {
            show_progress: false,
            ..Load::new(name, concurrency, max_ops, max_time)
        }
    }

    #[tokio::test]
    async fn runs_exactly_the_bounded_count_and_counts_each_outcome() {
        let load = quiet("count", 8, 1_000, Duration::from_secs(600));
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        let summary = run(&load, move |ctx| {
            s.fetch_add(1, Ordering::Relaxed);
            async move {
                if ctx.seq % 10 == 0 {
                    Outcome::of("sold_out")
                } else {
                    Outcome::ok()
                }
            }
        })
        .await;
        assert_eq!(seen.load(Ordering::Relaxed), 1_000);
        assert_eq!(summary.ops, 1_000);
        assert_eq!(summary.count("sold_out"), 100);
        assert_eq!(summary.count("ok"), 900);
        assert_eq!(summary.errors(), 0);
    }

    #[tokio::test]
    async fn the_time_bound_stops_an_unbounded_count() {
        let load = quiet("time", 4, u64::MAX, Duration::from_millis(50));
        let summary = run(&load, |_| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Outcome::ok()
        })
        .await;
        assert!(summary.ops > 0);
        assert!(summary.ops < u64::MAX);
        assert_eq!(summary.count("ok"), summary.ops);
    }

    #[tokio::test]
    async fn never_more_operations_in_flight_than_virtual_clients() {
        let in_flight = Arc::new(AtomicU64::new(0));
        let peak = Arc::new(AtomicU64::new(0));
        let (f, p) = (in_flight.clone(), peak.clone());
        let load = quiet("closed", 5, 200, Duration::from_secs(600));
        run(&load, move |_| {
            let (f, p) = (f.clone(), p.clone());
            async move {
                let now = f.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                f.fetch_sub(1, Ordering::SeqCst);
                Outcome::ok()
            }
        })
        .await;
        assert!(peak.load(Ordering::SeqCst) <= 5);
        assert!(peak.load(Ordering::SeqCst) >= 1);
    }

    #[tokio::test]
    async fn errors_are_counted_apart() {
        let load = quiet("errors", 2, 10, Duration::from_secs(600));
        let summary = run(&load, |ctx| async move {
            if ctx.seq < 3 {
                Outcome::error("http_500")
            } else {
                Outcome::ok()
            }
        })
        .await;
        assert_eq!(summary.errors(), 3);
        assert_eq!(summary.count("error:http_500"), 3);
    }

    #[tokio::test]
    async fn an_operation_may_report_its_own_latency() {
        let load = quiet("self-timed", 2, 20, Duration::from_secs(600));
        let summary = run(&load, |_| async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            Outcome::ok().timed(Duration::from_micros(100))
        })
        .await;
        assert_eq!(summary.count("ok"), 20);
        assert!(summary.latency.max_us <= 101, "{:?}", summary.latency);
    }
}
