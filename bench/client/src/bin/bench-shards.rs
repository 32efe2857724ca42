//! `bench-shards`: keys over several servers, in one run (`bench/shards.sh` starts three clusters
//! and runs this; see `--help`).
//!
//! Each contender takes and releases a fresh key per pair (a 30 s ttl), in interleaved rounds
//! (their order rotating each round), medians reported:
//! - the plain client on one server, and `ShardedClient` over a map of that one server: per-key
//!   latency at 1 task (what routing and the servers' map check add), and pairs/s at `--tasks`;
//! - `ShardedClient` over maps of 2 and 3 servers (clusters of their own), pairs/s at `--tasks`.
//!
//! Each map lives in databases of its own (`one`, `two`, `three` on the clusters it names), so
//! that every contender runs against its own installed map in the same rounds.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_common::latency::histogram;
use bench_common::markdown::Table;
use clap::Parser;
use dlock_client::{Applied, ApplyOptions, Client, ShardedClient, ShardsConfig, apply_shard_map};
use tokio_postgres::NoTls;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const TTL: Duration = Duration::from_secs(30);
/// The per-key latency the sharded client may add at one server (issue 33: at most 1.1×).
const TARGET_LATENCY_RATIO: f64 = 1.1;

#[derive(Parser)]
struct Args {
    /// Ports of the three clusters (127.0.0.1, user postgres).
    #[arg(long, value_delimiter = ',', required = true)]
    ports: Vec<u16>,
    /// Concurrent tasks of the throughput rounds.
    #[arg(long, default_value_t = 8)]
    tasks: usize,
    #[arg(long, default_value_t = 8)]
    rounds: usize,
    /// Length of one contender's run in a round (s).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Plain,
    Sharded(usize),
}

impl Contender {
    fn label(self) -> String {
        match self {
            Contender::Plain => "plain client, 1 server".into(),
            Contender::Sharded(1) => "sharded client, map of 1 server".into(),
            Contender::Sharded(n) => format!("sharded client, map of {n} servers"),
        }
    }
}

struct Setup {
    /// A session on each cluster, for its WAL counters.
    admins: Vec<tokio_postgres::Client>,
    plain: Client,
    /// The sharded clients over 1, 2 and 3 servers.
    sharded: Vec<ShardedClient>,
}

const DATABASES: [&str; 3] = ["one", "two", "three"];

async fn session(port: u16, db: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) =
        tokio_postgres::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname={db}"), NoTls)
            .await?;
    tokio::spawn(connection);
    Ok(client)
}

fn url(port: u16, db: &str) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname={db} sslmode=disable")
}

impl Setup {
    async fn new(args: &Args) -> Result<Setup> {
        let mut sharded = Vec::new();
        for (n, db) in DATABASES.iter().enumerate() {
            let servers = n + 1;
            for &port in &args.ports[..servers] {
                let admin = session(port, "postgres").await?;
                admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).await?;
                admin.batch_execute(&format!("CREATE DATABASE {db}")).await?;
                session(port, db).await?.batch_execute("CREATE EXTENSION dlock").await?;
            }
            let config = ShardsConfig::new(
                1,
                args.ports[..servers]
                    .iter()
                    .enumerate()
                    .map(|(i, &port)| (format!("s{}", i + 1), url(port, db))),
            )?;
            match apply_shard_map(&config, None, &ApplyOptions::default(), |_| {}).await? {
                Applied::Complete { .. } => {}
                pending => return Err(format!("map of {servers} not applied: {pending:?}").into()),
            }
            sharded.push(ShardedClient::connect(&config).await?);
        }
        let plain = Client::connect(&url(args.ports[0], DATABASES[0])).await?;
        let mut admins = Vec::new();
        for &port in &args.ports {
            admins.push(session(port, "postgres").await?);
        }
        Ok(Setup { admins, plain, sharded })
    }
}

async fn pair(setup: &Setup, contender: Contender, key: String) -> Result<()> {
    let builder = match contender {
        Contender::Plain => setup.plain.lock(key),
        Contender::Sharded(n) => setup.sharded[n - 1].lock(key),
    };
    let guard = builder.ttl(TTL).watchdog(false).try_acquire().await?.ok_or("a fresh key is free")?;
    if !guard.release().await? {
        return Err("the lease was no longer ours at release".into());
    }
    Ok(())
}

/// WAL flushes (fsyncs) of all three clusters so far.
async fn wal_syncs(setup: &Setup) -> Result<i64> {
    let mut total = 0;
    for admin in &setup.admins {
        total += admin.query_one("SELECT wal_sync FROM pg_stat_wal", &[]).await?.get::<_, i64>(0);
    }
    Ok(total)
}

