//! Observing an election: its leader now, then each change of leader, as the server notifies
//! the election's watchers (a new leader, a resignation, an expiry, a leader's session ending)
//! on the client's listener connection. Nothing polls.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;

use super::{Election, Leader};
use crate::args;
use crate::error::Error;

/// How many changes may wait unread before the observer stops reading new ones.
const BACKLOG: usize = 16;

/// The leaders of an election as they change: first the leader when observing began (`None`:
/// nobody led), then every change of leader (a new term, or nobody). An error ends it.
///
/// A [`Stream`] (read it with `StreamExt::next`, or combine it with the `futures` adapters), and
/// [`next`](Self::next) without them. Dropping it stops watching.
#[derive(Debug)]
pub struct LeaderChanges {
    changes: mpsc::Receiver<Result<Option<Leader>, Error>>,
}

impl LeaderChanges {
    /// The changes a task of the crate sends (a sharded observer's).
    pub(crate) fn from_receiver(changes: mpsc::Receiver<Result<Option<Leader>, Error>>) -> LeaderChanges {
        LeaderChanges { changes }
    }

    /// The next leader (`None` inside: nobody leads), or `None` once the observation ended
    /// after an error.
    pub async fn next(&mut self) -> Option<Result<Option<Leader>, Error>> {
        self.changes.recv().await
    }

    /// [`next`](Self::next) as a poll (what the [`Stream`] implementation does).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Option<Leader>, Error>>> {
        self.changes.poll_recv(cx)
    }
}

impl Stream for LeaderChanges {
    type Item = Result<Option<Leader>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The receiver is Unpin, and so is this.
        self.get_mut().changes.poll_recv(cx)
    }
}

impl Election {
    /// Observes who leads: a [`LeaderChanges`] whose first item is the leader now. It watches
    /// the election on the client's listener connection and reads the leader again when the
    /// server notifies a change, which costs a pooled connection for one short call each time.
    ///
    /// [`Error::Unsupported`] behind a transaction pooler (no notification can pass it) and
    /// for clients without a listener ([`Client::from_pool`](crate::Client::from_pool)): poll
    /// [`leader`](Self::leader) there.
    pub async fn observe(&self) -> Result<LeaderChanges, Error> {
        args::election_name(&self.name)?;
        let waits = self.client.shared.waits.as_ref().filter(|waits| waits.listens()).ok_or_else(|| {
            Error::Unsupported(
                "observing an election needs the client's listener connection, which a client \
                 behind a transaction pooler or made from a pool alone has not: poll leader() instead"
                    .into(),
            )
        })?;
        let statements = self.client.statements().await?;
        let mut watched = waits.watch_key(&self.name, &statements).await?;
        let (sender, changes) = mpsc::channel(BACKLOG);
        let election = self.clone();
        tokio::spawn(async move {
            // The term last sent (`Some(None)`: nobody led).
            let mut last: Option<Option<i64>> = None;
            loop {
                match election.leader().await {
                    Ok(leader) => {
                        let term = leader.as_ref().map(|l| l.term);
                        if last != Some(term) {
                            last = Some(term);
                            if sender.send(Ok(leader)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        drop(sender.send(Err(e)).await);
                        return;
                    }
                }
                tokio::select! {
                    () = sender.closed() => return,
                    watching = watched.changed(None, &statements) => if let Err(e) = watching {
                        drop(sender.send(Err(e)).await);
                        return;
                    }
                }
            }
        });
        Ok(LeaderChanges { changes })
    }
}
