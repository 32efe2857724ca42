//! The measurements, each over all its contenders: hand-offs with one waiter, chains of
//! waiters, and the CPU of parked waiters.

use std::sync::Arc;
use std::time::Duration;

use crate::cpu::{self, Waiters};
use crate::handoff::{self, Pair};
use crate::lock::{Key, Locker};
use crate::pg::{Endpoint, Observer, PgSession};
use crate::redis_peer::RedisSession;
use crate::report::{CpuRow, Latencies, LatencyRow};
use crate::{ADVISORY, Args, DLOCK, DLOCK_NO_FLUSH, NO_CLUSTER, ON_DEMAND, REDIS, Result};

/// The sessions of one PostgreSQL cluster.
pub struct Cluster {
    pub label: &'static str,
    endpoint: Endpoint,
    observer: Arc<Observer>,
    holder: Arc<PgSession>,
    pool: Vec<Arc<PgSession>>,
}

impl Cluster {
    /// Connects the observer, the holder and a pool of `pool` sessions.
    pub async fn connect(label: &'static str, endpoint: Endpoint, pool: usize) -> Result<Cluster> {
        let observer = Arc::new(Observer::connect(&endpoint).await?);
        let holder = Arc::new(PgSession::connect(&endpoint, false).await?);
        let pool = PgSession::connect_many(&endpoint, pool).await?.into_iter().map(Arc::new).collect();
        Ok(Cluster { label, endpoint, observer, holder, pool })
    }

    /// `SHOW setting`.
    pub async fn show(&self, setting: &str) -> Result<String> {
        let row = self.observer.session().client().query_one(&format!("SHOW {setting}"), &[]).await?;
        Ok(row.get(0))
    }
}

/// A contender of a latency measurement: its histogram, and the clients it runs on.
struct Contender<T> {
    contender: &'static str,
    cluster: &'static str,
    latencies: Latencies,
    fifo: Option<bool>,
    under_test: T,
}

impl<T> Contender<T> {
    fn new(contender: &'static str, cluster: &'static str, under_test: T) -> Contender<T> {
        Contender { contender, cluster, latencies: Latencies::new(), fifo: None, under_test }
    }

    fn row(&self) -> LatencyRow {
        LatencyRow {
            contender: self.contender.to_string(),
            cluster: self.cluster.to_string(),
            summary: self.latencies.summary(),
            fifo: self.fifo,
            targeted: self.contender == DLOCK,
        }
    }
}

async fn pg_pair(
    cluster: &Cluster,
    locker: fn(Arc<PgSession>) -> Locker,
    async_commit: bool,
    key: Key,
) -> Result<Pair> {
    let a = Arc::new(PgSession::connect(&cluster.endpoint, async_commit).await?);
    let b = Arc::new(PgSession::connect(&cluster.endpoint, async_commit).await?);
    Pair::new(locker(a), locker(b), key, Some(Arc::clone(&cluster.observer))).await
}

/// Measurement 1: one waiter; the contenders interleaved round by round, so that drift in the
/// machine's load hits all alike.
pub async fn handoffs(args: &Args, clusters: &[Cluster]) -> Result<Vec<LatencyRow>> {
    let main = &clusters[0];
    let mut contenders = Vec::new();
    for c in clusters {
        contenders.push(Contender::new(
            DLOCK,
            c.label,
            pg_pair(c, Locker::Dlock, false, Key::new("handoff", 0)).await?,
        ));
    }
    let no_flush = pg_pair(main, Locker::Dlock, true, Key::new("handoff-no-flush", 0)).await?;
    contenders.push(Contender::new(DLOCK_NO_FLUSH, main.label, no_flush));
    let advisory = pg_pair(main, Locker::Advisory, false, Key::new("handoff", 1001)).await?;
    contenders.push(Contender::new(ADVISORY, main.label, advisory));
    if let Some(port) = args.redis_port {
        let a = RedisSession::connect(&args.host, port, 1).await?;
        let b = RedisSession::connect(&args.host, port, 2).await?;
        let pair = Pair::new(Locker::Redis(a), Locker::Redis(b), Key::new("handoff", 0), None).await?;
        contenders.push(Contender::new(REDIS, NO_CLUSTER, pair));
    }
    for c in &mut contenders {
        c.under_test.handoffs(args.warmup, &mut Latencies::new()).await?;
    }
    let rounds = args.rounds.max(1);
    for round in 0..rounds {
        let n = args.handoffs / rounds + usize::from(round < args.handoffs % rounds);
        for c in &mut contenders {
            c.under_test.handoffs(n, &mut c.latencies).await?;
        }
        eprintln!("bench-wait: hand-offs, round {}/{rounds}", round + 1);
    }
    let mut rows = Vec::new();
    for c in contenders {
        rows.push(c.row());
        c.under_test.finish().await?;
    }
    Ok(rows)
}

