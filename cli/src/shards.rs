//! `dlock shards locate KEY` (the server a key belongs to) and `dlock shards show` (the map,
//! passwords hidden): both read the map file only, and connect to nothing.

use clap::Subcommand;
use dlock_client::{ShardsConfig, redact_conninfo};
use serde_json::json;

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
}

/// Runs a `shards` subcommand on `config`.
pub fn run(config: &ShardsConfig, command: &ShardsCommand, json: bool) -> u8 {
    match command {
        ShardsCommand::Locate { key } => locate(config, key, json),
        ShardsCommand::Show => show(config, json),
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
