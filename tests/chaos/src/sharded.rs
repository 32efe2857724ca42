//! `dlock-chaos shards`: keys over several servers while the map changes. Four dlock servers
//! (s1..s4, three of them in the map at a time) and a fenced resource on a fifth; Rust workers
//! route through `ShardedClient` from a map file, half of them reading it again at once and
//! half going on with a stale map for seconds; an operator changes the map every few seconds (a
//! server added, one removed, one replaced) with `apply_shard_map`; servers crash, stop and
//! come back; workers are killed and paused. The existing checker then judges every grant of
//! every server together (one machine, one clock): no two holders of a key, fences per key in
//! grant order, the resource's fencing. `--sabotage` opens every gate as soon as the map is
//! installed (the move's lock-delay turned off): the checker must then find violations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dlock_client::{Applied, ApplyOptions, ShardsConfig, apply_shard_map};
use dlock_tests::Cluster;
use tokio_postgres::NoTls;

use crate::crew::{Crew, Kind, PrimitiveKeys, Spec};
use crate::faults::{self, Counts};
use crate::rng::Rng;
use crate::{check, history, resource};

/// How big and how hostile a sharded run is.
#[derive(Debug, Clone, clap::Args)]
pub struct ShardArgs {
    /// How long the workers run, in seconds.
    #[arg(long, default_value_t = 120)]
    pub seconds: u64,
    /// Rust workers (sharded clients).
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Number of hot keys (spread over the servers).
    #[arg(long, default_value_t = 24)]
    pub keys: usize,
    /// Lease ttl range, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub ttl_min: f64,
    #[arg(long, default_value_t = 2.0)]
    pub ttl_max: f64,
    /// Longest of the workers' short holds, in seconds (most holds are short: many grants).
    #[arg(long, default_value_t = 0.05)]
    pub short_hold_max: f64,
    /// Seconds between two map changes (each starts once the last one is complete).
    #[arg(long, default_value_t = 4.0)]
    pub change_every: f64,
    /// Seconds between two faults of a worker (kill -9, SIGSTOP past the ttl, in turn).
    #[arg(long, default_value_t = 3.0)]
    pub fault_every: f64,
    /// Seconds between two faults of a server (a crash restart, or a stop of a few seconds).
    #[arg(long, default_value_t = 10.0)]
    pub server_fault_every: f64,
    /// Open every gate right after each install: the checker must find violations.
    #[arg(long)]
    pub sabotage: bool,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

const NAMES: [&str; 4] = ["s1", "s2", "s3", "s4"];

/// What the operator did.
#[derive(Debug, Default)]
struct Changes {
    complete: u64,
    added: u64,
    removed: u64,
    replaced: u64,
    /// Applies that stopped (a server down) and were resumed.
    resumed: u64,
    /// Gates opened early by the sabotage.
    forced: u64,
}

/// Runs the whole thing; returns whether no violation was found.
pub async fn run(args: ShardArgs) -> bool {
    let started = Instant::now();
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let dir = dlock_tests::workspace_root()
        .join("build/chaos")
        .join(format!("shards-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the run directory");
    let (servers, resource_cluster) = tokio::task::spawn_blocking(|| {
        let servers: Vec<Arc<Cluster>> =
            NAMES.iter().map(|n| Arc::new(Cluster::start_new(&format!("chaos-{n}"), &[]))).collect();
        (servers, Cluster::start_new("chaos-shards-resource", &[]))
    })
    .await
    .unwrap();
    let urls: BTreeMap<String, String> = NAMES
        .iter()
        .zip(&servers)
        .map(|(n, c)| {
            let url =
                format!("host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=3", c.port());
            (n.to_string(), url)
        })
        .collect();
    let (resource_conn, db) = resource::create(resource_cluster.port()).await;

    // The first map, installed before any worker starts.
    let map_file = dir.join("map.toml");
    let first = config(1, &NAMES[..3], &urls);
    write_map(&map_file, &first);
    match apply_shard_map(&first, None, &ApplyOptions::default(), |_| {}).await {
        Ok(Applied::Complete { .. }) => {}
        other => panic!("the first map was not applied: {other:?}"),
    }
    let spec = Spec {
        dir: dir.clone(),
        script: PathBuf::new(),
        dlock_conn: String::new(),
        resource_conn,
        keys: (0..args.keys).map(|i| format!("hot/{i}")).collect(),
        ttl: (args.ttl_min, args.ttl_max),
        wait: args.ttl_max,
        skew: 0.0,
        bound_rate: 0.0,
        fast: false,
        primitives: PrimitiveKeys {
            shared: Vec::new(),
            semaphore: Vec::new(),
            multi_key: Vec::new(),
            elections: Vec::new(),
            max_holders: 1,
        },
        shards: Some((map_file.clone(), args.short_hold_max)),
    };
    let mut crew = Crew::new(spec, args.seed);
    for _ in 0..args.workers {
        crew.spawn(Kind::Rust);
    }

    let done = Arc::new(AtomicBool::new(false));
    let down: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let operator = tokio::spawn(operate(args.clone(), first, urls.clone(), map_file, done.clone()));
    let mut counts = Counts::default();
    let mut server_faults = (0u64, 0u64);
    let mut rng = Rng::new(args.seed ^ 0x5a);
    let mut killed = Vec::new();
    let (mut next_worker_fault, mut next_server_fault) = (args.fault_every, args.server_fault_every);
    let mut turn = 0;
    while started.elapsed().as_secs_f64() < args.seconds as f64 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        crew.replace_exited(&killed);
        let now = started.elapsed().as_secs_f64();
        if now >= next_worker_fault {
            next_worker_fault = now + args.fault_every * rng.range(0.5, 1.5);
            if turn % 2 == 0 {
                if let Some((name, _)) = faults::kill9(&mut crew, false, &mut counts) {
                    killed.push(name);
                }
            } else {
                let pause = Duration::from_secs_f64(args.ttl_max + rng.range(0.5, 1.5));
                faults::stop_cont(&mut crew, pause, &mut counts);
            }
            turn += 1;
        }
        if now >= next_server_fault {
            next_server_fault = now + args.server_fault_every * rng.range(0.7, 1.3);
            let at = rng.below(NAMES.len());
            let (name, cluster) = (NAMES[at].to_string(), servers[at].clone());
            let crash = server_faults.0 <= server_faults.1;
            if crash {
                server_faults.0 += 1;
            } else {
                server_faults.1 += 1;
            }
            let down = down.clone();
            down.lock().unwrap().push(name.clone());
            // A crash restarts at once; a stop keeps the server down for a few seconds.
            let outage = if crash { 0.0 } else { rng.range(2.0, 5.0) };
            tokio::task::spawn_blocking(move || {
                cluster.stop(if crash { "immediate" } else { "fast" });
                std::thread::sleep(Duration::from_secs_f64(outage));
                cluster.start();
                down.lock().unwrap().retain(|n| *n != name);
            });
        }
    }
    done.store(true, Ordering::SeqCst);
    crew.kill_all().await;
    let changes = operator.await.expect("the operator");
    // Every server up again before the check reads nothing from them (only the histories and
    // the resource count).
    while !down.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let history = history::read(&dir).expect("read the lease history");
    let (accepted, refused) = resource::read(&db).await.expect("read the resource");
    let outcome = check::check(&history.grants, &accepted, &refused, &[], &counts.paused_leases);
    let mut per_epoch: BTreeMap<i64, usize> = BTreeMap::new();
    for grant in &history.grants {
        *per_epoch.entry(grant.fence >> 43).or_default() += 1;
    }
    let mut text = format!(
        "dlock-chaos shards: {} s, {} workers, {} keys over {} servers (3 in the map at a time){}\n",
        args.seconds,
        args.workers,
        args.keys,
        NAMES.len(),
        if args.sabotage { ", SABOTAGED (gates opened at once)" } else { "" }
    );
    text += &format!(
        "map changes complete: {} (added {}, removed {}, replaced {}; {} applies resumed after a \
         server was down; {} gates forced open)\n",
        changes.complete, changes.added, changes.removed, changes.replaced, changes.resumed, changes.forced
    );
    text += &format!(
        "server faults: {} crash restarts, {} stops; worker faults: {} kill -9, {} SIGSTOP past the ttl\n",
        server_faults.0,
        server_faults.1,
        counts.kill9_holding + counts.kill9_idle,
        counts.stop_cont
    );
    let (least, most) = (per_epoch.values().min().copied(), per_epoch.values().max().copied());
    text += &format!(
        "grants: {} under {} epochs ({}–{} per epoch; a fence's epoch is its high bits); writes: {} \
         accepted, {} refused ({} of them late, the fence doing its job)\n",
        outcome.grants,
        per_epoch.len(),
        least.unwrap_or(0),
        most.unwrap_or(0),
        outcome.accepted_writes,
        outcome.refused_writes,
        outcome.late_writes_refused
    );
    text += &format!("violations: {}\n", outcome.violations.len());
    for (rule, n) in &outcome.by_rule {
        text += &format!("  {}: {n}\n", rule.label());
    }
    for violation in outcome.violations.iter().take(10) {
        text += &format!("  {violation}\n");
    }
    text += &format!("took {:.0} s; run directory: {}\n", started.elapsed().as_secs_f64(), dir.display());
    print!("{text}");
    let _ = std::fs::write(dir.join("report.txt"), &text);
    outcome.violations.is_empty()
}

/// The map of `epoch` over `servers`.
fn config(epoch: i64, servers: &[&str], urls: &BTreeMap<String, String>) -> ShardsConfig {
    ShardsConfig::new(epoch, servers.iter().map(|s| (s.to_string(), urls[*s].clone()))).expect("a valid map")
}

/// Writes the map file the workers read, whole or not at all.
fn write_map(file: &Path, config: &ShardsConfig) {
    let mut text = format!("epoch = {}\n[servers]\n", config.epoch());
    for (name, url) in config.servers() {
        text += &format!("{name} = \"{url}\"\n");
    }
    let partial = file.with_extension("toml.partial");
    std::fs::write(&partial, text).expect("write the map");
    std::fs::rename(&partial, file).expect("move the map in place");
}

/// The operator: a map change every `change_every` seconds (once the last is complete), applied
/// until complete whatever the servers do meanwhile.
async fn operate(
    args: ShardArgs,
    mut current: ShardsConfig,
    urls: BTreeMap<String, String>,
    map_file: PathBuf,
    done: Arc<AtomicBool>,
) -> Changes {
    let mut changes = Changes::default();
    let mut rng = Rng::new(args.seed ^ 0x0b);
    while !done.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs_f64(args.change_every * rng.range(0.7, 1.3))).await;
        let names: Vec<&str> = current.map().servers().iter().map(String::as_str).collect();
        let spare: Vec<&str> = NAMES.iter().copied().filter(|n| !names.contains(n)).collect();
        // Between two and four servers: add one, remove one, or replace one by a spare.
        let mut next: Vec<&str> = names.clone();
        match rng.below(3) {
            0 if !spare.is_empty() => {
                next.push(spare[rng.below(spare.len())]);
                changes.added += 1;
            }
            1 if next.len() > 2 => {
                next.remove(rng.below(next.len()));
                changes.removed += 1;
            }
            _ if !spare.is_empty() => {
                let out = rng.below(next.len());
                next[out] = spare[rng.below(spare.len())];
                changes.replaced += 1;
            }
            _ => {
                next.remove(rng.below(next.len()));
                changes.removed += 1;
            }
        }
        let new = config(current.epoch() + 1, &next, &urls);
        // The workers may see the new map before the servers: they are told to wait (0F000).
        write_map(&map_file, &new);
        let mut attempts = 0;
        loop {
            let options = ApplyOptions {
                wait: Some(if args.sabotage { Duration::ZERO } else { Duration::from_secs(20) }),
                ..ApplyOptions::default()
            };
            match apply_shard_map(&new, Some(&current), &options, |_| {}).await {
                Ok(Applied::Complete { .. }) => break,
                Ok(Applied::Pending { epoch, .. }) if args.sabotage => {
                    changes.forced += force_open(&new, epoch).await;
                }
                Ok(Applied::Pending { .. }) => {}
                Err(_) => {
                    // A server is down: resume once it is back.
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            if done.load(Ordering::SeqCst) && attempts > 40 {
                return changes;
            }
        }
        if attempts > 0 {
            changes.resumed += 1;
        }
        changes.complete += 1;
        current = new;
    }
    changes
}

/// The sabotage: every closed gate of map `epoch` opened at once, whatever the old servers hold.
async fn force_open(config: &ShardsConfig, epoch: i64) -> u64 {
    let mut forced = 0;
    for (_, url) in config.servers() {
        let Ok((db, connection)) = tokio_postgres::connect(url, NoTls).await else { continue };
        tokio::spawn(connection);
        let opened = db
            .query(
                "SELECT dlock_shard_drained(from_server, $1) FROM dlock_shard_gates() WHERE NOT open",
                &[&epoch],
            )
            .await
            .map_or(0, |rows| rows.len() as u64);
        forced += opened;
    }
    forced
}
