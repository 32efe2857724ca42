//! Waiting for a key without holding a pooled connection for the length of the wait.
//!
//! A waiting acquire does not sit in `dlock_acquire(..., wait)` on a pooled connection. Instead
//! the client keeps a local FIFO line per key; only its head talks to the server, and only in
//! short calls: it tries the key once (`dlock_try_acquire`, which never queues), and if the key
//! is busy sleeps until something says it may be free, then tries again. What wakes it:
//! - **the listener** ([`listener`], the default): one connection shared by every wait of the
//!   client, on which the server NOTIFYs when a watched key is freed; and the blocking lease's
//!   expiry, which the server tells in its answer (so client clocks do not matter);
//! - **nothing but time** ([`polling`], behind a transaction pooler, where notifications cannot
//!   pass): backing off with jitter between tries, never sleeping past the blocking lease's
//!   expiry.
//!
//! The price: a waiter here is not in the server's queue, so waits by other clients on the
//! server (`server_queue`, or plain SQL) go first, and between clients the first to retry after
//! a release wins; within one client, waiters of a key are granted in arrival order.

mod listener;
mod polling;
mod watched;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio::time::Instant;

pub(crate) use listener::{Listener, RECHECK};
pub(crate) use polling::DEFAULT_MAX_POLL_INTERVAL;
/// Tries until granted or the deadline, pausing with growing, jittered pauses in between
/// (for waits that the listener's lines do not serve, behind a transaction pooler).
pub(crate) use polling::wait as retry;

use crate::error::Error;
use crate::lock::Mode;
use crate::statements::Statements;
use crate::statements::rows::Tried;

/// The waiting state one client (and its clones) share.
pub(crate) struct Waits {
    state: Mutex<State>,
    wake: Wake,
}

/// What wakes a head whose key was busy.
#[expect(clippy::large_enum_variant, reason = "one per client, never moved after it is made")]
enum Wake {
    /// A notification on the listener, or the blocking lease's expiry.
    Listener(Listener),
    /// Time alone: retries backing off up to this pause.
    Polling { max_interval: Duration },
}

#[derive(Default)]
struct State {
    /// Keys with local waiters, by kind of lease (fast and durable keys are separate).
    keys: HashMap<(Mode, String), Arc<KeyLine>>,
    /// Channels of watched (durable) keys: one per key hash, colliding keys share one.
    by_channel: HashMap<String, HashSet<String>>,
}

/// The local line of waiters for one key.
pub(crate) struct KeyLine {
    mode: Mode,
    key: String,
    /// One permit: its holder is the head; tokio's semaphore is FIFO.
    turn: Semaphore,
    /// Bumped on every notification for the key (and when the listener is lost).
    changed: watch::Sender<u64>,
    /// Listener generation in which the key was watched (0: not yet).
    watched_in: AtomicU64,
    users: AtomicU64,
}

impl std::fmt::Debug for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waits").finish_non_exhaustive()
    }
}

impl Waits {
    /// Waits woken by notifications on a listener connection opened with `listener`.
    pub(crate) fn listening(listener: Listener) -> Arc<Waits> {
        Arc::new(Waits { state: Mutex::default(), wake: Wake::Listener(listener) })
    }

