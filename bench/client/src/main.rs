//! `bench-client`: what the dlock client adds to an acquire+release pair, against the same two
//! statements sent through raw tokio-postgres, in one run on one cluster. `bench/client.sh`
//! starts the cluster and runs this; see `--help`.
//!
//! Contenders, each taking and releasing a fresh key per pair (key per task and iteration):
//! - the dlock client (`Client::connect`, its pool of 16): `try_acquire` with a 30 s ttl, then
//!   `Guard::release`, with the watchdog off (a fixed lease) and on (the default user path);
//! - raw tokio-postgres: `SELECT dlock_acquire($1,$2,'30 seconds'::interval)` and
//!   `SELECT dlock_release($1,$2)`, through a deadpool pool of 16 (`prepare_cached`, a
//!   connection taken from the pool per statement, as the client does: pool against pool), and
//!   on one connection per task with both statements prepared once (the floor).
//!
//! The contenders run in interleaved rounds (their order rotating each round) at each task
//! count; the tables give medians over the rounds, and the client's overhead is the median of
//! its per-round overhead against raw pool in the same round.

mod handoff;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_common::latency::histogram;
use bench_common::markdown::Table;
use clap::Parser;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dlock_client::Client;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio_postgres::{NoTls, Statement};

/// Any error of the benchmark: it reports and stops.
type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const ACQUIRE: &str = "SELECT dlock_acquire($1, $2, '30 seconds'::interval)";
const RELEASE: &str = "SELECT dlock_release($1, $2)";
/// The client's own acquire statement (a copy of `ACQUIRE` in clients/rust/src/statements/mod.rs, which is
/// private), for the contender that sends exactly what the client sends.
const CLIENT_ACQUIRE: &str = "\
SELECT dlock_acquire($1::text, $2::text, $3::float8 * interval '1 second', $4::float8 * interval '1 second'), \
       pg_catalog.clock_timestamp(), pg_catalog.statement_timestamp()";
/// The client's own release statement (clients/rust/src/statements/mod.rs).
const CLIENT_RELEASE: &str = "SELECT dlock_release($1::text, $2::text)";
const TTL: Duration = Duration::from_secs(30);
const POOL_SIZE: usize = 16;
/// The client's overhead against raw tokio-postgres (pool against pool) that issue 5 allows.
const TARGET_OVERHEAD_PERCENT: f64 = 10.0;

/// The dlock client's acquire+release overhead against raw tokio-postgres.
#[derive(Parser)]
struct Args {
    /// Host of the PostgreSQL cluster (dlock installed in database postgres, user postgres).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port of the PostgreSQL cluster.
    #[arg(long)]
    port: u16,
    /// Concurrent tasks, one measurement series each.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    tasks: Vec<usize>,
    /// Rounds per task count; every contender runs once per round.
    #[arg(long, default_value_t = 8)]
    rounds: usize,
    /// Length of one contender's run in a round (s): short, so that the rounds are many and the
    /// contenders compared within a round run close together in time (the WAL flush drifts).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Unrecorded run of each contender before the rounds of a task count (s).
    #[arg(long, default_value_t = 0.5)]
    warmup_seconds: f64,
    /// Hand-offs to one waiting acquire measured per wait mode (0: skip).
    #[arg(long, default_value_t = 200)]
    handoff_samples: usize,
    /// Waiters of the crowd hand-off run (0: skip), spread over `--crowd-keys` keys.
    #[arg(long, default_value_t = 1000)]
    crowd_waiters: usize,
    /// Keys of the crowd hand-off run.
    #[arg(long, default_value_t = 100)]
    crowd_keys: usize,
    /// Directory for results.json and results.md.
    #[arg(long)]
    out: PathBuf,
    /// Name of the run (a timestamp).
    #[arg(long, default_value = "")]
    stamp: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    ClientFixed,
    ClientWatchdog,
    RawPool,
    RawConnection,
    RawPoolClientSql,
}

