//! The primitive workers (`dlock-chaos primitive-worker`): loops over the version 2 primitives in
//! raw SQL (tokio-postgres, through the runner's proxy), recording every acknowledged grant in the
//! history with the server's clock and telling the runner on stdout whether they hold a lease
//! (`hold <key> <fence>` / `free`), like the hot-key workers. Each role works its own keys:
//! - `shared`: read-write locks, shared (no semaphore) or exclusive on the same keys;
//! - `semaphore`: shared leases with `max_holders` or exclusive ones on the same keys;
//! - `multi-key`: `dlock_acquire_all` of 2–4 keys of an overlapping set in random orders, and
//!   single exclusive or shared leases on the same keys;
//! - `election`: campaigns with renewals, and `dlock_leader` answers.
//!
//! A fresh owner per attempt: an unacknowledged grant is never re-entered by a later call.

mod lease;
mod roles;
mod statements;

use std::time::Duration;

use tokio_postgres::NoTls;

use crate::history::Log;
use crate::rng::Rng;

/// Which primitive a worker exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Shared,
    Semaphore,
    MultiKey,
    Election,
}

/// What one primitive worker does (given by the runner on its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct PrimitiveArgs {
    /// This worker's name (its history file is `<name>.jsonl`).
    #[arg(long)]
    pub name: String,
    #[arg(long, value_enum)]
    pub role: Role,
    /// Where dlock is (through the runner's proxy).
    #[arg(long)]
    pub dlock_url: String,
    /// The keys (or elections) of this role, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub keys: Vec<String>,
    /// The semaphore's size (`semaphore` role).
    #[arg(long, default_value_t = 3)]
    pub max_holders: i32,
    /// Lease ttl range in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub ttl_min: f64,
    #[arg(long, default_value_t = 2.0)]
    pub ttl_max: f64,
    /// How long a request waits, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub wait: f64,
    #[arg(long)]
    pub history: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// One worker's state across cycles.
pub struct Worker {
    pub args: PrimitiveArgs,
    pub rng: Rng,
    pub log: Log,
    attempt: u64,
}

impl Worker {
    /// A fresh owner for the next request.
    pub fn next_owner(&mut self) -> String {
        self.attempt += 1;
        format!("{}:{}:{}", self.args.name, std::process::id(), self.attempt)
    }

    /// A ttl from the range.
    pub fn ttl(&mut self) -> f64 {
        self.rng.range(self.args.ttl_min, self.args.ttl_max)
    }
}

/// Runs until killed.
pub async fn run(args: PrimitiveArgs) {
    let log = Log::create(&args.history).expect("create the history file");
    let rng = Rng::new(args.seed);
    let mut worker = Worker { args, rng, log, attempt: 0 };
    let mut db = None;
    loop {
        let Some(client) = &db else {
            db = connect(&worker.args.dlock_url).await;
            if db.is_none() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        };
        let done = match worker.args.role {
            Role::Shared | Role::Semaphore => roles::read_write(&mut worker, client).await,
            Role::MultiKey => roles::multi_key(&mut worker, client).await,
            Role::Election => roles::election(&mut worker, client).await,
        };
        if done.is_err() {
            // Cut, terminated or the server down: a new session for the next cycle.
            db = None;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("free");
    }
}

async fn connect(url: &str) -> Option<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.ok()?;
    tokio::spawn(connection);
    Some(client)
}
