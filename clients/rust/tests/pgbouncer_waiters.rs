//! Many waiters through pgbouncer (1.18, `pool_mode = transaction`) with a pool of 4 server
//! connections, in the client's transaction-pooler mode: every waiter is granted, no wait
//! occupies a server connection (nobody waits inside the server, and the pooler never has more
//! than its 4), and each key is held by one waiter at a time, with growing fences.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock_client::{Client, PoolerMode};
use dlock_tests::{Cluster, Pgbouncer, Session, key, within};
use tokio::sync::Mutex;
use tokio::time::Instant;

const KEYS: usize = 10;
const WAITERS: usize = 200;
/// Clients the waiters are spread over (as if several processes), each with its own pool.
const CLIENTS: usize = 4;
const SERVER_CONNECTIONS: u32 = 4;
const SECOND: Duration = Duration::from_secs(1);

/// One holding of a key: when it began and ended (local monotonic clock), and its fence.
#[derive(Debug, Clone, Copy)]
struct Holding {
    granted: Instant,
    released: Instant,
    fence: i64,
}

/// The most of each thing seen while sampling.
#[derive(Debug, Default)]
struct Peaks {
    samples: usize,
    /// Backends sleeping inside a dlock call (a server-side wait) or waiting for a dlock lock.
    waiting_backends: i64,
    /// What those were waiting for, and in which statement.
    waits_seen: Vec<String>,
    /// Server backends other than the test's own sessions: pgbouncer's server connections.
    pooler_backends: i64,
    /// pgbouncer's own count of its server connections (`SHOW POOLS`, every `sv_*` column).
    pooler_connections: i64,
}

/// Backends of database `postgres` sleeping in a dlock wait (shown as an `Extension` wait) or
/// waiting for one of dlock's advisory locks, and pgbouncer's backends (everything but this
/// test's own). A release is no waiter: it may wait a moment for the key lock of a transaction
/// changing the key (a waiter's try, or a grant about to commit). Nor is a relation extension
/// lock between concurrent inserts a dlock wait.
const SAMPLE: &str = "\
SELECT count(*) FILTER (WHERE waits), \
       coalesce(string_agg(seen, '; ') FILTER (WHERE waits), ''), \
       count(*) FILTER (WHERE application_name NOT IN ('holders', 'dlock-tests')) \
  FROM (SELECT application_name, \
               state = 'active' AND query NOT LIKE '%dlock_release%' \
                 AND (wait_event_type = 'Extension' OR (wait_event_type = 'Lock' AND wait_event = 'advisory')) AS waits, \
               wait_event_type || '/' || wait_event || ': ' || left(query, 120) AS seen \
          FROM pg_catalog.pg_stat_activity \
         WHERE backend_type = 'client backend' AND datname = 'postgres' \
           AND pid <> pg_catalog.pg_backend_pid()) AS a";

/// Samples the server and the pooler until `done`.
async fn sample(observer: Session, bouncer: &Pgbouncer, done: &AtomicBool) -> Peaks {
    let mut peaks = Peaks::default();
    while !done.load(Ordering::Relaxed) {
        let row = observer.query_one(SAMPLE, &[]).await.expect("sample pg_stat_activity");
        let (waiting, seen): (i64, String) = (row.get(0), row.get(1));
        peaks.waiting_backends = peaks.waiting_backends.max(waiting);
        if waiting > 0 {
            peaks.waits_seen.push(seen);
        }
        peaks.pooler_backends = peaks.pooler_backends.max(row.get(2));
        let servers: i64 = bouncer
            .pool()
            .await
            .iter()
            .filter(|(column, _)| column.starts_with("sv_"))
            .map(|(column, value)| value.parse::<i64>().unwrap_or_else(|_| panic!("{column} = {value:?}")))
            .sum();
        peaks.pooler_connections = peaks.pooler_connections.max(servers);
        peaks.samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    peaks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_waiters_on_ten_keys_through_four_server_connections_are_all_granted_in_turn() {
    const T: &str = "pgbouncer_waiters";
    // A cluster of its own: its backends are this test's alone to count.
    let cluster = Cluster::start_new(T, &[]);
    let bouncer = Pgbouncer::start(&cluster, T, SERVER_CONNECTIONS).await;
    let keys: Vec<String> = (0..KEYS).map(|i| key(T, &i.to_string())).collect();
    let holdings: Arc<Vec<Mutex<Vec<Holding>>>> = Arc::new((0..KEYS).map(|_| Mutex::default()).collect());

    // Every key held at first (directly, not through the pooler), so that every waiter waits.
    let port = cluster.port();
    let holders = Client::connect(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres application_name=holders"
    ))
    .await
    .unwrap();
    let mut held = Vec::new();
    for k in &keys {
        let guard = holders.lock(k).ttl(SECOND * 60).acquire().await.unwrap();
        held.push((Instant::now(), guard));
    }

    let observer = cluster.connect().await;
    let done = AtomicBool::new(false);
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| {
            Client::builder(&format!("{}?application_name=waiters", bouncer.url()))
                .pooler(PoolerMode::Transaction)
                .pool_size(8)
                .build()
                .expect("a client through pgbouncer")
        })
        .collect();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let slot = i % KEYS;
        let client = clients[i % CLIENTS].with_owner(format!("{T}-waiter-{i}"));
        let (k, holdings) = (keys[slot].clone(), holdings.clone());
        waiters.push(tokio::spawn(async move {
            let guard = client.lock(&k).ttl(SECOND * 30).wait(SECOND * 120).acquire().await?;
            let granted = Instant::now();
            // Hold it a moment, so that overlapping holders would show.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let fence = guard.fence();
            let released = Instant::now();
            holdings[slot].lock().await.push(Holding { granted, released, fence });
            assert!(guard.release().await?, "the lease was still ours");
            Ok::<(), dlock_client::Error>(())
        }));
    }

    let waiting = async {
        // Let every waiter find its key busy, then free the keys.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "every key is held");
        for (slot, (granted, guard)) in held.into_iter().enumerate() {
            let fence = guard.fence();
            let released = Instant::now();
            holdings[slot].lock().await.push(Holding { granted, released, fence });
            assert!(guard.release().await.unwrap());
        }
        for waiter in waiters {
            waiter.await.expect("the waiter's task").expect("every waiter is granted");
        }
        done.store(true, Ordering::Relaxed);
    };
    let (peaks, ()) = within(SECOND * 240, "every waiter is granted", async {
        tokio::join!(sample(observer, &bouncer, &done), waiting)
    })
    .await;

    assert!(peaks.samples >= 10, "sampled only {} times", peaks.samples);
    assert_eq!(peaks.waiting_backends, 0, "a wait sat in the server: {peaks:?}");
    let most = i64::from(SERVER_CONNECTIONS);
    assert!(peaks.pooler_connections <= most && peaks.pooler_backends <= most, "{peaks:?}");

    for (slot, holdings) in holdings.iter().enumerate() {
        let mut holdings = holdings.lock().await.clone();
        assert_eq!(holdings.len(), WAITERS / KEYS + 1, "key {slot}: the first holder and every waiter");
        holdings.sort_by_key(|h| h.granted);
        for pair in holdings.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            assert!(after.granted > before.released, "key {slot}: two holders at once: {before:?} {after:?}");
            assert!(after.fence > before.fence, "key {slot}: fences do not grow: {before:?} {after:?}");
        }
    }
}
