//! `dlock-chaos`: a bounded fault-injection run of dlock that checks mutual exclusion and
//! fencing (`make chaos`, `make test-chaos`).
//!
//! `dlock-chaos run` starts a throwaway cluster, a fenced resource in a second database, a
//! connection-cutting proxy and worker processes (`dlock-chaos worker` through the Rust client,
//! `tests/chaos/worker.py` in raw SQL), injects faults, then checks the lease history against the
//! resource and exits non-zero on any violation. With `--primitives`, workers of the version 2
//! primitives (`dlock-chaos primitive-worker`: shared leases, semaphores, multi-key grants,
//! elections) run beside them under the same faults, and the checker judges them too.
//! `dlock-chaos shards` does the same over several servers while the shard map changes.

mod check;
mod crew;
mod faults;
mod history;
mod primitives;
mod proxy;
mod report;
mod resource;
mod rng;
mod run_args;
mod runner;
mod sharded;
mod worker;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Fault-injection run of dlock: mutual exclusion and fencing under chaos")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A whole run: cluster, workers, faults, check, report.
    Run(run_args::RunArgs),
    /// One Rust worker (started by `run`).
    Worker(worker::WorkerArgs),
    /// One worker of the version 2 primitives (started by `run`).
    PrimitiveWorker(primitives::PrimitiveArgs),
    /// A run over several servers while the shard map changes (sharded workers, server faults).
    Shards(sharded::ShardArgs),
}

fn main() {
    match Cli::parse().command {
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            let clean = runtime.block_on(runner::run(args));
            std::process::exit(if clean { 0 } else { 1 });
        }
        Command::Shards(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            let clean = runtime.block_on(sharded::run(args));
            std::process::exit(if clean { 0 } else { 1 });
        }
        Command::Worker(args) => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            runtime.block_on(worker::run(args));
        }
        Command::PrimitiveWorker(args) => {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            runtime.block_on(primitives::run(args));
        }
    }
}
