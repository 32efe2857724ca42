//! The Rust worker (`dlock-chaos worker`): loops acquire → fenced writes to the resource →
//! release through `dlock_client`, recording every acknowledged grant in its history file and
//! telling the runner on stdout whether it holds a lease (`hold <key> <fence>` / `free`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::path::PathBuf;
use std::time::Instant;

use dlock_client::{Client, Error, LockBuilder, ShardedClient, ShardsConfig};
use tokio_postgres::NoTls;

use crate::history::{Event, Log, Mode};
use crate::resource;
use crate::rng::Rng;

/// What one worker does (given by the runner on its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// This worker's name (its history file is `<name>.jsonl`).
    #[arg(long)]
    pub name: String,
    /// Where dlock is (through the runner's proxy).
    #[arg(long, default_value = "")]
    pub dlock_url: String,
    /// Several dlock servers instead: the shard map file, read again when a server says the
    /// map changed (0F001, 0F000) and every `--reload-every` seconds.
    #[arg(long)]
    pub shards: Option<PathBuf>,
    /// How long this worker goes on with a map before it reads the file again, errors aside (a
    /// long time: a client with a stale map).
    #[arg(long, default_value_t = 1.0)]
    pub reload_every: f64,
    /// Where the resource is.
    #[arg(long)]
    pub resource_url: String,
    /// The hot keys, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub keys: Vec<String>,
    /// Lease ttl range in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub ttl_min: f64,
    #[arg(long, default_value_t = 2.0)]
    pub ttl_max: f64,
    /// Longest hold, as a multiple of the ttl (the watchdog renews past one ttl).
    #[arg(long, default_value_t = 1.5)]
    pub hold_factor: f64,
    /// Share of holds long enough that the watchdog must renew.
    #[arg(long, default_value_t = 0.15)]
    pub long_hold_rate: f64,
    /// Longest of the short holds (most holds are short), in seconds.
    #[arg(long, default_value_t = 0.4)]
    pub short_hold_max: f64,
    /// How long an acquire waits for a busy key, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub wait: f64,
    #[arg(long)]
    pub history: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fast-mode leases (`LockBuilder::fast`) instead of durable ones.
    #[arg(long)]
    pub fast: bool,
}

/// Why a cycle stopped early.
enum Broken {
    /// The resource connection failed: reconnect it.
    Resource,
    /// dlock failed (connection cut, server down, a shard map changed): try again shortly.
    Dlock(Option<Error>),
}

impl From<tokio_postgres::Error> for Broken {
    fn from(_: tokio_postgres::Error) -> Self {
        Broken::Resource
    }
}

/// One server, or several by a shard map.
enum Target {
    One(Client),
    Sharded { client: ShardedClient, read_at: Instant },
}

