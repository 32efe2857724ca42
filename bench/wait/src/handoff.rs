//! Hand-off latency: from the moment the holder's release call returned (client side) to the
//! moment the parked waiter's acquire call returned, with one waiter and along a line of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::Result;
use crate::lock::{Key, LIMIT, Locker, until_parked};
use crate::pg::Observer;
use crate::report::Latencies;

/// A pause between "the waiter is parked" and the release, so that the release meets a waiter
/// that is asleep and a server with nothing else in flight (the observer's poll included).
const SETTLE: Duration = Duration::from_millis(1);

/// Two clients that hand one key back and forth: one holds it, the other waits for it.
pub struct Pair {
    holder: Arc<Locker>,
    waiter: Arc<Locker>,
    key: Key,
    observer: Option<Arc<Observer>>,
}

impl Pair {
    /// Makes `a` the holder of `key` and `b` its waiter (PostgreSQL pairs need the observer).
    pub async fn new(a: Locker, b: Locker, key: Key, observer: Option<Arc<Observer>>) -> Result<Pair> {
        a.take(&key).await?;
        Ok(Pair { holder: Arc::new(a), waiter: Arc::new(b), key, observer })
    }

    /// `n` hand-offs, each recorded in `latencies`; the roles swap after each (the new holder
    /// is the one that was just granted), so no extra release sits between two hand-offs.
    pub async fn handoffs(&mut self, n: usize, latencies: &mut Latencies) -> Result<()> {
        for _ in 0..n {
            let (parked, signal) = oneshot::channel();
            let (waiter, key) = (Arc::clone(&self.waiter), self.key.clone());
            let task = tokio::spawn(async move { waiter.wait(&key, Some(parked)).await });
            until_parked(std::slice::from_ref(&self.waiter), signal, self.observer.as_deref()).await?;
            tokio::time::sleep(SETTLE).await;
            let called = Instant::now();
            self.holder.release(&self.key).await?;
            let returned = Instant::now();
            let granted =
                tokio::time::timeout(LIMIT, task).await.map_err(|_| "no grant after a release")???;
            latencies.record(called, returned, granted);
            std::mem::swap(&mut self.holder, &mut self.waiter);
        }
        Ok(())
    }

    /// Releases the key.
    pub async fn finish(self) -> Result<()> {
        self.holder.release(&self.key).await
    }
}

/// A waiter's turn in a chain: when its grant returned, and when its release was called and
/// returned.
struct Turn {
    granted: Instant,
    release: (Instant, Instant),
}

/// One chain: `holder` takes `key`, every client of `waiters` lines up behind it in turn (each
/// parked before the next arrives), the holder releases, and each granted waiter releases at
/// once. Each hop (a release's return → the next grant's return, in grant order) goes into
/// `latencies`. Whether the grants came in arrival order.
pub async fn chain(
    holder: &Locker,
    waiters: &[Arc<Locker>],
    key: &Key,
    observer: Option<&Observer>,
    latencies: &mut Latencies,
) -> Result<bool> {
    holder.take(key).await?;
    let mut tasks = Vec::with_capacity(waiters.len());
    for (i, waiter) in waiters.iter().enumerate() {
        let (parked, signal) = oneshot::channel();
        let (waiter_, key_) = (Arc::clone(waiter), key.clone());
        tasks.push(tokio::spawn(async move {
            let granted = waiter_.wait(&key_, Some(parked)).await?;
            let called = Instant::now();
            waiter_.release(&key_).await?;
            Ok::<_, crate::Error>(Turn { granted, release: (called, Instant::now()) })
        }));
        until_parked(&waiters[..=i], signal, observer).await?;
    }
    tokio::time::sleep(SETTLE).await;
    let called = Instant::now();
    holder.release(key).await?;
    let mut release = (called, Instant::now());
    let deadline = tokio::time::Instant::now() + LIMIT + waiters.len() as u32 * Duration::from_millis(100);
    let mut turns = Vec::with_capacity(tasks.len());
    for (arrival, task) in tasks.into_iter().enumerate() {
        let turn = tokio::time::timeout_at(deadline, task).await.map_err(|_| "the chain stalled")???;
        turns.push((turn, arrival));
    }
    turns.sort_by_key(|(turn, _)| turn.granted);
    for (turn, _) in &turns {
        latencies.record(release.0, release.1, turn.granted);
        release = turn.release;
    }
    Ok(turns.iter().enumerate().all(|(i, &(_, arrival))| i == arrival))
}
