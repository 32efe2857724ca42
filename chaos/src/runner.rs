//! The run: a throwaway cluster with dlock and the resource database, the proxy, the workers,
//! faults on a schedule, then the checker and the report.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dlock_tests::Cluster;
use tokio_postgres::NoTls;

use crate::check::{self, Snapshot};
use crate::crew::{Crew, Kind, Spec};
use crate::faults::{self, Counts};
use crate::proxy::{self, ProxyStats};
use crate::rng::Rng;
use crate::{history, report, resource};

/// How big and how hostile a run is.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// How long the workers run, in seconds.
    #[arg(long, default_value_t = 300)]
    pub seconds: u64,
    /// Workers through the Rust client.
    #[arg(long, default_value_t = 3)]
    pub rust_workers: usize,
    /// Workers in raw SQL (Python, psycopg 3).
    #[arg(long, default_value_t = 3)]
    pub sql_workers: usize,
    /// Number of hot keys.
    #[arg(long, default_value_t = 3)]
    pub keys: usize,
    /// Lease ttl range, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub ttl_min: f64,
    #[arg(long, default_value_t = 2.0)]
    pub ttl_max: f64,
    /// Seconds between two faults (kill -9, SIGSTOP, pg_terminate_backend, in turn).
    #[arg(long, default_value_t = 3.0)]
    pub fault_every: f64,
    /// Seconds between two crash restarts of the server (0: none).
    #[arg(long, default_value_t = 45.0)]
    pub crash_every: f64,
    /// Probability that the proxy cuts a connection right after forwarding a request.
    #[arg(long, default_value_t = 0.02)]
    pub cut_rate: f64,
    /// The SQL workers' clocks are off by up to this many seconds.
    #[arg(long, default_value_t = 3600.0)]
    pub skew: f64,
    /// Start the server with `shared_preload_libraries = 'dlock'` (direct hand-off to the
    /// server-side waiters of the SQL workers).
    #[arg(long)]
    pub preload: bool,
    /// Self-test: also force-release hot keys under their holders (dlock_force_release), which
    /// takes leases away early; the checker must then report violations and the run fail.
    #[arg(long)]
    pub sabotage: bool,
    /// Seed of every random choice of the run (faults, keys, ttls, holds, cuts).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// What a run works on.
struct World {
    cluster: Arc<Cluster>,
    port: u16,
    admin: tokio_postgres::Client,
    dir: PathBuf,
    proxy: Arc<ProxyStats>,
    crew: Crew,
}

/// What the faults did and found on the way.
#[derive(Default)]
struct Injected {
    counts: Counts,
    snapshots: Vec<Snapshot>,
    violations: Vec<String>,
}

/// Runs the whole thing; returns whether no violation was found.
pub async fn run(args: RunArgs) -> bool {
    let started = Instant::now();
    let mut world = set_up(&args).await;
    let mut injected = inject(&args, &mut world).await;
    world.crew.kill_all().await;
    let counts = &mut injected.counts;
    counts.proxy_cuts = world.proxy.cuts.load(Ordering::Relaxed);
    counts.proxy_connections = world.proxy.connections.load(Ordering::Relaxed);
    counts.skewed_workers = world.crew.skewed;
    counts.max_skew = world.crew.max_skew;

    let grants = history::read(&world.dir).expect("read the lease history");
    let (db, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres dbname={}", world.port, resource::DATABASE),
        NoTls,
    )
    .await
    .expect("resource session for the checker");
    tokio::spawn(connection);
    let (accepted, refused) = resource::read(&db).await.expect("read the resource");
    let mut outcome =
        check::check(&grants, &accepted, &refused, &injected.snapshots, &injected.counts.paused_leases);
    outcome.violations.splice(0..0, injected.violations);
    let text = report::render(&args, &injected.counts, &outcome, &injected.snapshots, started.elapsed());
    print!("{text}");
    let _ = std::fs::write(world.dir.join("report.txt"), &text);
    println!("run directory (worker histories, stderr): {}", world.dir.display());
    outcome.violations.is_empty()
}

