//! `bench-suite` (`make bench`): dlock against its peers in one run on one machine, on servers
//! `bench/suite.sh` starts (a tuned throwaway PostgreSQL with dlock preloaded, and Redis), with
//! `results.json`, `results.md` and PNG plots in the output directory.
//!
//! Workloads (this version): 1. uncontended acquire+release pairs at 1/8/32/64 clients, with the
//! server's durable-commit ceiling measured alongside; 3. renewals of many live leases;
//! 4. acquire latency with 0, 100k and 1M live leases, and the table's size after many keys
//! came and went; 5. an expiry storm: 100k leases expiring at once under load.

mod contended;
mod contenders;
mod plot;
mod workloads;

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

use contenders::{ALL, Contender, Servers};
use workloads::Point;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

#[derive(Parser)]
struct Args {
    /// PostgreSQL connection string (dlock and the peers' lock table installed).
    #[arg(long)]
    pg: String,
    /// Redis port on 127.0.0.1.
    #[arg(long)]
    redis_port: u16,
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
    #[arg(long, default_value_t = 200_000)]
    churn_keys: usize,
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

#[derive(Serialize)]
struct Results {
    environment: Vec<String>,
    uncontended: Vec<Point>,
    ceiling: Vec<Point>,
    contended: Vec<Point>,
    renewals: Vec<Point>,
    scale: Vec<Point>,
    churn: Churn,
    storm: Vec<workloads::StormWindow>,
    ratios: Vec<(String, f64)>,
}

#[derive(Serialize)]
struct Churn {
    keys: usize,
    seconds: f64,
    table_bytes_before: i64,
    table_bytes_after: i64,
}

fn find<'a>(points: &'a [Point], contender: &str, clients: usize) -> Option<&'a Point> {
    points.iter().find(|p| p.contender == contender && p.clients == clients)
}

async fn run(args: Args) -> Result<()> {
    let servers = Servers { pg_url: args.pg.clone(), redis_port: args.redis_port };
    let run = std::process::id();
    let mut uncontended = Vec::new();
    let mut ceiling = Vec::new();
    for &clients in &args.clients {
        // Interleaved: every contender at this client count, then the next count.
        for contender in ALL {
            let prefix = format!("bench:{run}:u:{clients}:{contender:?}");
            let p = workloads::uncontended(contender, &servers, clients, args.seconds, &prefix).await?;
            eprintln!(
                "bench: {} × {clients}: {:.0}/s, p50 {:.0} µs",
                p.contender, p.per_second, p.latency.p50_us
            );
            uncontended.push(p);
        }
        let p = workloads::ceiling(&servers, clients, args.seconds).await?;
        eprintln!("bench: ceiling × {clients}: {:.0}/s", p.per_second);
        ceiling.push(p);
    }
    let mut contended = Vec::new();
    for &clients in &args.contended_clients {
        for contender in contended::CONTENDERS {
            let key = format!("bench:{run}:c:{clients}:{contender:?}");
            let p = contended::run(contender, &servers, clients, args.seconds, &key).await?;
            eprintln!("bench: one key, {} × {clients}: {:.0} grants/s", p.contender, p.per_second);
            contended.push(p);
        }
    }
    let mut renewals = Vec::new();
    for contender in [Contender::DlockSql, Contender::Naive, Contender::Redis] {
        let prefix = format!("bench:{run}:r:{contender:?}");
        let p = workloads::renewals(contender, &servers, 8, args.renew_leases, args.seconds, &prefix).await?;
        eprintln!("bench: renew {}: {:.0}/s", p.contender, p.per_second);
        renewals.push(p);
    }
    // Churn first, while the table has only seen the workloads above: whether it stays small.
    let (before, after, seconds) =
        workloads::churn(&servers, args.churn_keys, &format!("bench:{run}")).await?;
    let churn =
        Churn { keys: args.churn_keys, seconds, table_bytes_before: before, table_bytes_after: after };
    eprintln!("bench: churn of {} keys: {} kB → {} kB", args.churn_keys, before / 1024, after / 1024);
    let mut scale = Vec::new();
    for &live in &args.live {
        let p = workloads::with_live_leases(&servers, live, args.samples, &format!("bench:{run}:s")).await?;
        eprintln!("bench: {}: p50 {:.0} µs", p.contender, p.latency.p50_us);
        scale.push(p);
    }
    workloads::with_live_leases(&servers, 0, 10, &format!("bench:{run}:clean")).await?;
    let storm = workloads::expiry_storm(
        &servers,
        args.storm_leases,
        8,
        std::time::Duration::from_secs(2),
        args.storm_seconds,
        &format!("bench:{run}"),
    )
    .await?;

    let mut ratios = Vec::new();
    let dlock = Contender::DlockSql.label();
    for &clients in &args.clients {
        let Some(d) = find(&uncontended, dlock, clients) else { continue };
        if let Some(c) = ceiling.iter().find(|p| p.clients == clients) {
            ratios.push((
                format!("dlock / durable-commit ceiling, {clients} clients"),
                d.per_second / c.per_second,
            ));
        }
        for peer in [Contender::Naive, Contender::Advisory, Contender::Redis] {
            if let Some(p) = find(&uncontended, peer.label(), clients) {
                ratios.push((
                    format!("dlock / {}, {clients} clients", peer.label()),
                    d.per_second / p.per_second,
                ));
            }
        }
    }
    if let (Some(empty), Some(full)) = (scale.first(), scale.last()) {
        ratios.push((
            format!("acquire p50, {} / {}", full.contender, empty.contender),
            full.latency.p50_us / empty.latency.p50_us,
        ));
    }
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
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    let md = markdown(&results);
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    Ok(())
}

