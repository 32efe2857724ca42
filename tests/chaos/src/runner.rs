//! The run: a throwaway cluster with dlock and the resource database, the proxy, the workers,
//! faults on a schedule, then the checker and the report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Standby};
use tokio_postgres::NoTls;

use crate::check::{self, Snapshot};
use crate::crew::{Crew, Kind, PrimitiveKeys, Spec};
use crate::faults::{self, Counts};
use crate::primitives::Role;
use crate::proxy::{self, ProxyStats};
use crate::rng::Rng;
use crate::run_args::RunArgs;
use crate::{history, report, resource};

/// What a run works on.
struct World {
    /// dlock's cluster (the primary, with `--failover`).
    cluster: Arc<Cluster>,
    /// With `--failover`: the synchronous standby, and the resource's own cluster.
    standby: Option<Arc<Standby>>,
    /// Kept only so that it lives (and is stopped) with the run.
    _resource_cluster: Option<Cluster>,
    /// The port of the server dlock is on now (the standby's after a failover).
    upstream: Arc<AtomicU16>,
    resource_port: u16,
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

    let history = history::read(&world.dir).expect("read the lease history");
    let grants = &history.grants;
    if let (true, Some(snapshot)) = (args.failover, injected.snapshots.last()) {
        let after = |g: &&history::Grant| g.requested_at.is_some_and(|r| r > snapshot.read_at);
        counts.grants_after_failover = grants.iter().filter(after).count();
        for key in (0..args.keys).map(|i| format!("hot/{i}")) {
            let of_key = || grants.iter().filter(|g| g.key == key);
            let before = of_key().filter(|g| g.granted_by < snapshot.crash_at).map(|g| g.fence).max();
            let first_after = of_key().filter(after).map(|g| g.fence).min();
            if let (Some(before), Some(first_after)) = (before, first_after) {
                counts.fences_across_failover.push((key, before, first_after));
            }
        }
    }
    let (db, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres dbname={}", world.resource_port, resource::DATABASE),
        NoTls,
    )
    .await
    .expect("resource session for the checker");
    tokio::spawn(connection);
    let (accepted, refused) = resource::read(&db).await.expect("read the resource");
    let mut outcome =
        check::check(grants, &accepted, &refused, &injected.snapshots, &injected.counts.paused_leases);
    let crash_times: Vec<f64> = injected.snapshots.iter().map(|s| s.crash_at).collect();
    check::multi_key(grants, &history.multi, &history.not_granted, &mut outcome);
    check::elections(grants, &history.observations, &mut outcome);
    check::free_answers(grants, &history.free_answers, &mut outcome);
    check::bound_kills(
        grants,
        &injected.counts.bound_kills,
        &injected.counts.terminated,
        &crash_times,
        &mut outcome,
    );
    // What the sentinels found across crashes and failovers comes first.
    if !injected.violations.is_empty() {
        *outcome.by_rule.entry(check::Rule::Durability).or_default() += injected.violations.len();
        outcome.violations.splice(0..0, injected.violations);
    }
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
    let mut conf: Vec<&'static str> = Vec::new();
    if args.preload || args.fast {
        conf.push("shared_preload_libraries = 'dlock'");
    }
    if args.fast {
        let max_ttl = format!("dlock.fast_max_ttl = {}", args.ttl_max.ceil().max(1.0) as u64);
        conf.push(Box::leak(max_ttl.into_boxed_str()));
    }
    if args.failover {
        // The default, spelled out: an acknowledged commit is flushed on the sync standby.
        conf.push("synchronous_commit = on");
    }
    let cluster =
        Arc::new(tokio::task::spawn_blocking(move || Cluster::start_new("chaos", &conf)).await.unwrap());
    let port = cluster.port();
    let (standby, resource_cluster) = if args.failover {
        let primary = cluster.clone();
        let (standby, resource_cluster) = tokio::task::spawn_blocking(move || {
            // Cloned before the primary asks for a synchronous standby: the clone's own
            // configuration has none, so once promoted it commits without waiting.
            let standby = Standby::clone_of(&primary, "chaos-standby");
            (standby, Cluster::start_new("chaos-resource", &[]))
        })
        .await
        .unwrap();
        dlock_tests::require_sync_standby(&cluster.connect().await).await;
        (Some(Arc::new(standby)), Some(resource_cluster))
    } else {
        (None, None)
    };
    let resource_port = resource_cluster.as_ref().map_or(port, Cluster::port);
    let admin = faults::admin(port).await.expect("admin session");
    let (resource_conn, _) = resource::create(resource_port).await;
    let proxy = Arc::new(ProxyStats::default());
    let upstream = Arc::new(AtomicU16::new(port));
    let proxy_port = proxy::start(upstream.clone(), args.cut_rate, args.seed ^ 0x5eed, proxy.clone()).await;
    let spec = Spec {
        dir: dir.clone(),
        script: dlock_tests::workspace_root().join("tests/chaos/worker.py"),
        dlock_conn: format!(
            "host=127.0.0.1 port={proxy_port} user=postgres dbname=postgres connect_timeout=3"
        ),
        resource_conn,
        keys: (0..args.keys).map(|i| format!("hot/{i}")).collect(),
        ttl: (args.ttl_min, args.ttl_max),
        wait: args.ttl_max,
        skew: args.skew,
        bound_rate: if args.fast { 0.0 } else { args.bound_rate },
        fast: args.fast,
        primitives: primitive_keys(args),
        shards: None,
    };
    let mut crew = Crew::new(spec, args.seed);
    for _ in 0..args.rust_workers {
        crew.spawn(Kind::Rust);
    }
    for _ in 0..args.sql_workers {
        crew.spawn(Kind::Sql);
    }
    // Durable leases in every mode (in fast mode beside the hot keys' fast ones). Twice as many
    // multi-key workers: a grant needs every key of its set at once, so each waits longer.
    for role in [Role::Shared, Role::Semaphore, Role::MultiKey, Role::Election] {
        let workers = if role == Role::MultiKey { 2 * args.primitives } else { args.primitives };
        for _ in 0..workers {
            crew.spawn(Kind::Primitive(role));
        }
    }
    World {
        cluster,
        standby,
        _resource_cluster: resource_cluster,
        upstream,
        resource_port,
        admin,
        dir,
        proxy,
        crew,
    }
}

