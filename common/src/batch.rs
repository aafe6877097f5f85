//! Group commit: operations that arrive while earlier batches are in flight go
//! together in the next one, so a thousand concurrent payments cost a handful of round
//! trips and commits instead of a thousand. Nothing waits on a timer: when nothing is
//! in flight an operation leaves at once, alone, so one caller at a time sees the
//! latency of an unbatched call.

use std::{
    collections::VecDeque,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
};

use tokio::sync::oneshot;

/// Why an operation got no answer of its own. The operation may or may not have been
/// applied, exactly like a call whose answer was lost.
#[derive(Debug, thiserror::Error)]
pub enum BatchFailure<E> {
    /// The flush failed as a whole; every operation in it shares its error.
    #[error("{batch}: {error}")]
    Flush { batch: &'static str, error: Arc<E> },
    /// The flush answered a different number of operations than it was given.
    #[error("{batch}: {answers} answers for {operations} operations")]
    Miscounted {
        batch: &'static str,
        answers: usize,
        operations: usize,
    },
    /// The batcher went away before answering (the runtime is shutting down).
    #[error("batch dropped without an answer")]
    Dropped,
}

impl<E> Clone for BatchFailure<E> {
    fn clone(&self) -> Self {
        match self {
            Self::Flush { batch, error } => Self::Flush {
                batch,
                error: error.clone(),
            },
            Self::Miscounted {
                batch,
                answers,
                operations,
            } => Self::Miscounted {
                batch,
                answers: *answers,
                operations: *operations,
            },
            Self::Dropped => Self::Dropped,
        }
    }
}

impl<E> BatchFailure<E> {
    /// The flush's own error, when that is why.
    pub fn flush_error(&self) -> Option<&E> {
        match self {
            Self::Flush { error, .. } => Some(error),
            Self::Miscounted { .. } | Self::Dropped => None,
        }
    }
}

struct Job<I, O, E> {
    item: I,
    reply: oneshot::Sender<Result<O, BatchFailure<E>>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type FlushFn<I, O, E> = dyn Fn(Vec<I>) -> BoxFuture<Result<Vec<O>, E>> + Send + Sync;

struct Queue<I, O, E> {
    waiting: VecDeque<Job<I, O, E>>,
    in_flight: usize,
}

struct Shared<I, O, E> {
    name: &'static str,
    max_batch: usize,
    max_in_flight: usize,
    queue: Mutex<Queue<I, O, E>>,
    flush: Box<FlushFn<I, O, E>>,
}

/// A group-commit batcher; cheap to clone.
///
/// The caller that finds a flush slot free leads: it takes everything waiting (itself
/// included) and runs the flush in its own task, so a lone operation costs no hop to
/// another task. Callers that arrive while every slot is busy wait in the queue; a
/// flush that ends with operations waiting hands its slot to a task that flushes them.
pub struct Coalescer<I, O, E> {
    shared: Arc<Shared<I, O, E>>,
}

impl<I, O, E> Clone for Coalescer<I, O, E> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<I, O, E> std::fmt::Debug for Coalescer<I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static, E: Send + Sync + 'static> Coalescer<I, O, E> {
    /// A batcher whose `flush` gets up to `max_batch` operations in arrival order and
    /// answers each, in the same order (or fails as a whole with `E`, which every
    /// operation of that flush then gets); at most `in_flight` flushes run at once. The
    /// batch sizes are recorded as the histogram `paysaga_batch_ops{batch=name}`, and
    /// the operations in flushes not yet answered as the gauge
    /// `paysaga_batch_in_flight_ops{batch=name}` (the fault suite reads it to kill a
    /// process while a batch is in flight).
    pub fn new<F, Fut>(name: &'static str, max_batch: usize, in_flight: usize, flush: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, E>> + Send + 'static,
    {
        Self {
            shared: Arc::new(Shared {
                name,
                max_batch: max_batch.max(1),
                max_in_flight: in_flight.max(1),
                queue: Mutex::new(Queue {
                    waiting: VecDeque::new(),
                    in_flight: 0,
                }),
                flush: Box::new(move |items| Box::pin(flush(items))),
            }),
        }
    }

    /// Sends `item` with the next batch and waits for its own answer.
    pub async fn submit(&self, item: I) -> Result<O, BatchFailure<E>> {
        let (reply, answer) = oneshot::channel();
        let lead = {
            let mut q = self.shared.lock();
            q.waiting.push_back(Job { item, reply });
            if q.in_flight < self.shared.max_in_flight {
                q.in_flight += 1;
                Some(self.shared.take(&mut q))
            } else {
                None
            }
        };
        if let Some(jobs) = lead {
            let mut leading = Leading(Some(Box::pin(run(self.shared.clone(), jobs))));
            leading.finish().await;
        }
        answer.await.map_err(|_| BatchFailure::Dropped)?
    }
}

impl<I, O, E> Shared<I, O, E> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<I, O, E>> {
        // A panic while holding the lock leaves the queue consistent (pushes and
        // drains are single calls), so a poisoned lock is still usable.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, q: &mut Queue<I, O, E>) -> Vec<Job<I, O, E>> {
        let n = q.waiting.len().min(self.max_batch);
        q.waiting.drain(..n).collect()
    }
}

/// A leader's flush, run in the leader's task. Dropped before the end (the caller gave
/// up), it finishes in a task of its own: a flush is never cut off halfway.
struct Leading(Option<BoxFuture<()>>);

impl Leading {
    async fn finish(&mut self) {
        if let Some(flush) = self.0.as_mut() {
            flush.await;
            self.0 = None;
        }
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        if let Some(flush) = self.0.take() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(flush);
            }
        }
    }
}

