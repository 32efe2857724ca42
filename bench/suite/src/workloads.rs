//! The workloads: uncontended pairs at several client counts, the durable-commit ceiling of the
//! same server, renewals of many live leases, acquire latency as the lease table grows, the
//! table's size as keys come and go, and an expiry storm.

use std::time::{Duration, Instant};

use dlock_client::Client;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::Result;
use crate::contenders::{Contender, Servers, Session, pg_connect};

pub use bench_common::latency::{Latency, histogram};

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

/// The durable-commit ceiling's label.
pub const CEILING: &str = "durable commit ceiling (single-row UPDATE)";
/// The two-statement bound's label.
pub const TWO_STATEMENTS: &str = "two-statement bound (the ceiling's UPDATE, then SELECT 1)";

/// The ceiling: durable single-row UPDATE commits per second at `clients`, one row per client
/// (no row contention), as pgbench's simplest write. An acknowledged acquire needs one of these.
/// With `then_select`, each UPDATE is followed by an empty round trip (`SELECT 1`): the most any
/// lock whose pair is one durable commit plus a second statement (the release) can reach.
pub async fn ceiling(servers: &Servers, clients: usize, seconds: f64, then_select: bool) -> Result<Point> {
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
        let select = client.prepare("SELECT 1").await?;
        sessions.push((client, update, select));
    }
    let sessions = std::sync::Arc::new(sessions);
    let (rate, h) = drive(clients, seconds, move |task, _| {
        let sessions = sessions.clone();
        async move {
            let (client, update, select) = &sessions[task];
            client.execute(update, &[&(task as i32)]).await?;
            if then_select {
                client.execute(select, &[]).await?;
            }
            Ok(())
        }
    })
    .await?;
    Ok(Point {
        contender: if then_select { TWO_STATEMENTS } else { CEILING }.into(),
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
    // The sessions take their leases side by side (etcd's are two fsynced writes each).
    let sessions = futures::future::try_join_all((0..clients).map(|id| async move {
        let mut s = Session::open(contender, servers, id, None).await?;
        for j in 0..per_task {
            s.take(&format!("{prefix}:{id}:{j}")).await?;
        }
        Ok::<_, crate::Error>(tokio::sync::Mutex::new(s))
    }))
    .await?;
    let sessions = std::sync::Arc::new(sessions);
    let (rate, h) = {
        let (sessions, prefix) = (sessions.clone(), prefix.to_string());
        drive(clients, seconds, move |task, i| {
            let (sessions, key) = (sessions.clone(), format!("{prefix}:{task}:{}", i as usize % per_task));
            async move { sessions[task].lock().await.renew(&key).await }
        })
        .await?
    };
    if matches!(contender, Contender::DlockFast | Contender::Etcd) {
        // Given back at once: fast mode's table is bounded, and etcd would otherwise revoke
        // the expired leases (raft writes) during the next workloads.
        futures::future::try_join_all(sessions.iter().enumerate().map(|(id, s)| async move {
            let mut s = s.lock().await;
            for j in 0..per_task {
                s.give(&format!("{prefix}:{id}:{j}")).await?;
            }
            Ok::<_, crate::Error>(())
        }))
        .await?;
    }
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
                "INSERT INTO dlock_internal.lease (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, holder)
                 SELECT 'filler:' || g, 'bench-filler', 10, nextval('dlock_internal.fence_seq'), 1,
                        now(), now() + interval '1 day', 0, ''
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

/// The lease table's size after some keys of the churn came and went.
#[derive(Clone, Debug, Serialize)]
pub struct ChurnSample {
    pub keys: usize,
    pub seconds: f64,
    /// Table, indexes and TOAST (`pg_total_relation_size`).
    pub table_bytes: i64,
    /// The indexes alone.
    pub index_bytes: i64,
    /// Dead rows and autovacuum runs so far, as the statistics say (they lag a little).
    pub dead_rows: i64,
    pub autovacuums: i64,
}

impl ChurnSample {
    async fn take(admin: &tokio_postgres::Client, keys: usize, seconds: f64) -> Result<ChurnSample> {
        let row = admin
            .query_one(
                "SELECT pg_total_relation_size(relid), pg_indexes_size(relid), n_dead_tup, autovacuum_count
                   FROM pg_stat_user_tables WHERE relid = 'dlock_internal.lease'::regclass",
                &[],
            )
            .await?;
        Ok(ChurnSample {
            keys,
            seconds,
            table_bytes: row.try_get(0)?,
            index_bytes: row.try_get(1)?,
            dead_rows: row.try_get(2)?,
            autovacuums: row.try_get(3)?,
        })
    }
}

/// The `autovacuum_naptime` the churn runs with: released rows' space comes back when
/// autovacuum visits the table, so the table's size is about the churn between two visits. The
/// The book (operating/settings.md) recommends this for databases whose locks change hands thousands of times a second.
pub const CHURN_NAPTIME: &str = "10 s";
const SET_CHURN_NAPTIME: &str = "ALTER SYSTEM SET autovacuum_naptime = '10s'";

/// Workload 4, churn: `keys` distinct keys come and go (acquire+release by 8 tasks), the
/// table's size sampled every `step` keys: whether it levels off or grows without bound. Runs
/// with `autovacuum_naptime = CHURN_NAPTIME` (the default, 1 min, again afterwards).
pub async fn churn(servers: &Servers, keys: usize, step: usize, prefix: &str) -> Result<Vec<ChurnSample>> {
    let admin = pg_connect(&servers.pg_url).await?;
    // One statement per call: ALTER SYSTEM refuses to run in the implicit transaction of a batch.
    admin.batch_execute(SET_CHURN_NAPTIME).await?;
    admin.batch_execute("SELECT pg_reload_conf()").await?;
    let samples = churn_sampled(servers, &admin, keys, step, prefix).await;
    admin.batch_execute("ALTER SYSTEM RESET autovacuum_naptime").await?;
    admin.batch_execute("SELECT pg_reload_conf()").await?;
    samples
}

async fn churn_sampled(
    servers: &Servers,
    admin: &tokio_postgres::Client,
    keys: usize,
    step: usize,
    prefix: &str,
) -> Result<Vec<ChurnSample>> {
    let clients = 8;
    let mut sessions = Vec::new();
    for id in 0..clients {
        sessions.push(Session::open(Contender::DlockSql, servers, id, None).await?);
    }
    let mut samples = vec![ChurnSample::take(admin, 0, 0.0).await?];
    let start = Instant::now();
    let mut done = 0;
    while done < keys {
        let n = step.max(1).min(keys - done);
        let mut tasks = Vec::new();
        for (id, mut s) in sessions.drain(..).enumerate() {
            let prefix = prefix.to_string();
            tasks.push(tokio::spawn(async move {
                // Task `id` takes every `clients`th key of this step: all distinct across steps.
                for k in (done + id..done + n).step_by(clients) {
                    s.pair(&format!("{prefix}:churn:{k}")).await?;
                }
                Ok::<_, crate::Error>(s)
            }));
        }
        for t in tasks {
            sessions.push(t.await??);
        }
        done += n;
        let sample = ChurnSample::take(admin, done, start.elapsed().as_secs_f64()).await?;
        eprintln!("bench: churn: {done} keys, {} kB", sample.table_bytes / 1024);
        samples.push(sample);
    }
    Ok(samples)
}

/// Workload 5: `leases` leases that all expire at once, `after` from now, while `clients`
/// sessions keep acquiring and releasing fresh keys; per-second windows show whether the
/// storm disturbs them, and the count of the storm's leases still there shows them being
/// swept. Durable dlock (rows written directly, as a superuser), or fast mode (as many as half
/// its shared-memory table holds, taken through `dlock_fast_acquire` in one statement).
pub async fn expiry_storm(
    contender: Contender,
    servers: &Servers,
    leases: usize,
    clients: usize,
    after: Duration,
    seconds: f64,
    prefix: &str,
) -> Result<Storm> {
    let admin = pg_connect(&servers.pg_url).await?;
    let (leases, left) = match contender {
        Contender::DlockSql => {
            admin.batch_execute("DELETE FROM dlock_internal.lease WHERE owner = 'bench-storm'").await?;
            admin
                .execute(
                    "INSERT INTO dlock_internal.lease (key, owner, role, fence, hold_count, acquired_at, expires_at, holder_pid, holder)
                     SELECT 'storm:' || g, 'bench-storm', 10, nextval('dlock_internal.fence_seq'), 1,
                            now(), clock_timestamp() + $2::float8 * interval '1 second', 0, ''
                       FROM generate_series(1, $1::int) g",
                    &[&(leases as i32), &after.as_secs_f64()],
                )
                .await?;
            (leases, "SELECT count(*) FROM dlock_internal.lease WHERE owner = 'bench-storm'")
        }
        Contender::DlockFast => {
            crate::contenders::fast_mode_ready(servers).await?;
            let capacity: i32 =
                admin.query_one("SELECT current_setting('dlock.fast_max_leases')::int", &[]).await?.get(0);
            let leases = leases.min(capacity.max(0) as usize / 2);
            let granted: i64 = admin
                .query_one(
                    "SELECT count(*) FROM generate_series(1, $1::int) g
                      WHERE dlock_fast_acquire('storm:' || g, 'bench-storm', $2::float8 * interval '1 second') IS NOT NULL",
                    &[&(leases as i32), &after.as_secs_f64()],
                )
                .await?
                .get(0);
            if granted != leases as i64 {
                return Err(format!("fast storm: {granted} of {leases} leases granted").into());
            }
            // Lists live leases only: expired entries stay in shared memory until a sweep.
            (leases, "SELECT count(*) FROM dlock_fast_locks() WHERE owner = 'bench-storm'")
        }
        other => return Err(format!("no expiry storm for {other:?}").into()),
    };
    let start = Instant::now();
    let windows = (seconds.ceil() as usize).max(1);
    let hists: Vec<std::sync::Mutex<Histogram<u64>>> =
        (0..windows).map(|_| std::sync::Mutex::new(histogram())).collect();
    let hists = std::sync::Arc::new(hists);
    let mut tasks = Vec::new();
    for id in 0..clients {
        let mut s = Session::open(contender, servers, id, None).await?;
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
                hists[window]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .saturating_record(t.elapsed().as_nanos() as u64);
                i += 1;
            }
        }));
    }
    let mut rows = Vec::new();
    for second in 0..windows {
        tokio::time::sleep_until((start + Duration::from_secs(second as u64 + 1)).into()).await;
        let n: i64 = admin.query_one(left, &[]).await?.get(0);
        rows.push(n);
    }
    for t in tasks {
        t.await??;
    }
    let windows = hists
        .iter()
        .zip(rows)
        .enumerate()
        .map(|(second, (h, storm_rows))| {
            let h = h.lock().unwrap_or_else(|e| e.into_inner());
            StormWindow { second, pairs: h.len(), latency: Latency::of(&h), storm_rows_left: storm_rows }
        })
        .collect();
    Ok(Storm { contender: contender.label().into(), leases, windows })
}

/// The expiry storm of one contender.
#[derive(Clone, Debug, Serialize)]
pub struct Storm {
    pub contender: String,
    pub leases: usize,
    pub windows: Vec<StormWindow>,
}

/// One second of the expiry storm.
#[derive(Clone, Debug, Serialize)]
pub struct StormWindow {
    pub second: usize,
    pub pairs: u64,
    pub latency: Latency,
    /// The storm's leases still there at the end of the second: rows in the table (durable),
    /// or live leases listed by `dlock_fast_locks` (fast mode).
    pub storm_rows_left: i64,
}
