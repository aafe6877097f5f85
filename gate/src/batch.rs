//! Group commit for pass issue: requests for one product that arrive while a script
//! call is in flight go to Redis together in the next call. Redis still decides each
//! member in order inside one atomic script; the gate just pays one round trip (and
//! one script call) per batch instead of per buyer.

use tokio::sync::{mpsc, oneshot};

use crate::{
    admission::unix_now,
    error::{Error, Result},
    store::{IssueOutcome, QuotaStore},
};

/// The most members one script call decides.
const MAX_BATCH: usize = 256;
/// Requests waiting beyond this go to Redis on their own instead.
const QUEUE: usize = 4096;

/// Why a batch failed, shareable by every request in it.
#[derive(Debug, Clone)]
pub struct BatchFailure {
    pub outage: bool,
    pub message: String,
}

struct Job {
    member: String,
    reply: oneshot::Sender<Result<IssueOutcome, BatchFailure>>,
}

/// The sending side of one product's batching task; the task ends when this drops.
#[derive(Debug, Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Job>,
}

impl Batcher {
    pub fn spawn(store: QuotaStore, product_id: i64, ttl_secs: i64) -> Self {
        let (tx, mut rx) = mpsc::channel::<Job>(QUEUE);
        tokio::spawn(async move {
            let mut jobs = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
                let members: Vec<String> = jobs.iter().map(|j| j.member.clone()).collect();
                let now = unix_now();
                let result = store
                    .issue_many(product_id, &members, now, now + ttl_secs)
                    .await;
                metrics::histogram!("gate_issue_batch_size").record(members.len() as f64);
                match result {
                    Ok(outcomes) => {
                        for (job, o) in jobs.drain(..).zip(outcomes) {
                            let _ = job.reply.send(Ok(o));
                        }
                    }
                    Err(e) => {
                        let failure = BatchFailure {
                            outage: e.is_redis_outage(),
                            message: e.to_string(),
                        };
                        for job in jobs.drain(..) {
                            let _ = job.reply.send(Err(failure.clone()));
                        }
                    }
                }
            }
        });
        Self { tx }
    }

    /// Issues through the next batch; `None` when the queue is full or the task is
    /// gone (the caller then asks Redis directly).
    pub async fn issue(&self, member: &str) -> Option<Result<IssueOutcome>> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .try_send(Job {
                member: member.to_owned(),
                reply,
            })
            .ok()?;
        match answer.await.ok()? {
            Ok(o) => Some(Ok(o)),
            Err(f) if f.outage => Some(Err(Error::RedisBatch(f.message))),
            Err(f) => Some(Err(Error::ScriptReply(f.message))),
        }
    }
}