impl Target {
    async fn connect(args: &WorkerArgs) -> Target {
        loop {
            if let Some(file) = &args.shards {
                let client =
                    ShardsConfig::from_file(file).ok().and_then(|c| ShardedClient::connect_lazy(&c).ok());
                if let Some(client) = client {
                    return Target::Sharded { client, read_at: Instant::now() };
                }
            } else if let Ok(client) = Client::connect(&args.dlock_url).await {
                return Target::One(client);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn lock(&self, key: &str) -> LockBuilder {
        match self {
            Target::One(client) => client.lock(key),
            Target::Sharded { client, .. } => client.lock(key),
        }
    }

    fn owner(&self) -> &str {
        match self {
            Target::One(client) => client.owner(),
            Target::Sharded { client, .. } => client.owner(),
        }
    }

    /// Reads the map file again if `error` says the map changed, or it is older than `every`.
    fn refresh(&mut self, error: Option<&Error>, every: f64) {
        let Target::Sharded { client, read_at, .. } = self else { return };
        let told = matches!(error, Some(Error::WrongServer(_) | Error::MapBehind(_)));
        if !told && read_at.elapsed().as_secs_f64() < every {
            return;
        }
        if let Ok(Some(fresh)) = client.refreshed() {
            *client = fresh;
        }
        *read_at = Instant::now();
    }
}

/// Runs until killed.
pub async fn run(args: WorkerArgs) {
    let mut log = Log::create(&args.history).expect("create the history file");
    let mut rng = Rng::new(args.seed);
    let mut client = Target::connect(&args).await;
    let mut resource = None;
    loop {
        let Some(db) = &resource else {
            resource = connect(&args.resource_url).await;
            if resource.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        };
        let key = &args.keys[rng.below(args.keys.len())];
        let ttl = rng.range(args.ttl_min, args.ttl_max);
        // Mostly short holds (many grants); some long enough that the watchdog must renew.
        let hold = if rng.chance(args.long_hold_rate) {
            rng.range(0.8 * ttl, args.hold_factor * ttl)
        } else {
            rng.range(0.02f64.min(args.short_hold_max), args.short_hold_max)
        };
        let outcome = cycle(&client, db, &args, key, ttl, hold, &mut log).await;
        client.refresh(
            if let Err(Broken::Dlock(Some(e))) = &outcome { Some(e) } else { None },
            args.reload_every,
        );
        match outcome {
            Ok(()) => {}
            Err(Broken::Resource) => resource = None,
            Err(Broken::Dlock(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
        println!("free");
    }
}

async fn connect(url: &str) -> Option<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.ok()?;
    tokio::spawn(connection);
    Some(client)
}

/// One acquire → start write → hold → end write → release.
async fn cycle(
    client: &Target,
    db: &tokio_postgres::Client,
    args: &WorkerArgs,
    key: &str,
    ttl: f64,
    hold: f64,
    log: &mut Log,
) -> Result<(), Broken> {
    let requested_at: f64 = db.query_one(resource::SERVER_NOW, &[]).await?.get(0);
    let lock = client.lock(key).ttl(Duration::from_secs_f64(ttl)).wait(Duration::from_secs_f64(args.wait));
    let acquired = if args.fast { lock.fast() } else { lock }.acquire().await;
    let guard = match acquired {
        Ok(guard) => guard,
        Err(Error::Timeout | Error::NotAcquired) => return Ok(()),
        Err(e) => return Err(Broken::Dlock(Some(e))),
    };
    let (owner, fence) = (client.owner().to_string(), guard.fence());
    // The client's expiry is the server's clock right after the grant plus the ttl.
    let live_until = epoch(guard.expires_at());
    log.record(&Event::Grant {
        owner: owner.clone(),
        key: key.to_string(),
        fence,
        requested_at: Some(requested_at),
        granted_by: live_until - ttl,
        live_until,
        bound: false,
        mode: Mode::Exclusive,
        max_holders: None,
        fast: args.fast,
    });
    println!("hold {key} {fence}");
    let mut outcome = Ok(());
    // The server time of the last write: the release call comes after it.
    let mut last_at = None;
    match write(db, &owner, key, fence, "start", log).await {
        // Refused: the lease is lost; go straight to the release.
        Ok((false, at)) => last_at = Some(at),
        Ok((true, at)) => {
            last_at = Some(at);
            tokio::time::sleep(Duration::from_secs_f64(hold)).await;
            match write(db, &owner, key, fence, "end", log).await {
                Ok((_, at)) => last_at = Some(at),
                Err(e) => outcome = Err(e),
            }
        }
        Err(e) => outcome = Err(e),
    }
    let renewed = epoch(guard.expires_at());
    if renewed > live_until {
        log.record(&Event::Renewed {
            owner: owner.clone(),
            key: key.to_string(),
            fence,
            live_until: renewed,
        });
    }
    log.record(&Event::Releasing {
        owner: owner.clone(),
        key: key.to_string(),
        fence,
        local: epoch(Some(SystemTime::now())),
        lb: last_at,
    });
    let ok = guard.release().await.ok();
    // A server time after the release answered (if the resource still answers).
    let ub = match db.query_one(resource::SERVER_NOW, &[]).await {
        Ok(row) => Some(row.get(0)),
        Err(_) => None,
    };
    log.record(&Event::Release { owner, key: key.to_string(), fence, ok, lb: last_at, ub });
    outcome
}

/// One fenced write; `Ok((accepted, server time it was judged))`.
async fn write(
    db: &tokio_postgres::Client,
    owner: &str,
    key: &str,
    fence: i64,
    phase: &str,
    log: &mut Log,
) -> Result<(bool, f64), Broken> {
    let no_client_time: Option<SystemTime> = None;
    let row = db.query_one(resource::WRITE, &[&key, &fence, &owner, &phase, &no_client_time]).await?;
    let (accepted, at): (bool, f64) = (row.get(0), row.get(1));
    log.record(&Event::Write {
        owner: owner.to_string(),
        key: key.to_string(),
        fence,
        phase: phase.to_string(),
        accepted,
        at,
    });
    Ok((accepted, at))
}

fn epoch(at: Option<SystemTime>) -> f64 {
    at.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64())
}
