//! `bench-suite` (`make bench`): dlock against its peers in one run on one machine, on servers
//! `bench/suite.sh` starts (a tuned throwaway PostgreSQL with dlock preloaded, Redis, and
//! etcd), with `results.json`, `results.md` and PNG plots in the output directory.
//!
//! Workloads: 1. uncontended acquire+release pairs at 1/8/32/64 clients, with the server's
//! durable-commit ceiling measured alongside; 2. every client waiting on one key; 3. renewals
//! of many live leases; 4. acquire latency with 0, 100k and 1M live leases, and the table's size
//! sampled as 1M distinct keys come and go; 5. an expiry storm: many leases expiring at once
//! under load.

mod contended;
mod contenders;
mod etcd;
mod plot;
mod results;
mod workloads;

use std::path::PathBuf;

use clap::Parser;

use contenders::{ALL, Contender, Servers};
use results::{Bar, Churn, Levelling, NO_ETCD, Results, Skip, Target, find, markdown};
use workloads::Point;

type Error = Box<dyn std::error::Error + Send + Sync>;
/// The ttl of every lease the contenders take.
const TTL: std::time::Duration = std::time::Duration::from_secs(30);
type Result<T> = std::result::Result<T, Error>;

#[derive(Parser)]
struct Args {
    /// PostgreSQL connection string (dlock and the peers' lock table installed).
    #[arg(long)]
    pg: String,
    /// Redis port on 127.0.0.1.
    #[arg(long)]
    redis_port: u16,
    /// etcd client port on 127.0.0.1 (without it, etcd is left out).
    #[arg(long)]
    etcd_port: Option<u16>,
    /// Client counts of the throughput workload.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    clients: Vec<usize>,
    /// Seconds per measured point.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Client counts of the contended workload (all on one key).
    #[arg(long, value_delimiter = ',', default_value = "8,32")]
    contended_clients: Vec<usize>,
    /// Live leases renewed in the renew workload.
    #[arg(long, default_value_t = 10_000)]
    renew_leases: usize,
    /// Live-lease counts of the scale workload.
    #[arg(long, value_delimiter = ',', default_value = "0,100000,1000000")]
    live: Vec<usize>,
    /// Acquire+release samples per scale step.
    #[arg(long, default_value_t = 3000)]
    samples: usize,
    /// Keys that come and go in the churn step.
    #[arg(long, default_value_t = 1_000_000)]
    churn_keys: usize,
    /// The table's size is sampled every this many keys of the churn.
    #[arg(long, default_value_t = 100_000)]
    churn_step: usize,
    /// Leases of the expiry storm (all expire at once, 2 s into it).
    #[arg(long, default_value_t = 100_000)]
    storm_leases: usize,
    /// Seconds the expiry storm runs (new acquires go on throughout).
    #[arg(long, default_value_t = 8.0)]
    storm_seconds: f64,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Lines describing the machine and servers, for the report.
    #[arg(long)]
    environment: Vec<String>,
}

