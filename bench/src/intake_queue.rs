//! The seed's intake queue, the gate's alternative the benchmark measures: buyers' orders on a Redis stream, consumers calling the order service.
//!
//! A buyer's order (who, with which pass) is added to a stream (`XADD`); a consumer group
//! reads it (`XREADGROUP`), sends it to the order service over HTTP as the buyer
//! (`POST /v1/reservations` with the buyer's token and pass), acknowledges it (`XACK`) and
//! hands the order service's answer to the waiting buyer, in this process, the moment it
//! has it (a real client would poll for it, later still). Every order reaches the order
//! service: the queue spreads the load out in time; it does not turn anyone away.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

use crate::{
    client::{post_json, send, Buyers},
    error::{Error, Result},
    load::Outcome,
};

/// The consumer group's name.
const GROUP: &str = "order";
/// How long one `XREADGROUP` blocks before a consumer looks at the stop flag again.
const BLOCK_MS: u64 = 200;

/// One reservation request as the order service answers it: `reserved`, `sold_out`,
/// `conflict` (an optimistic claim strategy), or an unexpected answer.
pub async fn reserve(
    http: &reqwest::Client,
    order: &str,
    token: &str,
    product: i64,
    pass: &str,
) -> Outcome {
    let body = serde_json::json!({"product_id": product, "pass": pass}).to_string();
    let url = format!("{order}/v1/reservations");
    let reply = match send(post_json(http, &url, token, body)).await {
        Ok(r) => r,
        Err(o) => return o,
    };
    match (reply.status, reply.code().as_deref()) {
        (200 | 201, _) => Outcome::of("reserved"),
        (409, Some("SOLD_OUT")) => Outcome::of("sold_out"),
        (409, Some("CLAIM_CONFLICT")) => Outcome::of("conflict"),
        _ => reply.unexpected(),
    }
}

type Waiters = Arc<Mutex<HashMap<usize, oneshot::Sender<Outcome>>>>;

/// A running queue for one product: its stream, its consumers, the buyers waiting.
pub struct IntakeQueue {
    stream: String,
    producer: MultiplexedConnection,
    waiters: Waiters,
    stop: Arc<AtomicBool>,
    consumers: Mutex<Vec<tokio::task::JoinHandle<Result<()>>>>,
}

fn redis_error(what: &str, e: redis::RedisError) -> Error {
    Error::Setup(format!("intake queue: {what}: {e}"))
}

impl IntakeQueue {
    /// Creates the stream `stream` and its group and starts `consumers` consumers, each
    /// on a connection of its own (a blocked read holds its connection), sending orders
    /// for `product` to the order service at `order` as `buyers` (buyer `i` is entry
    /// field `i`).
    pub async fn start(
        redis_url: &str,
        stream: String,
        consumers: usize,
        http: reqwest::Client,
        order: String,
        buyers: Buyers,
        product: i64,
    ) -> Result<Self> {
        let client = redis::Client::open(redis_url).map_err(|e| redis_error("client", e))?;
        let mut producer = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| redis_error("connect", e))?;
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&stream)
            .arg(GROUP)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut producer)
            .await
            .map_err(|e| redis_error("XGROUP CREATE", e))?;
        let waiters: Waiters = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::with_capacity(consumers);
        for k in 0..consumers {
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| redis_error("connect", e))?;
            let consumer = Consumer {
                conn,
                name: format!("c{k}"),
                stream: stream.clone(),
                http: http.clone(),
                order: order.clone(),
                buyers: buyers.clone(),
                product,
                waiters: waiters.clone(),
                stop: stop.clone(),
            };
            tasks.push(tokio::spawn(consumer.run()));
        }
        Ok(Self {
            stream,
            producer,
            waiters,
            stop,
            consumers: Mutex::new(tasks),
        })
    }

    /// Buyer `i`'s order with `pass`: added to the stream, then the order service's
    /// answer once a consumer has it.
    pub async fn order(&self, i: usize, pass: &str) -> Outcome {
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(i, tx);
        let mut conn = self.producer.clone();
        let added: redis::RedisResult<String> = redis::cmd("XADD")
            .arg(&self.stream)
            .arg("*")
            .arg("i")
            .arg(i)
            .arg("pass")
            .arg(pass)
            .query_async(&mut conn)
            .await;
        if added.is_err() {
            return Outcome::of("error:xadd");
        }
        match tokio::time::timeout(PATIENCE, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Outcome::of("error:consumer_gone"),
            Err(_) => Outcome::of("error:not_answered"),
        }
    }

    /// Stops the consumers once their current order is done; entries left unread,
    /// if any, stay in the stream.
    pub async fn stop(&self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let consumers = std::mem::take(
            &mut *self
                .consumers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for t in consumers {
            t.await
                .map_err(|e| Error::Setup(format!("intake queue consumer: {e}")))??;
        }
        Ok(())
    }
}

struct Consumer {
    conn: MultiplexedConnection,
    name: String,
    stream: String,
    http: reqwest::Client,
    order: String,
    buyers: Buyers,
    product: i64,
    waiters: Waiters,
    stop: Arc<AtomicBool>,
}

/// `XREADGROUP`'s answer: per stream, its entries (id, field-value pairs).
type ReadReply = Option<Vec<(String, Vec<(String, Vec<String>)>)>>;

impl Consumer {
    async fn run(mut self) -> Result<()> {
        while !self.stop.load(Ordering::Relaxed) {
            let read: ReadReply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(1)
                .arg("BLOCK")
                .arg(BLOCK_MS)
                .arg("STREAMS")
                .arg(&self.stream)
                .arg(">")
                .query_async(&mut self.conn)
                .await
                .map_err(|e| redis_error("XREADGROUP", e))?;
            for (_, entries) in read.unwrap_or_default() {
                for (id, fields) in entries {
                    self.handle(&id, &fields).await?;
                }
            }
        }
        Ok(())
    }

    async fn handle(&mut self, id: &str, fields: &[String]) -> Result<()> {
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|kv| kv[0] == name)
                .and_then(|kv| kv.get(1))
                .cloned()
        };
        let i: Option<usize> = field("i").and_then(|v| v.parse().ok());
        let outcome = match (i, field("pass")) {
            (Some(i), Some(pass)) => {
                reserve(
                    &self.http,
                    &self.order,
                    self.buyers.token(i),
                    self.product,
                    &pass,
                )
                .await
            }
            _ => Outcome::of("error:bad_entry"),
        };
        let _: i64 = redis::cmd("XACK")
            .arg(&self.stream)
            .arg(GROUP)
            .arg(id)
            .query_async(&mut self.conn)
            .await
            .map_err(|e| redis_error("XACK", e))?;
        if let Some(i) = i {
            let waiter = self
                .waiters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&i);
            if let Some(tx) = waiter {
                // The buyer may have given up (the run's time bound): nobody to tell.
                let _ = tx.send(outcome);
            }
        }
        Ok(())
    }
}

/// How long a queued buyer waits for its answer before the run calls it an error.
pub const PATIENCE: Duration = Duration::from_secs(300);