/// Flushes `jobs` and answers each; then, holding the same slot, flushes whatever
/// queued meanwhile (in a task of its own, so the leader returns with its answer), or
/// frees the slot.
// Not an `async fn`: it spawns itself, and only a named `Send` bound breaks the cycle
// in inferring whether its future is `Send`.
#[allow(clippy::manual_async_fn)]
fn run<I: Send + 'static, O: Send + 'static, E: Send + Sync + 'static>(
    shared: Arc<Shared<I, O, E>>,
    jobs: Vec<Job<I, O, E>>,
) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let name = shared.name;
        let size = jobs.len() as f64;
        metrics::histogram!("paysaga_batch_ops", "batch" => name).record(size);
        let in_flight = metrics::gauge!("paysaga_batch_in_flight_ops", "batch" => name);
        in_flight.increment(size);
        let (items, replies): (Vec<I>, Vec<_>) =
            jobs.into_iter().map(|j| (j.item, j.reply)).unzip();
        let outcome = (shared.flush)(items).await;
        in_flight.decrement(size);
        match outcome {
            Ok(answers) if answers.len() == replies.len() => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(answers) => {
                let failure = BatchFailure::Miscounted {
                    batch: name,
                    answers: answers.len(),
                    operations: replies.len(),
                };
                for reply in replies {
                    let _ = reply.send(Err(failure.clone()));
                }
            }
            Err(error) => {
                let failure = BatchFailure::Flush {
                    batch: name,
                    error: Arc::new(error),
                };
                for reply in replies {
                    let _ = reply.send(Err(failure.clone()));
                }
            }
        }
        let next = {
            let mut q = shared.lock();
            if q.waiting.is_empty() {
                q.in_flight -= 1;
                None
            } else {
                Some(shared.take(&mut q))
            }
        };
        if let Some(jobs) = next {
            let continued: BoxFuture<()> = Box::pin(run(shared, jobs));
            tokio::spawn(continued);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use super::*;

    #[tokio::test]
    async fn a_lone_operation_leaves_at_once_and_gets_its_own_answer() {
        let c = Coalescer::new("test", 16, 1, |items: Vec<u32>| async move {
            Ok::<_, String>(items.into_iter().map(|i| i * 2).collect())
        });
        let answer = tokio::time::timeout(Duration::from_secs(1), c.submit(21)).await;
        assert_eq!(answer.expect("no timer to wait out").expect("answered"), 42);
    }

    /// Operations queued in `c`, waiting for a flush slot.
    fn waiting<I, O, E>(c: &Coalescer<I, O, E>) -> usize {
        c.shared.lock().waiting.len()
    }

    /// Yields until `done` holds; the bound only turns a broken test into a failure.
    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..100_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never happened: {what}");
    }

    /// Flushes that hold until `gate` opens (a closed gate: a flush in progress),
    /// counted, with the operations they carried.
    struct Gated {
        gate: Arc<tokio::sync::Semaphore>,
        flushes: Arc<AtomicUsize>,
        sizes: Arc<AtomicUsize>,
    }

    type Answer = tokio::task::JoinHandle<Result<u32, BatchFailure<String>>>;

    impl Gated {
        /// Every flush held until the test opens the gate.
        fn closed() -> Self {
            Self {
                gate: Arc::new(tokio::sync::Semaphore::new(0)),
                flushes: Arc::default(),
                sizes: Arc::default(),
            }
        }

        /// A coalescer of up to `max_batch` operations a flush, one flush at a time,
        /// whose flushes answer each operation `i` with `i + 1`.
        fn coalescer(&self, max_batch: usize) -> Coalescer<u32, u32, String> {
            let (gate, flushes, sizes) =
                (self.gate.clone(), self.flushes.clone(), self.sizes.clone());
            Coalescer::new("test", max_batch, 1, move |items: Vec<u32>| {
                let (gate, flushes, sizes) = (gate.clone(), flushes.clone(), sizes.clone());
                let flush: BoxFuture<Result<Vec<u32>, String>> = Box::pin(async move {
                    flushes.fetch_add(1, Ordering::SeqCst);
                    let _open = gate.acquire().await.map_err(|e| e.to_string())?;
                    sizes.fetch_add(items.len(), Ordering::SeqCst);
                    Ok(items.into_iter().map(|i| i + 1).collect())
                });
                flush
            })
        }

        /// Submits `item` to `c` from a task of its own, and waits until a flush has
        /// started if none had.
        async fn lead(&self, c: &Coalescer<u32, u32, String>, item: u32) -> Answer {
            let answer = submitted(c, item);
            until("the first flush started", || {
                self.flushes.load(Ordering::SeqCst) == 1
            })
            .await;
            answer
        }
    }

    /// Submits `item` to `c` from a task of its own.
    fn submitted(c: &Coalescer<u32, u32, String>, item: u32) -> Answer {
        let c = c.clone();
        tokio::spawn(async move { c.submit(item).await })
    }

    #[tokio::test]
    async fn operations_arriving_during_a_flush_share_the_next_one() {
        let gated = Gated::closed();
        let c = gated.coalescer(1000);
        let first = gated.lead(&c, 0).await;
        let rest: Vec<_> = (1..200u32).map(|i| submitted(&c, i)).collect();
        until("199 operations queued", || waiting(&c) == 199).await;
        gated.gate.add_permits(1_000);
        assert_eq!(first.await.expect("joined").expect("answered"), 1);
        for (i, r) in rest.into_iter().enumerate() {
            assert_eq!(r.await.expect("joined").expect("answered"), i as u32 + 2);
        }
        assert_eq!(
            gated.flushes.load(Ordering::SeqCst),
            2,
            "one flush for the 199"
        );
        assert_eq!(gated.sizes.load(Ordering::SeqCst), 200);
    }

    #[tokio::test]
    async fn a_failed_flush_fails_every_operation_in_it_and_nothing_else() {
        let c = Coalescer::new("test", 8, 1, |items: Vec<u32>| async move {
            if items.contains(&13) {
                Err("unlucky".to_owned())
            } else {
                Ok(items)
            }
        });
        let failed = c.submit(13).await.expect_err("the flush failed");
        assert_eq!(failed.flush_error().map(String::as_str), Some("unlucky"));
        assert_eq!(c.submit(7).await.expect("next batch is fine"), 7);
        let short = Coalescer::new("short", 8, 1, |_: Vec<u32>| async move {
            Ok::<_, String>(Vec::<u32>::new())
        });
        assert!(
            matches!(
                short.submit(1).await,
                Err(BatchFailure::Miscounted {
                    answers: 0,
                    operations: 1,
                    ..
                })
            ),
            "a missing answer is a failure"
        );
    }

    #[tokio::test]
    async fn a_leader_that_gives_up_does_not_cut_its_flush_short() {
        let gated = Gated::closed();
        let c = gated.coalescer(16);
        let leader = gated.lead(&c, 1).await;
        // Queued behind the leader's flush: answered by the flush that follows it.
        let follower = submitted(&c, 2);
        until("the follower queued", || waiting(&c) == 1).await;
        leader.abort();
        assert!(leader.await.is_err_and(|e| e.is_cancelled()));
        gated.gate.add_permits(16);
        let answer = tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("the follower is answered")
            .expect("task ran");
        assert_eq!(answer.expect("answered"), 3);
        assert_eq!(
            gated.sizes.load(Ordering::SeqCst),
            2,
            "the abandoned flush ran to its end"
        );
    }
}