async fn run(args: Args) -> Result<()> {
    let servers = Servers { pg_url: args.pg.clone(), redis_port: args.redis_port, etcd_port: args.etcd_port };
    let run = std::process::id();
    let mut skipped = Vec::new();
    let mut skip = |workload: &str, contender: Contender, why: &str| {
        skipped.push(Skip { workload: workload.into(), contender: contender.label().into(), why: why.into() })
    };
    let mut failed = Failures(Vec::new());
    let mut uncontended = Vec::new();
    let mut ceiling = Vec::new();
    for &clients in &args.clients {
        // Interleaved: every contender at this client count, then the next count.
        for contender in ALL.into_iter().filter(|&c| servers.has(c)) {
            let prefix = format!("bench:{run}:u:{clients}:{contender:?}");
            let what = format!("1. uncontended, {clients} clients");
            let outcome = workloads::uncontended(contender, &servers, clients, args.seconds, &prefix).await;
            let Some(p) = failed.record(&what, contender.label(), outcome) else { continue };
            eprintln!(
                "bench: {} × {clients}: {:.0}/s, p50 {:.0} µs",
                p.contender, p.per_second, p.latency.p50_us
            );
            uncontended.push(p);
            failed.clean(&servers).await;
        }
        for then_select in [false, true] {
            let outcome = workloads::ceiling(&servers, clients, args.seconds, then_select).await;
            let Some(p) = failed.record(&format!("1. ceiling, {clients} clients"), "PostgreSQL", outcome)
            else {
                continue;
            };
            eprintln!("bench: {} × {clients}: {:.0}/s", p.contender, p.per_second);
            ceiling.push(p);
        }
    }
    let mut contended = Vec::new();
    for &clients in &args.contended_clients {
        for contender in contended::CONTENDERS.into_iter().filter(|&c| servers.has(c)) {
            let key = format!("bench:{run}:c:{clients}:{contender:?}");
            let outcome = contended::run(contender, &servers, clients, args.seconds, &key).await;
            let what = format!("2. contended, {clients} clients");
            let Some(p) = failed.record(&what, contender.label(), outcome) else { continue };
            eprintln!("bench: one key, {} × {clients}: {:.0} grants/s", p.contender, p.per_second);
            contended.push(p);
            failed.clean(&servers).await;
        }
    }
    let mut renewals = Vec::new();
    let renewing =
        [Contender::DlockSql, Contender::DlockFast, Contender::Naive, Contender::Redis, Contender::Etcd];
    for contender in renewing.into_iter().filter(|&c| servers.has(c)) {
        let prefix = format!("bench:{run}:r:{contender:?}");
        let outcome =
            workloads::renewals(contender, &servers, 8, args.renew_leases, args.seconds, &prefix).await;
        let Some(p) = failed.record("3. renewals", contender.label(), outcome) else { continue };
        eprintln!("bench: renew {}: {:.0}/s", p.contender, p.per_second);
        renewals.push(p);
        failed.clean(&servers).await;
    }
    if !servers.has(Contender::Etcd) {
        for workload in ["1. uncontended", "2. contended", "3. renewals"] {
            skip(workload, Contender::Etcd, NO_ETCD);
        }
    }
    // Churn first, while the table has only seen the workloads above: whether it stays small.
    let outcome = workloads::churn(&servers, args.churn_keys, args.churn_step, &format!("bench:{run}")).await;
    let samples = failed.record("4. churn", Contender::DlockSql.label(), outcome).unwrap_or_default();
    let (first, last) = (samples.first(), samples.last());
    let churn = Churn {
        keys: last.map_or(0, |s| s.keys),
        seconds: last.map_or(0.0, |s| s.seconds),
        table_bytes_before: first.map_or(0, |s| s.table_bytes),
        table_bytes_after: last.map_or(0, |s| s.table_bytes),
        verdict: Levelling::of(&samples),
        samples,
    };
    eprintln!(
        "bench: churn of {} keys in {:.1} s: {} kB → {} kB",
        churn.keys,
        churn.seconds,
        churn.table_bytes_before / 1024,
        churn.table_bytes_after / 1024
    );
    let mut scale = Vec::new();
    for &live in &args.live {
        let outcome =
            workloads::with_live_leases(&servers, live, args.samples, &format!("bench:{run}:s")).await;
        let Some(p) =
            failed.record(&format!("4. scale, {live} live leases"), Contender::DlockSql.label(), outcome)
        else {
            continue;
        };
        eprintln!("bench: {}: p50 {:.0} µs", p.contender, p.latency.p50_us);
        scale.push(p);
    }
    let outcome = workloads::with_live_leases(&servers, 0, 10, &format!("bench:{run}:clean")).await;
    failed.record("4. scale, clean up", Contender::DlockSql.label(), outcome);
    failed.clean(&servers).await;
    skip(
        "4. scale and churn",
        Contender::DlockFast,
        "its shared-memory table holds dlock.fast_max_leases = 16384 leases (the default), not 1M",
    );
    skip(
        "4. scale and churn",
        Contender::Etcd,
        "1M leased keys take 2M fsynced raft writes to set up (many minutes here); the workload studies dlock's table",
    );
    let mut storm = Vec::new();
    for contender in [Contender::DlockSql, Contender::DlockFast] {
        let outcome = workloads::expiry_storm(
            contender,
            &servers,
            args.storm_leases,
            8,
            std::time::Duration::from_secs(2),
            args.storm_seconds,
            &format!("bench:{run}:{contender:?}"),
        )
        .await;
        let Some(s) = failed.record("5. expiry storm", contender.label(), outcome) else { continue };
        eprintln!("bench: expiry storm of {} leases, {}", s.leases, s.contender);
        storm.push(s);
        failed.clean(&servers).await;
    }
    skip(
        "5. expiry storm",
        Contender::Etcd,
        "100k leases take 200k fsynced raft writes to set up, and etcd 3.4 revokes expired leases at \
         most 1000 a second by design, so the storm would last minutes",
    );

    let mut ratios = Vec::new();
    let ratio = |points: &[Point], a: Contender, b: Contender, clients: usize| {
        Some(find(points, a.label(), clients)?.per_second / find(points, b.label(), clients)?.per_second)
    };
    let dlock = Contender::DlockSql.label();
    for &clients in &args.clients {
        let Some(d) = find(&uncontended, dlock, clients) else { continue };
        if let Some(c) = find(&ceiling, workloads::CEILING, clients) {
            ratios.push((
                format!("dlock / durable-commit ceiling, {clients} clients"),
                d.per_second / c.per_second,
            ));
        }
        if let Some(b) = find(&ceiling, workloads::TWO_STATEMENTS, clients) {
            ratios.push((
                format!("dlock / two-statement bound, {clients} clients"),
                d.per_second / b.per_second,
            ));
        }
        for peer in [Contender::Naive, Contender::Advisory, Contender::Redis, Contender::Etcd] {
            if let Some(r) = ratio(&uncontended, Contender::DlockSql, peer, clients) {
                ratios.push((format!("dlock / {}, {clients} clients", peer.label()), r));
            }
        }
        for peer in [Contender::Redis, Contender::Advisory] {
            if let Some(r) = ratio(&uncontended, Contender::DlockFast, peer, clients) {
                ratios.push((format!("dlock (fast mode) / {}, {clients} clients", peer.label()), r));
            }
        }
    }
    if let (Some(empty), Some(full)) = (scale.first(), scale.last()) {
        ratios.push((
            format!("acquire p50, {} / {}", full.contender, empty.contender),
            full.latency.p50_us / empty.latency.p50_us,
        ));
    }
    let mut targets = vec![Target {
        what: "dlock (SQL, durable) / durable-commit ceiling, 8 clients".into(),
        ratio: find(&uncontended, dlock, 8)
            .zip(find(&ceiling, workloads::CEILING, 8))
            .map(|(d, c)| d.per_second / c.per_second),
        bar: Bar::AtLeast(0.8),
    }];
    targets.extend([(Contender::Redis, 0.5), (Contender::Advisory, 0.8)].into_iter().map(|(peer, bar)| {
        Target {
            what: format!("dlock (fast mode) / {}, 8 clients", peer.label()),
            ratio: ratio(&uncontended, Contender::DlockFast, peer, 8),
            bar: Bar::AtLeast(bar),
        }
    }));
    targets.push(Target {
        what: "acquire p50 with 1M live leases / with none".into(),
        ratio: scale
            .first()
            .zip(scale.last())
            .map(|(empty, full)| full.latency.p50_us / empty.latency.p50_us),
        bar: Bar::AtMost(1.5),
    });
    let results = Results {
        environment: args.environment,
        uncontended,
        ceiling,
        contended,
        renewals,
        scale,
        churn,
        storm,
        ratios,
        targets,
        skipped,
        failed: failed.0,
    };

    std::fs::create_dir_all(&args.out)?;
    plot::init_font()?;
    let mut throughput: Vec<Point> = results.uncontended.clone();
    throughput.extend(results.ceiling.iter().cloned());
    plot::throughput(
        &args.out.join("throughput.png"),
        "Uncontended acquire+release pairs/s (ceiling: durable commits/s)",
        &throughput,
    )?;
    let at8: Vec<Point> = results.uncontended.iter().filter(|p| p.clients == 8).cloned().collect();
    plot::cdf(&args.out.join("latency-8-clients.png"), "Acquire+release latency, 8 clients", &at8)?;
    plot::throughput(
        &args.out.join("contended.png"),
        "One key, every client waiting: grants/s",
        &results.contended,
    )?;
    plot::cdf(
        &args.out.join("latency-live-leases.png"),
        "dlock acquire+release latency by live leases",
        &results.scale,
    )?;
    let mib = |f: fn(&workloads::ChurnSample) -> i64| -> Vec<(f64, f64)> {
        let samples = &results.churn.samples;
        samples.iter().map(|s| (s.keys as f64 / 1000.0, f(s) as f64 / 1_048_576.0)).collect()
    };
    plot::lines(
        &args.out.join("churn.png"),
        "dlock lease table size as distinct keys come and go (8 clients)",
        "keys acquired and released (thousands)",
        "MiB",
        &[
            ("table + indexes (pg_total_relation_size)", mib(|s| s.table_bytes)),
            ("indexes", mib(|s| s.index_bytes)),
            ("table (heap, TOAST, maps)", mib(|s| s.table_bytes - s.index_bytes)),
        ],
    )?;
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    let md = markdown(&results);
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// The workloads that failed: each is reported and the run goes on without it.
struct Failures(Vec<Skip>);

impl Failures {
    /// The workload's result, or `None` after noting its error.
    fn record<T>(&mut self, workload: &str, contender: &str, outcome: Result<T>) -> Option<T> {
        match outcome {
            Ok(value) => Some(value),
            Err(e) => {
                eprintln!("bench: {workload}, {contender} FAILED: {e}");
                self.0.push(Skip {
                    workload: workload.into(),
                    contender: contender.into(),
                    why: e.to_string(),
                });
                None
            }
        }
    }

    /// The next workload starts from a clean state: every lease an earlier one left (durable
    /// and fast) released, as an administrator.
    async fn clean(&mut self, servers: &Servers) {
        let outcome = async {
            let pg = contenders::pg_connect(&servers.pg_url).await?;
            pg.batch_execute(
                "SELECT count(dlock_force_release(key)) FROM (SELECT DISTINCT key FROM dlock_locks) AS k; \
                 SELECT count(dlock_fast_release(key, owner)) FROM dlock_fast_locks()",
            )
            .await?;
            Ok::<_, Error>(())
        }
        .await;
        self.record("clean-up between workloads", "PostgreSQL", outcome);
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e} ({e:?})");
            std::process::ExitCode::FAILURE
        }
    }
}
