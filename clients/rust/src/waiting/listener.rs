//! The listener: one connection on which every wait of a client hears of released keys.
//!
//! The head of a key's line
//! 1. makes sure the listener watches the key (`dlock_watch`: LISTEN on the key's channel, and
//!    from then on whoever frees the key NOTIFYs it at commit);
//! 2. tries the key once on a pooled connection;
//! 3. if the key is busy sleeps until a notification for the key, the blocking lease's expiry,
//!    or its own deadline — then goes back to 2.
//!
//! Watching before trying is what makes the wake-up impossible to miss: a release that
//! committed before the try is seen by the try, and one after it notifies (the server checks
//! for watchers under the key lock the try also takes). If the listener connection breaks,
//! every head is woken to re-watch on a new one and try again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::AsyncMessage;
use tokio_postgres::types::Type;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{KeyLine, Waits, Wake};
use crate::error::Error;
use crate::lock::Mode;
use crate::statements::Statements;
use crate::statements::rows::Tried;

/// How long a head sleeps at most when only a notification can free the key (a session-bound
/// holder, or others queueing on the server): a safety net in case one never comes (the holder
/// died in a way that could not send it), not the way waits normally end.
pub(crate) const RECHECK: Duration = Duration::from_secs(2);

/// Where and how the listener connects, and the connection once it is open.
pub(crate) struct Listener {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    /// Also serialises watch and unwatch calls, so they reach the server in the order they
    /// were decided.
    connection: tokio::sync::Mutex<Option<Connected>>,
    generations: AtomicU64,
}

struct Connected {
    client: tokio_postgres::Client,
    generation: u64,
    /// The unwatch statement of the database it is connected to.
    unwatch: String,
}

impl Listener {
    /// A listener connecting with `config` over `tls` (as the client's pool does) when the
    /// first wait needs it.
    pub(crate) fn new(config: tokio_postgres::Config, tls: MakeRustlsConnect) -> Listener {
        Listener { config, tls, connection: tokio::sync::Mutex::new(None), generations: AtomicU64::new(0) }
    }
}

impl Waits {
    fn listener(&self) -> &Listener {
        match &self.wake {
            Wake::Listener(listener) => listener,
            Wake::Polling { .. } => unreachable!("the listener of waits that poll"),
        }
    }

    /// The head's loop: watch, try, sleep until notified or the blocking lease's expiry.
    pub(super) async fn wait_notified<T, F, Fut>(
        self: &Arc<Self>,
        line: &KeyLine,
        deadline: Option<Instant>,
        statements: &Arc<Statements>,
        mut attempt: F,
    ) -> Result<Option<T>, Error>
    where
        F: FnMut(Option<Duration>) -> Fut,
        Fut: Future<Output = Result<Tried<T>, Error>>,
    {
        loop {
            // Subscribed before watching and trying: a notification from here on is not missed.
            let mut changed = line.changed.subscribe();
            self.watch(line, statements).await?;
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

    /// Makes sure the listener (connected first if need be) watches the line's key.
    pub(super) async fn watch(
        self: &Arc<Self>,
        line: &KeyLine,
        statements: &Arc<Statements>,
    ) -> Result<(), Error> {
        let mut connection = self.listener().connection.lock().await;
        if connection.as_ref().is_none_or(|c| c.client.is_closed()) {
            *connection = Some(self.connect(statements).await?);
        }
        let connection = connection.as_ref().expect("just connected");
        if line.watched_in.load(Ordering::Acquire) == connection.generation {
            return Ok(());
        }
        // Unprepared: the listener sends each statement once or rarely.
        let channel: String = connection
            .client
            .query_typed_one(&statements.watch, &[(&line.key, Type::TEXT)])
            .await?
            .try_get(0)?;
        self.state().by_channel.entry(channel).or_default().insert(line.key.clone());
        line.watched_in.store(connection.generation, Ordering::Release);
        Ok(())
    }

    /// Opens a listener connection and the task that routes its notifications.
    async fn connect(self: &Arc<Self>, statements: &Statements) -> Result<Connected, Error> {
        let listener = self.listener();
        let (client, mut connection) = listener.config.connect(listener.tls.clone()).await?;
        let generation = listener.generations.fetch_add(1, Ordering::Relaxed) + 1;
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
        Ok(Connected { client, generation, unwatch: statements.unwatch.clone() })
    }

    /// A notification: every line of a key on this channel retries.
    fn notified(&self, channel: &str) {
        let state = self.state();
        for key in state.by_channel.get(channel).into_iter().flatten() {
            if let Some(line) = state.keys.get(&(Mode::Durable, key.clone())) {
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

    /// Stops watching `key`, in the background (its last waiter left).
    pub(super) fn unwatch(self: Arc<Self>, key: String) {
        // Outside a runtime the watch stays until the listener closes: only extra notifications.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            let connection = self.listener().connection.lock().await;
            // A new waiter may have come meanwhile: its watch call waits for this lock, so
            // checking here keeps the order right.
            if self.has_line(Mode::Durable, &key) {
                return;
            }
            if let Some(c) = connection.as_ref().filter(|c| !c.client.is_closed())
                && let Err(e) = c.client.query_typed(&c.unwatch, &[(&key, Type::TEXT)]).await
            {
                tracing::debug!(error = %e, "dlock: unwatch failed");
            }
        });
    }
}