const CONTENDERS: [Contender; 5] = [
    Contender::ClientFixed,
    Contender::ClientWatchdog,
    Contender::RawPool,
    Contender::RawConnection,
    Contender::RawPoolClientSql,
];

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::ClientFixed => "dlock client, watchdog off",
            Contender::ClientWatchdog => "dlock client, watchdog on",
            Contender::RawPool => "raw tokio-postgres, pool of 16",
            Contender::RawConnection => "raw tokio-postgres, 1 connection per task",
            Contender::RawPoolClientSql => "raw tokio-postgres, pool of 16, the client's SQL and owner",
        }
    }
}

/// One connection with both statements prepared.
struct RawConnection {
    client: tokio_postgres::Client,
    acquire: Statement,
    release: Statement,
}

/// Everything the contenders run on, set up once.
struct Setup {
    client: Client,
    pool: Pool,
    connections: Vec<Arc<RawConnection>>,
}

fn pg_config(args: &Args) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&args.host)
        .port(args.port)
        .user("postgres")
        .dbname("postgres")
        .application_name("bench-client");
    config
}

impl Setup {
    async fn new(args: &Args) -> Result<Setup> {
        let url = format!("host={} port={} user=postgres dbname=postgres", args.host, args.port);
        let client = Client::connect(&url).await?;
        // The same pool as the client's own: deadpool, fast recycling, 16 connections, no TLS.
        let manager = Manager::from_config(
            pg_config(args),
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager).max_size(POOL_SIZE).build()?;
        let mut connections = Vec::new();
        for _ in 0..args.tasks.iter().copied().max().unwrap_or(1) {
            let (client, connection) = pg_config(args).connect(NoTls).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let acquire = client.prepare(ACQUIRE).await?;
            let release = client.prepare(RELEASE).await?;
            connections.push(Arc::new(RawConnection { client, acquire, release }));
        }
        Ok(Setup { client, pool, connections })
    }

    async fn show(&self, setting: &str) -> Result<String> {
        let connection = self.pool.get().await?;
        Ok(connection.query_one(&format!("SHOW {setting}"), &[]).await?.get(0))
    }
}

/// One contender's run: pairs done and their latencies.
struct Sample {
    pairs: u64,
    elapsed: Duration,
    latencies: Histogram<u64>,
}

/// One acquire+release pair of `contender` on `key`.
async fn pair(contender: Contender, setup: &Setup, task: usize, key: String, owner: &str) -> Result<()> {
    match contender {
        Contender::ClientFixed | Contender::ClientWatchdog => {
            let guard = setup
                .client
                .lock(key)
                .ttl(TTL)
                .watchdog(contender == Contender::ClientWatchdog)
                .try_acquire()
                .await?
                .expect("a fresh key is free");
            if !guard.release().await? {
                return Err("the client's lease was no longer ours at release".into());
            }
        }
        Contender::RawPool => {
            let fence: Option<i64> = {
                let connection = setup.pool.get().await?;
                let statement = connection.prepare_cached(ACQUIRE).await?;
                connection.query_one(&statement, &[&key, &owner]).await?.get(0)
            };
            fence.expect("a fresh key is free");
            let connection = setup.pool.get().await?;
            let statement = connection.prepare_cached(RELEASE).await?;
            let released: bool = connection.query_one(&statement, &[&key, &owner]).await?.get(0);
            if !released {
                return Err("a raw lease was no longer ours at release".into());
            }
        }
        Contender::RawPoolClientSql => {
            // Byte for byte what the client sends: its statements, its one owner for all tasks.
            let owner = setup.client.owner();
            let ttl = Some(TTL.as_secs_f64());
            let wait = Some(0.0f64);
            let fence: Option<i64> = {
                let connection = setup.pool.get().await?;
                let statement = connection.prepare_cached(CLIENT_ACQUIRE).await?;
                connection.query_one(&statement, &[&key, &owner, &ttl, &wait]).await?.get(0)
            };
            fence.expect("a fresh key is free");
            let connection = setup.pool.get().await?;
            let statement = connection.prepare_cached(CLIENT_RELEASE).await?;
            let released: bool = connection.query_one(&statement, &[&key, &owner]).await?.get(0);
            if !released {
                return Err("a raw lease was no longer ours at release".into());
            }
        }
        Contender::RawConnection => {
            let c = &setup.connections[task];
            let fence: Option<i64> = c.client.query_one(&c.acquire, &[&key, &owner]).await?.get(0);
            fence.expect("a fresh key is free");
            let released: bool = c.client.query_one(&c.release, &[&key, &owner]).await?.get(0);
            if !released {
                return Err("a raw lease was no longer ours at release".into());
            }
        }
    }
    Ok(())
}

