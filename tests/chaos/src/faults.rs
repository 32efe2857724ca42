//! The faults: each one injects itself and says what it did, for the report.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Standby};
use tokio_postgres::{Client, NoTls};

use crate::check::{BoundKill, PROBE_WAIT, Snapshot};
use crate::crew::Crew;
use crate::history::{Event, Log, Mode};
use crate::resource;

/// How many of each fault were injected.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub kill9_holding: u64,
    pub kill9_idle: u64,
    pub stop_cont: u64,
    /// (key, fence) of the leases held by paused workers when they were paused.
    pub paused_leases: Vec<(String, i64)>,
    pub terminate_rounds: u64,
    pub terminated_backends: u64,
    /// Server time after each round, and the `application_name`s of the backends it ended.
    pub terminated: Vec<(f64, Vec<String>)>,
    pub crashes: u64,
    /// Promotions of the synchronous standby after the primary stopped immediately.
    pub failovers: u64,
    /// How long the workers had no primary (stop to promoted), longest, in seconds.
    pub failover_down: f64,
    /// Worker grants requested after the failover, and per key the largest fence granted
    /// before it and the smallest after it (for the report; the checker's rules cover them).
    pub grants_after_failover: usize,
    pub fences_across_failover: Vec<(String, i64, i64)>,
    pub sentinels_checked: u64,
    /// kill -9 of holders of a session-bound lease, each with what followed (see `BoundKill`).
    pub bound_kills: Vec<BoundKill>,
    pub proxy_cuts: u64,
    pub proxy_connections: u64,
    pub skewed_workers: u64,
    pub max_skew: f64,
    pub unexpected_exits: Vec<String>,
    pub sabotage_force_releases: u64,
    /// The keys force-released, in order.
    pub sabotaged_keys: Vec<String>,
}

/// SIGKILL of a worker, preferably one holding a lease (a session-bound one if
/// `prefer_bound` and there is one); returns its name and, if it held a session-bound lease,
/// that lease.
pub fn kill9(
    crew: &mut Crew,
    prefer_bound: bool,
    counts: &mut Counts,
) -> Option<(String, Option<(String, i64)>)> {
    let bound_holders: Vec<usize> =
        (0..crew.workers.len()).filter(|&i| crew.workers[i].holding_bound().is_some()).collect();
    let i = match bound_holders.first() {
        Some(&i) if prefer_bound => i,
        _ => crew.pick_holder()?,
    };
    let worker = &crew.workers[i];
    let bound = worker.holding_bound();
    if worker.holding().is_some() {
        counts.kill9_holding += 1;
    } else {
        counts.kill9_idle += 1;
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(worker.pid, libc::SIGKILL) };
    Some((worker.name.clone(), bound))
}

/// After a kill -9 of the holder of the session-bound lease on `key`: waits for the key (up
/// to `PROBE_WAIT`) on a session of its own, directly on the server at `port`, and gives it
/// back at once; its grant and release go to the history (`probe.jsonl`) like a worker's, so
/// the checker sees the probe's lease too. Returns whether it was granted (`None`: the probe
/// failed, e.g. the server went down).
pub async fn probe(port: u16, key: String, owner: String, log: Arc<Mutex<Log>>) -> Option<bool> {
    let db = admin(port).await.ok()?;
    let row = db
        .query_one(
            "SELECT dlock_acquire($1, $2, interval '1 second', $3 * interval '1 second'), \
               extract(epoch FROM statement_timestamp())::float8, \
               extract(epoch FROM clock_timestamp())::float8",
            &[&key, &owner, &PROBE_WAIT],
        )
        .await
        .ok()?;
    let (fence, requested_at, granted_by): (Option<i64>, f64, f64) = (row.get(0), row.get(1), row.get(2));
    let Some(fence) = fence else { return Some(false) };
    log.lock().unwrap().record(&Event::Grant {
        owner: owner.clone(),
        key: key.clone(),
        fence,
        requested_at: Some(requested_at),
        granted_by,
        // Granted after the statement began: it lives at least until then + 1 s.
        live_until: requested_at + 1.0,
        bound: false,
        mode: Mode::Exclusive,
        max_holders: None,
        fast: false,
    });
    log.lock().unwrap().record(&Event::Releasing {
        owner: owner.clone(),
        key: key.clone(),
        fence,
        local: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        lb: Some(granted_by),
    });
    let released = db
        .query_one(
            "SELECT dlock_release($1, $2), extract(epoch FROM statement_timestamp())::float8, \
               extract(epoch FROM clock_timestamp())::float8",
            &[&key, &owner],
        )
        .await;
    let (ok, lb, ub) = match released {
        Ok(row) => (Some(row.get(0)), Some(row.get(1)), Some(row.get(2))),
        Err(_) => (None, None, None),
    };
    log.lock().unwrap().record(&Event::Release { owner, key, fence, ok, lb, ub });
    Some(true)
}