    /// Waits that retry, pausing at most `max_interval` between tries (behind a transaction pooler).
    pub(crate) fn polling(max_interval: Duration) -> Arc<Waits> {
        Arc::new(Waits { state: Mutex::default(), wake: Wake::Polling { max_interval } })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain maps behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this client already has waiters lined up for `key` (a newcomer then queues
    /// behind them instead of trying first).
    pub(crate) fn has_line(&self, mode: Mode, key: &str) -> bool {
        self.state().keys.contains_key(&(mode, key.to_owned()))
    }

    /// Whether waits here hear of freed keys from the listener (not behind a transaction pooler).
    pub(crate) fn listens(&self) -> bool {
        matches!(self.wake, Wake::Listener(_))
    }

    /// The longest pause between tries, when waits retry (behind a transaction pooler).
    pub(crate) fn max_poll_interval(&self) -> Option<Duration> {
        match self.wake {
            Wake::Listener(_) => None,
            Wake::Polling { max_interval } => Some(max_interval),
        }
    }

    /// Whether a wait for a key of `mode` can be done here. The listener only hears of durable
    /// keys; retrying works for either.
    pub(crate) fn can_wait_for(&self, mode: Mode) -> bool {
        match self.wake {
            Wake::Listener(_) => mode.notifies_watchers(),
            Wake::Polling { .. } => true,
        }
    }

    /// How long a try may wait on the server for a transaction that is changing the key: up to
    /// the deadline, except behind a transaction pooler, where nothing may hold a server
    /// connection longer than one short call.
    pub(crate) fn settle(&self, deadline: Option<Instant>) -> Option<Duration> {
        match self.wake {
            Wake::Listener(_) => deadline.map(|d| d.saturating_duration_since(Instant::now())),
            Wake::Polling { .. } => Some(Duration::ZERO),
        }
    }

    /// Joins the local line of `key`.
    pub(crate) fn enter(self: &Arc<Self>, mode: Mode, key: &str) -> Place {
        let mut state = self.state();
        let line = state
            .keys
            .entry((mode, key.to_owned()))
            .or_insert_with(|| {
                Arc::new(KeyLine {
                    mode,
                    key: key.to_owned(),
                    turn: Semaphore::new(1),
                    changed: watch::channel(0).0,
                    watched_in: AtomicU64::new(0),
                    users: AtomicU64::new(0),
                })
            })
            .clone();
        line.users.fetch_add(1, Ordering::Relaxed);
        Place { waits: Arc::downgrade(self), line }
    }

    /// The last waiter of `line` left: forget the key, and stop watching it (unless a colliding
    /// key still needs its channel).
    fn leave(self: Arc<Self>, line: &KeyLine) {
        {
            let mut state = self.state();
            if line.users.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
            state.keys.remove(&(line.mode, line.key.clone()));
            if !line.mode.notifies_watchers() {
                return;
            }
            // In the same critical section as the line's removal: a newcomer's watch of the key
            // can only come after.
            let mut shared = false;
            state.by_channel.retain(|_, keys| {
                if keys.remove(&line.key) && !keys.is_empty() {
                    shared = true;
                }
                !keys.is_empty()
            });
            if shared || line.watched_in.load(Ordering::Acquire) == 0 {
                return;
            }
        }
        self.unwatch(line.key.clone());
    }
}

/// A waiter's place in the local line of a key; leaving the line when dropped.
pub(crate) struct Place {
    waits: Weak<Waits>,
    line: Arc<KeyLine>,
}

impl Place {
    /// Waits to be the head of the line, then tries with `attempt(settle)` until it grants or
    /// `deadline` passes (`None` at the deadline). `attempt` waits on the server at most
    /// `settle` for a transaction changing the key.
    pub(crate) async fn wait<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        statements: &Arc<Statements>,
        attempt: F,
    ) -> Result<Option<T>, Error>
    where
        F: FnMut(Option<Duration>) -> Fut,
        Fut: Future<Output = Result<Tried<T>, Error>>,
    {
        let Some(_head) = self.turn(deadline).await else { return Ok(None) };
        let waits = self
            .waits
            .upgrade()
            .ok_or_else(|| Error::Connection { message: "the client is gone".into(), source: None })?;
        match waits.wake {
            Wake::Listener(_) => waits.wait_notified(&self.line, deadline, statements, attempt).await,
            Wake::Polling { max_interval } => polling::wait(deadline, max_interval, attempt).await,
        }
    }

    /// The head's permit, once every earlier waiter of the line is done (`None` at `deadline`).
    async fn turn(&self, deadline: Option<Instant>) -> Option<SemaphorePermit<'_>> {
        let turn = self.line.turn.acquire();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, turn).await.ok()?,
            None => turn.await,
        };
        Some(permit.expect("the line's semaphore is never closed"))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(waits) = self.waits.upgrade() {
            waits.leave(&self.line);
        }
    }
}