fn markdown(r: &Results) -> String {
    let mut md = String::from("# make bench\n\n");
    for e in &r.environment {
        let _ = writeln!(md, "- {e}");
    }
    let _ = writeln!(md, "\n## 1. Uncontended acquire+release pairs/s (p50 / p99 / p99.9 µs)\n");
    let clients: Vec<usize> = r.ceiling.iter().map(|p| p.clients).collect();
    let _ = write!(md, "| contender |");
    for c in &clients {
        let _ = write!(md, " {c} clients |");
    }
    let _ = write!(md, "\n|---|");
    for _ in &clients {
        let _ = write!(md, "---:|");
    }
    md.push('\n');
    let mut rows: Vec<&str> = ALL.iter().map(|c| c.label()).collect();
    rows.push("durable commit ceiling (single-row UPDATE)");
    for name in rows {
        let _ = write!(md, "| {name} |");
        for &c in &clients {
            let p = find(&r.uncontended, name, c)
                .or_else(|| r.ceiling.iter().find(|p| p.contender == name && p.clients == c));
            match p {
                Some(p) => {
                    let l = &p.latency;
                    let _ = write!(
                        md,
                        " {:.0} ({:.0} / {:.0} / {:.0}) |",
                        p.per_second, l.p50_us, l.p99_us, l.p999_us
                    );
                }
                None => md.push_str(" — |"),
            }
        }
        md.push('\n');
    }
    let _ = writeln!(md, "\n![throughput](throughput.png)\n![latency at 8 clients](latency-8-clients.png)\n");
    let _ = writeln!(md, "## 2. Contended: every client waits for one key, takes it and gives it back\n");
    let _ = writeln!(
        md,
        "| contender | clients | grants/s | acquire p50 µs | p99 µs | p99.9 µs |\n|---|---:|---:|---:|---:|---:|"
    );
    for p in &r.contended {
        let l = &p.latency;
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.clients, p.per_second, l.p50_us, l.p99_us, l.p999_us
        );
    }
    let _ = writeln!(md, "\n![contended](contended.png)\n");
    let _ = writeln!(md, "## 3. Renewals of {} live leases, 8 clients\n", 10_000);
    let _ = writeln!(md, "| contender | renewals/s | p50 µs | p99 µs |\n|---|---:|---:|---:|");
    for p in &r.renewals {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.per_second, p.latency.p50_us, p.latency.p99_us
        );
    }
    let _ = writeln!(md, "\n## 4. Scale: one session's acquire+release with live leases in the table\n");
    let _ = writeln!(md, "| table | pairs/s | p50 µs | p99 µs | p99.9 µs |\n|---|---:|---:|---:|---:|");
    for p in &r.scale {
        let l = &p.latency;
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.per_second, l.p50_us, l.p99_us, l.p999_us
        );
    }
    let c = &r.churn;
    let _ = writeln!(
        md,
        "\n{} distinct keys came and went (8 clients, {:.1} s): the lease table went from {} kB to {} kB.\n\n![latency by live leases](latency-live-leases.png)\n",
        c.keys,
        c.seconds,
        c.table_bytes_before / 1024,
        c.table_bytes_after / 1024
    );
    if let Some(first) = r.storm.first() {
        let _ = writeln!(
            md,
            "## 5. Expiry storm: {} leases expire at once 2 s in, while 8 clients acquire and release\n",
            first.storm_rows_left.max(r.storm.iter().map(|w| w.storm_rows_left).max().unwrap_or(0))
        );
        let _ = writeln!(
            md,
            "| second | pairs | p50 µs | p99 µs | max µs | expired rows left |\n|---:|---:|---:|---:|---:|---:|"
        );
        for w in &r.storm {
            let l = &w.latency;
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.0} | {:.0} | {} |",
                w.second, w.pairs, l.p50_us, l.p99_us, l.max_us, w.storm_rows_left
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "## Ratios\n\n| | ratio |\n|---|---:|");
    for (what, ratio) in &r.ratios {
        let _ = writeln!(md, "| {what} | {ratio:.2} |");
    }
    md
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
