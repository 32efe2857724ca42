//! Hand-off to waiting acquires of the client: a wait on the client's listener (the default,
//! one connection for all waits) against a wait in the server's queue (`server_queue`, one
//! pooled connection per waiter), and a crowd of waiters on a bounded number of connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock_client::Client;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use crate::{Result, histogram};

const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(30);

/// Latencies from a holder's release returning to its waiter's acquire returning.
#[derive(Debug, Serialize)]
pub struct HandoffRow {
    pub scenario: String,
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Server connections of the waiting client, at most (sampled), where counted.
    pub connections: Option<i64>,
    pub elapsed_s: Option<f64>,
}

impl HandoffRow {
    fn new(
        scenario: String,
        h: &Histogram<u64>,
        connections: Option<i64>,
        elapsed: Option<Duration>,
    ) -> Self {
        HandoffRow {
            scenario,
            samples: h.len(),
            p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
            max_us: h.max() as f64 / 1000.0,
            connections,
            elapsed_s: elapsed.map(|e| e.as_secs_f64()),
        }
    }
}

/// One waiter, `samples` times per mode (modes interleaved): the holder releases once the
/// waiter had 5 ms to line up.
pub async fn one_waiter(url: &str, samples: usize, prefix: &str) -> Result<Vec<HandoffRow>> {
    let (holder, waiter) = (Client::connect(url).await?, Client::connect(url).await?);
    let mut hists = [histogram(), histogram()];
    for i in 0..samples {
        for (mode, hist) in hists.iter_mut().enumerate() {
            let key = format!("{prefix}:one:{mode}:{i}");
            let guard = holder.lock(&key).ttl(TTL).watchdog(false).acquire().await?;
            let lock = waiter.lock(&key).ttl(TTL).watchdog(false).wait(WAIT);
            let lock = if mode == 1 { lock.server_queue() } else { lock };
            let waiting = tokio::spawn(async move {
                let guard = lock.acquire().await;
                (guard, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await?;
            let released = Instant::now();
            let (granted, at) = waiting.await?;
            hist.saturating_record(at.saturating_duration_since(released).as_nanos() as u64);
            granted?.release().await?;
        }
    }
    Ok(vec![
        HandoffRow::new("1 waiter, on the client's listener (default)".into(), &hists[0], None, None),
        HandoffRow::new("1 waiter, in the server's queue (server_queue)".into(), &hists[1], None, None),
    ])
}

/// `waiters` waiters (each its own owner) on `keys` keys, all held at first, through one client
/// whose connections are counted: each takes the key, holds it 1 ms and releases it.
pub async fn crowd(
    url: &str,
    counter: &Client,
    waiters: usize,
    keys: usize,
    prefix: &str,
) -> Result<HandoffRow> {
    let app = format!("bench-crowd-{}", std::process::id());
    let client = Client::connect(&format!("{url} application_name={app}")).await?;
    let holder = Client::connect(url).await?;
    let names: Vec<String> = (0..keys).map(|k| format!("{prefix}:crowd:{k}")).collect();
    let mut held = Vec::new();
    for k in &names {
        held.push(holder.lock(k).ttl(TTL).watchdog(false).acquire().await?);
    }
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, pool, app) = (done.clone(), counter.pool().clone(), app.clone());
        tokio::spawn(async move {
            let mut most = 0i64;
            while !done.load(Ordering::Relaxed) {
                if let Ok(c) = pool.get().await
                    && let Ok(row) = c
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                            &[&app],
                        )
                        .await
                {
                    most = most.max(row.get(0));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    let freed: Arc<Vec<std::sync::Mutex<Option<Instant>>>> =
        Arc::new((0..keys).map(|_| std::sync::Mutex::new(None)).collect());
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let slot = i % keys;
        let (lock, freed) = (client.with_owner(format!("crowd-{i}")).lock(&names[slot]), freed.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.ttl(TTL).wait(WAIT).acquire().await?;
            let lag = freed[slot].lock().unwrap().map(|f| Instant::now().saturating_duration_since(f));
            tokio::time::sleep(Duration::from_millis(1)).await;
            guard.release().await?;
            *freed[slot].lock().unwrap() = Some(Instant::now());
            Ok::<_, dlock_client::Error>(lag)
        }));
    }
    // Let every waiter line up before the keys are freed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    for (slot, guard) in held.into_iter().enumerate() {
        guard.release().await?;
        *freed[slot].lock().unwrap() = Some(Instant::now());
    }
    let mut hist = histogram();
    for task in tasks {
        if let Some(lag) = task.await?? {
            hist.saturating_record(lag.as_nanos() as u64);
        }
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let most = sampler.await?;
    Ok(HandoffRow::new(
        format!("{waiters} waiters on {keys} keys, one client (listener + pool of 15), 1 ms holds"),
        &hist,
        Some(most),
        Some(elapsed),
    ))
}