/// Runs `contender` with `tasks` concurrent tasks for `seconds`, each doing pairs back to back
/// on keys of their own (`prefix:task:i`).
async fn run_contender(
    setup: &Arc<Setup>,
    contender: Contender,
    tasks: usize,
    seconds: f64,
    prefix: String,
) -> Result<Sample> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let setup = Arc::clone(setup);
        let prefix = prefix.clone();
        handles.push(tokio::spawn(async move {
            let owner = format!("bench-client:{}:{task}", std::process::id());
            let mut latencies = histogram();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let key = format!("{prefix}:{task}:{i}");
                let t0 = Instant::now();
                pair(contender, &setup, task, key, &owner).await?;
                latencies.saturating_record(t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
                i += 1;
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let mut latencies = histogram();
    for handle in handles {
        latencies.add(handle.await??)?;
    }
    Ok(Sample { pairs: latencies.len(), elapsed: start.elapsed(), latencies })
}

/// One round's figures of a contender.
#[derive(Clone, Debug, Serialize)]
struct Round {
    pairs: u64,
    seconds: f64,
    pairs_per_second: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

impl From<&Sample> for Round {
    fn from(s: &Sample) -> Round {
        let us = |ns: u64| ns as f64 / 1000.0;
        Round {
            pairs: s.pairs,
            seconds: s.elapsed.as_secs_f64(),
            pairs_per_second: s.pairs as f64 / s.elapsed.as_secs_f64(),
            p50_us: us(s.latencies.value_at_quantile(0.50)),
            p99_us: us(s.latencies.value_at_quantile(0.99)),
            max_us: us(s.latencies.max()),
        }
    }
}

/// A contender at a task count: its rounds and their medians.
#[derive(Clone, Debug, Serialize)]
struct Row {
    tasks: usize,
    contender: &'static str,
    pairs_per_second: f64,
    p50_us: f64,
    p99_us: f64,
    rounds: Vec<Round>,
}

/// The client's overhead against raw tokio-postgres at a task count.
#[derive(Clone, Debug, Serialize)]
struct Overhead {
    tasks: usize,
    client: &'static str,
    baseline: &'static str,
    /// Median over the rounds of (baseline pairs/s ÷ client pairs/s − 1) × 100: the extra time
    /// per pair, compared within a round.
    percent: f64,
    per_round_percent: Vec<f64>,
    /// (client p50 ÷ baseline p50 − 1) × 100, of the medians.
    p50_percent: f64,
    target_percent: Option<f64>,
    meets_target: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Results {
    stamp: String,
    environment: Vec<(String, String)>,
    rows: Vec<Row>,
    overhead: Vec<Overhead>,
    handoff: Vec<handoff::HandoffRow>,
    notes: Vec<String>,
}

fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn overhead(
    rows: &[Row],
    tasks: usize,
    client: Contender,
    baseline: Contender,
    target: bool,
) -> Option<Overhead> {
    let of = |c: Contender| rows.iter().find(|r| r.tasks == tasks && r.contender == c.label());
    let (c, b) = (of(client)?, of(baseline)?);
    let per_round: Vec<f64> = c
        .rounds
        .iter()
        .zip(&b.rounds)
        .map(|(c, b)| (b.pairs_per_second / c.pairs_per_second - 1.0) * 100.0)
        .collect();
    let percent = median(per_round.iter().copied());
    Some(Overhead {
        tasks,
        client: client.label(),
        baseline: baseline.label(),
        percent,
        per_round_percent: per_round,
        p50_percent: (c.p50_us / b.p50_us - 1.0) * 100.0,
        target_percent: target.then_some(TARGET_OVERHEAD_PERCENT),
        meets_target: target.then_some(percent <= TARGET_OVERHEAD_PERCENT),
    })
}

fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn markdown(results: &Results) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# bench-client {}\n", results.stamp);
    for (k, v) in &results.environment {
        let _ = writeln!(md, "- {k}: {v}");
    }
    let _ = writeln!(md, "\n## Acquire+release pairs, fresh key each (median over the rounds)\n");
    let _ = writeln!(md, "| tasks | contender | pairs/s | p50 µs | p99 µs | pairs/s by round |");
    let _ = writeln!(md, "|---:|---|---:|---:|---:|---|");
    for r in &results.rows {
        let by_round: Vec<String> = r.rounds.iter().map(|x| thousands(x.pairs_per_second)).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} | {:.0} | {} |",
            r.tasks,
            r.contender,
            thousands(r.pairs_per_second),
            r.p50_us,
            r.p99_us,
            by_round.join(" / ")
        );
    }
    let _ = writeln!(
        md,
        "\n## Client overhead against raw tokio-postgres (extra time per pair; target ≤ {TARGET_OVERHEAD_PERCENT:.0} % pool vs pool)\n"
    );
    let _ =
        writeln!(md, "| tasks | client | against | overhead (median) | by round | p50 overhead | target |");
    let _ = writeln!(md, "|---:|---|---|---:|---|---:|---|");
    for o in &results.overhead {
        let by_round: Vec<String> = o.per_round_percent.iter().map(|p| format!("{p:+.1}")).collect();
        let target = match o.meets_target {
            Some(true) => format!("≤ {TARGET_OVERHEAD_PERCENT:.0} %: met"),
            Some(false) => format!("≤ {TARGET_OVERHEAD_PERCENT:.0} %: **missed**"),
            None => "(reference)".to_string(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:+.1} % | {} | {:+.1} % | {} |",
            o.tasks,
            o.client,
            o.baseline,
            o.percent,
            by_round.join(" / "),
            o.p50_percent,
            target
        );
    }
    if !results.handoff.is_empty() {
        let _ = writeln!(
            md,
            "\n## Hand-off to waiting acquires: from the release returning to the grant returning\n"
        );
        let mut table = Table::new(&[
            "scenario",
            ">samples",
            ">p50 µs",
            ">p99 µs",
            ">max µs",
            ">connections at most",
            ">total s",
        ]);
        for h in &results.handoff {
            table.row(&[
                h.scenario.to_string(),
                h.samples.to_string(),
                format!("{:.0}", h.p50_us),
                format!("{:.0}", h.p99_us),
                format!("{:.0}", h.max_us),
                h.connections.map_or("—".to_string(), |c| c.to_string()),
                h.elapsed_s.map_or("—".to_string(), |e| format!("{e:.2}")),
            ]);
        }
        md.push_str(table.render());
    }
    if !results.notes.is_empty() {
        let _ = writeln!(md, "\n## Notes\n");
        for n in &results.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

fn load_average() -> String {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

async fn run(args: &Args) -> Result<()> {
    if args.rounds == 0 || args.tasks.is_empty() || args.tasks.contains(&0) {
        return Err("--rounds and every --tasks must be at least 1".into());
    }
    let setup = Arc::new(Setup::new(args).await?);
    let mut environment = vec![
        ("PostgreSQL".to_string(), setup.show("server_version").await?),
        ("CPUs".to_string(), std::thread::available_parallelism().map_or(0, |n| n.get()).to_string()),
    ];
    let mut settings = Vec::new();
    for s in ["fsync", "synchronous_commit", "full_page_writes"] {
        settings.push(format!("{s} = '{}'", setup.show(s).await?));
    }
    environment.push(("cluster".to_string(), settings.join(", ")));
    environment.push((
        "method".to_string(),
        format!(
            "tokio-postgres over TCP on {}, one process; per task count, {} s unrecorded per \
             contender, then {} rounds of {} s per contender, interleaved (order rotating)",
            args.host, args.warmup_seconds, args.rounds, args.seconds
        ),
    ));
    let load_before = load_average();
    let run_id = std::process::id();
    let mut rows = Vec::new();
    for &tasks in &args.tasks {
        for (i, &c) in CONTENDERS.iter().enumerate() {
            let prefix = format!("bench-client:{run_id}:warmup:{tasks}:{i}");
            run_contender(&setup, c, tasks, args.warmup_seconds, prefix).await?;
        }
        let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); CONTENDERS.len()];
        for round in 0..args.rounds {
            for k in 0..CONTENDERS.len() {
                let i = (k + round) % CONTENDERS.len();
                let c = CONTENDERS[i];
                let prefix = format!("bench-client:{run_id}:{tasks}:{round}:{i}");
                let sample = run_contender(&setup, c, tasks, args.seconds, prefix).await?;
                let r = Round::from(&sample);
                eprintln!(
                    "bench-client: {tasks} task(s), round {}, {}: {} pairs/s, p50 {:.0} µs",
                    round + 1,
                    c.label(),
                    thousands(r.pairs_per_second),
                    r.p50_us
                );
                rounds[i].push(r);
            }
        }
        for (i, &c) in CONTENDERS.iter().enumerate() {
            let r = &rounds[i];
            rows.push(Row {
                tasks,
                contender: c.label(),
                pairs_per_second: median(r.iter().map(|x| x.pairs_per_second)),
                p50_us: median(r.iter().map(|x| x.p50_us)),
                p99_us: median(r.iter().map(|x| x.p99_us)),
                rounds: r.clone(),
            });
        }
    }
    environment.push((
        "load average (1, 5, 15 min), before and after".to_string(),
        format!("{load_before}; {}", load_average()),
    ));
    let mut overheads = Vec::new();
    for &tasks in &args.tasks {
        for (client, baseline, target) in [
            (Contender::ClientFixed, Contender::RawPool, true),
            (Contender::ClientWatchdog, Contender::RawPool, true),
            (Contender::ClientFixed, Contender::RawConnection, false),
            (Contender::ClientFixed, Contender::RawPoolClientSql, false),
            (Contender::RawPoolClientSql, Contender::RawPool, false),
        ] {
            overheads.extend(overhead(&rows, tasks, client, baseline, target));
        }
    }
    let notes = vec![
        format!(
            "Every pair: a durable acquire (one WAL flush) and a release on a key of its own, owner \
             fixed per task (raw) or per client. The client's acquire statement also reads the \
             server clock and the statement's start (for the expiry and the watchdog's local \
             deadline) and passes durations as float8 seconds: `{ACQUIRE}` is \
             what raw sends."
        ),
        "Pool vs pool: raw tokio-postgres takes a connection from a deadpool pool of 16 (fast \
         recycling) for each statement and uses prepare_cached, as the client does; the row \
         against one connection per task (statements prepared once) is the floor, for reference."
            .to_string(),
        "The row with the client's SQL and owner sends byte for byte what the client sends (its \
         acquire statement, a copy of clients/rust/src/statements/mod.rs, and one owner for all tasks) through the \
         raw pool: client against it is the cost of the client's Rust code (builder, guard, \
         watchdog task); it against raw pool is the cost of the client's heavier statement and \
         shared owner."
            .to_string(),
        "Overhead = (raw pairs/s ÷ client pairs/s − 1) × 100 within each round, median over the \
         rounds: the extra time the client spends per pair."
            .to_string(),
    ];
    let url = format!("host={} port={} user=postgres dbname=postgres", args.host, args.port);
    let mut handoffs = Vec::new();
    if args.handoff_samples > 0 {
        eprintln!("bench-client: hand-off to one waiter, {} samples per mode", args.handoff_samples);
        handoffs.extend(
            handoff::one_waiter(&url, args.handoff_samples, &format!("bench-client:{run_id}")).await?,
        );
    }
    if args.crowd_waiters > 0 {
        eprintln!("bench-client: {} waiters on {} keys", args.crowd_waiters, args.crowd_keys);
        let prefix = format!("bench-client:{run_id}");
        handoffs.push(
            handoff::crowd(&url, &setup.client, args.crowd_waiters, args.crowd_keys.max(1), &prefix).await?,
        );
    }
    let results = Results {
        stamp: args.stamp.clone(),
        environment,
        rows,
        overhead: overheads,
        handoff: handoffs,
        notes,
    };
    let md = markdown(&results);
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-client: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
