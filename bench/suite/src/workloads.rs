//! The workloads: uncontended pairs at several client counts, the durable-commit ceiling of the
//! same server, renewals of many live leases, and acquire latency as the lease table grows.

use std::time::{Duration, Instant};

use dlock_client::Client;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::Result;
use crate::contenders::{Contender, Servers, Session, pg_connect};

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Latency figures in µs.
#[derive(Clone, Debug, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// (µs, fraction of samples at or below), for the CDF plots.
    pub cdf: Vec<(f64, f64)>,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let cdf = (0..=200).map(|i| i as f64 / 200.0).map(|q| (us(q), q)).collect();
        Latency {
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1000.0,
            cdf,
        }
    }
}

/// One measured point: operations per second and their latencies.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub contender: String,
    pub clients: usize,
    pub per_second: f64,
    pub latency: Latency,
}

/// `clients` tasks doing `op` back to back for `seconds`, each on a session of its own.
async fn drive<F, Fut>(clients: usize, seconds: f64, op: F) -> Result<(f64, Histogram<u64>)>
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for task in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                op(task, i).await?;
                h.saturating_record(t.elapsed().as_nanos() as u64);
                i += 1;
            }
            Ok::<_, crate::Error>(h)
        }));
    }
    let mut all = histogram();
    for task in tasks {
        all.add(task.await??)?;
    }
    Ok((all.len() as f64 / start.elapsed().as_secs_f64(), all))
}

/// Workload 1: acquire+release pairs on keys nobody else uses.
pub async fn uncontended(
    contender: Contender,
    servers: &Servers,
    clients: usize,
    seconds: f64,
    prefix: &str,
) -> Result<Point> {
    // The client contender: one client (its own pool, sized for the tasks) as a service would.
    let shared = if contender == Contender::DlockClient {
        let manager = deadpool_postgres::Manager::new(servers.pg_url.parse()?, tokio_postgres::NoTls);
        Some(Client::from_pool(deadpool_postgres::Pool::builder(manager).max_size(clients).build()?))
    } else {
        None
    };
    let mut sessions = Vec::new();
    for id in 0..clients {
        sessions.push(tokio::sync::Mutex::new(Session::open(contender, servers, id, shared.as_ref()).await?));
    }
    let sessions = std::sync::Arc::new(sessions);
    let prefix = prefix.to_string();
    let (rate, h) = drive(clients, seconds, move |task, i| {
        let (sessions, key) = (sessions.clone(), format!("{prefix}:{task}:{i}"));
        async move { sessions[task].lock().await.pair(&key).await }
    })
    .await?;
    Ok(Point { contender: contender.label().into(), clients, per_second: rate, latency: Latency::of(&h) })
}

/// The ceiling: durable single-row UPDATE commits per second at `clients`, one row per client
/// (no row contention), as pgbench's simplest write. An acknowledged acquire needs one of these.
pub async fn ceiling(servers: &Servers, clients: usize, seconds: f64) -> Result<Point> {
    let setup = pg_connect(&servers.pg_url).await?;
    setup
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO bench_ceiling SELECT g, 0 FROM generate_series(0, 255) g ON CONFLICT DO NOTHING;",
        )
        .await?;
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let client = pg_connect(&servers.pg_url).await?;
        let update = client.prepare("UPDATE bench_ceiling SET n = n + 1 WHERE id = $1").await?;
        sessions.push((client, update));
    }
    let sessions = std::sync::Arc::new(sessions);
    let (rate, h) = drive(clients, seconds, move |task, _| {
        let sessions = sessions.clone();
        async move {
            let (client, update) = &sessions[task];
            client.execute(update, &[&(task as i32)]).await?;
            Ok(())
        }
    })
    .await?;
    Ok(Point {
        contender: "durable commit ceiling (single-row UPDATE)".into(),
        clients,
        per_second: rate,
        latency: Latency::of(&h),
    })
}

/// Workload 3: `leases` live leases renewed round-robin by `clients` tasks (watchdog-like).
pub async fn renewals(
    contender: Contender,
    servers: &Servers,
    clients: usize,
    leases: usize,
    seconds: f64,
    prefix: &str,
) -> Result<Point> {
    let per_task = leases.div_ceil(clients);
    let mut sessions = Vec::new();
    for id in 0..clients {
        let mut s = Session::open(contender, servers, id, None).await?;
        for j in 0..per_task {
            s.take(&format!("{prefix}:{id}:{j}")).await?;
        }
        sessions.push(tokio::sync::Mutex::new(s));
    }
    let sessions = std::sync::Arc::new(sessions);
    let prefix = prefix.to_string();
    let (rate, h) = drive(clients, seconds, move |task, i| {
        let (sessions, key) = (sessions.clone(), format!("{prefix}:{task}:{}", i as usize % per_task));
        async move { sessions[task].lock().await.renew(&key).await }
    })
    .await?;
    Ok(Point { contender: contender.label().into(), clients, per_second: rate, latency: Latency::of(&h) })
}