/// The clients of a chain: a holder and a line of waiters.
struct Line {
    holder: Locker,
    waiters: Vec<Arc<Locker>>,
    key: Key,
    observer: Option<Arc<Observer>>,
}

fn pg_line(cluster: &Cluster, locker: fn(Arc<PgSession>) -> Locker, n: usize, key: Key) -> Line {
    Line {
        holder: locker(Arc::clone(&cluster.holder)),
        waiters: cluster.pool[..n].iter().map(|s| Arc::new(locker(Arc::clone(s)))).collect(),
        key,
        observer: Some(Arc::clone(&cluster.observer)),
    }
}

/// Measurement 2: a line of waiters on one key; one unrecorded chain first.
pub async fn chains(args: &Args, clusters: &[Cluster]) -> Result<Vec<LatencyRow>> {
    let n = args.chain_len;
    let mut contenders = Vec::new();
    for c in clusters {
        contenders.push(Contender::new(DLOCK, c.label, pg_line(c, Locker::Dlock, n, Key::new("chain", 0))));
    }
    contenders.push(Contender::new(
        ADVISORY,
        ON_DEMAND,
        pg_line(&clusters[0], Locker::Advisory, n, Key::new("chain", 2001)),
    ));
    if let Some(port) = args.redis_port {
        let holder = Locker::Redis(RedisSession::connect(&args.host, port, 0).await?);
        let mut waiters = Vec::with_capacity(n);
        for id in 1..=n {
            waiters.push(Arc::new(Locker::Redis(RedisSession::connect(&args.host, port, id).await?)));
        }
        contenders.push(Contender::new(
            REDIS,
            NO_CLUSTER,
            Line { holder, waiters, key: Key::new("chain", 0), observer: None },
        ));
    }
    for chain in 0..=args.chains {
        for c in &mut contenders {
            let line = &c.under_test;
            let mut warmup = Latencies::new();
            let latencies = if chain == 0 { &mut warmup } else { &mut c.latencies };
            let fifo =
                handoff::chain(&line.holder, &line.waiters, &line.key, line.observer.as_deref(), latencies)
                    .await?;
            if chain > 0 {
                c.fifo = Some(c.fifo.unwrap_or(true) && fifo);
            }
        }
        eprintln!("bench-wait: chains of {n}, {chain}/{} (0: warm-up)", args.chains);
    }
    Ok(contenders.iter().map(Contender::row).collect())
}

/// Measurement 4: parked waiters' CPU; an idle baseline, dlock on every cluster, advisory
/// locks on the first.
pub async fn cpu(args: &Args, clusters: &[Cluster]) -> Result<Vec<CpuRow>> {
    let n = args.cpu_waiters;
    let settle = Duration::from_secs_f64(args.settle_seconds);
    let main = &clusters[0];
    let mut plan = vec![(main, Waiters::None, true, args.cpu_peer_seconds)];
    for distinct in [true, false] {
        for c in clusters {
            plan.push((c, Waiters::Dlock, distinct, args.cpu_seconds));
        }
    }
    for distinct in [true, false] {
        plan.push((main, Waiters::Advisory, distinct, args.cpu_peer_seconds));
    }
    let mut rows = Vec::new();
    for (c, waiters, distinct, seconds) in plan {
        let keys = match (waiters, distinct) {
            (Waiters::None, _) => 0,
            (_, true) => n,
            (_, false) => 1,
        };
        eprintln!("bench-wait: CPU, {waiters:?} waiters on {keys} key(s), {} cluster, {seconds} s", c.label);
        let window =
            cpu::parked_waiters(&c.observer, &c.holder, &c.pool[..n], waiters, distinct, settle, seconds)
                .await?;
        let contender = match waiters {
            Waiters::None => "nobody (sessions idle)",
            Waiters::Dlock => DLOCK,
            Waiters::Advisory => ADVISORY,
        };
        rows.push(CpuRow {
            contender: contender.to_string(),
            cluster: c.label.to_string(),
            waiters: if waiters == Waiters::None { 0 } else { n },
            keys,
            window,
            targeted: waiters == Waiters::Dlock,
        });
    }
    Ok(rows)
}
