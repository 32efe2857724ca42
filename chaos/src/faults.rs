//! The faults: each one injects itself and says what it did, for the report.

use std::sync::Arc;
use std::time::Duration;

use dlock_tests::Cluster;
use tokio_postgres::{Client, NoTls};

use crate::check::Snapshot;
use crate::crew::Crew;
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
    pub crashes: u64,
    pub sentinels_checked: u64,
    pub proxy_cuts: u64,
    pub proxy_connections: u64,
    pub skewed_workers: u64,
    pub max_skew: f64,
    pub unexpected_exits: Vec<String>,
    pub sabotage_force_releases: u64,
}

/// SIGKILL of a worker, preferably one holding a lease; returns its name.
pub fn kill9(crew: &mut Crew, counts: &mut Counts) -> Option<String> {
    let i = crew.pick_holder()?;
    let worker = &crew.workers[i];
    if worker.holding().is_some() {
        counts.kill9_holding += 1;
    } else {
        counts.kill9_idle += 1;
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(worker.pid, libc::SIGKILL) };
    Some(worker.name.clone())
}

/// SIGSTOP of a holder, SIGCONT after `pause` (longer than any ttl): it wakes up believing
/// it still holds its lease, and its next write must be refused by the fence.
pub fn stop_cont(crew: &mut Crew, pause: Duration, counts: &mut Counts) {
    let Some(i) = crew.pick_holder() else { return };
    let pid = crew.workers[i].pid;
    counts.stop_cont += 1;
    counts.paused_leases.extend(crew.workers[i].holding());
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::spawn(async move {
        tokio::time::sleep(pause).await;
        // SAFETY: kill(2). If the worker was killed and reaped meanwhile and its pid reused,
        // SIGCONT to a process that is not stopped does nothing.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
}

/// pg_terminate_backend of up to `n` random worker backends (dlock's and the resource's).
pub async fn terminate(admin: &Client, n: i64, counts: &mut Counts) {
    let terminated = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM \
               (SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'chaos-%' \
                 ORDER BY random() LIMIT $1) s",
            &[&n],
        )
        .await;
    if let Ok(row) = terminated {
        counts.terminate_rounds += 1;
        counts.terminated_backends += row.get::<_, i64>(0) as u64;
    }
}

/// Sabotage (self-test only): frees `key` whoever holds it, before its lease ends.
pub async fn force_release(admin: &Client, key: &str, counts: &mut Counts) {
    if let Ok(row) = admin.query_one("SELECT dlock_force_release($1)", &[&key]).await
        && row.get::<_, bool>(0)
    {
        counts.sabotage_force_releases += 1;
    }
}

/// Opens an admin session on the `postgres` database, directly (not through the proxy).
pub async fn admin(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) =
        tokio_postgres::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"), NoTls)
            .await?;
    tokio::spawn(connection);
    Ok(client)
}

/// `pg_ctl stop -m immediate` and a restart. Before it, takes sentinel leases: one with a long
/// ttl, one short one renewed to a long ttl, and a session-bound one. After it, reads every live
/// lease (for the checker) and checks the sentinels: the TTL ones still held by their owner with
/// their fence, refused to others, released by their owner, the next fence larger; the
/// session-bound one gone with its crashed session. Returns the snapshot, a fresh admin session
/// and any violations.
pub async fn crash(
    cluster: &Arc<Cluster>,
    admin: &Client,
    round: u64,
    counts: &mut Counts,
) -> Result<(Snapshot, Client, Vec<String>), tokio_postgres::Error> {
    let sentinel = |what: &str| (format!("sentinel/{round}/{what}"), format!("runner:{round}:{what}"));
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
    let bound_session = self::admin(cluster.port()).await?;
    let (bound_key, bound_owner) = sentinel("session");
    bound_session.query_one("SELECT dlock_acquire($1, $2, NULL)", &[&bound_key, &bound_owner]).await?;

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
    let leases: Vec<(String, String, i64)> = admin
        .query("SELECT key, owner, fence FROM dlock_locks", &[])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let read_at: f64 = admin.query_one(resource::SERVER_NOW, &[]).await?.get(0);
    let read_local =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let mut violations = Vec::new();
    for (key, owner, fence) in &durable {
        counts.sentinels_checked += 1;
        if !leases.iter().any(|(k, o, f)| k == key && o == owner && f == fence) {
            violations
                .push(format!("crash {round}: sentinel {key} (fence {fence}, {owner}) lost in the crash"));
        }
        let intruder: Option<i64> = admin
            .query_one("SELECT dlock_acquire($1, 'intruder', interval '1 second')", &[key])
            .await?
            .get(0);
        if intruder.is_some() {
            violations
                .push(format!("crash {round}: sentinel {key} granted to another owner after the restart"));
        }
        let released: bool = admin.query_one("SELECT dlock_release($1, $2)", &[key, owner]).await?.get(0);
        if !released {
            violations.push(format!("crash {round}: sentinel {key}: its owner's release answered false"));
        }
        let next: Option<i64> =
            admin.query_one("SELECT dlock_acquire($1, 'next', interval '1 second')", &[key]).await?.get(0);
        if next.is_none_or(|next| next <= *fence) {
            violations.push(format!("crash {round}: sentinel {key}: next fence {next:?} not above {fence}"));
        }
        admin.query_one("SELECT dlock_release($1, 'next')", &[key]).await?;
    }
    counts.sentinels_checked += 1;
    if leases.iter().any(|(k, _, _)| *k == bound_key) {
        violations
            .push(format!("crash {round}: session-bound sentinel {bound_key} outlived its crashed session"));
    }
    let next: Option<i64> =
        admin.query_one("SELECT dlock_acquire($1, 'next', interval '1 second')", &[&bound_key]).await?.get(0);
    if next.is_none() {
        violations
            .push(format!("crash {round}: session-bound sentinel {bound_key} still busy after the restart"));
    }
    Ok((Snapshot { crash_at, read_at, read_local, leases }, admin, violations))
}
