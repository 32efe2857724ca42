//! What parked waiters cost the server: the CPU time of every process of the cluster (the
//! postmaster and all its children) over a window, from `/proc`: `utime + stime` of
//! `/proc/<pid>/stat` (clock ticks, the figure the targets are stated in) and, as an exact
//! cross-check, the run time of `/proc/<pid>/schedstat` (ns); plus context switches, i.e. how
//! often the processes woke.

use std::collections::HashMap;
use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Result;
use crate::lock::Locker;
use crate::pg::{Observer, PgSession};
use crate::proc_stat::stat_fields;

/// CPU use of one process so far.
#[derive(Clone, Copy, Default)]
struct Usage {
    ticks: u64,
    run_ns: u64,
    switches: u64,
}

fn usage(pid: i32) -> Option<Usage> {
    let fields = stat_fields(pid)?;
    // utime and stime are fields 14 and 15; `fields` starts at field 3.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let run_ns = fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let switches = status
        .lines()
        .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Some(Usage { ticks, run_ns, switches })
}

/// Usage of the postmaster and each of its children, by pid.
fn snapshot(postmaster: i32) -> Result<HashMap<i32, Usage>> {
    let mut all = HashMap::new();
    for entry in fs::read_dir("/proc")? {
        let Some(pid) = entry?.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let family = pid == postmaster || stat_fields(pid).is_some_and(|f| f[1] == postmaster.to_string());
        if family && let Some(u) = usage(pid) {
            all.insert(pid, u);
        }
    }
    Ok(all)
}

/// The CPU use of a cluster's processes over one window.
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    /// Processes alive at both ends of the window (the ones counted).
    pub processes: usize,
    pub seconds: f64,
    /// `utime + stime` over the window, as a percentage of one core.
    pub cpu_percent: f64,
    /// Run time from schedstat over the window, as a percentage of one core.
    pub cpu_percent_schedstat: f64,
    /// Context switches per second, all processes together: how often they woke.
    pub wakeups_per_second: f64,
}

/// Measures the cluster of `postmaster` for `seconds`, sleeping meanwhile.
pub async fn window(postmaster: i32, seconds: f64) -> Result<Window> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let before = snapshot(postmaster)?;
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let after = snapshot(postmaster)?;
    let wall = start.elapsed().as_secs_f64();
    let (mut processes, mut delta) = (0, Usage::default());
    for (pid, a) in &after {
        if let Some(b) = before.get(pid) {
            processes += 1;
            delta.ticks += a.ticks.saturating_sub(b.ticks);
            delta.run_ns += a.run_ns.saturating_sub(b.run_ns);
            delta.switches += a.switches.saturating_sub(b.switches);
        }
    }
    Ok(Window {
        processes,
        seconds: wall,
        cpu_percent: 100.0 * delta.ticks as f64 / ticks_per_second / wall,
        cpu_percent_schedstat: 100.0 * delta.run_ns as f64 / 1e9 / wall,
        wakeups_per_second: delta.switches as f64 / wall,
    })
}

/// What the waiters of a CPU scenario wait with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiters {
    /// Nobody waits: the connected sessions sit idle (the baseline).
    None,
    Dlock,
    Advisory,
}

/// Parks one waiter per session of `pool` on keys held by `holder` — each on a key of its own
/// (`distinct`) or all on one — waits `settle`, measures a window of `seconds`, checks that
/// every waiter is still parked as before, then cancels them and frees the keys.
pub async fn parked_waiters(
    observer: &Observer,
    holder: &Arc<PgSession>,
    pool: &[Arc<PgSession>],
    waiters: Waiters,
    distinct: bool,
    settle: Duration,
    seconds: f64,
) -> Result<Window> {
    let postmaster = observer.postmaster_pid()?;
    if waiters == Waiters::None {
        tokio::time::sleep(settle).await;
        return window(postmaster, seconds).await;
    }
    let n = pool.len();
    let keys = if distinct { n } else { 1 };
    let holder_owner = holder.owner().to_string();
    let client = holder.client();
    match waiters {
        Waiters::Dlock => {
            let taken: i64 = client
                .query_one(
                    "SELECT count(dlock_acquire('bench-wait:cpu:' || i, $1, '10 minutes')) \
                       FROM generate_series(1, $2::int4) AS i",
                    &[&holder_owner, &(keys as i32)],
                )
                .await?
                .get(0);
            if taken != keys as i64 {
                return Err(format!("the holder took {taken} of {keys} keys").into());
            }
        }
        _ => {
            client
                .execute(
                    "SELECT pg_advisory_lock(i) FROM generate_series(1, $1::int8) AS i",
                    &[&(keys as i64)],
                )
                .await?;
        }
    }
    // Long enough to outlast settle + window: nobody may time out inside the window.
    let wait = format!("{} seconds", (settle.as_secs_f64() + seconds) as u64 + 120);
    let mut tasks = Vec::with_capacity(n);
    for (i, session) in pool.iter().enumerate() {
        let (session, wait) = (Arc::clone(session), wait.clone());
        let id = if distinct { i as i64 + 1 } else { 1 };
        tasks.push(tokio::spawn(async move {
            match waiters {
                Waiters::Dlock => {
                    session.dlock_wait_long(&format!("bench-wait:cpu:{id}"), &wait).await.map(|f| f.is_some())
                }
                _ => session.advisory_lock(id).await.map(|()| true),
            }
        }));
    }
    let pids: Vec<i32> = pool.iter().map(|s| s.pid()).collect();
    let kind = match waiters {
        Waiters::Dlock => Locker::Dlock(Arc::clone(holder)),
        _ => Locker::Advisory(Arc::clone(holder)),
    };
    let parked = kind.parked_as(n, keys);
    observer.until_parked(&pids, parked, Duration::from_secs(60)).await?;
    tokio::time::sleep(settle).await;
    let measured = window(postmaster, seconds).await?;
    let still = observer.parked(&pids).await?;
    observer.cancel(&pids).await?;
    let mut granted = 0;
    for task in tasks {
        match task.await? {
            Ok(true) => granted += 1,
            Ok(false) => {}
            Err(e) if is_cancel(&e) => {}
            Err(e) => return Err(e),
        }
    }
    match waiters {
        Waiters::Dlock => {
            client.execute("SELECT dlock_release_all($1)", &[&holder_owner]).await?;
            let left: i64 = client.query_one("SELECT count(*) FROM dlock_locks", &[]).await?.get(0);
            if left != 0 {
                return Err(format!("{left} leases left after a CPU scenario").into());
            }
        }
        _ => {
            client.execute("SELECT pg_advisory_unlock_all()", &[]).await?;
        }
    }
    if still != parked || granted != 0 {
        return Err(format!(
            "waiters moved during the window: parked {parked:?} before, {still:?} after, {granted} granted"
        )
        .into());
    }
    Ok(measured)
}

/// Whether `e` is the 57014 (query_canceled) of a cancelled wait.
fn is_cancel(e: &crate::Error) -> bool {
    e.downcast_ref::<tokio_postgres::Error>()
        .and_then(|e| e.code())
        .is_some_and(|c| *c == tokio_postgres::error::SqlState::QUERY_CANCELED)
}