/// The keys (and elections) of the primitive workers: few, so that their requests meet.
fn primitive_keys(args: &RunArgs) -> PrimitiveKeys {
    PrimitiveKeys {
        shared: names("rw", 2),
        semaphore: names("sem", 2),
        multi_key: names("multi", 32),
        elections: names("elect", 6),
        max_holders: args.max_holders,
    }
}

/// `prefix/0` … `prefix/<n-1>`.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}/{i}")).collect()
}

/// Faults until the time is up: kill -9 (every other one of a session-bound holder when there
/// is one, then a probe waits for its key), SIGSTOP, pg_terminate_backend in turn, and a crash
/// restart every `crash_every` seconds, or with `--failover` one failover instead (the proxy
/// cuts connections all along).
async fn inject(args: &RunArgs, world: &mut World) -> Injected {
    let mut injected = Injected::default();
    let counts = &mut injected.counts;
    let mut rng = Rng::new(args.seed);
    let run_for = Duration::from_secs(args.seconds);
    let fault_every = Duration::from_secs_f64(args.fault_every);
    let mut next_crash = (args.crash_every > 0.0 && !args.failover)
        .then(|| Duration::from_secs_f64(args.crash_every.min(args.seconds as f64 / 2.0)));
    let mut next_failover = args
        .failover
        .then(|| Duration::from_secs_f64(args.seconds as f64 * args.failover_at.clamp(0.05, 0.95)));
    let probe_log =
        Arc::new(Mutex::new(history::Log::create(&world.dir.join("probe.jsonl")).expect("probe log")));
    let mut probes = Vec::new();
    let mut killed = Vec::new();
    let mut turn = 0;
    let begin = Instant::now();
    while begin.elapsed() < run_for {
        // Jittered, so faults do not fall into step with the workers' cycles.
        tokio::time::sleep(fault_every.mul_f64(rng.range(0.5, 1.5))).await;
        counts.unexpected_exits.extend(world.crew.replace_exited(&killed));
        if next_failover.is_some_and(|at| begin.elapsed() >= at)
            && let Some(standby) = &world.standby
        {
            next_failover = None;
            match faults::failover(&world.cluster, standby, &world.admin, &world.upstream, counts).await {
                Ok((snapshot, fresh, found)) => {
                    injected.snapshots.push(snapshot);
                    world.admin = fresh;
                    injected.violations.extend(found);
                }
                Err(e) => {
                    // The workers go on against whichever server answers; the run is judged
                    // without this failover's sentinels.
                    injected.violations.push(format!("failover round failed: {e}"));
                    world.upstream.store(standby.port(), Ordering::SeqCst);
                    if let Ok(fresh) = faults::admin(standby.port()).await {
                        world.admin = fresh;
                    }
                }
            }
            continue;
        }
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
                    if let Ok(fresh) = faults::admin(world.cluster.port()).await {
                        world.admin = fresh;
                    }
                }
            }
            continue;
        }
        if args.sabotage {
            // Every other time a key of the primitives held right then, when they run: their
            // checks must notice too.
            let p = primitive_keys(args);
            let held = if args.primitives > 0 && turn % 2 == 1 {
                let keys = [p.shared, p.semaphore, p.multi_key, p.elections].concat();
                faults::held_among(&world.admin, &keys).await
            } else {
                None
            };
            let key = held.unwrap_or_else(|| format!("hot/{}", rng.below(args.keys)));
            faults::force_release(&world.admin, &key, counts).await;
        }
        match turn % 3 {
            0 => {
                // Every other kill goes to the holder of a session-bound lease: wait a little for one.
                let prefer_bound = (turn / 3) % 2 == 0;
                for _ in 0..40 {
                    if !prefer_bound || world.crew.workers.iter().any(|w| w.holding_bound().is_some()) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // The server time just before the kill (a lower bound of it).
                let at: Option<f64> =
                    world.admin.query_one(resource::SERVER_NOW, &[]).await.ok().map(|r| r.get(0));
                let local = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                if let Some((name, bound)) = faults::kill9(&mut world.crew, prefer_bound, counts) {
                    if let (Some((key, fence)), Some(at)) = (bound, at) {
                        let owner = format!("probe:{}", counts.bound_kills.len());
                        counts.bound_kills.push(check::BoundKill {
                            worker: name.clone(),
                            key: key.clone(),
                            fence,
                            at,
                            local,
                            probe: None,
                        });
                        let port = world.upstream.load(Ordering::SeqCst);
                        probes.push(tokio::spawn(faults::probe(port, key, owner, probe_log.clone())));
                    }
                    killed.push(name);
                }
            }
            1 => {
                let pause = Duration::from_secs_f64(args.ttl_max + rng.range(0.5, 1.5));
                faults::stop_cont(&mut world.crew, pause, counts);
            }
            _ => faults::terminate(&world.admin, 2, counts).await,
        }
        turn += 1;
    }
    for (kill, probe) in counts.bound_kills.iter_mut().zip(probes) {
        kill.probe = probe.await.ok().flatten();
    }
    injected
}
