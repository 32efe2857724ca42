//! Connection-frugal waiting: any number of waits share **one** connection, the listener.
//!
//! A waiting acquire does not sit in `dlock_acquire(..., wait)` on a pooled connection. Instead
//! the client keeps a local FIFO line per key; only its head talks to the server, and only in
//! short calls:
//! 1. it makes sure the listener watches the key (`dlock_watch`: LISTEN on the key's channel,
//!    and from then on whoever frees the key NOTIFYs it at commit);
//! 2. it tries the key once on a pooled connection (`dlock_try_acquire`), which waits only for
//!    a transaction that is changing the key at that moment, never in a queue;
//! 3. if the key is busy it sleeps until a notification for the key, the blocking lease's
//!    expiry (the server says how far off that is, so client clocks do not matter), or its own
//!    deadline — then goes back to 2.
//!
//! Watching before trying is what makes the wake-up impossible to miss: a release that
//! committed before the try is seen by the try, and one after it notifies (the server checks
//! for watchers under the key lock the try also takes). If the listener connection breaks,
//! every head is woken to re-watch on a new one and try again.
//!
//! The price: a frugal waiter is not in the server's queue, so waits by other clients on the
//! server (`server_queue`, or plain SQL) go first, and between clients the first to retry after
//! a notification wins; within one client, waiters of a key are granted in arrival order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::error::Error;

/// How long a head sleeps at most when only a notification can free the key (a session-bound
/// holder, or others queueing on the server): a safety net in case one never comes (the holder
/// died in a way that could not send it), not the way waits normally end.
pub(crate) const RECHECK: Duration = Duration::from_secs(2);

/// The waiting state one client (and its clones) share.
pub(crate) struct Waits {
    config: tokio_postgres::Config,
    /// The listener connection: also serialises watch and unwatch calls, so they reach the
    /// server in the order they were decided.
    listener: tokio::sync::Mutex<Option<Listener>>,
    state: Mutex<State>,
    generations: AtomicU64,
}

struct Listener {
    client: tokio_postgres::Client,
    generation: u64,
}

#[derive(Default)]
struct State {
    /// Keys with local waiters.
    keys: HashMap<String, Arc<KeyLine>>,
    /// Channels of watched keys (one per key hash: colliding keys share one).
    by_channel: HashMap<String, HashSet<String>>,
}