/// The cluster with dlock and the resource, the proxy, and the first workers.
async fn set_up(args: &RunArgs) -> World {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let dir =
        dlock_tests::workspace_root().join("build/chaos").join(format!("run-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the run directory");
    let conf: &'static [&'static str] =
        if args.preload { &["shared_preload_libraries = 'dlock'"] } else { &[] };
    let cluster =
        Arc::new(tokio::task::spawn_blocking(move || Cluster::start_new("chaos", conf)).await.unwrap());
    let port = cluster.port();
    let admin = faults::admin(port).await.expect("admin session");
    admin.batch_execute(&format!("CREATE DATABASE {}", resource::DATABASE)).await.expect("CREATE DATABASE");
    let resource_conn =
        format!("host=127.0.0.1 port={port} user=postgres dbname={} connect_timeout=3", resource::DATABASE);
    {
        let (db, connection) =
            tokio_postgres::connect(&resource_conn, NoTls).await.expect("resource session");
        tokio::spawn(connection);
        resource::install(&db).await.expect("install the resource");
    }
    let proxy = Arc::new(ProxyStats::default());
    let proxy_port = proxy::start(port, args.cut_rate, args.seed ^ 0x5eed, proxy.clone()).await;
    let spec = Spec {
        dir: dir.clone(),
        script: dlock_tests::workspace_root().join("chaos/worker.py"),
        dlock_conn: format!(
            "host=127.0.0.1 port={proxy_port} user=postgres dbname=postgres connect_timeout=3"
        ),
        resource_conn,
        keys: (0..args.keys).map(|i| format!("hot/{i}")).collect(),
        ttl: (args.ttl_min, args.ttl_max),
        wait: args.ttl_max,
        skew: args.skew,
    };
    let mut crew = Crew::new(spec, args.seed);
    for _ in 0..args.rust_workers {
        crew.spawn(Kind::Rust);
    }
    for _ in 0..args.sql_workers {
        crew.spawn(Kind::Sql);
    }
    World { cluster, port, admin, dir, proxy, crew }
}

/// Faults until the time is up: kill -9, SIGSTOP, pg_terminate_backend in turn, and a crash
/// restart every `crash_every` seconds (the proxy cuts connections all along).
async fn inject(args: &RunArgs, world: &mut World) -> Injected {
    let mut injected = Injected::default();
    let counts = &mut injected.counts;
    let mut rng = Rng::new(args.seed);
    let run_for = Duration::from_secs(args.seconds);
    let fault_every = Duration::from_secs_f64(args.fault_every);
    let mut next_crash = (args.crash_every > 0.0)
        .then(|| Duration::from_secs_f64(args.crash_every.min(args.seconds as f64 / 2.0)));
    let mut killed = Vec::new();
    let mut turn = 0;
    let begin = Instant::now();
    while begin.elapsed() < run_for {
        // Jittered, so faults do not fall into step with the workers' cycles.
        tokio::time::sleep(fault_every.mul_f64(rng.range(0.5, 1.5))).await;
        counts.unexpected_exits.extend(world.crew.replace_exited(&killed));
        if next_crash.is_some_and(|at| begin.elapsed() >= at) {
            next_crash = next_crash.map(|at| at + Duration::from_secs_f64(args.crash_every));
            match faults::crash(&world.cluster, &world.admin, counts.crashes + 1, counts).await {
                Ok((snapshot, fresh, found)) => {
                    injected.snapshots.push(snapshot);
                    world.admin = fresh;
                    injected.violations.extend(found);
                }
                Err(e) => {
                    eprintln!("chaos: crash round failed ({e}); reconnecting");
                    if let Ok(fresh) = faults::admin(world.port).await {
                        world.admin = fresh;
                    }
                }
            }
            continue;
        }
        if args.sabotage {
            let key = format!("hot/{}", rng.below(args.keys));
            faults::force_release(&world.admin, &key, counts).await;
        }
        match turn % 3 {
            0 => killed.extend(faults::kill9(&mut world.crew, counts)),
            1 => {
                let pause = Duration::from_secs_f64(args.ttl_max + rng.range(0.5, 1.5));
                faults::stop_cont(&mut world.crew, pause, counts);
            }
            _ => faults::terminate(&world.admin, 2, counts).await,
        }
        turn += 1;
    }
    injected
}
