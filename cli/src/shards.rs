//! `dlock shards locate KEY` (the server a key belongs to) and `dlock shards show` (the map,
//! passwords hidden), which read the map file only and connect to nothing; and `dlock shards
//! apply`, which installs the map on every server in the order a move needs, resumably.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use dlock_client::{Applied, ApplyOptions, Progress, ShardsConfig, apply_shard_map, redact_conninfo};
use serde_json::json;

use crate::{EXIT_NOT_ACQUIRED, Failure, parse_duration};

/// The `shards` subcommands.
#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// Print the name of the server KEY belongs to under the map (connects to nothing).
    ///
    /// The key's hash tag (the text between its first `{` and the next `}`) is routed if it
    /// has one, so `{tenant-7}:a` and `{tenant-7}:b` land on one server.
    Locate {
        /// The key (or election name).
        key: String,
    },
    /// Print the map: its epoch, and each server with its connection string (passwords shown
    /// as ***). Connects to nothing.
    Show,
    /// Install the map on every server: first those of the map it replaces (which from then on
    /// grant only their keys under it), then the new ones; then open each moved key's gate
    /// once its old server holds it no more. Prints each step. Safe to stop anywhere and run
    /// again: every step is idempotent. Exit 0 when complete, 75 when gates are still closed
    /// after --wait.
    Apply {
        /// The map being replaced, for the connection strings of servers the new map drops
        /// (default: the servers' own record of it, whose servers the new map must all name).
        #[arg(long, value_name = "FILE")]
        previous: Option<PathBuf>,
        /// A server of the map being replaced that cannot be reached and will not come back
        /// with its leases: its keys move after --gone-delay instead of a check (repeatable).
        #[arg(long, value_name = "SERVER")]
        gone: Vec<String>,
        /// How long a gone server's keys wait (default: twice the longest dlock.max_ttl of the
        /// servers reached: a lease, then its lock-delay).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        gone_delay: Option<Duration>,
        /// How long to wait for the gates to open (default: until they have).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
        /// Replace a map whose move is not complete on a server.
        #[arg(long)]
        force: bool,
    },
}

/// Runs a `shards` subcommand on `config`.
pub async fn run(config: &ShardsConfig, command: &ShardsCommand, json: bool) -> Result<u8, Failure> {
    match command {
        ShardsCommand::Locate { key } => Ok(locate(config, key, json)),
        ShardsCommand::Show => Ok(show(config, json)),
        ShardsCommand::Apply { previous, gone, gone_delay, wait, force } => {
            let previous = previous
                .as_deref()
                .map(ShardsConfig::from_file)
                .transpose()
                .map_err(|e| Failure::Usage(e.to_string()))?;
            let options = ApplyOptions {
                gone: gone.iter().cloned().collect::<BTreeSet<_>>(),
                gone_delay: *gone_delay,
                wait: *wait,
                force: *force,
            };
            apply(config, previous.as_ref(), &options, json).await
        }
    }
}

async fn apply(
    config: &ShardsConfig,
    previous: Option<&ShardsConfig>,
    options: &ApplyOptions,
    json: bool,
) -> Result<u8, Failure> {
    let say = |step: Progress| {
        if json {
            println!("{}", progress_json(&step));
            return;
        }
        match step {
            Progress::Installed { server, new: true } => println!("{server}: map installed"),
            Progress::Installed { server, new: false } => println!("{server}: had the map already"),
            Progress::Skipped { server } => println!("{server}: gone, left out"),
            Progress::Draining { from, keys } => println!("{from}: still holds {keys} keys that moved away"),
            Progress::Opened { into, from } => println!("{into}: grants the keys from {from}"),
            Progress::Timer { into, from, after } => {
                println!(
                    "{into}: grants the keys from {from} (gone) in {}",
                    humantime::format_duration(after)
                )
            }
        }
    };
    let applied =
        apply_shard_map(config, previous, options, say).await.map_err(|e| Failure::Other(e.to_string()))?;
    match applied {
        Applied::Complete { epoch } => {
            if json {
                println!("{}", json!({ "complete": true, "epoch": epoch }));
            } else {
                println!("map epoch {epoch}: complete");
            }
            Ok(0)
        }
        Applied::Pending { epoch, waiting_for } => {
            if json {
                println!("{}", json!({ "complete": false, "epoch": epoch, "waiting_for": waiting_for }));
            } else {
                println!("map epoch {epoch}: installed; still waiting for:");
                for what in waiting_for {
                    println!("  {what}");
                }
                println!("run the same command again to go on");
            }
            Ok(EXIT_NOT_ACQUIRED)
        }
    }
}

fn progress_json(step: &Progress) -> serde_json::Value {
    match step {
        Progress::Installed { server, new } => json!({ "step": "installed", "server": server, "new": new }),
        Progress::Skipped { server } => json!({ "step": "skipped", "server": server }),
        Progress::Draining { from, keys } => json!({ "step": "draining", "server": from, "keys": keys }),
        Progress::Opened { into, from } => json!({ "step": "opened", "server": into, "from": from }),
        Progress::Timer { into, from, after } => {
            json!({ "step": "timer", "server": into, "from": from, "seconds": after.as_secs_f64() })
        }
    }
}

fn locate(config: &ShardsConfig, key: &str, json: bool) -> u8 {
    let server = config.locate(key);
    if json {
        println!("{}", json!({ "key": key, "server": server, "epoch": config.epoch() }));
    } else {
        println!("{server}");
    }
    0
}

fn show(config: &ShardsConfig, json: bool) -> u8 {
    if json {
        let servers: Vec<_> = config
            .servers()
            .map(|(name, url)| json!({ "name": name, "connection": redact_conninfo(url) }))
            .collect();
        println!("{}", json!({ "epoch": config.epoch(), "servers": servers }));
        return 0;
    }
    println!("epoch  {}", config.epoch());
    let width = config.servers().map(|(name, _)| name.len()).max().unwrap_or(0).max("server".len());
    println!("{:<width$}  connection", "server");
    for (name, url) in config.servers() {
        println!("{name:<width$}  {}", redact_conninfo(url));
    }
    0
}
