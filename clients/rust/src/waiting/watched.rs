//! A key watched on the listener for its own sake rather than by a wait for a lease: an
//! observer of an election, a wait for a key to be free. It joins the key's local line without
//! ever taking a turn, so that the line's notifications reach it, and leaves when dropped (the
//! last to leave stops watching the key).

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Place, Waits};
use crate::error::Error;
use crate::lock::Mode;
use crate::statements::Statements;

/// A watched key; see the module's docs.
pub(crate) struct Watched {
    waits: Arc<Waits>,
    place: Place,
    changed: watch::Receiver<u64>,
}

impl Waits {
    /// Watches `key` on the listener (connecting it first if need be). Only for waits that
    /// listen ([`Waits::listens`]). Whatever frees or changes the key from the moment this
    /// returns wakes [`Watched::changed`].
    pub(crate) async fn watch_key(
        self: &Arc<Self>,
        key: &str,
        statements: &Arc<Statements>,
    ) -> Result<Watched, Error> {
        let place = self.enter(Mode::Durable, key);
        // Subscribed before the watch: nothing after it is missed.
        let changed = place.line.changed.subscribe();
        self.watch(&place.line, statements).await?;
        Ok(Watched { waits: self.clone(), place, changed })
    }
}

impl Watched {
    /// Sleeps until a notification for the key (or the loss of the listener, after which some
    /// may have been missed) or `until`, then makes sure the key is watched again (on a new
    /// listener after a loss). Look at the key again once it returns.
    pub(crate) async fn changed(
        &mut self,
        until: Option<Instant>,
        statements: &Arc<Statements>,
    ) -> Result<(), Error> {
        // An error means the line's sender is gone, which the place we hold rules out.
        match until {
            Some(until) => drop(tokio::time::timeout_at(until, self.changed.changed()).await),
            None => drop(self.changed.changed().await),
        }
        self.waits.watch(&self.place.line, statements).await
    }
}
