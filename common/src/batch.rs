//! Group commit: operations that arrive while earlier batches are in flight go
//! together in the next one, so a thousand concurrent payments cost a handful of round
//! trips and commits instead of a thousand. Nothing waits on a timer: when nothing is
//! in flight an operation leaves at once, alone, so one caller at a time sees the
//! latency of an unbatched call.

use std::{future::Future, sync::Arc};

use tokio::sync::{mpsc, oneshot, Semaphore};

/// Operations queued beyond this make `submit` wait for room (back-pressure).
const QUEUE: usize = 8192;

/// Why an operation got no answer of its own: the batch it rode in failed as a whole
/// (the flush's error), or the batcher is gone. The operation may or may not have been
/// applied, exactly like a call whose answer was lost.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BatchFailure(pub Arc<str>);

impl BatchFailure {
    fn new(message: impl Into<String>) -> Self {
        Self(Arc::from(message.into()))
    }
}

struct Job<I, O> {
    item: I,
    reply: oneshot::Sender<Result<O, BatchFailure>>,
}

/// The sending side of one batching task; the task ends when every clone is dropped
/// and the queued operations have been flushed.
pub struct Coalescer<I, O> {
    tx: mpsc::Sender<Job<I, O>>,
}

impl<I, O> Clone for Coalescer<I, O> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
        }
    }
}

impl<I, O> std::fmt::Debug for Coalescer<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static> Coalescer<I, O> {
    /// Starts the batching task. `flush` gets up to `max_batch` operations in arrival
    /// order and answers each, in the same order; at most `in_flight` flushes run at
    /// once. The batch sizes are recorded as the histogram `paysaga_batch_ops{batch=name}`,
    /// and the operations in flushes not yet answered as the gauge
    /// `paysaga_batch_in_flight_ops{batch=name}` (the fault suite reads it to kill a
    /// process while a batch is in flight).
    pub fn spawn<F, Fut>(name: &'static str, max_batch: usize, in_flight: usize, flush: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, String>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel::<Job<I, O>>(QUEUE);
        let slots = Arc::new(Semaphore::new(in_flight.max(1)));
        let flush = Arc::new(flush);
        tokio::spawn(async move {
            loop {
                // A free slot first, then whatever has queued meanwhile: under load the
                // queue fills while every slot is busy, and the next batch takes it all.
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let mut jobs = Vec::with_capacity(max_batch.min(256));
                if rx.recv_many(&mut jobs, max_batch.max(1)).await == 0 {
                    return;
                }
                let size = jobs.len() as f64;
                metrics::histogram!("paysaga_batch_ops", "batch" => name).record(size);
                let in_flight = metrics::gauge!("paysaga_batch_in_flight_ops", "batch" => name);
                in_flight.increment(size);
                let (items, replies): (Vec<I>, Vec<_>) =
                    jobs.into_iter().map(|j| (j.item, j.reply)).unzip();
                let run = flush(items);
                // Its own task: a flush is never cancelled halfway by a caller that gave up.
                tokio::spawn(async move {
                    let outcome = run.await;
                    in_flight.decrement(size);
                    drop(slot);
                    match outcome {
                        Ok(answers) if answers.len() == replies.len() => {
                            for (reply, answer) in replies.into_iter().zip(answers) {
                                let _ = reply.send(Ok(answer));
                            }
                        }
                        Ok(answers) => {
                            let failure = BatchFailure::new(format!(
                                "{name}: {} answers for {} operations",
                                answers.len(),
                                replies.len()
                            ));
                            for reply in replies {
                                let _ = reply.send(Err(failure.clone()));
                            }
                        }
                        Err(e) => {
                            let failure = BatchFailure::new(format!("{name}: {e}"));
                            for reply in replies {
                                let _ = reply.send(Err(failure.clone()));
                            }
                        }
                    }
                });
            }
        });
        Self { tx }
    }

    /// Sends `item` with the next batch and waits for its own answer.
    pub async fn submit(&self, item: I) -> Result<O, BatchFailure> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job { item, reply })
            .await
            .map_err(|_| BatchFailure::new("batcher stopped"))?;
        answer
            .await
            .map_err(|_| BatchFailure::new("batch dropped without an answer"))?
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
        let c = Coalescer::spawn("test", 16, 1, |items: Vec<u32>| async move {
            Ok(items.into_iter().map(|i| i * 2).collect())
        });
        let answer = tokio::time::timeout(Duration::from_secs(1), c.submit(21)).await;
        assert_eq!(answer.expect("no timer to wait out").expect("answered"), 42);
    }

    #[tokio::test]
    async fn operations_arriving_during_a_flush_share_the_next_one() {
        let flushes = Arc::new(AtomicUsize::new(0));
        let f = flushes.clone();
        let c = Coalescer::spawn("test", 1000, 1, move |items: Vec<u32>| {
            let f = f.clone();
            async move {
                f.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(items.into_iter().map(|i| i + 1).collect::<Vec<u32>>())
            }
        });
        let answers = futures::future::join_all((0..200u32).map(|i| {
            let c = c.clone();
            async move { c.submit(i).await }
        }))
        .await;
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a.expect("answered"), i as u32 + 1);
        }
        let n = flushes.load(Ordering::SeqCst);
        assert!(n <= 3, "200 concurrent operations took {n} flushes");
    }

    #[tokio::test]
    async fn a_failed_flush_fails_every_operation_in_it_and_nothing_else() {
        let c = Coalescer::spawn("test", 8, 1, |items: Vec<u32>| async move {
            if items.contains(&13) {
                Err("unlucky".to_owned())
            } else {
                Ok(items)
            }
        });
        assert!(c.submit(13).await.is_err());
        assert_eq!(c.submit(7).await.expect("next batch is fine"), 7);
        let short = Coalescer::spawn(
            "short",
            8,
            1,
            |_: Vec<u32>| async move { Ok(Vec::<u32>::new()) },
        );
        assert!(
            short.submit(1).await.is_err(),
            "a missing answer is a failure"
        );
    }
}