/// Workload 4, one step: acquire+release latency of one session with `live` other leases in
/// the table (written directly, as a superuser, so that filling takes seconds, not minutes).
pub async fn with_live_leases(servers: &Servers, live: usize, samples: usize, prefix: &str) -> Result<Point> {
    let admin = pg_connect(&servers.pg_url).await?;
    admin.batch_execute("DELETE FROM dlock_internal.lease WHERE owner = 'bench-filler'").await?;
    if live > 0 {
        admin
            .execute(
                "INSERT INTO dlock_internal.lease (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid)
                 SELECT 'filler:' || g, 'bench-filler', 10, nextval('dlock_internal.fence_seq'), 1,
                        now(), now() + interval '1 day', 0
                   FROM generate_series(1, $1::int) g",
                &[&(live as i32)],
            )
            .await?;
        admin.batch_execute("VACUUM ANALYZE dlock_internal.lease").await?;
    }
    // The filling's WAL and dirty pages written out first: measure the leases, not the filling.
    admin.batch_execute("CHECKPOINT").await?;
    let mut session = Session::open(Contender::DlockSql, servers, 0, None).await?;
    for i in 0..samples / 10 {
        session.pair(&format!("{prefix}:warm:{live}:{i}")).await?;
    }
    let mut h = histogram();
    let start = Instant::now();
    for i in 0..samples {
        let t = Instant::now();
        session.pair(&format!("{prefix}:{live}:{i}")).await?;
        h.saturating_record(t.elapsed().as_nanos() as u64);
    }
    let rate = samples as f64 / start.elapsed().as_secs_f64();
    Ok(Point {
        contender: format!("dlock, {live} live leases"),
        clients: 1,
        per_second: rate,
        latency: Latency::of(&h),
    })
}

/// The lease table's size (table, indexes, TOAST) in bytes.
pub async fn lease_table_bytes(servers: &Servers) -> Result<i64> {
    let admin = pg_connect(&servers.pg_url).await?;
    Ok(admin.query_one("SELECT pg_total_relation_size('dlock_internal.lease')", &[]).await?.get(0))
}

/// Workload 4, churn: `keys` distinct keys come and go (8 tasks); the table's size before and
/// after says whether it grows without bound.
pub async fn churn(servers: &Servers, keys: usize, prefix: &str) -> Result<(i64, i64, f64)> {
    let before = lease_table_bytes(servers).await?;
    let clients = 8;
    let per_task = keys / clients;
    let mut tasks = Vec::new();
    let start = Instant::now();
    for id in 0..clients {
        let mut s = Session::open(Contender::DlockSql, servers, id, None).await?;
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_task {
                s.pair(&format!("{prefix}:churn:{id}:{i}")).await?;
            }
            Ok::<_, crate::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok((before, lease_table_bytes(servers).await?, seconds))
}

/// Workload 5: `leases` leases that all expire at once, `after` from now, while `clients`
/// sessions keep acquiring and releasing fresh keys; per-second windows show whether the
/// storm disturbs them, and the table's row count shows the dead rows being swept.
pub async fn expiry_storm(
    servers: &Servers,
    leases: usize,
    clients: usize,
    after: Duration,
    seconds: f64,
    prefix: &str,
) -> Result<Vec<StormWindow>> {
    let admin = pg_connect(&servers.pg_url).await?;
    admin.batch_execute("DELETE FROM dlock_internal.lease WHERE owner = 'bench-storm'").await?;
    admin
        .execute(
            "INSERT INTO dlock_internal.lease (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid)
             SELECT 'storm:' || g, 'bench-storm', 10, nextval('dlock_internal.fence_seq'), 1,
                    now(), clock_timestamp() + $2::float8 * interval '1 second', 0
               FROM generate_series(1, $1::int) g",
            &[&(leases as i32), &after.as_secs_f64()],
        )
        .await?;
    let start = Instant::now();
    let windows = (seconds.ceil() as usize).max(1);
    let hists: Vec<std::sync::Mutex<Histogram<u64>>> =
        (0..windows).map(|_| std::sync::Mutex::new(histogram())).collect();
    let hists = std::sync::Arc::new(hists);
    let mut tasks = Vec::new();
    for id in 0..clients {
        let mut s = Session::open(Contender::DlockSql, servers, id, None).await?;
        let (hists, prefix) = (hists.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            loop {
                let t = Instant::now();
                let window = t.duration_since(start).as_secs() as usize;
                if window >= hists.len() {
                    return Ok::<_, crate::Error>(());
                }
                s.pair(&format!("{prefix}:storm:{id}:{i}")).await?;
                hists[window].lock().unwrap().saturating_record(t.elapsed().as_nanos() as u64);
                i += 1;
            }
        }));
    }
    let mut rows = Vec::new();
    for second in 0..windows {
        tokio::time::sleep_until((start + Duration::from_secs(second as u64 + 1)).into()).await;
        let n: i64 = admin
            .query_one("SELECT count(*) FROM dlock_internal.lease WHERE owner = 'bench-storm'", &[])
            .await?
            .get(0);
        rows.push(n);
    }
    for t in tasks {
        t.await??;
    }
    Ok(hists
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(second, (h, storm_rows))| {
            let h = h.lock().unwrap();
            StormWindow { second, pairs: h.len(), latency: Latency::of(&h), storm_rows_left: storm_rows }
        })
        .collect())
}

/// One second of the expiry storm.
#[derive(Clone, Debug, Serialize)]
pub struct StormWindow {
    pub second: usize,
    pub pairs: u64,
    pub latency: Latency,
    /// Rows of the expired leases still in the table at the end of the second.
    pub storm_rows_left: i64,
}
