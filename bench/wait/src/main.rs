//! `bench-wait`: how fast dlock hands a key to a parked waiter, and what parked waiters cost,
//! against `pg_advisory_lock` (the floor inside PostgreSQL) and a Redisson-style Redis lock,
//! all in one run. `bench/wait.sh` starts the servers and runs this; see `--help`.

mod cpu;
mod handoff;
mod lock;
mod measure;
mod pg;
mod proc_stat;
mod redis_peer;
mod report;

use std::path::PathBuf;

use clap::Parser;

use measure::Cluster;
use pg::Endpoint;
use redis_peer::RedisSession;
use report::{Results, Targets};

/// Any error of the benchmark: it reports and stops.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// The result of a benchmark step.
pub type Result<T> = std::result::Result<T, Error>;

/// The cluster that loads dlock on demand (`CREATE EXTENSION` only, as the README installs it).
pub const ON_DEMAND: &str = "on demand";
/// The cluster with `shared_preload_libraries = 'dlock'`.
const PRELOADED: &str = "preloaded";
/// The cluster column of the Redis rows.
const NO_CLUSTER: &str = "—";
const DLOCK: &str = "dlock";
const DLOCK_NO_FLUSH: &str = "dlock, synchronous_commit off";
const ADVISORY: &str = "pg_advisory_lock";
const REDIS: &str = "redis pub/sub";

/// Hand-off latency and parked-waiter CPU of dlock, advisory locks and a Redis lock.
#[derive(Parser)]
struct Args {
    /// Host of the PostgreSQL clusters and of Redis.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port of the cluster that loads dlock on demand (CREATE EXTENSION, no preload).
    #[arg(long)]
    pg_port: u16,
    /// Port of a cluster with shared_preload_libraries = 'dlock' (dlock measured on it too).
    #[arg(long)]
    preload_port: Option<u16>,
    /// Port of a Redis server (the Redis peer is left out without it).
    #[arg(long)]
    redis_port: Option<u16>,
    /// Hand-offs with one waiter, per contender.
    #[arg(long, default_value_t = 500)]
    handoffs: usize,
    /// Rounds the hand-offs are split into, the contenders interleaved.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Hand-offs per contender before measuring (not recorded).
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Waiters in line behind the holder in a chain.
    #[arg(long, default_value_t = 100)]
    chain_len: usize,
    /// Chains per contender (one more runs first, unrecorded, as a warm-up).
    #[arg(long, default_value_t = 5)]
    chains: usize,
    /// Parked waiters in the CPU scenarios.
    #[arg(long, default_value_t = 200)]
    cpu_waiters: usize,
    /// CPU window of the dlock scenarios (s).
    #[arg(long, default_value_t = 30.0)]
    cpu_seconds: f64,
    /// CPU window of the idle baseline and the advisory-lock scenarios (s).
    #[arg(long, default_value_t = 15.0)]
    cpu_peer_seconds: f64,
    /// Pause between "all waiters parked" and the CPU window (s): past deadlock_timeout (1 s),
    /// when each lock-manager waiter runs its one deadlock check.
    #[arg(long, default_value_t = 2.0)]
    settle_seconds: f64,
    /// Directory for results.json and results.md.
    #[arg(long)]
    out: PathBuf,
    /// Name of the run (a timestamp).
    #[arg(long, default_value = "")]
    stamp: String,
}

fn ratio_note(what: &str, a: f64, b: f64) -> String {
    format!("{what}: preloaded / on demand = {:.2}", a / b.max(1e-9))
}

/// Notes under the tables: how the peers work, and anything a reader should know.
fn notes(results: &Results) -> Vec<String> {
    let mut notes = vec![
        format!(
            "{REDIS}: Redisson-style. Lease `SET key owner NX PX 30000`; release a Lua script that \
             DELs only if the owner matches and then PUBLISHes on `<key>:released`; a waiter \
             SUBSCRIBEs, tries SET NX, and tries again on every message (unsubscribing once \
             granted). Every waiter hears every release, so a line of waiters races for each \
             release (no arrival order). No persistence (`--save '' --appendonly no`)."
        ),
        format!(
            "{DLOCK_NO_FLUSH}: the same dlock hand-off with both sessions at synchronous_commit = \
             off, so the waiter's grant does not wait for its WAL flush: the hand-off mechanism \
             without durability. dlock's grants are durable by default (one WAL flush each); \
             advisory locks and this Redis write nothing durable."
        ),
        format!(
            "{ADVISORY}: session-level `pg_advisory_lock`/`pg_advisory_unlock` — no lease, no \
             WAL, the connection pinned while held: the floor inside PostgreSQL, not a peer."
        ),
        "CPU: a dlock waiter at the head of a key's queue sleeps on its latch (wait_event \
         Extension); the others queue in the lock manager (wait_event Lock), as advisory waiters \
         do. Wake-ups/s are the context switches of all the cluster's processes per second."
            .to_string(),
    ];
    for (what, rows) in [("hand-off p50", &results.handoff), ("chain hop p50", &results.chain)] {
        let of = |cluster: &str| rows.iter().find(|r| r.contender == DLOCK && r.cluster == cluster);
        if let (Some(p), Some(o)) = (of(PRELOADED), of(ON_DEMAND)) {
            notes.push(ratio_note(
                &format!("dlock {what}"),
                p.summary.after_return.p50_us,
                o.summary.after_return.p50_us,
            ));
        }
    }
    notes
}