/// SIGSTOP of a holder, SIGCONT after `pause` (longer than any ttl): it wakes up believing
/// it still holds its lease, and its next write must be refused by the fence.
pub fn stop_cont(crew: &mut Crew, pause: Duration, counts: &mut Counts) {
    let Some(i) = crew.pick_holder() else { return };
    let pid = crew.workers[i].pid;
    counts.stop_cont += 1;
    // What became of its late writes is reported for the workers that write to the resource.
    if crew.workers[i].kind.writes() {
        counts.paused_leases.extend(crew.workers[i].holding());
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::spawn(async move {
        tokio::time::sleep(pause).await;
        // SAFETY: kill(2). If the worker was killed and reaped meanwhile and its pid reused,
        // SIGCONT to a process that is not stopped does nothing.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
}

/// pg_terminate_backend of up to `n` random worker backends (dlock's and the resource's, when
/// on one cluster); remembers when and whose (`application_name`).
pub async fn terminate(admin: &Client, n: i64, counts: &mut Counts) {
    let terminated = admin
        .query_one(
            "SELECT count(*), coalesce(array_agg(application_name), '{}'), \
                    extract(epoch FROM clock_timestamp())::float8 FROM \
               (SELECT pid, application_name FROM pg_stat_activity WHERE application_name LIKE 'chaos-%' \
                 ORDER BY random() LIMIT $1) s WHERE pg_terminate_backend(pid)",
            &[&n],
        )
        .await;
    if let Ok(row) = terminated {
        counts.terminate_rounds += 1;
        counts.terminated_backends += row.get::<_, i64>(0) as u64;
        counts.terminated.push((row.get(2), row.get(1)));
    }
}

/// Sabotage (self-test only): frees `key` whoever holds it, before its lease ends.
pub async fn force_release(admin: &Client, key: &str, counts: &mut Counts) {
    if let Ok(row) = admin.query_one("SELECT dlock_force_release($1)", &[&key]).await
        && row.get::<_, bool>(0)
    {
        counts.sabotage_force_releases += 1;
        counts.sabotaged_keys.push(key.to_string());
    }
}

/// Sabotage (self-test only): one key held now among `keys` (at random), if any.
pub async fn held_among(admin: &Client, keys: &[String]) -> Option<String> {
    let row = admin
        .query_opt("SELECT key FROM dlock_locks WHERE key = ANY($1) ORDER BY random() LIMIT 1", &[&keys])
        .await
        .ok()??;
    Some(row.get(0))
}

/// Opens an admin session on the `postgres` database, directly (not through the proxy).
pub async fn admin(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) =
        tokio_postgres::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"), NoTls)
            .await?;
    tokio::spawn(connection);
    Ok(client)
}

/// This machine's clock, epoch seconds (orders the runner's faults against the workers'
/// `releasing` records; never compared with a server time).
fn local_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The sentinel leases taken just before a crash or failover: (key, owner, fence) of the TTL
/// ones, and the key and session of the session-bound one.
pub struct Sentinels {
    label: String,
    durable: Vec<(String, String, i64)>,
    bound_key: String,
    /// Keeps the session-bound sentinel's session open until the server goes down.
    _bound_session: Client,
}

/// Takes sentinel leases on the server at `port` (`admin` is a session there): one with a long
/// ttl, one short one renewed to a long ttl, and a session-bound one.
pub async fn take_sentinels(
    admin: &Client,
    port: u16,
    label: &str,
) -> Result<Sentinels, tokio_postgres::Error> {
    let sentinel = |what: &str| (format!("sentinel/{label}/{what}"), format!("runner:{label}:{what}"));
    let mut durable = Vec::new();
    let (key, owner) = sentinel("ttl");
    let fence: i64 = admin
        .query_one("SELECT dlock_acquire($1, $2, interval '120 seconds')", &[&key, &owner])
        .await?
        .get(0);
    durable.push((key, owner, fence));
    let (key, owner) = sentinel("renewed");
    let fence: i64 =
        admin.query_one("SELECT dlock_acquire($1, $2, interval '1 second')", &[&key, &owner]).await?.get(0);
    admin.query_one("SELECT dlock_renew($1, $2, interval '120 seconds')", &[&key, &owner]).await?;
    durable.push((key, owner, fence));
    let bound_session = self::admin(port).await?;
    let (bound_key, bound_owner) = sentinel("session");
    bound_session.query_one("SELECT dlock_acquire($1, $2, NULL)", &[&bound_key, &bound_owner]).await?;
    Ok(Sentinels { label: label.to_string(), durable, bound_key, _bound_session: bound_session })
}

/// After the server came back (restart or promotion; `admin` is a session on it): reads every
/// live lease (for the checker) and checks the sentinels: the TTL ones still held by their
/// owner with their fence, refused to others, released by their owner, the next fence larger;
/// the session-bound one gone with its session. Returns the snapshot and any violations.
pub async fn verify_sentinels(
    admin: &Client,
    sentinels: Sentinels,
    crash_at: f64,
    counts: &mut Counts,
) -> Result<(Snapshot, Vec<String>), tokio_postgres::Error> {
    let label = &sentinels.label;
    let leases: Vec<(String, String, i64)> = admin
        .query("SELECT key, owner, fence FROM dlock_locks", &[])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let read_at: f64 = admin.query_one(resource::SERVER_NOW, &[]).await?.get(0);
    let read_local = local_now();
    let mut violations = Vec::new();
    for (key, owner, fence) in &sentinels.durable {
        counts.sentinels_checked += 1;
        if !leases.iter().any(|(k, o, f)| k == key && o == owner && f == fence) {
            violations.push(format!("{label}: sentinel {key} (fence {fence}, {owner}) lost"));
        }
        let intruder: Option<i64> = admin
            .query_one("SELECT dlock_acquire($1, 'intruder', interval '1 second')", &[key])
            .await?
            .get(0);
        if intruder.is_some() {
            violations.push(format!("{label}: sentinel {key} granted to another owner afterwards"));
        }
        let released: bool = admin.query_one("SELECT dlock_release($1, $2)", &[key, owner]).await?.get(0);
        if !released {
            violations.push(format!("{label}: sentinel {key}: its owner's release answered false"));
        }
        let next: Option<i64> =
            admin.query_one("SELECT dlock_acquire($1, 'next', interval '1 second')", &[key]).await?.get(0);
        if next.is_none_or(|next| next <= *fence) {
            violations.push(format!("{label}: sentinel {key}: next fence {next:?} not above {fence}"));
        }
        admin.query_one("SELECT dlock_release($1, 'next')", &[key]).await?;
    }
    counts.sentinels_checked += 1;
    let bound_key = &sentinels.bound_key;
    if leases.iter().any(|(k, _, _)| k == bound_key) {
        violations.push(format!("{label}: session-bound sentinel {bound_key} outlived its ended session"));
    }
    let next: Option<i64> =
        admin.query_one("SELECT dlock_acquire($1, 'next', interval '1 second')", &[bound_key]).await?.get(0);
    if next.is_none() {
        violations.push(format!("{label}: session-bound sentinel {bound_key} still busy afterwards"));
    }
    Ok((Snapshot { crash_at, read_at, read_local, leases }, violations))
}

/// `pg_ctl stop -m immediate` and a restart, with sentinels before and their check after.
/// Returns the snapshot, a fresh admin session and any violations.
pub async fn crash(
    cluster: &Arc<Cluster>,
    admin: &Client,
    round: u64,
    counts: &mut Counts,
) -> Result<(Snapshot, Client, Vec<String>), tokio_postgres::Error> {
    let sentinels = take_sentinels(admin, cluster.port(), &format!("crash {round}")).await?;
    let crash_at: f64 = admin.query_one(resource::SERVER_NOW, &[]).await?.get(0);
    let restarted = cluster.clone();
    tokio::task::spawn_blocking(move || {
        restarted.stop("immediate");
        restarted.start();
    })
    .await
    .expect("restart the cluster");
    counts.crashes += 1;
    let admin = self::admin(cluster.port()).await?;
    let (snapshot, violations) = verify_sentinels(&admin, sentinels, crash_at, counts).await?;
    Ok((snapshot, admin, violations))
}

/// Failover: sentinels on the primary, `pg_ctl stop -m immediate` of the primary, `pg_ctl
/// promote` of its synchronous standby, the proxy pointed at it (the workers reconnect as after
/// a crash), then the sentinels checked on the new primary. Returns the snapshot, an admin
/// session on the new primary and any violations.
pub async fn failover(
    primary: &Arc<Cluster>,
    standby: &Arc<Standby>,
    admin: &Client,
    upstream: &AtomicU16,
    counts: &mut Counts,
) -> Result<(Snapshot, Client, Vec<String>), tokio_postgres::Error> {
    let round = counts.failovers + 1;
    let sentinels = take_sentinels(admin, primary.port(), &format!("failover {round}")).await?;
    let crash_at: f64 = admin.query_one(resource::SERVER_NOW, &[]).await?.get(0);
    let down = Instant::now();
    let (old, new) = (primary.clone(), standby.clone());
    tokio::task::spawn_blocking(move || {
        old.stop("immediate");
        new.promote();
    })
    .await
    .expect("fail over to the standby");
    upstream.store(standby.port(), Ordering::SeqCst);
    counts.failovers += 1;
    counts.failover_down = counts.failover_down.max(down.elapsed().as_secs_f64());
    let admin = self::admin(standby.port()).await?;
    let (snapshot, violations) = verify_sentinels(&admin, sentinels, crash_at, counts).await?;
    Ok((snapshot, admin, violations))
}
