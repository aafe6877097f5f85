//! The answer a waiting request gives, stored by its driver with the move that settles
//! the payment: one write and one flush fewer per payment than storing it afterwards.
//!
//! The request and its driver race only at the request's deadline: the driver takes
//! the slot before it sends the settling move, the request takes it when it stops
//! waiting, and whoever takes it first writes the key's answer. A request that finds
//! the driver writing waits for that write to end and answers with what it stored.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use uuid::Uuid;

use crate::idempotency::Scope;

#[derive(Debug)]
enum Stage {
    /// Nobody has taken it.
    Open,
    /// The driver is recording the settling move with the answer.
    Writing,
    /// The driver stored this body under the key.
    Stored(String),
    /// The driver's write ended without storing it (lease or key lost, an error), or
    /// the request stopped waiting first: the request stores its own answer.
    Left,
}

#[derive(Debug)]
struct Inner {
    scope: Scope,
    token: Uuid,
    stage: Mutex<Stage>,
    changed: Notify,
}

/// A request's idempotency key and owner token, shared with the driver it started.
#[derive(Debug, Clone)]
pub struct AnswerSlot(Arc<Inner>);

/// The driver's hold on the slot while its settling move is written; dropped without
/// [`Writing::stored`] (an error, a lost lease), it leaves the answer to the request.
#[derive(Debug)]
pub struct Writing(Option<AnswerSlot>);

impl AnswerSlot {
    pub fn new(scope: Scope, token: Uuid) -> Self {
        Self(Arc::new(Inner {
            scope,
            token,
            stage: Mutex::new(Stage::Open),
            changed: Notify::new(),
        }))
    }

    pub fn scope(&self) -> &Scope {
        &self.0.scope
    }

    pub fn token(&self) -> Uuid {
        self.0.token
    }

    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.0.stage.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, to: Stage) {
        *self.stage() = to;
        self.0.changed.notify_waiters();
    }

    /// For the driver, before it sends the settling move: `None` once the request has
    /// stopped waiting (the driver then records the move alone).
    pub fn take(&self) -> Option<Writing> {
        let mut stage = self.stage();
        match *stage {
            Stage::Open => {
                *stage = Stage::Writing;
                Some(Writing(Some(self.clone())))
            }
            _ => None,
        }
    }

    /// For the request, once it stops waiting: the body the driver stored, or `None`
    /// when the answer is the request's own to store (nothing will be stored for it
    /// from now on).
    pub async fn close(&self) -> Option<String> {
        loop {
            let notified = self.0.changed.notified();
            {
                let mut stage = self.stage();
                match &*stage {
                    Stage::Open => {
                        *stage = Stage::Left;
                        return None;
                    }
                    Stage::Stored(body) => return Some(body.clone()),
                    Stage::Left => return None,
                    Stage::Writing => {}
                }
            }
            notified.await;
        }
    }
}

impl Writing {
    /// The settling move committed with the answer: the request answers with `body`.
    pub fn stored(mut self, body: String) {
        if let Some(slot) = self.0.take() {
            slot.set(Stage::Stored(body));
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            slot.set(Stage::Left);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::idempotency::IdempotencyKey;

    fn slot() -> AnswerSlot {
        AnswerSlot::new(
            Scope {
                member: "m".into(),
                operation: "create_payment",
                key: IdempotencyKey::parse("k").unwrap(),
            },
            Uuid::new_v4(),
        )
    }

    #[tokio::test]
    async fn the_first_to_take_it_writes_the_answer() {
        let s = slot();
        assert_eq!(s.close().await, None, "the request closed it first");
        assert!(s.take().is_none(), "the driver then records alone");

        let s = slot();
        s.take().expect("open").stored("body".into());
        assert_eq!(s.close().await.as_deref(), Some("body"));
        assert!(s.take().is_none());
    }

    #[tokio::test]
    async fn a_request_waits_for_a_write_in_flight() {
        let s = slot();
        let writing = s.take().expect("open");
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.close().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "it waits while the move is written");
        writing.stored("stored".into());
        assert_eq!(waiter.await.unwrap().as_deref(), Some("stored"));

        // A write that ends without storing leaves the answer to the request.
        let s = slot();
        let writing = s.take().expect("open");
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.close().await }
        });
        drop(writing);
        assert_eq!(waiter.await.unwrap(), None);
    }
}