/// The first three fields of /proc/loadavg.
fn load_average() -> String {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

async fn run(args: &Args) -> Result<()> {
    let pool = args.cpu_waiters.max(args.chain_len);
    let endpoint = |port| Endpoint { host: args.host.clone(), port };
    let mut clusters = vec![Cluster::connect(ON_DEMAND, endpoint(args.pg_port), pool).await?];
    if let Some(port) = args.preload_port {
        clusters.push(Cluster::connect(PRELOADED, endpoint(port), pool).await?);
    }
    let mut environment = vec![
        ("PostgreSQL".to_string(), clusters[0].show("server_version").await?),
        ("CPUs".to_string(), std::thread::available_parallelism().map_or(0, |n| n.get()).to_string()),
        (
            "kernel".to_string(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
        ),
    ];
    for c in &clusters {
        let mut settings = Vec::new();
        for s in ["fsync", "synchronous_commit", "max_connections", "shared_preload_libraries"] {
            settings.push(format!("{s} = '{}'", c.show(s).await?));
        }
        environment.push((format!("cluster {}", c.label), settings.join(", ")));
    }
    if let Some(port) = args.redis_port {
        let version = RedisSession::connect(&args.host, port, 0).await?.server_version().await?;
        environment.push(("Redis".to_string(), format!("{version}, no persistence")));
    }
    environment.push((
        "method".to_string(),
        format!(
            "clients tokio-postgres and redis-rs over TCP on 127.0.0.1 (TCP_NODELAY), one round trip \
             per call; hand-offs: {} per contender in {} interleaved rounds after {} unrecorded; \
             chains: {} of {} waiters per contender after 1 unrecorded; CPU: {} waiters, windows of \
             {} s (dlock) and {} s (others), starting {} s after the last waiter parked",
            args.handoffs,
            args.rounds,
            args.warmup,
            args.chains,
            args.chain_len,
            args.cpu_waiters,
            args.cpu_seconds,
            args.cpu_peer_seconds,
            args.settle_seconds
        ),
    ));

    let load_before = load_average();
    let handoff = measure::handoffs(args, &clusters).await?;
    let chain = measure::chains(args, &clusters).await?;
    let cpu = measure::cpu(args, &clusters).await?;
    environment.push((
        "load average (1, 5, 15 min), before and after (other work on the machine disturbs latency)"
            .to_string(),
        format!("{load_before}; {}", load_average()),
    ));
    let ratios = report::ratios(&handoff, &chain, &[ADVISORY, REDIS]);
    let mut results = Results {
        stamp: args.stamp.clone(),
        environment,
        targets: Targets { p50_us: 200.0, p99_us: 2000.0, cpu_percent: 1.0 },
        handoff,
        chain,
        cpu,
        ratios,
        notes: Vec::new(),
    };
    let mut notes = notes(&results);
    let of = |cluster: &str, keys: usize| {
        results.cpu.iter().find(|r| r.contender == DLOCK && r.cluster == cluster && r.keys == keys)
    };
    for keys in [args.cpu_waiters, 1] {
        if let (Some(p), Some(o)) = (of(PRELOADED, keys), of(ON_DEMAND, keys)) {
            notes.push(format!(
                "dlock CPU, {} waiters on {keys} key(s): {:.2} % (schedstat {:.2} %) preloaded, \
                 {:.2} % ({:.2} %) on demand",
                args.cpu_waiters,
                p.window.cpu_percent,
                p.window.cpu_percent_schedstat,
                o.window.cpu_percent,
                o.window.cpu_percent_schedstat
            ));
        }
    }
    if let (Some(one), Some(own)) = (of(ON_DEMAND, 1), of(ON_DEMAND, args.cpu_waiters))
        && args.cpu_waiters > 1
    {
        let queued = (args.cpu_waiters - 1) as f64;
        let per_waiter = (one.window.wakeups_per_second - own.window.wakeups_per_second) / queued;
        let cpu_per_waiter =
            (one.window.cpu_percent_schedstat - own.window.cpu_percent_schedstat).max(0.0) / queued;
        notes.push(format!(
            "dlock, all waiters on one key against one key each: {per_waiter:.2} more wake-ups/s \
             and {cpu_per_waiter:.4} % more of a core per waiter queued behind the head \
             (schedstat): the cost of a queued waiter, which sleeps in the lock manager."
        ));
    }
    results.notes = notes;
    let markdown = report::markdown(&results);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    std::fs::write(args.out.join("results.md"), &markdown)?;
    print!("{markdown}");
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-wait: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