/// The local line of waiters for one key.
pub(crate) struct KeyLine {
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
    pub(crate) fn new(config: tokio_postgres::Config) -> Arc<Waits> {
        Arc::new(Waits {
            config,
            listener: tokio::sync::Mutex::new(None),
            state: Mutex::new(State::default()),
            generations: AtomicU64::new(0),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain maps behind: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this client already has waiters lined up for `key` (a newcomer then queues
    /// behind them instead of trying first).
    pub(crate) fn has_line(&self, key: &str) -> bool {
        self.state().keys.contains_key(key)
    }

    /// Joins the local line of `key`.
    pub(crate) fn enter(self: &Arc<Self>, key: &str) -> Place {
        let mut state = self.state();
        let line = state
            .keys
            .entry(key.to_owned())
            .or_insert_with(|| {
                Arc::new(KeyLine {
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

    /// Makes sure the listener (connected first if need be) watches the line's key.
    async fn watch(self: &Arc<Self>, line: &KeyLine) -> Result<(), Error> {
        let mut listener = self.listener.lock().await;
        if listener.as_ref().is_none_or(|l| l.client.is_closed()) {
            *listener = Some(self.connect().await?);
        }
        let listener = listener.as_ref().expect("just connected");
        if line.watched_in.load(Ordering::Acquire) == listener.generation {
            return Ok(());
        }
        let channel: String =
            listener.client.query_one("SELECT dlock_watch($1::text)", &[&line.key]).await?.try_get(0)?;
        self.state().by_channel.entry(channel).or_default().insert(line.key.clone());
        line.watched_in.store(listener.generation, Ordering::Release);
        Ok(())
    }

    /// Opens a listener connection and the task that routes its notifications.
    async fn connect(self: &Arc<Self>) -> Result<Listener, Error> {
        let (client, mut connection) = self.config.connect(NoTls).await?;
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let waits = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        let Some(waits) = waits.upgrade() else { return };
                        waits.notified(n.channel());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "dlock: the listener connection broke");
                        break;
                    }
                    None => break,
                }
            }
            if let Some(waits) = waits.upgrade() {
                waits.lost();
            }
        });
        Ok(Listener { client, generation })
    }

    /// A notification: every line of a key on this channel retries.
    fn notified(&self, channel: &str) {
        let state = self.state();
        for key in state.by_channel.get(channel).into_iter().flatten() {
            if let Some(line) = state.keys.get(key) {
                line.changed.send_modify(|n| *n += 1);
            }
        }
    }

    /// The listener is gone: notifications may have been missed, so every head retries (and
    /// re-watches on a new listener).
    fn lost(&self) {
        let mut state = self.state();
        state.by_channel.clear();
        for line in state.keys.values() {
            line.changed.send_modify(|n| *n += 1);
        }
    }

    /// The last waiter of `line` left: forget the key and stop watching it (unless a colliding
    /// key still needs its channel).
    fn leave(self: Arc<Self>, line: &KeyLine) {
        {
            let mut state = self.state();
            if line.users.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
            state.keys.remove(&line.key);
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
        // Outside a runtime the watch stays until the listener closes: only extra notifications.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let key = line.key.clone();
        runtime.spawn(async move {
            let listener = self.listener.lock().await;
            // A new waiter may have come meanwhile: its watch call waits for this lock, so
            // checking here keeps the order right.
            if self.state().keys.contains_key(&key) {
                return;
            }
            if let Some(l) = listener.as_ref().filter(|l| !l.client.is_closed())
                && let Err(e) = l.client.execute("SELECT dlock_unwatch($1::text)", &[&key]).await
            {
                tracing::debug!(error = %e, "dlock: unwatch failed");
            }
        });
    }
}

/// A waiter's place in the local line of a key; leaving the line when dropped.
pub(crate) struct Place {
    waits: Weak<Waits>,
    line: Arc<KeyLine>,
}

/// What one try on the server answered.
pub(crate) enum Tried<T> {
    Granted(T),
    /// Busy; the blocking lease expires by itself after this long (`None`: only a release or
    /// its holder's session ending frees it).
    Busy(Option<Duration>),
}

impl Place {
    /// Waits for the head of the line, then tries with `attempt(settle)` until it grants or
    /// `deadline` passes (`None` at the deadline). `attempt` waits on the server at most
    /// `settle` for a transaction changing the key.
    pub(crate) async fn wait<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        mut attempt: F,
    ) -> Result<Option<T>, Error>
    where
        F: FnMut(Option<Duration>) -> Fut,
        Fut: Future<Output = Result<Tried<T>, Error>>,
    {
        let turn = self.line.turn.acquire();
        let _head = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, turn).await {
                Ok(permit) => permit,
                Err(_) => return Ok(None),
            },
            None => turn.await,
        }
        .expect("the line's semaphore is never closed");
        let waits = self
            .waits
            .upgrade()
            .ok_or_else(|| Error::Connection { message: "the client is gone".into(), source: None })?;
        loop {
            // Subscribed before watching and trying: a notification from here on is not missed.
            let mut changed = self.line.changed.subscribe();
            waits.watch(&self.line).await?;
            let settle = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let retry = match attempt(settle).await? {
                Tried::Granted(granted) => return Ok(Some(granted)),
                Tried::Busy(retry) => retry.unwrap_or(RECHECK),
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let wake = deadline.map_or(now + retry, |d| d.min(now + retry));
            tokio::select! {
                _ = changed.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(waits) = self.waits.upgrade() {
            waits.leave(&self.line);
        }
    }
}