/// Pairs/s, p50 latency (µs) and WAL flushes per pair of `contender` with `tasks` tasks for
/// `seconds`.
async fn run(
    setup: &Arc<Setup>,
    contender: Contender,
    tasks: usize,
    seconds: f64,
    prefix: &str,
) -> Result<(f64, f64, f64)> {
    let syncs_before = wal_syncs(setup).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (setup, prefix) = (setup.clone(), prefix.to_owned());
        handles.push(tokio::spawn(async move {
            let mut latencies = histogram();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                pair(&setup, contender, format!("{prefix}:{task}:{i}")).await?;
                latencies.saturating_record(t0.elapsed().as_nanos() as u64);
                i += 1;
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let mut latencies = histogram();
    for handle in handles {
        latencies.add(handle.await??)?;
    }
    let pairs_per_second = latencies.len() as f64 / start.elapsed().as_secs_f64();
    let syncs = (wal_syncs(setup).await? - syncs_before) as f64 / latencies.len().max(1) as f64;
    Ok((pairs_per_second, latencies.value_at_quantile(0.5) as f64 / 1000.0, syncs))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// Interleaved rounds of `contenders` at `tasks`: per contender, the per-round (pairs/s, p50 µs,
/// WAL flushes per pair).
async fn rounds(
    setup: &Arc<Setup>,
    args: &Args,
    contenders: &[Contender],
    tasks: usize,
) -> Result<Vec<Vec<(f64, f64, f64)>>> {
    let mut results = vec![Vec::new(); contenders.len()];
    for (i, &c) in contenders.iter().enumerate() {
        run(setup, c, tasks, args.seconds / 2.0, &format!("warm:{tasks}:{i}")).await?;
    }
    for round in 0..args.rounds {
        for k in 0..contenders.len() {
            let i = (k + round) % contenders.len();
            let prefix = format!("r{round}:t{tasks}:c{i}");
            results[i].push(run(setup, contenders[i], tasks, args.seconds, &prefix).await?);
        }
    }
    Ok(results)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.ports.len() != 3 {
        return Err(format!("--ports takes the ports of three clusters, not {}", args.ports.len()).into());
    }
    std::fs::create_dir_all(&args.out)?;
    let setup = Arc::new(Setup::new(&args).await?);
    let mut md = String::new();
    writeln!(
        md,
        "# Keys over several servers\n\nFresh keys, acquire (30 s ttl) + release, interleaved rounds \
         ({} × {} s), medians.\n",
        args.rounds, args.seconds
    )?;

    // Per-key latency at one server: what the sharded client (and its map check) adds.
    let latency = rounds(&setup, &args, &[Contender::Plain, Contender::Sharded(1)], 1).await?;
    let ratios: Vec<f64> = latency[0].iter().zip(&latency[1]).map(|(p, s)| s.1 / p.1).collect();
    let ratio = median(ratios.clone());
    let mut table = Table::new(&["1 task", "p50 per pair (µs)", "pairs/s"]);
    for (c, r) in [Contender::Plain, Contender::Sharded(1)].iter().zip(&latency) {
        table.row(&[
            c.label(),
            format!("{:.0}", median(r.iter().map(|x| x.1).collect())),
            format!("{:.0}", median(r.iter().map(|x| x.0).collect())),
        ]);
    }
    writeln!(md, "{}", table.render())?;
    writeln!(
        md,
        "Sharded ÷ plain p50 per key: **{ratio:.3}×** (per round: {}); target ≤ {TARGET_LATENCY_RATIO}×: {}.\n",
        ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(", "),
        if ratio <= TARGET_LATENCY_RATIO { "met" } else { "NOT met" }
    )?;

    // Throughput over 1, 2 and 3 servers.
    let contenders = [Contender::Plain, Contender::Sharded(1), Contender::Sharded(2), Contender::Sharded(3)];
    let results = rounds(&setup, &args, &contenders, args.tasks).await?;
    let base = median(results[1].iter().map(|x| x.0).collect());
    let mut table = Table::new(&[
        &format!("{} tasks", args.tasks),
        "pairs/s",
        "÷ 1 server",
        "p50 (µs)",
        "WAL flushes per pair",
    ]);
    for (c, r) in contenders.iter().zip(&results) {
        let pps = median(r.iter().map(|x| x.0).collect());
        table.row(&[
            c.label(),
            format!("{pps:.0}"),
            format!("{:.2}×", pps / base),
            format!("{:.0}", median(r.iter().map(|x| x.1).collect())),
            format!("{:.2}", median(r.iter().map(|x| x.2).collect())),
        ]);
    }
    writeln!(md, "{}", table.render())?;
    writeln!(
        md,
        "Each grant and each release commits durably, so a pair costs its server WAL flushes; on one \
         server the tasks' commits share flushes (group commit), over N servers each server flushes \
         its own, and all of them share this machine's cores and disk.\n"
    )?;
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    Ok(())
}
